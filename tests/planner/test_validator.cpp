// SPDX-License-Identifier: MIT
// Schedule validator: accepts every generated schedule, rejects broken ones with a message that says why.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/schedule/generator.h"

using namespace pw::planner;

namespace {

/// Uniform model (one layer per virtual stage), one node; physical stage j gets replicas[j] devices.
Plan validatorMakePlan(
    const std::string& kind, const std::vector<int>& replicas, int microbatches, int chunks = 1, int iterations = 1)
{
    Plan plan;
    const int p = static_cast<int>(replicas.size());
    const int stages = p * chunks;
    for (int i = 0; i < stages; ++i) {
        Layer l;
        l.name = "layer" + std::to_string(i);
        l.forward_ms = 1;
        l.backward_ms = 2;
        l.activation_bytes = 1000;
        l.weight_bytes = 100;
        plan.model.edit().layers.push_back(l);
    }
    plan.cluster.edit().device_types.push_back({"gpu", 80e9, 100, 0, std::nullopt, 0});
    Node node;
    node.name = "n0";
    node.device_type = "gpu";
    node.count = std::accumulate(replicas.begin(), replicas.end(), 0);
    node.intra_bandwidth_bytes_per_s = 1e11; // wsp derives its order from a timed run: links must be finite
    plan.cluster.edit().nodes.push_back(node);
    std::vector<std::vector<int>> owned(p);
    for (int j = 0, next = 0; j < p; ++j)
        for (int r = 0; r < replicas[j]; ++r)
            owned[j].push_back(next++);
    // Virtual stages in a loop, or in a V for a kind that runs two chunks so (ZBV).
    const auto* traits = findScheduleTraits(kind);
    const bool v = traits && traits->chunks == ChunkRule::V && chunks == 2;
    for (int s = 0; s < stages; ++s)
        plan.stages.push_back({s, s, owned[v && s >= p ? 2 * p - 1 - s : s % p]});
    plan.schedule.kind = kind;
    plan.schedule.microbatches = microbatches;
    plan.schedule.chunks = chunks;
    plan.schedule.iterations = iterations;
    return plan;
}

int lcmOf(const std::vector<int>& values)
{
    int l = 1;
    for (int v : values)
        l = std::lcm(l, v);
    return l;
}

/// Whether a kind's traits say it accepts this configuration.
bool accepts(const ScheduleTraits& t, const std::vector<int>& replicas, int m, int chunks, int iterations)
{
    const int p = static_cast<int>(replicas.size());
    const int maxReplicas = *std::max_element(replicas.begin(), replicas.end());
    const bool equal = std::all_of(replicas.begin(), replicas.end(), [&](int r) { return r == replicas[0]; });
    if (!t.replicated_stages && maxReplicas > 1)
        return false;
    if (chunks > 1 && t.chunks == ChunkRule::None)
        return false;
    if (chunks > 1 && t.chunks == ChunkRule::WholeRounds
        && !(equal && m % replicas[0] == 0 && (m / replicas[0]) % p == 0))
        return false;
    if (t.chunks == ChunkRule::V && !(chunks == 2 && equal && m % replicas[0] == 0))
        return false;
    if (t.replicas_divide_inputs && (m * iterations) % lcmOf(replicas) != 0)
        return false;
    if (t.batch_covers_pipeline && (m < p || m < maxReplicas))
        return false;
    if (t.batch_covers_virtual_stages && m / maxReplicas < p * chunks)
        return false;
    return true;
}

std::string joined(const std::vector<std::string>& errors)
{
    std::string out;
    for (const auto& e : errors)
        out += e + "\n";
    return out;
}

void checkGrid(const std::vector<int>& replicas, const std::vector<int>& chunkValues)
{
    for (const auto* generator : scheduleGenerators()) {
        const std::string kind(generator->name());
        const auto& traits = generator->traits();
        for (int m : {1, 2, 3, 4, 8, 16})
            for (int v : chunkValues)
                for (int iterations : {1, 2}) {
                    auto plan = validatorMakePlan(kind, replicas, m, v, iterations);
                    plan.cluster.edit().device_types[0].streaming_execution = traits.streams_transfers;
                    INFO(kind << " config " << plan.configString() << " m=" << m << " v=" << v
                              << " iterations=" << iterations);
                    if (!accepts(traits, replicas, m, v, iterations)) {
                        CHECK_THROWS_AS(generateSchedule(plan), InputError);
                        continue;
                    }
                    auto s = generateSchedule(plan);
                    auto report = validate(s, plan);
                    INFO(joined(report.errors));
                    CHECK(report.ok);
                    CHECK(report.errors.empty());
                }
    }
}

std::size_t validatorFind(const std::vector<Action>& list, ActionKind kind, int microbatch)
{
    for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i].kind == kind && list[i].microbatch == microbatch)
            return i;
    FAIL("action not found");
    return 0;
}

} // namespace

TEST_CASE("validator accepts every generated straight schedule", "[validator]")
{
    for (int p = 1; p <= 8; ++p)
        checkGrid(std::vector<int>(p, 1), {1, 2, 3});
}

TEST_CASE("validator accepts every generated replicated schedule", "[validator]")
{
    const std::vector<std::vector<int>> configs = {
        {2}, {2, 1}, {3, 1}, {1, 2}, {2, 2}, {2, 3}, {4, 1}, {2, 2, 1}, {3, 2, 1}, {1, 3, 2}, {2, 1, 1, 1}, {1, 1, 2}};
    for (const auto& c : configs)
        checkGrid(c, {1, 2});
}

TEST_CASE("validator measures the sends a device must buffer", "[validator]")
{
    auto plan = validatorMakePlan("1f1b", {1, 1, 1, 1}, 8);
    CHECK(validate(generateSchedule(plan), plan).max_outstanding_sends == 4);
    plan.schedule.kind = "gpipe";
    CHECK(validate(generateSchedule(plan), plan).max_outstanding_sends == 8);
}

TEST_CASE("validator rejects broken schedules with a reason", "[validator]")
{
    auto plan = validatorMakePlan("1f1b", {1, 1}, 2);
    const auto good = generateSchedule(plan);
    REQUIRE(validate(good, plan).ok);

    SECTION("a removed receive")
    {
        auto s = good;
        auto& d1 = s.devices[1];
        d1.erase(d1.begin() + static_cast<long>(validatorFind(d1, ActionKind::RecvActivation, 1)));
        auto r = validate(s, plan);
        CHECK_FALSE(r.ok);
        CHECK_THAT(joined(r.errors), Catch::Contains("no matching receive"));
        CHECK_THAT(joined(r.errors), Catch::Contains("no receive of the activation"));
    }
    SECTION("a receive moved before the send it waits for: deadlock")
    {
        auto s = good;
        auto& d0 = s.devices[0];
        auto recv = d0[validatorFind(d0, ActionKind::RecvGradient, 0)];
        d0.erase(d0.begin() + static_cast<long>(validatorFind(d0, ActionKind::RecvGradient, 0)));
        d0.insert(d0.begin() + 1, recv); // F0, RECV_B0, SEND_F0, ...
        auto r = validate(s, plan);
        CHECK_FALSE(r.ok);
        CHECK_THAT(joined(r.errors), Catch::Contains("deadlock"));
        CHECK_THAT(joined(r.errors), Catch::Contains("device 0 action #1 (1RECV_B0) waits for device 1"));
        CHECK_THAT(joined(r.errors), Catch::Contains("device 1 action #0 (0RECV_F0) waits for device 0"));
    }
    SECTION("two swapped receives on one device: deadlock")
    {
        auto s = validatorMakePlan("1f1b", {1, 1, 1}, 3);
        auto sch = generateSchedule(s);
        auto& d1 = sch.devices[1];
        std::swap(
            d1[validatorFind(d1, ActionKind::RecvActivation, 0)], d1[validatorFind(d1, ActionKind::RecvGradient, 0)]);
        auto r = validate(sch, s);
        CHECK_FALSE(r.ok);
        CHECK_THAT(joined(r.errors), Catch::Contains("deadlock"));
    }
    SECTION("a duplicated forward")
    {
        auto s = good;
        auto& d0 = s.devices[0];
        d0.insert(d0.begin() + 1, d0[0]);
        auto r = validate(s, plan);
        CHECK_FALSE(r.ok);
        CHECK_THAT(joined(r.errors), Catch::Contains("F(stage 0, microbatch 0) occurs 2 times"));
    }
    SECTION("a missing backward")
    {
        auto s = good;
        auto& d1 = s.devices[1];
        d1.erase(d1.begin() + static_cast<long>(validatorFind(d1, ActionKind::Backward, 1)));
        CHECK_THAT(joined(validate(s, plan).errors), Catch::Contains("B(stage 1, microbatch 1) is missing"));
    }
    SECTION("a backward with another version than its forward")
    {
        auto s = good;
        s.devices[1][validatorFind(s.devices[1], ActionKind::Backward, 0)].weight_version = 1;
        auto r = validate(s, plan);
        CHECK_FALSE(r.ok);
        CHECK_THAT(joined(r.errors), Catch::Contains("uses weight version 1 but its forward used 0"));
    }
    SECTION("a forward using a version not produced yet")
    {
        auto s = good;
        s.devices[0][0].weight_version = 3;
        s.devices[0][validatorFind(s.devices[0], ActionKind::Backward, 0)].weight_version = 3;
        CHECK_THAT(joined(validate(s, plan).errors), Catch::Contains("does not exist yet"));
    }
    SECTION("a forward on the wrong replica")
    {
        auto rplan = validatorMakePlan("1f1b", {2, 1}, 2);
        auto s = generateSchedule(rplan);
        std::swap(s.devices[0], s.devices[1]);
        CHECK_THAT(joined(validate(s, rplan).errors),
            Catch::Contains("runs on device 1, but microbatch 0 belongs to device 0 (replica 0 of stage 0)"));
    }
    SECTION("an all-reduce one replica never reaches")
    {
        auto rplan = validatorMakePlan("pipedream", {2, 1}, 4);
        auto s = generateSchedule(rplan);
        auto& d1 = s.devices[1];
        for (std::size_t i = d1.size(); i-- > 0;)
            if (d1[i].kind == ActionKind::AllReduce) {
                d1.erase(d1.begin() + static_cast<long>(i));
                break;
            }
        auto r = validate(s, rplan);
        CHECK_THAT(joined(r.errors), Catch::Contains("all-reduce group 0"));
        CHECK_THAT(joined(r.errors), Catch::Contains("deadlock"));
        CHECK_THAT(joined(r.errors), Catch::Contains("1 of 2 members arrived"));
    }
    SECTION("a schedule for another plan")
    {
        auto other = validatorMakePlan("1f1b", {1, 1, 1}, 2);
        CHECK_FALSE(validate(good, other).ok);
    }
}
