// SPDX-License-Identifier: MIT
// The Timeline as a growing value: appending spans as a run reports them, named counters with units, the run id
// and clock domain, its file format (version 2, version 1 still read) and its errors.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/errors.h"
#include "planner/timeline.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

Span timelineSpan(int device, double t0, double t1, int microbatch = 0)
{
    Span s;
    s.device = device;
    s.t0 = t0;
    s.t1 = t1;
    s.microbatch = microbatch;
    return s;
}

std::string errorOf(const json& j)
{
    try {
        timelineFromJson(j);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("a Timeline grows by appending spans from devices in any order", "[timeline]")
{
    Timeline t;
    t.device_names = {"a"};
    const std::vector<Span> first = {timelineSpan(0, 0, 1), timelineSpan(2, 0.5, 1.5)};
    t.append(first);
    CHECK(t.spans.size() == 2);
    // Devices beyond the names get placeholders until named.
    REQUIRE(t.device_names.size() == 3);
    CHECK(t.device_names[0] == "a");
    CHECK(t.device_names[2] == "device 2");
    const std::vector<Span> second = {timelineSpan(1, 0.2, 3.0), timelineSpan(0, 1, 2)};
    t.append(second);
    CHECK(t.spans.size() == 4);
    CHECK(t.spans[2] == second[0]); // arrival order kept
    CHECK(t.endTime() == 3.0);
}

TEST_CASE("Timeline counters are named series with units", "[timeline]")
{
    Timeline t;
    CHECK(t.counter(kMemoryCounter) == nullptr);
    CHECK(t.memory().empty());
    t.counter(kMemoryCounter, "B").samples.push_back({0, 0.0, 4e9});
    t.counter("loss", "").samples.push_back({3, 1.5, 2.25});
    t.counter(kMemoryCounter, "ignored: it exists").samples.push_back({0, 1.0, 5e9});
    REQUIRE(t.counters.size() == 2);
    CHECK(t.counter(kMemoryCounter)->unit == "B");
    REQUIRE(t.memory().size() == 2);
    CHECK(t.memory()[1].value == 5e9);
    CHECK(t.counter("loss")->samples.front() == CounterSample {3, 1.5, 2.25});
}

TEST_CASE("a Timeline round-trips through JSON with its run id, clock and counters", "[timeline]")
{
    Timeline t;
    t.source = Timeline::Source::Measured;
    t.run_id = "run-0042";
    t.label = "gpt 1f1b";
    t.clock = ClockDomain::Aligned;
    t.epoch_unix_s = 1795543400.25;
    t.device_names = {"h0/gpu0", "h1/gpu0"};
    t.spans = {timelineSpan(0, 0, 0.001, 3), timelineSpan(1, 0.0005, 0.002, 3)};
    t.spans[1].lane = Lane::Send;
    t.spans[1].kind = ActionKind::SendActivation;
    t.spans[1].peer = 0;
    t.counter(kMemoryCounter, "B").samples = {{0, 0, 1e9}, {1, 0, 2e9}};
    t.counter("utilisation", "%").samples = {{1, 0.001, 87.5}};

    const json j = toJson(t);
    CHECK(j["format_version"] == 2);
    CHECK(j["clock"] == "aligned");
    const Timeline back = timelineFromJson(j);
    CHECK(back == t);
    // Not equal when one field differs: the comparison is by value, field by field.
    Timeline other = back;
    other.counters[1].samples[0].value = 88;
    CHECK_FALSE(other == t);
}

TEST_CASE("a version 1 timeline file is still read: its memory table becomes the memory counter", "[timeline]")
{
    const json v1 = {{"format_version", 1}, {"source", "predicted"}, {"label", "old"}, {"device_names", {"d0"}},
        {"spans", json::array({json::array({0, "compute", "F", 0, 0, 0, 0.0, 0.001})})},
        {"memory", json::array({json::array({0, 0.0, 4.2e9})})}};
    const Timeline t = timelineFromJson(v1);
    CHECK(t.clock == ClockDomain::Simulated);
    CHECK(t.run_id.empty());
    REQUIRE(t.memory().size() == 1);
    CHECK(t.memory()[0].value == 4.2e9);
    CHECK(t.counter(kMemoryCounter)->unit == "B");
}

TEST_CASE("bad timeline files name the field", "[timeline]")
{
    json base = toJson(Timeline {});
    json j = base;
    j["clock"] = "sundial";
    CHECK(errorOf(j).find("/clock: unknown clock 'sundial'") != std::string::npos);
    j = base;
    j["counters"]
        = json::array({{{"name", "loss"}, {"samples", json::array()}}, {{"name", "loss"}, {"samples", json::array()}}});
    CHECK(errorOf(j).find("/counters/1/name: counter 'loss' appears twice") != std::string::npos);
    j = base;
    j["counters"] = json::array({{{"name", "loss"}, {"samples", json::array({json::array({0, "x", 1})})}}});
    CHECK(errorOf(j).find("/counters/0/samples/0: expected [device, t_s, value]") != std::string::npos);
    j = base;
    j["format_version"] = 3;
    CHECK(errorOf(j).find("timeline format version 3 is not supported") != std::string::npos);
}
