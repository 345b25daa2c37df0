// SPDX-License-Identifier: MIT
// Tensor- and context-parallel groups in the simulator: a group runs once, on its first device, its transfer arrives
// with its last slice, and every member gets its first device's timeline and metrics (simulateGroupLeaders).
#include <catch2/catch.hpp>

#include <algorithm>
#include <tuple>
#include <vector>

#include "fixtures.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using pw::test::ChainLayer;
using pw::test::NodeSpec;

namespace {

constexpr double kInterBandwidth = 1e9, kInterLatency = 1e-5;

/// Two stages of two layers, tensor-parallel groups of 2: stage 0 on node 0's devices 0 and 1, stage 1 on node 1's
/// devices 2 and 3, so every activation and gradient crosses the nodes' uplinks (`links` each).
Plan modelParallelGroupsTwoNodePlan(int links, int microbatches = 1)
{
    Plan plan;
    plan.model = pw::test::uniformChain(4, ChainLayer {1, 2, 2e6, 1e6, {}});
    auto cluster = pw::test::uniformCluster(2, 2, NodeSpec {80e9, 100, 1e11, 0, kInterBandwidth, kInterLatency});
    for (auto& node : cluster.nodes)
        node.inter_node_links = links;
    plan.cluster = std::move(cluster);
    plan.stages = {{0, 1, {0, 1}}, {2, 3, {2, 3}}};
    plan.tensor_parallel = 2;
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = microbatches;
    return plan;
}

/// The first span of `kind` on `device`.
Span first(const SimulationResult& r, int device, ActionKind kind)
{
    for (const auto& s : r.timeline.spans)
        if (s.device == device && s.kind == kind && s.lane == Lane::Compute)
            return s;
    FAIL("no span of that kind on device " << device);
    return {};
}

/// Spans as comparable tuples, sorted.
std::vector<std::tuple<int, int, int, int, int, double, double, int>> sorted(const SimulationResult& r)
{
    std::vector<std::tuple<int, int, int, int, int, double, double, int>> out;
    for (const auto& s : r.timeline.spans)
        out.emplace_back(
            s.device, static_cast<int>(s.lane), static_cast<int>(s.kind), s.stage, s.microbatch, s.t0, s.t1, s.peer);
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

TEST_CASE("a tensor-parallel group goes on when the last slice of its input has arrived", "[simulator][tensor]")
{
    for (int links : {1, 2}) {
        INFO(links << " uplink(s) per node");
        const Plan plan = modelParallelGroupsTwoNodePlan(links);
        const auto cost = CostModel::fromPlan(plan);
        const double slice = cost.boundary_bytes[0]; // each rank's 1/t of the activation
        REQUIRE(slice == Approx(1e6));
        const auto r = simulate(plan);
        const double sent = first(r, 0, ActionKind::Forward).t1;
        // One shared uplink carries the two slices one after the other; with a link each they travel together. Both
        // members of the receiving group start with the later slice (Megatron gathers them before computing).
        const double arrival = sent + kInterLatency + (links == 1 ? 2 : 1) * slice / kInterBandwidth;
        CHECK(first(r, 2, ActionKind::Forward).t0 == Approx(arrival));
        CHECK(first(r, 3, ActionKind::Forward).t0 == Approx(arrival));
    }
}

TEST_CASE("a group's members get its first device's spans and metrics, simulated once", "[simulator][tensor]")
{
    const Plan plan = modelParallelGroupsTwoNodePlan(1, 6);
    const Schedule full = generateSchedule(plan);
    const auto once = simulate(plan); // the group leaders' schedule
    CHECK(once.simulated_actions * 2 == full.actionCount());
    // The full schedule (every rank's copy, expandTensorParallel) is recognised and run the same way.
    const auto recognised = simulate(plan, full);
    CHECK(recognised.simulated_actions == once.simulated_actions);
    CHECK(sorted(recognised) == sorted(once));
    CHECK(recognised.iteration_time_s == once.iteration_time_s);
    for (int d = 0; d < 4; ++d) {
        const int leader = d - d % 2;
        INFO("device " << d);
        CHECK(once.devices[d].busy_s == once.devices[leader].busy_s);
        CHECK(once.devices[d].peak_memory_bytes == once.devices[leader].peak_memory_bytes);
        CHECK(once.devices[d].bubble_fraction == once.devices[leader].bubble_fraction);
        CHECK(recognised.devices[d].peak_memory_bytes == once.devices[d].peak_memory_bytes);
    }
    // Each member's spans name its own peers: rank 1 of stage 0 sends to rank 1 of stage 1.
    for (const auto& s : once.timeline.spans)
        if (s.lane == Lane::Send && s.device == 1)
            CHECK(s.peer == 3);
    // Memory samples too, one series per device.
    const auto* memory = once.timeline.counter(kMemoryCounter);
    REQUIRE(memory);
    for (int d = 0; d < 4; ++d)
        CHECK(std::any_of(
            memory->samples.begin(), memory->samples.end(), [d](const CounterSample& c) { return c.device == d; }));
}

TEST_CASE("a schedule whose ranks differ is simulated rank by rank", "[simulator][tensor]")
{
    const Plan plan = modelParallelGroupsTwoNodePlan(1, 2);
    Schedule full = generateSchedule(plan);
    // Rank 1 of stage 0 sends twice its slice: its group no longer runs alike.
    for (auto& a : full.devices[1])
        if (isSend(a.kind))
            a.bytes *= 2;
    const auto r = simulate(plan, full);
    CHECK(r.simulated_actions == full.actionCount());
    CHECK(first(r, 3, ActionKind::Forward).t0 != Approx(first(r, 2, ActionKind::Forward).t0));
}
