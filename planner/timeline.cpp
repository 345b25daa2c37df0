// SPDX-License-Identifier: MIT
#include "timeline.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_fields.h"

namespace pw::planner {

using nlohmann::json;

namespace {
constexpr std::array<std::string_view, 4> kLaneNames = {"compute", "send", "recv", "collective"};
constexpr std::array<std::string_view, 3> kClockNames = {"simulated", "host", "aligned"};

Lane laneFromString(const std::string& name, const std::string& path)
{
    for (std::size_t i = 0; i < kLaneNames.size(); ++i)
        if (kLaneNames[i] == name)
            return static_cast<Lane>(i);
    fields::fail(path, "unknown lane '" + name + "'");
}
} // namespace

std::string_view toString(Lane lane)
{
    return kLaneNames[static_cast<std::size_t>(lane)];
}

std::string_view toString(ClockDomain clock)
{
    return kClockNames[static_cast<std::size_t>(clock)];
}

double Timeline::endTime() const
{
    double end = 0;
    for (const auto& s : spans)
        end = std::max(end, s.t1);
    return end;
}

void Timeline::append(std::span<const Span> more)
{
    spans.insert(spans.end(), more.begin(), more.end());
    for (const auto& s : more)
        while (s.device >= 0 && static_cast<std::size_t>(s.device) >= device_names.size())
            device_names.push_back("device " + std::to_string(device_names.size()));
}

const Counter* Timeline::counter(std::string_view name) const
{
    auto it = std::find_if(counters.begin(), counters.end(), [&](const Counter& c) { return c.name == name; });
    return it == counters.end() ? nullptr : &*it;
}

Counter& Timeline::counter(std::string_view name, std::string_view unit)
{
    auto it = std::find_if(counters.begin(), counters.end(), [&](const Counter& c) { return c.name == name; });
    if (it != counters.end())
        return *it;
    return counters.emplace_back(Counter {std::string(name), std::string(unit), {}});
}

std::span<const CounterSample> Timeline::memory() const
{
    const Counter* c = counter(kMemoryCounter);
    return c ? std::span<const CounterSample>(c->samples) : std::span<const CounterSample>();
}

json toJson(const Timeline& t)
{
    // Spans as rows of a table keep the file compact: [device, lane, kind, stage, microbatch, action, t0, t1, peer].
    json spans = json::array();
    for (const auto& s : t.spans)
        spans.push_back(
            {s.device, toString(s.lane), toString(s.kind), s.stage, s.microbatch, s.action, s.t0, s.t1, s.peer});
    json counters = json::array();
    for (const auto& c : t.counters) {
        json samples = json::array();
        for (const auto& m : c.samples)
            samples.push_back({m.device, m.t, m.value});
        counters.push_back({{"name", c.name}, {"unit", c.unit}, {"sample_columns", {"device", "t_s", "value"}},
            {"samples", std::move(samples)}});
    }
    return {{"format_version", kTimelineFormatVersion},
        {"source", t.source == Timeline::Source::Predicted ? "predicted" : "measured"}, {"run_id", t.run_id},
        {"label", t.label}, {"clock", toString(t.clock)}, {"epoch_unix_s", t.epoch_unix_s},
        {"device_names", t.device_names},
        {"span_columns", {"device", "lane", "kind", "stage", "microbatch", "action", "t0_s", "t1_s", "peer"}},
        {"spans", std::move(spans)}, {"counters", std::move(counters)}};
}

Timeline timelineFromJson(const json& j)
{
    namespace f = fields;
    f::object(j, "");
    f::checkVersion(j, "timeline", kTimelineFormatVersion);
    Timeline t;
    auto source = f::stringOr(j, "source", "", "predicted");
    if (source != "predicted" && source != "measured")
        f::fail("/source", "must be 'predicted' or 'measured'");
    t.source = source == "predicted" ? Timeline::Source::Predicted : Timeline::Source::Measured;
    t.run_id = f::stringOr(j, "run_id", "", "");
    t.label = f::stringOr(j, "label", "", "");
    const auto clock = f::stringOr(j, "clock", "", "simulated");
    const auto clockAt = std::find(kClockNames.begin(), kClockNames.end(), clock);
    if (clockAt == kClockNames.end())
        f::fail("/clock", "unknown clock '" + clock + "': use simulated, host or aligned");
    t.clock = static_cast<ClockDomain>(clockAt - kClockNames.begin());
    t.epoch_unix_s = f::nonNegativeOr(j, "epoch_unix_s", "", 0.0);
    if (j.contains("device_names"))
        for (const auto& n : f::array(j, "device_names", "")) {
            if (!n.is_string())
                f::fail("/device_names", "expected strings");
            t.device_names.push_back(n.get<std::string>());
        }
    const auto& spans = f::array(j, "spans", "");
    for (std::size_t i = 0; i < spans.size(); ++i) {
        auto path = f::child("/spans", i);
        const auto& r = spans[i];
        if (!r.is_array() || (r.size() != 8 && r.size() != 9))
            f::fail(path, "expected [device, lane, kind, stage, microbatch, action, t0_s, t1_s, peer]");
        for (std::size_t c = 0; c < r.size(); ++c)
            if ((c == 1 || c == 2) ? !r[c].is_string() : !r[c].is_number())
                f::fail(f::child(path, c), c == 1 || c == 2 ? "expected a string" : "expected a number");
        Span s;
        s.device = r[0].get<int>();
        s.lane = laneFromString(r[1].get<std::string>(), f::child(path, 1));
        try {
            s.kind = actionKindFromString(r[2].get<std::string>());
        } catch (const InputError& e) {
            f::fail(f::child(path, 2), e.message());
        }
        s.stage = r[3].get<int>();
        s.microbatch = r[4].get<int>();
        s.action = r[5].get<int>();
        s.t0 = r[6].get<double>();
        s.t1 = r[7].get<double>();
        if (r.size() == 9)
            s.peer = r[8].get<int>();
        if (!(s.t1 >= s.t0))
            f::fail(f::child(path, 7), "span ends before it starts");
        t.spans.push_back(s);
    }
    // Samples as [device, t_s, value] rows; version 1 had only memory, at the top level.
    auto readSamples = [](const json& rows, const std::string& path, Counter& into) {
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& r = rows[i];
            if (!r.is_array() || r.size() != 3 || !r[0].is_number_integer() || !r[1].is_number() || !r[2].is_number())
                f::fail(f::child(path, i), "expected [device, t_s, value]");
            into.samples.push_back({r[0].get<int>(), r[1].get<double>(), r[2].get<double>()});
        }
    };
    if (j.contains("memory"))
        readSamples(f::array(j, "memory", ""), "/memory", t.counter(kMemoryCounter, "B"));
    if (j.contains("counters")) {
        const auto& counters = f::array(j, "counters", "");
        for (std::size_t i = 0; i < counters.size(); ++i) {
            const auto path = f::child("/counters", i);
            f::object(counters[i], path);
            const auto name = f::string(counters[i], "name", path);
            if (name.empty())
                f::fail(path + "/name", "a counter needs a name");
            if (t.counter(name))
                f::fail(path + "/name", "counter '" + name + "' appears twice");
            auto& c = t.counter(name, f::stringOr(counters[i], "unit", path, ""));
            readSamples(f::array(counters[i], "samples", path), path + "/samples", c);
        }
    }
    return t;
}

} // namespace pw::planner
