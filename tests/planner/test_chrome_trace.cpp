// SPDX-License-Identifier: MIT
// Tests of the Chrome Trace export against the rules Perfetto applies, and of the actions CSV.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/chrome_trace.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

bool isInt(const json& e, const char* key)
{
    return e.contains(key) && e[key].is_number_integer();
}
bool isNum(const json& e, const char* key)
{
    return e.contains(key) && e[key].is_number();
}
bool isStr(const json& e, const char* key)
{
    return e.contains(key) && e[key].is_string();
}

/// What Perfetto's JSON importer (and chrome://tracing) needs from the events this exporter writes:
/// required fields per phase, named processes and threads, no overlapping slices on one thread, and flows
/// whose two ends pair up and bind to enclosing slices. Returns one line per problem.
std::vector<std::string> perfettoProblems(const json& trace)
{
    std::vector<std::string> problems;
    auto bad = [&](std::size_t i, const std::string& what) {
        problems.push_back("event " + std::to_string(i) + ": " + what);
    };
    if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
        return {"no traceEvents array"};
    if (trace.contains("displayTimeUnit") && trace["displayTimeUnit"] != "ms" && trace["displayTimeUnit"] != "ns")
        problems.push_back("displayTimeUnit must be ms or ns");

    using Thread = std::pair<long, long>;
    std::map<Thread, std::vector<std::pair<double, double>>> slices;
    std::set<long> namedProcesses;
    std::set<Thread> namedThreads;
    struct FlowEnd
    {
        int count = 0;
        double ts = 0;
        Thread thread;
    };
    std::map<std::string, std::pair<FlowEnd, FlowEnd>> flows; // id -> (s, f)

    const auto& events = trace["traceEvents"];
    for (std::size_t i = 0; i < events.size(); ++i) {
        const auto& e = events[i];
        if (!e.is_object() || !isStr(e, "ph")) {
            bad(i, "not an object with a ph");
            continue;
        }
        const std::string ph = e["ph"];
        if (!isInt(e, "pid"))
            bad(i, "pid must be an integer");
        if (ph == "X") {
            if (!isStr(e, "name") || !isNum(e, "ts") || !isNum(e, "dur") || !isInt(e, "tid"))
                bad(i, "X needs name, ts, dur, pid and tid");
            else if (e["ts"].get<double>() < 0 || e["dur"].get<double>() < 0)
                bad(i, "X has a negative ts or dur");
            else
                slices[{e["pid"].get<long>(), e["tid"].get<long>()}].emplace_back(
                    e["ts"].get<double>(), e["dur"].get<double>());
            if (e.contains("args") && !e["args"].is_object())
                bad(i, "args must be an object");
        } else if (ph == "M") {
            const std::string name = e.value("name", "");
            bool thread = name == "thread_name" || name == "thread_sort_index";
            if (name != "process_name" && name != "process_sort_index" && !thread)
                bad(i, "unknown metadata " + name);
            if (thread && !isInt(e, "tid"))
                bad(i, "thread metadata needs a tid");
            if (!e.contains("args") || !e["args"].is_object())
                bad(i, "metadata needs args");
            else if (name.ends_with("_name") && !isStr(e["args"], "name"))
                bad(i, "name metadata needs args.name");
            else if (name.ends_with("_sort_index") && !isInt(e["args"], "sort_index"))
                bad(i, "sort metadata needs args.sort_index");
            if (name == "process_name")
                namedProcesses.insert(e["pid"].get<long>());
            if (name == "thread_name" && isInt(e, "tid"))
                namedThreads.insert({e["pid"].get<long>(), e["tid"].get<long>()});
        } else if (ph == "C") {
            if (!isStr(e, "name") || !isNum(e, "ts") || !e.contains("args") || !e["args"].is_object())
                bad(i, "C needs name, ts and args");
            else
                for (const auto& [k, v] : e["args"].items())
                    if (!v.is_number())
                        bad(i, "counter value " + k + " is not a number");
        } else if (ph == "s" || ph == "f") {
            if (!e.contains("id") || !isStr(e, "name") || !isStr(e, "cat") || !isNum(e, "ts") || !isInt(e, "tid")) {
                bad(i, "flow needs id, name, cat, ts, pid and tid");
                continue;
            }
            if (ph == "f" && e.value("bp", "") != "e")
                bad(i, "flow end must bind to its enclosing slice (bp e)");
            auto& end = ph == "s" ? flows[e["id"].dump()].first : flows[e["id"].dump()].second;
            end.count++;
            end.ts = e["ts"].get<double>();
            end.thread = {e["pid"].get<long>(), e["tid"].get<long>()};
        } else {
            bad(i, "unexpected phase " + ph);
        }
    }

    for (auto& [thread, list] : slices) {
        std::string where = "pid " + std::to_string(thread.first) + " tid " + std::to_string(thread.second);
        if (!namedProcesses.count(thread.first))
            problems.push_back(where + ": process has no process_name");
        if (!namedThreads.count(thread))
            problems.push_back(where + ": thread has no thread_name");
        std::sort(list.begin(), list.end());
        for (std::size_t k = 1; k < list.size(); ++k)
            if (list[k].first < list[k - 1].first + list[k - 1].second - 1e-6)
                problems.push_back(where + ": slices overlap at ts " + std::to_string(list[k].first));
    }
    auto encloses = [&](const FlowEnd& end) {
        auto it = slices.find(end.thread);
        if (it == slices.end())
            return false;
        return std::any_of(it->second.begin(), it->second.end(),
            [&](const auto& s) { return s.first <= end.ts + 1e-6 && end.ts <= s.first + s.second + 1e-6; });
    };
    for (const auto& [id, ends] : flows) {
        if (ends.first.count != 1 || ends.second.count != 1) {
            problems.push_back("flow " + id + " needs exactly one s and one f");
            continue;
        }
        if (ends.second.ts < ends.first.ts)
            problems.push_back("flow " + id + " ends before it starts");
        if (!encloses(ends.first) || !encloses(ends.second))
            problems.push_back("flow " + id + " has an end outside every slice of its thread");
    }
    return problems;
}

Span span(int device, Lane lane, ActionKind kind, int stage, int mb, double t0ms, double t1ms, int peer = -1)
{
    Span s;
    s.device = device;
    s.lane = lane;
    s.kind = kind;
    s.stage = stage;
    s.microbatch = mb;
    s.t0 = t0ms * 1e-3;
    s.t1 = t1ms * 1e-3;
    s.peer = peer;
    return s;
}

/// Two stages; stage 1 is replicated on devices 1 and 2. Compute and transfers overlap on separate lanes,
/// and device 0 has two sends in flight at once.
Timeline sampleTimeline()
{
    using K = ActionKind;
    Timeline t;
    t.label = "hand-made";
    t.device_names = {"n0/gpu0 (A100)", "n0/gpu1 (A100)", "n1/gpu0 (A100)"};
    t.spans = {
        span(0, Lane::Compute, K::Forward, 0, 0, 0.0, 0.1),
        span(0, Lane::Compute, K::Forward, 0, 1, 0.1, 0.3), // back to back, times not exact in binary
        span(0, Lane::Send, K::SendActivation, 0, 0, 0.1, 0.6, 1),
        span(0, Lane::Send, K::SendActivation, 0, 1, 0.3, 0.7, 2), // overlaps the first send
        span(1, Lane::Recv, K::RecvActivation, 0, 0, 0.05, 0.6), // posted before the send starts
        span(1, Lane::Compute, K::Forward, 1, 0, 0.6, 1.0),
        span(1, Lane::Compute, K::Backward, 1, 0, 1.0, 2.0),
        span(1, Lane::Send, K::SendGradient, 1, 0, 2.0, 2.4, 0),
        span(2, Lane::Recv, K::RecvActivation, 0, 1, 0.3, 0.7),
        span(2, Lane::Compute, K::Forward, 1, 1, 0.7, 1.1),
        span(0, Lane::Recv, K::RecvGradient, 1, 0, 0.3, 2.4),
        span(0, Lane::Compute, K::Backward, 0, 0, 2.4, 2.6),
        span(0, Lane::Collective, K::AllReduce, 0, -1, 2.6, 3.0),
        span(0, Lane::Compute, K::OptimizerStep, 0, -1, 3.0, 3.1),
    };
    t.counter(kMemoryCounter, "B").samples = {{0, 0.0, 1e9}, {0, 0.1e-3, 1.5e9}, {0, 2.6e-3, 1e9}, {1, 0.0, 2e9}};
    return t;
}

std::vector<json> eventsWith(const json& trace, const std::string& ph)
{
    std::vector<json> out;
    for (const auto& e : trace["traceEvents"])
        if (e["ph"] == ph)
            out.push_back(e);
    return out;
}

} // namespace

TEST_CASE("Chrome trace of a hand-made timeline obeys Perfetto's rules", "[chrome_trace]")
{
    const Timeline t = sampleTimeline();
    const json trace = chromeTrace(t);
    CHECK(json::parse(trace.dump()) == trace); // valid JSON, nothing lost in text
    CHECK(trace["displayTimeUnit"] == "ms");
    const auto problems = perfettoProblems(trace);
    for (const auto& p : problems)
        UNSCOPED_INFO(p);
    CHECK(problems.empty());

    auto slices = eventsWith(trace, "X");
    REQUIRE(slices.size() == t.spans.size());
    const auto& first = slices.front();
    CHECK(first["name"] == "F s0 mb0");
    CHECK(first["cat"] == "compute,F");
    CHECK(first["ts"] == 0.0);
    CHECK(first["dur"] == Approx(100.0)); // 0.1 ms in microseconds
    CHECK(first["args"] == json {{"stage", 0}, {"microbatch", 0}, {"kind", "F"}, {"action", 0}});
    auto allReduce
        = std::find_if(slices.begin(), slices.end(), [](const json& e) { return e["cat"] == "collective,ALLREDUCE"; });
    REQUIRE(allReduce != slices.end());
    CHECK((*allReduce)["name"] == "ALLREDUCE s0");
    CHECK((*allReduce)["tid"] == 3);

    // The two overlapping sends of device 0 sit on two rows of the send lane.
    std::set<int> sendTids;
    for (const auto& e : slices)
        if (e["pid"] == 0 && e["cat"] == "send,SEND_F")
            sendTids.insert(e["tid"].get<int>());
    CHECK(sendTids == std::set<int> {1, 5});

    std::map<std::pair<int, int>, std::string> threadNames;
    std::map<int, std::string> processNames;
    for (const auto& e : eventsWith(trace, "M")) {
        if (e["name"] == "thread_name")
            threadNames[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
        if (e["name"] == "process_name")
            processNames[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
    CHECK(processNames
        == std::map<int, std::string> {{0, "n0/gpu0 (A100)"}, {1, "n0/gpu1 (A100)"}, {2, "n1/gpu0 (A100)"}});
    CHECK(threadNames[{0, 0}] == "compute");
    CHECK(threadNames[{0, 1}] == "send");
    CHECK(threadNames[{0, 2}] == "recv");
    CHECK(threadNames[{0, 3}] == "collective");
    CHECK(threadNames[{0, 5}] == "send 2");
}

TEST_CASE("Chrome trace draws a flow from every send to its receive", "[chrome_trace]")
{
    const json trace = chromeTrace(sampleTimeline());
    auto starts = eventsWith(trace, "s");
    auto ends = eventsWith(trace, "f");
    REQUIRE(starts.size() == 3);
    REQUIRE(ends.size() == 3);
    // (send pid, send ts) -> (recv pid, recv tid, f ts)
    std::map<std::pair<int, double>, std::tuple<int, int, double>> arrows;
    for (const auto& s : starts) {
        auto f = std::find_if(ends.begin(), ends.end(), [&](const json& e) { return e["id"] == s["id"]; });
        REQUIRE(f != ends.end());
        CHECK((*f)["bp"] == "e");
        CHECK((*f)["cat"] == s["cat"]);
        arrows[{s["pid"].get<int>(), s["ts"].get<double>()}]
            = {(*f)["pid"].get<int>(), (*f)["tid"].get<int>(), (*f)["ts"].get<double>()};
    }
    // mb0 forward: device 0 -> 1; the receive was posted at 50 us, so the arrow ends at the send's start.
    CHECK(arrows.at({0, 100.0}) == std::tuple<int, int, double> {1, 2, 100.0});
    // mb1 forward goes to the other replica, device 2 (the span's peer).
    CHECK(arrows.at({0, 300.0}) == std::tuple<int, int, double> {2, 2, 300.0});
    // mb0 gradient back to device 0.
    CHECK(arrows.at({1, 2000.0}) == std::tuple<int, int, double> {0, 2, 2000.0});
}

TEST_CASE("Chrome trace pairs transfers by stage and microbatch when peers are unknown", "[chrome_trace]")
{
    // Both ends of a transfer carry the stage that produced the tensor (the schedule builder's convention).
    using K = ActionKind;
    Timeline t;
    t.spans = {
        span(0, Lane::Send, K::SendActivation, 0, 7, 1.0, 2.0), span(1, Lane::Recv, K::RecvActivation, 0, 7, 0.5, 2.0),
        span(1, Lane::Send, K::SendActivation, 1, 7, 3.0, 4.0),
        span(2, Lane::Recv, K::RecvActivation, 1, 7, 0.2, 4.0), // posted long before its data: not stage 0's
        span(2, Lane::Send, K::SendGradient, 2, 7, 5.0, 6.0), span(1, Lane::Recv, K::RecvGradient, 2, 7, 4.5, 6.0),
        span(1, Lane::Send, K::SendGradient, 1, 7, 6.5, 7.0), // arrived before asked for: no receive slice,
        span(0, Lane::Compute, K::Backward, 0, 7, 7.2, 8.0), // so the arrow ends on the B that consumes it
        span(0, Lane::Recv, K::RecvGradient, 1, 8, 6.5, 7.5), // another microbatch: no arrow
        span(2, Lane::Send, K::SendActivation, 2, 9, 8.0, 8.5), // nothing receives or consumes it: no arrow
    };
    const json trace = chromeTrace(t);
    CHECK(perfettoProblems(trace).empty());
    auto ends = eventsWith(trace, "f");
    REQUIRE(eventsWith(trace, "s").size() == 4);
    REQUIRE(ends.size() == 4);
    CHECK(ends[0]["pid"] == 1);
    CHECK(ends[1]["pid"] == 2);
    CHECK(ends[1]["ts"] == 3000.0);
    CHECK(ends[2]["pid"] == 1);
    CHECK(ends[3]["pid"] == 0);
    CHECK(ends[3]["tid"] == 0);
    CHECK(ends[3]["ts"] == 7200.0);
    // Unnamed devices still get a process name.
    for (const auto& e : eventsWith(trace, "M"))
        if (e["name"] == "process_name" && e["pid"] == 2)
            CHECK(e["args"]["name"] == "device 2");
}

TEST_CASE("Chrome trace of simulated schedules obeys Perfetto's rules", "[chrome_trace]")
{
    TransformerConfig config;
    config.layers = 6;
    config.hidden = 64;
    config.heads = 4;
    config.sequence = 16;
    config.vocab = 100;
    Plan plan;
    plan.model = transformerProfile(config, *devicePreset("cpu")); // 8 layers
    plan.cluster.device_types = {*devicePreset("cpu")};
    Node node;
    node.name = "n0";
    node.device_type = "cpu";
    node.count = 4;
    node.intra_bandwidth_bytes_per_s = 1e8;
    node.intra_latency_s = 1e-5;
    plan.cluster.nodes = {node};
    plan.schedule.microbatches = 8;

    auto kind = GENERATE(as<std::string> {}, "gpipe", "1f1b", "interleaved");
    INFO(kind);
    plan.schedule.kind = kind;
    const int stages = kind == "interleaved" ? 8 : 4;
    plan.schedule.chunks = stages / 4;
    for (int s = 0; s < stages; ++s) {
        const int layers = 8 / stages;
        plan.stages.push_back({s * layers, s * layers + layers - 1, {s % 4}});
    }

    const Timeline timeline = simulate(plan).timeline;
    const json trace = chromeTrace(timeline);
    const auto problems = perfettoProblems(trace);
    for (const auto& p : problems)
        UNSCOPED_INFO(p);
    CHECK(problems.empty());
    auto isSendSpan = [](const Span& s) { return isSend(s.kind); };
    auto sends = static_cast<std::size_t>(std::count_if(timeline.spans.begin(), timeline.spans.end(), isSendSpan));
    CHECK(sends > 0);
    CHECK(eventsWith(trace, "s").size() == sends); // every send found its receive
    CHECK(eventsWith(trace, "X").size() == timeline.spans.size());
}

TEST_CASE("Chrome trace writes memory as counters", "[chrome_trace]")
{
    const json trace = chromeTrace(sampleTimeline());
    auto counters = eventsWith(trace, "C");
    REQUIRE(counters.size() == 4);
    CHECK(
        counters[1] == json {{"ph", "C"}, {"name", "memory"}, {"ts", 100.0}, {"pid", 0}, {"args", {{"bytes", 1.5e9}}}});
    CHECK(counters[3]["pid"] == 1);
}

TEST_CASE("The Perfetto checker rejects broken traces", "[chrome_trace]")
{
    const json good = chromeTrace(sampleTimeline());
    auto problemsAfter = [&](auto&& edit) {
        json t = good;
        edit(t["traceEvents"]);
        return perfettoProblems(t);
    };
    auto firstX = [](json& events) -> json& {
        return *std::find_if(events.begin(), events.end(), [](const json& e) { return e["ph"] == "X"; });
    };
    CHECK(problemsAfter([&](json& ev) { firstX(ev)["dur"] = 150.0; }).size() == 1); // runs into the next F
    CHECK_FALSE(problemsAfter([&](json& ev) { firstX(ev).erase("tid"); }).empty());
    CHECK_FALSE(problemsAfter([&](json& ev) { firstX(ev)["ts"] = "0"; }).empty());
    CHECK_FALSE(problemsAfter([](json& ev) {
        ev.erase(std::find_if(ev.begin(), ev.end(), [](const json& e) { return e["ph"] == "f"; }));
    }).empty());
    CHECK_FALSE(problemsAfter([](json& ev) {
        for (auto& e : ev)
            if (e["ph"] == "f")
                e.erase("bp");
    }).empty());
    CHECK_FALSE(problemsAfter([](json& ev) {
        for (auto& e : ev)
            if (e["ph"] == "s")
                e["ts"] = 1e9; // outside every slice
    }).empty());
    CHECK_FALSE(problemsAfter([](json& ev) {
        ev.erase(std::find_if(ev.begin(), ev.end(), [](const json& e) { return e["name"] == "thread_name"; }));
    }).empty());
    CHECK_FALSE(perfettoProblems(json::array()).empty());
}

TEST_CASE("Actions CSV has one row per device in actionLabel form", "[chrome_trace]")
{
    using K = ActionKind;
    Schedule s;
    s.num_devices = 2;
    s.devices = {
        {{K::Forward, 0, 0}, {K::SendActivation, 0, 0, 1}, {K::RecvGradient, 0, 0, 1}, {K::Backward, 0, 0}},
        {{K::RecvActivation, 1, 0, 0}, {K::Forward, 1, 12}, {K::Backward, 1, 12}, {K::AllReduce, 1, -1},
            {K::OptimizerStep, 1, -1}},
    };
    CHECK(actionsCsv(s)
        == "0,0F0,0SEND_F0,0RECV_B0,0B0\n"
           "1,1RECV_F0,1F12,1B12,1ALLREDUCE,1OPTIMIZER_STEP\n");
    CHECK(actionsCsv(Schedule {}).empty());
}

TEST_CASE("Chrome trace of the demo plan obeys Perfetto's rules", "[chrome_trace]")
{
    auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    for (const char* clusterFile : {"/dgx-h100.json", "/hetpipe-cluster.json"}) {
        auto cluster = loadCluster(std::string(PW_DEMO_DIR) + clusterFile);
        PartitionOptions options;
        options.schedule.kind = "1f1b";
        options.schedule.microbatches = 16;
        options.flat = true;
        auto result = findPartitioner("pipedream")->partition({model, cluster, options}, {}, {});
        REQUIRE(result.ok());
        auto sim = simulate(*result.plan);
        // Through text and back, as Perfetto would read the file.
        auto trace = json::parse(chromeTrace(sim.timeline).dump());
        auto problems = perfettoProblems(trace);
        INFO(clusterFile << ": " << (problems.empty() ? "" : problems.front()));
        CHECK(problems.empty());
        CHECK(eventsWith(trace, "X").size() == sim.timeline.spans.size());
        CHECK(!eventsWith(trace, "C").empty());
    }
}

// #10 item 7: the export built the whole trace as a JSON document first (2.95 GB for a 261 MB file); it streams now.
TEST_CASE("the streamed Chrome trace file is valid JSON equal to the trace document", "[chrome_trace]")
{
    Timeline t = sampleTimeline();
    t.label = "plan \"A\\B\"\n\ttab \x01 and caf\xc3\xa9"; // quotes, backslash, control characters, UTF-8
    t.device_names[0] = "n0/\"gpu0\"";
    const auto dir = std::filesystem::temp_directory_path() / ("pw_trace_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = (dir / "trace.json").string();
    writeChromeTraceFile(path, t);
    const json fromFile = readJsonFile(path);
    CHECK(fromFile == chromeTrace(t));
    CHECK(fromFile.at("otherData").at("label") == t.label);
    CHECK(perfettoProblems(fromFile).empty());
    const auto slices = eventsWith(fromFile, "X");
    REQUIRE(slices.size() == t.spans.size());
    for (const auto& e : slices) {
        CHECK(e.at("ts").is_number());
        CHECK(e.at("dur").get<double>() >= 0);
    }
    CHECK_FALSE(std::filesystem::exists(path + ".partial"));

    // A target that cannot be written names the file and leaves nothing behind.
    CHECK_THROWS_AS(writeChromeTraceFile((dir / "missing" / "t.json").string(), t), InputError);
    // A span that ends before it starts: no half-written file replaces a good one.
    Timeline bad = t;
    bad.spans[0].t1 = bad.spans[0].t0 - 1;
    CHECK_THROWS_AS(writeChromeTraceFile(path, bad), InputError);
    CHECK(readJsonFile(path) == fromFile);
    CHECK_FALSE(std::filesystem::exists(path + ".partial"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("the trace writer writes times exactly as a JSON document would", "[chrome_trace]")
{
    Timeline t;
    t.device_names = {"d"};
    // Whole, fractional, tiny and huge microsecond values.
    for (double t0 : {0.0, 1e-6, 1.5e-6, 123.456789e-3, 1e-9, 3600.0, 1e6})
        t.spans.push_back({0, Lane::Compute, ActionKind::Forward, 0, 0, 0, t0, t0 + 2e-6, -1});
    std::stringstream text;
    writeChromeTrace(text, t);
    const json parsed = json::parse(text.str());
    std::multiset<double> ts;
    for (const auto& e : eventsWith(parsed, "X"))
        ts.insert(e.at("ts").get<double>());
    CHECK(ts == std::multiset<double> {0.0, 1.0, 1.5, 123456.789, 0.001, 3.6e9, 1e12});
}
