// SPDX-License-Identifier: MIT
// Schedule generators: per-device orders against the papers' worked examples, transfers, replicas, versions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "tests/planner/fixtures.h"

using namespace pw::planner;

namespace {

/// Uniform model (2 layers per virtual stage), one node of devices; physical stage j gets replicas[j]
/// consecutive devices, virtual stage c*p+j reuses them.
Plan schedulesMakePlan(const std::string& kind, const std::vector<int>& replicas, int microbatches, int chunks = 1,
    int iterations = 1, int extraDevices = 0)
{
    Plan plan;
    const int p = static_cast<int>(replicas.size());
    const int stages = p * chunks;
    for (int i = 0; i < 2 * stages; ++i) {
        Layer l;
        l.name = "layer" + std::to_string(i);
        l.forward_ms = 1;
        l.backward_ms = 2;
        l.activation_bytes = 1000 + i;
        l.weight_bytes = 100;
        plan.model.edit().layers.push_back(l);
    }
    const int devices = std::accumulate(replicas.begin(), replicas.end(), 0) + extraDevices;
    plan.cluster.edit().device_types.push_back({"gpu", 80e9, 100, 0, std::nullopt, 0});
    Node node;
    node.name = "n0";
    node.device_type = "gpu";
    node.count = devices;
    node.intra_bandwidth_bytes_per_s = 1e11;
    plan.cluster.edit().nodes.push_back(node);
    std::vector<std::vector<int>> owned(p);
    for (int j = 0, next = 0; j < p; ++j)
        for (int r = 0; r < replicas[j]; ++r)
            owned[j].push_back(next++);
    for (int s = 0; s < stages; ++s)
        plan.stages.push_back({2 * s, 2 * s + 1, owned[s % p]});
    plan.schedule.kind = kind;
    plan.schedule.microbatches = microbatches;
    plan.schedule.chunks = chunks;
    plan.schedule.iterations = iterations;
    return plan;
}

/// "F1 F2 B1 ... U": compute actions with 1-based microbatches (chunk letters when `chunks` > 1).
std::string schedulesOrder(const Schedule& s, int device, int chunks = 1, int depth = 1)
{
    std::string out;
    for (const auto& a : s.devices[device]) {
        std::string item;
        if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) {
            item = (a.kind == ActionKind::Forward ? "F" : "B") + std::to_string(a.microbatch + 1);
            if (chunks > 1)
                item += static_cast<char>('a' + a.stage / depth);
        } else if (a.kind == ActionKind::OptimizerStep) {
            item = "U";
        } else {
            continue;
        }
        out += (out.empty() ? "" : " ") + item;
    }
    return out;
}

std::string labels(const Schedule& s, int device)
{
    std::string out;
    for (const auto& a : s.devices[device])
        out += (out.empty() ? "" : " ") + actionLabel(a);
    return out;
}

/// Peak number of distinct weight versions of `stage` alive on a device: the latest one plus those that
/// in-flight microbatches (F done, B not yet) were run with.
int peakLiveVersions(const Schedule& s, int device, int stage)
{
    int latest = 0, peak = 1;
    std::map<int, int> inFlight; // version -> microbatches
    for (const auto& a : s.devices[device]) {
        if (a.stage != stage)
            continue;
        if (a.kind == ActionKind::Forward)
            ++inFlight[a.weight_version];
        else if (a.kind == ActionKind::Backward && --inFlight[a.weight_version] == 0)
            inFlight.erase(a.weight_version);
        else if (a.kind == ActionKind::OptimizerStep)
            latest = a.weight_version;
        int live = static_cast<int>(inFlight.size()) + (inFlight.count(latest) ? 0 : 1);
        peak = std::max(peak, live);
    }
    return peak;
}

const char* kStraight[] = {
    "F1 F2 F3 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 B6 B7 B8",
    "F1 F2 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 F8 B6 B7 B8",
    "F1 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 F8 B7 B8",
    "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8",
};

/// Strips optimizer steps from an order.
std::string withoutSteps(std::string s)
{
    std::string out;
    std::size_t i = 0;
    while (i < s.size()) {
        auto j = s.find(' ', i);
        auto item = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
        if (item != "U")
            out += (out.empty() ? "" : " ") + item;
        if (j == std::string::npos)
            break;
        i = j + 1;
    }
    return out;
}

} // namespace

TEST_CASE("1F1B orders equal the worked example for 4 stages x 8 microbatches", "[schedule]")
{
    // pipedream-2bw.md 3.2 (W1..W4) and megatron-gavel.md 1.3 (D1..D4) give the same orders.
    for (const char* kind : {"1f1b", "pipedream", "2bw"}) {
        INFO(kind);
        auto s = generateSchedule(schedulesMakePlan(kind, {1, 1, 1, 1}, 8));
        for (int d = 0; d < 4; ++d)
            CHECK(withoutSteps(schedulesOrder(s, d)) == kStraight[d]);
    }
    auto flush = generateSchedule(schedulesMakePlan("1f1b", {1, 1, 1, 1}, 8));
    CHECK(schedulesOrder(flush, 0) == std::string(kStraight[0]) + " U");
}

TEST_CASE("PipeDream-Flush runs two batches with a flush and a step after each", "[schedule]")
{
    // pipedream-2bw.md 3.6: m = 4, two batches on 4 stages.
    auto s = generateSchedule(schedulesMakePlan("1f1b", {1, 1, 1, 1}, 4, 1, 2));
    CHECK(schedulesOrder(s, 0) == "F1 F2 F3 F4 B1 B2 B3 B4 U F5 F6 F7 F8 B5 B6 B7 B8 U");
    CHECK(schedulesOrder(s, 1) == "F1 F2 F3 B1 F4 B2 B3 B4 U F5 F6 F7 B5 F8 B6 B7 B8 U");
    CHECK(schedulesOrder(s, 2) == "F1 F2 B1 F3 B2 F4 B3 B4 U F5 F6 B5 F7 B6 F8 B7 B8 U");
    CHECK(schedulesOrder(s, 3) == "F1 B1 F2 B2 F3 B3 F4 B4 U F5 B5 F6 B6 F7 B7 F8 B8 U");
    for (const auto& a : s.devices[2])
        if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward)
            CHECK(a.weight_version == a.microbatch / 4);
        else if (a.kind == ActionKind::OptimizerStep)
            CHECK((a.weight_version == 1 || a.weight_version == 2));
}

TEST_CASE("GPipe runs all forwards, then all backwards in order", "[schedule]")
{
    auto s = generateSchedule(schedulesMakePlan("gpipe", {1, 1, 1, 1}, 8));
    for (int d = 0; d < 4; ++d)
        CHECK(schedulesOrder(s, d) == "F1 F2 F3 F4 F5 F6 F7 F8 B1 B2 B3 B4 B5 B6 B7 B8 U");
    auto v2 = generateSchedule(schedulesMakePlan("gpipe", {1, 1}, 2, 2));
    CHECK(schedulesOrder(v2, 0, 2, 2) == "F1a F2a F1b F2b B1b B2b B1a B2a U U");
}

TEST_CASE("interleaved 1F1B equals Megatron's order for p=4, v=2, m=8", "[schedule]")
{
    // megatron-gavel.md 1.4 worked example (a = chunk 0, b = chunk 1).
    const char* expected[] = {
        "F1a F2a F3a F4a F1b F2b F3b F4b F5a F6a F7a B1b F8a B2b F5b B3b F6b B4b F7b B1a F8b B2a B3a B4a B5b B6b "
        "B7b B8b B5a B6a B7a B8a",
        "F1a F2a F3a F4a F1b F2b F3b F4b F5a B1b F6a B2b F7a B3b F8a B4b F5b B1a F6b B2a F7b B3a F8b B4a B5b B6b "
        "B7b B8b B5a B6a B7a B8a",
        "F1a F2a F3a F4a F1b F2b F3b B1b F4b B2b F5a B3b F6a B4b F7a B1a F8a B2a F5b B3a F6b B4a F7b B5b F8b B6b "
        "B7b B8b B5a B6a B7a B8a",
        "F1a F2a F3a F4a F1b B1b F2b B2b F3b B3b F4b B4b F5a B1a F6a B2a F7a B3a F8a B4a F5b B5b F6b B6b F7b B7b "
        "F8b B8b B5a B6a B7a B8a",
    };
    auto s = generateSchedule(schedulesMakePlan("interleaved", {1, 1, 1, 1}, 8, 2));
    CHECK(s.chunks == 2);
    CHECK(s.num_stages == 8);
    for (int d = 0; d < 4; ++d)
        CHECK(withoutSteps(schedulesOrder(s, d, 2, 4)) == expected[d]);
    // The chunk wrap-around goes from the last device back to the first.
    bool wraps = false;
    for (const auto& a : s.devices[0])
        wraps |= a.kind == ActionKind::RecvActivation && a.stage == 3 && a.peer == 3;
    CHECK(wraps);
}

TEST_CASE("transfers surround compute actions with peers and cut bytes", "[schedule]")
{
    auto plan = schedulesMakePlan("1f1b", {1, 1}, 2);
    auto s = generateSchedule(plan);
    CHECK(labels(s, 0) == "0F0 0SEND_F0 0F1 0SEND_F1 1RECV_B0 0B0 1RECV_B1 0B1 0OPTIMIZER_STEP");
    CHECK(labels(s, 1) == "0RECV_F0 1F0 1B0 1SEND_B0 0RECV_F1 1F1 1B1 1SEND_B1 1OPTIMIZER_STEP");
    for (int d = 0; d < 2; ++d)
        for (const auto& a : s.devices[d])
            if (isSend(a.kind) || isRecv(a.kind)) {
                CHECK(a.peer == 1 - d);
                CHECK(a.bytes == 1001.0); // activation of layer 1, the last of stage 0
            }
    plan.model.edit().microbatch_size = 2;
    plan.schedule.microbatch_size = 6;
    auto scaled = generateSchedule(plan);
    CHECK(scaled.devices[0][1].bytes == 3003.0);
}

TEST_CASE("schedule fields describe the run", "[schedule]")
{
    auto s = generateSchedule(schedulesMakePlan("2bw", {1, 1, 1}, 4, 1, 3, 2));
    CHECK(s.kind == "2bw");
    CHECK(s.num_devices == 5);
    CHECK(s.devices.size() == 5);
    CHECK(s.devices[3].empty());
    CHECK(s.devices[4].empty());
    CHECK(s.num_stages == 3);
    CHECK(s.microbatches == 12);
    CHECK(s.microbatches_per_batch == 4);
    CHECK(s.chunks == 1);
    CHECK(s.groups.empty());
    REQUIRE(findScheduleGenerator("gpipe") != nullptr);
    CHECK(findScheduleGenerator("nope") == nullptr);
    std::set<std::string> names;
    for (const auto* g : scheduleGenerators())
        names.insert(std::string(g->name()));
    CHECK(names
        == std::set<std::string> {"gpipe", "1f1b", "pipedream", "2bw", "interleaved", "1f1b-so", "1f1b-as", "wsp",
            "zb-h1", "zb-h2", "zbv", "dualpipev", "v-half", "v-min"});
}

TEST_CASE("replicated stages take microbatches round robin (1F1B-RR)", "[schedule]")
{
    // 2-1 on 3 devices: worker 1 takes even ids, worker 2 odd ids, worker 3 all; NOAM = ceil(3/2) = 2.
    auto s = generateSchedule(schedulesMakePlan("pipedream", {2, 1}, 4, 1, 2));
    REQUIRE(s.groups.size() == 1);
    CHECK(s.groups[0].stage == 0);
    CHECK(s.groups[0].devices == std::vector<std::int32_t> {0, 1});
    CHECK(withoutSteps(schedulesOrder(s, 0)) == "F1 F3 B1 F5 B3 F7 B5 B7");
    CHECK(withoutSteps(schedulesOrder(s, 1)) == "F2 F4 B2 F6 B4 F8 B6 B8");
    CHECK(withoutSteps(schedulesOrder(s, 2)) == "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8");
    // Every backward of a replica is followed by the all-reduce and the step.
    const auto& d0 = s.devices[0];
    for (std::size_t i = 0; i < d0.size(); ++i)
        if (d0[i].kind == ActionKind::Backward) {
            REQUIRE(i + 2 < d0.size());
            CHECK(d0[i + 1].kind == ActionKind::AllReduce);
            CHECK(d0[i + 1].group == 0);
            CHECK(d0[i + 1].bytes == 200.0);
            CHECK(d0[i + 2].kind == ActionKind::OptimizerStep);
        }
    // Gradients of odd microbatches go back to the second replica.
    for (const auto& a : s.devices[2])
        if (a.kind == ActionKind::SendGradient)
            CHECK(a.peer == a.microbatch % 2);
    // Flush: each replica steps once per batch after an all-reduce.
    auto flush = generateSchedule(schedulesMakePlan("1f1b", {2, 1}, 4, 1, 2));
    CHECK(schedulesOrder(flush, 0) == "F1 F3 B1 B3 U F5 F7 B5 B7 U");
    CHECK(schedulesOrder(flush, 2) == "F1 B1 F2 B2 F3 B3 F4 B4 U F5 B5 F6 B6 F7 B7 F8 B8 U");
}

TEST_CASE("generators reject options they cannot run", "[schedule]")
{
    CHECK_THROWS_WITH(
        generateSchedule(schedulesMakePlan("zigzag", {1, 1}, 4)), Catch::Contains("unknown schedule kind"));
    CHECK_THROWS_WITH(
        generateSchedule(schedulesMakePlan("interleaved", {1, 1, 1, 1}, 6, 2)), Catch::Contains("multiple"));
    CHECK_THROWS_WITH(generateSchedule(schedulesMakePlan("interleaved", {2, 1}, 4, 2)), Catch::Contains("replicated"));
    CHECK_THROWS_WITH(generateSchedule(schedulesMakePlan("2bw", {1, 1, 1, 1}, 3)), Catch::Contains("at least as many"));
    CHECK_THROWS_WITH(generateSchedule(schedulesMakePlan("pipedream", {2, 1}, 3)), Catch::Contains("multiple"));
    CHECK_THROWS_WITH(generateSchedule(schedulesMakePlan("1f1b", {1, 1}, 4, 2)), Catch::Contains("interleaved"));
    CHECK_THROWS_AS(generateSchedule(schedulesMakePlan("pipedream", {1, 1}, 4, 2)), InputError);
    auto shared = schedulesMakePlan("1f1b", {1, 1}, 4);
    shared.stages[1].devices = {0};
    CHECK_THROWS_AS(generateSchedule(shared), InputError);
    auto wrongVirtual = schedulesMakePlan("interleaved", {1, 1}, 4, 2);
    wrongVirtual.stages[2].devices = {1};
    CHECK_THROWS_AS(generateSchedule(wrongVirtual), InputError);
}

TEST_CASE("weight versions: PipeDream stashes p-s versions, 2BW two, flush one", "[schedule]")
{
    auto async = generateSchedule(schedulesMakePlan("pipedream", {1, 1, 1, 1}, 8, 1, 2));
    for (int s = 0; s < 4; ++s)
        CHECK(peakLiveVersions(async, s, s) == 4 - s);
    // A forward uses the latest version: k - (p - s) updates, clamped at 0 (pipedream-2bw.md 3.4).
    for (const auto& a : async.devices[0])
        if (a.kind == ActionKind::Forward)
            CHECK(a.weight_version == std::max(0, a.microbatch - 3));

    auto tbw = generateSchedule(schedulesMakePlan("2bw", {1, 1, 1, 1}, 4, 1, 4));
    for (int s = 0; s < 4; ++s)
        CHECK(peakLiveVersions(tbw, s, s) == 2);
    for (const auto& a : tbw.devices[1])
        if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward)
            CHECK(a.weight_version == std::max(a.microbatch / 4 - 1, 0));
    // Version 1 is created right after each stage's B4 (pipedream-2bw.md 3.5).
    const auto& w1 = tbw.devices[0];
    for (std::size_t i = 0; i + 1 < w1.size(); ++i)
        if (w1[i].kind == ActionKind::OptimizerStep && w1[i].weight_version == 1)
            CHECK(actionLabel(w1[i - 1]) == "0B3");

    auto replicated = generateSchedule(schedulesMakePlan("2bw", {2, 2, 1}, 6, 1, 4));
    for (int d = 0; d < 5; ++d)
        CHECK(peakLiveVersions(replicated, d, d < 2 ? 0 : d < 4 ? 1 : 2) <= 2);

    for (const char* kind : {"gpipe", "1f1b"}) {
        auto flush = generateSchedule(schedulesMakePlan(kind, {1, 1, 1}, 4, 1, 3));
        for (int s = 0; s < 3; ++s)
            CHECK(peakLiveVersions(flush, s, s) == 1);
    }
}

TEST_CASE("sends between two devices are received in the order they were posted", "[schedule]")
{
    // Transports without tags (NCCL point-to-point) match messages per pair of devices in order.
    for (const char* kind : {"gpipe", "1f1b", "pipedream", "2bw", "interleaved"})
        for (int p : {2, 3, 4})
            for (int v : {1, 2, 3}) {
                if (v > 1 && std::string(kind) != "gpipe" && std::string(kind) != "interleaved")
                    continue;
                auto s = generateSchedule(schedulesMakePlan(kind, std::vector<int>(p, 1), 2 * p, v, 2));
                std::map<std::pair<int, int>, std::vector<std::string>> sent, received;
                for (int d = 0; d < s.num_devices; ++d)
                    for (const auto& a : s.devices[d]) {
                        std::string key
                            = std::to_string(static_cast<int>(isSend(a.kind) ? a.kind : ActionKind(int(a.kind) - 1)))
                            + ":" + std::to_string(a.stage) + ":" + std::to_string(a.microbatch);
                        if (isSend(a.kind))
                            sent[{d, a.peer}].push_back(key);
                        else if (isRecv(a.kind))
                            received[{a.peer, d}].push_back(key);
                    }
                INFO(kind << " p=" << p << " v=" << v);
                CHECK(sent == received);
            }
}

TEST_CASE("generators produce millions of actions per second", "[.][schedule-perf]")
{
    for (const char* kind : {"gpipe", "1f1b", "pipedream", "2bw", "interleaved"}) {
        auto plan
            = schedulesMakePlan(kind, std::vector<int>(8, 1), 512, std::string(kind) == "interleaved" ? 2 : 1, 64);
        auto t0 = std::chrono::steady_clock::now();
        auto s = generateSchedule(plan);
        auto t1 = std::chrono::steady_clock::now();
        auto report = validate(s, plan);
        auto t2 = std::chrono::steady_clock::now();
        double gen = std::chrono::duration<double>(t1 - t0).count();
        double val = std::chrono::duration<double>(t2 - t1).count();
        WARN(kind << ": " << s.actionCount() << " actions, generate " << s.actionCount() / gen / 1e6
                  << " M actions/s, validate " << s.actionCount() / val / 1e6 << " M actions/s");
        CHECK(report.ok);
    }
}

TEST_CASE("2bw rejects replicated plans whose batches are too small for the next version", "[schedule]")
{
    // 2-2-1: stage 0 keeps ceil(5/2) = 3 microbatches in flight, so microbatch 6 (batch 2) would need
    // version 1 before its replica has finished batch 0.
    CHECK_THROWS_WITH(
        generateSchedule(schedulesMakePlan("2bw", {2, 2, 1}, 3, 1, 3)), Catch::Contains("5 pipeline devices"));
    auto ok = schedulesMakePlan("2bw", {2, 2, 1}, 5, 1, 3);
    CHECK(validate(generateSchedule(ok), ok).ok);
}

namespace {

/// Per device: the actions of `kind` with a group of `purpose`, in order.
std::vector<std::vector<Action>> groupActions(const Schedule& s, CollectivePurpose purpose)
{
    std::vector<std::vector<Action>> out(s.devices.size());
    for (std::size_t d = 0; d < s.devices.size(); ++d)
        for (const auto& a : s.devices[d])
            if (a.kind == ActionKind::AllReduce && s.groups.at(a.group).purpose == purpose)
                out[d].push_back(a);
    return out;
}

} // namespace

TEST_CASE("the tied embedding's gradient is an all-reduce of its own before the step of both holders", "[schedule]")
{
    // issue 30 item 11: the engine summed it inside the optimizer step and the simulator left it out ("groups": []).
    const double tiedBytes = 1000.0 * 64 * 4; // vocab x hidden x fp32
    SECTION("two stages: one pair, an all-reduce per step on each, after the B and right before the step")
    {
        const Plan plan = pw::test::tiedPlan(2, {{0, 2, {0}}, {3, 5, {1}}}, "1f1b", 4);
        const Schedule s = generateSchedule(plan);
        REQUIRE(s.groups.size() == 1);
        CHECK(s.groups[0].purpose == CollectivePurpose::TiedWeights);
        CHECK(s.groups[0].devices == std::vector<std::int32_t> {0, 1});
        for (int d = 0; d < 2; ++d) {
            const auto& list = s.devices[d];
            const auto step = std::find_if(
                list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::OptimizerStep; });
            REQUIRE(step != list.begin());
            const Action& before = *(step - 1);
            CHECK(before.kind == ActionKind::AllReduce);
            CHECK(before.group == 0);
            CHECK(before.stage == d);
            CHECK(before.bytes == Approx(tiedBytes));
        }
        // The JSON names the purpose, and reads back the same.
        CHECK(toJson(s)["groups"][0]["purpose"] == "tied_weights");
        CHECK(scheduleFromJson(toJson(s)) == s);
    }
    SECTION("replicated stages: replica j of the embedding's stage with replica j of the head's, after the replicas'")
    {
        const Plan plan = pw::test::tiedPlan(4, {{0, 2, {0, 1}}, {3, 5, {2, 3}}}, "1f1b", 4);
        const Schedule s = generateSchedule(plan);
        const auto tied = groupActions(s, CollectivePurpose::TiedWeights);
        std::vector<std::vector<std::int32_t>> pairs;
        for (const auto& g : s.groups)
            if (g.purpose == CollectivePurpose::TiedWeights)
                pairs.push_back(g.devices);
        CHECK(pairs == std::vector<std::vector<std::int32_t>> {{0, 2}, {1, 3}});
        for (int d = 0; d < 4; ++d) {
            REQUIRE(tied[d].size() == 1);
            const auto& list = s.devices[d];
            const auto at = std::find(list.begin(), list.end(), tied[d][0]) - list.begin();
            REQUIRE(at >= 1);
            CHECK(list[at - 1].kind == ActionKind::AllReduce); // the replicas' own, first
            CHECK(s.groups.at(list[at - 1].group).purpose == CollectivePurpose::Replicas);
            CHECK(list[at + 1].kind == ActionKind::OptimizerStep);
        }
    }
    SECTION("none where one stage holds both, in a V, or for a model that ties nothing")
    {
        CHECK(generateSchedule(pw::test::tiedPlan(1, {{0, 5, {0}}}, "1f1b", 4)).groups.empty());
        const Plan v = pw::test::tiedPlan(2, {{0, 1, {0}}, {2, 3, {1}}, {4, 4, {1}}, {5, 5, {0}}}, "zbv", 4, 2);
        CHECK(generateSchedule(v).groups.empty());
        Plan untied = pw::test::tiedPlan(2, {{0, 2, {0}}, {3, 5, {1}}}, "1f1b", 4);
        untied.model.edit().architecture.reset(); // a profile without an architecture ties nothing
        CHECK(generateSchedule(untied).groups.empty());
    }
    SECTION("interleaved: the embedding's chunk on the first device, the head's on the last, once per step")
    {
        const Plan plan
            = pw::test::tiedPlan(2, {{0, 1, {0}}, {2, 2, {1}}, {3, 4, {0}}, {5, 5, {1}}}, "interleaved", 4, 2);
        const Schedule s = generateSchedule(plan);
        const auto tied = groupActions(s, CollectivePurpose::TiedWeights);
        REQUIRE(tied[0].size() == 1);
        REQUIRE(tied[1].size() == 1);
        CHECK(tied[0][0].stage == 0);
        CHECK(tied[1][0].stage == 3);
    }
}
