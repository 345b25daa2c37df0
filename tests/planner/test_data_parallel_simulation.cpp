// SPDX-License-Identifier: MIT
// simulateDataParallel: Megatron plans simulated on the fewest of their identical data-parallel pipelines that fill
// whole nodes give the whole simulation's metrics (many random configurations); the check refuses the others.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "planner/device_presets.h"
#include "planner/io/transformer.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

Cluster cluster(int nodes, int perNode, double intra, double inter, double latency, double memoryBandwidth)
{
    Cluster c;
    auto h100 = *devicePreset("H100");
    h100.memory_bandwidth_bytes_per_s = memoryBandwidth;
    c.device_types = {h100};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", h100.name, perNode, intra, latency});
    c.inter_node_bandwidth_bytes_per_s = inter;
    c.inter_node_latency_s = 4 * latency;
    return c;
}

ModelProfile gpt(int layers)
{
    TransformerConfig c {layers, 1024, 16, 1024, 51200, 1, 2};
    return transformerProfile(c, *devicePreset("H100"));
}

bool close(double a, double b)
{
    return a == b || std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

bool sameStage(const StageMetrics& a, const StageMetrics& b)
{
    return a.charge == b.charge && a.peak_memory_bytes == b.peak_memory_bytes
        && a.memory_capacity_bytes == b.memory_capacity_bytes
        && a.peak_stashed_microbatches == b.peak_stashed_microbatches
        && a.peak_weight_versions == b.peak_weight_versions;
}

/// Every metric of the whole simulation, to 1e-12 relative (the reduced one recomputes the means in device order).
void requireSame(const SimulationResult& whole, const SimulationResult& reduced)
{
    CHECK(close(whole.makespan_s, reduced.makespan_s));
    CHECK(close(whole.iteration_time_s, reduced.iteration_time_s));
    CHECK(close(whole.throughput_samples_per_s, reduced.throughput_samples_per_s));
    CHECK(close(whole.bubble_fraction, reduced.bubble_fraction));
    CHECK(close(whole.bubble_overhead, reduced.bubble_overhead));
    CHECK(whole.fitsMemory() == reduced.fitsMemory());
    CHECK(worstMemory(whole).peak_bytes == worstMemory(reduced).peak_bytes);
    REQUIRE(whole.batch_ends_s.size() == reduced.batch_ends_s.size());
    for (std::size_t i = 0; i < whole.batch_ends_s.size(); ++i)
        CHECK(close(whole.batch_ends_s[i], reduced.batch_ends_s[i]));
    REQUIRE(whole.devices.size() == reduced.devices.size());
    int differ = 0;
    for (std::size_t d = 0; d < whole.devices.size(); ++d) {
        const auto& a = whole.devices[d];
        const auto& b = reduced.devices[d];
        if (!close(a.busy_s, b.busy_s) || !close(a.bubble_fraction, b.bubble_fraction)
            || a.peak_memory_bytes != b.peak_memory_bytes || a.memory_capacity_bytes != b.memory_capacity_bytes
            || a.peak_stashed_microbatches != b.peak_stashed_microbatches
            || a.peak_weight_versions != b.peak_weight_versions)
            ++differ;
    }
    CHECK(differ == 0);
    REQUIRE(whole.stages.size() == reduced.stages.size());
    for (std::size_t s = 0; s < whole.stages.size(); ++s)
        CHECK(sameStage(whole.stages[s], reduced.stages[s]));
    CHECK(predictedMetrics(whole).stage_peak_memory_bytes == predictedMetrics(reduced).stage_peak_memory_bytes);
}

} // namespace

TEST_CASE("simulating a few data-parallel pipelines gives the whole simulation's metrics", "[simulator][megatron]")
{
    std::mt19937 rng(23);
    auto pick = [&](std::vector<int> v) { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
    const std::vector<std::string> kinds {"", "zb-h1", "zb-h2", "zbv", "dualpipev", "v-half", "v-min"};
    int reducedToOne = 0, reducedToSeveral = 0, whole = 0;
    for (int trial = 0; trial < 112; ++trial) { // 16 of each kind
        megatron::Config c;
        c.kind = kinds[trial % kinds.size()];
        c.p = pick({1, 2, 3, 4});
        c.t = pick({1, 2, 4});
        c.d = pick({2, 4, 8});
        const bool v = megatron::vShaped(c.kind);
        c.v = v ? 2 : c.kind.empty() ? pick({1, 2}) : 1;
        if (v && c.p == 1)
            c.p = 2;
        c.m = c.p * (c.kind == "dualpipev" ? pick({2, 3}) : pick({1, 2, 3}));
        c.recompute = trial % 3 == 0 ? Recompute::Full : Recompute::None;
        const int perNode = pick({1, 2, 4, 8});
        const int devices = c.p * c.t * c.d;
        const int nodes = (devices + perNode - 1) / perNode;
        std::uniform_real_distribution<double> u(0.2, 5.0);
        const auto cl = cluster(nodes, perNode, 1e11 * u(rng), 1e9 * u(rng), 2e-6 * u(rng), trial % 2 ? 3e12 : 0);
        const auto model = gpt(2 * c.p * c.v + trial % 3);
        PartitionRequest request {model, cl, {}};
        const Plan plan = megatron::configPlan(request, c);
        const SimulationOptions metricsOnly {false, false};
        const std::string why = dataParallelAsymmetry(plan, metricsOnly);
        INFO(c.text() << " on " << nodes << " x " << perNode << ": " << (why.empty() ? "reduced" : why));
        const auto full = simulate(plan, metricsOnly);
        const auto one = simulateDataParallel(plan, metricsOnly);
        requireSame(full, one);
        if (!why.empty()) {
            ++whole;
            CHECK(one.simulated_actions == full.simulated_actions);
        } else {
            const int q = std::lcm(c.t, perNode) / c.t;
            CHECK(one.simulated_actions * c.d == full.simulated_actions * q);
            (q == 1 ? reducedToOne : reducedToSeveral) += 1;
        }
    }
    // The draw covers one pipeline simulated (its tensor-parallel groups fill whole nodes), several, and refusals.
    CHECK(reducedToOne > 10);
    CHECK(reducedToSeveral > 5);
    CHECK(whole > 5);
}

TEST_CASE("the data-parallel reduction refuses plans whose pipelines are not alike", "[simulator][megatron]")
{
    const SimulationOptions metricsOnly {false, false};
    const auto model = gpt(8);
    const megatron::Config c {2, 4, 4, 1, 1, Recompute::None, 4};
    const auto even = cluster(8, 4, 1e11, 1e10, 2e-6, 0);
    const Plan plan = megatron::configPlan(PartitionRequest {model, even, {}}, c);
    REQUIRE(dataParallelAsymmetry(plan, metricsOnly).empty());
    REQUIRE(
        simulateDataParallel(plan, metricsOnly).simulated_actions * 4 == simulate(plan, metricsOnly).simulated_actions);

    // Nodes of 8 hold two pipelines of a stage: two simulated (of 4) for one batch, the whole plan for zbv's two
    // batches (after the first all-reduce, whose turn it is on a shared uplink may differ between pipelines).
    const auto wide = cluster(4, 8, 1e11, 1e10, 2e-6, 0);
    const Plan two = megatron::configPlan(PartitionRequest {model, wide, {}}, c);
    CHECK(dataParallelAsymmetry(two, metricsOnly).empty());
    CHECK(simulateDataParallel(two, metricsOnly).simulated_actions * 2 == simulate(two, metricsOnly).simulated_actions);
    auto v = c;
    v.kind = "zbv";
    v.v = 2;
    const Plan shared = megatron::configPlan(PartitionRequest {model, wide, {}}, v);
    REQUIRE(shared.schedule.iterations > 1);
    CHECK(!dataParallelAsymmetry(shared, metricsOnly).empty());
    // Nodes of 16 hold all four pipelines of a stage: nothing to leave out.
    const auto wider = cluster(2, 16, 1e11, 1e10, 2e-6, 0);
    CHECK(!dataParallelAsymmetry(megatron::configPlan(PartitionRequest {model, wider, {}}, c), metricsOnly).empty());
    const auto sharedWhole = simulate(shared, metricsOnly);
    const auto sharedResult = simulateDataParallel(shared, metricsOnly);
    CHECK(sharedResult.simulated_actions == sharedWhole.simulated_actions);
    requireSame(sharedWhole, sharedResult);
    // A node with a slower link, or another device type: the cluster is not homogeneous.
    auto slow = even;
    slow.nodes[3].intra_bandwidth_bytes_per_s /= 2;
    const Plan slowPlan = megatron::configPlan(PartitionRequest {model, slow, {}}, c);
    CHECK(!dataParallelAsymmetry(slowPlan, metricsOnly).empty());
    requireSame(simulate(slowPlan, metricsOnly), simulateDataParallel(slowPlan, metricsOnly));
    auto mixed = even;
    auto other = mixed.device_types[0];
    other.name = "other";
    other.memory_bytes /= 2;
    mixed.device_types.push_back(other);
    mixed.nodes[2].device_type = "other";
    CHECK(!dataParallelAsymmetry(megatron::configPlan(PartitionRequest {model, mixed, {}}, c), metricsOnly).empty());
    // Spans and memory counters are the whole plan's own.
    CHECK(!dataParallelAsymmetry(plan, {}).empty());
    CHECK(!dataParallelAsymmetry(plan, {false, true}).empty());
    // Microbatches that do not split evenly, a pipeline's devices out of order, a kind not known to be symmetric.
    auto uneven = plan;
    uneven.schedule.microbatches += 1;
    CHECK(!dataParallelAsymmetry(uneven, metricsOnly).empty());
    auto swapped = plan;
    std::swap(swapped.stages[0].devices[0], swapped.stages[0].devices[4]);
    CHECK(!dataParallelAsymmetry(swapped, metricsOnly).empty());
    auto gpipe = plan;
    gpipe.schedule.kind = "gpipe";
    CHECK(!dataParallelAsymmetry(gpipe, metricsOnly).empty());
}
