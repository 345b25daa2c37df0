// SPDX-License-Identifier: MIT
// Devices that share one physical GPU (a node's `gpus` naming one card twice; issue 33): the simulator lets their
// computations take turns on it, so a pipeline on one GPU takes about the time of all its stages' work one after
// the other, not the time of a pipeline over as many GPUs; its devices split its memory and its peak FLOP/s, and
// waiting while it runs another device's work is no bubble.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "planner/analysis/flops.h"
#include "planner/physical_gpu.h"
#include "planner/sim/simulator.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;

namespace {

/// A 4-stage plan on one node of four devices on the node's GPUs `gpus`.
planner::Plan fourStages(std::vector<int> gpus, const std::string& kind = "1f1b")
{
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 0, {0}}, {1, 1, {1}}, {2, 2, {2}}, {3, 3, {3}}}, kind, 8);
    planner::Cluster cluster = *plan.cluster;
    cluster.nodes.at(0).gpus = std::move(gpus);
    plan.cluster = cluster;
    plan.validate();
    return plan;
}

} // namespace

TEST_CASE("devices sharing a GPU are numbered by the GPU they share", "[simulator][shared-gpu]")
{
    const auto plan = fourStages({0, 1, 0, 2});
    CHECK(planner::physicalGpu(*plan.cluster, 2) == "local/0");
    CHECK(planner::sharedGpus(*plan.cluster, {0, 1, 2, 3}) == std::vector<int> {0, -1, 0, -1});
    CHECK(planner::sharedGpus(*plan.cluster, {0, 1, 3}) == std::vector<int> {-1, -1, -1, -1}); // 2 unused
    CHECK(planner::sharedGpus(*fourStages({}).cluster, {0, 1, 2, 3}) == std::vector<int> {-1, -1, -1, -1});
}

TEST_CASE("stages sharing one GPU take turns on it", "[simulator][shared-gpu]")
{
    for (const char* kind : {"1f1b", "zb-h1", "gpipe"}) {
        INFO(kind);
        const auto own = planner::simulate(fourStages({0, 1, 2, 3}, kind));
        const auto shared = planner::simulate(fourStages({0, 0, 0, 0}, kind));
        // No two computations overlap on the shared GPU, and its busy time is all the stages' work.
        std::vector<std::pair<double, double>> busy;
        double work = 0;
        for (const auto& s : shared.timeline.spans)
            if (s.lane == planner::Lane::Compute && s.t1 > s.t0) { // (the embedding's input gradient takes no time)
                busy.emplace_back(s.t0, s.t1);
                work += s.t1 - s.t0;
            }
        std::sort(busy.begin(), busy.end());
        for (std::size_t i = 1; i < busy.size(); ++i)
            CHECK(busy[i].first >= busy[i - 1].second - 1e-12);
        double ownWork = 0;
        for (const auto& s : own.timeline.spans)
            if (s.lane == planner::Lane::Compute)
                ownWork += s.t1 - s.t0;
        CHECK(work == Approx(ownWork).epsilon(1e-9)); // the same work, taking turns
        // One step is at least all of that work, and little more: the GPU idles only while a transfer is in flight.
        CHECK(shared.makespan_s >= work - 1e-12);
        CHECK(shared.makespan_s < 1.1 * work);
        CHECK(shared.makespan_s > own.makespan_s); // on a GPU each, the stages overlap
        // Waiting while the GPU runs another stage is no bubble: the GPU's idle time is what is left of the step
        // (the bubble, and the wait for the tied embedding's all-reduce counted apart).
        CHECK(shared.bubble_fraction + shared.data_parallel_wait_fraction
            == Approx(1.0 - work / shared.makespan_s).margin(1e-9));
        CHECK(shared.bubble_fraction < own.bubble_fraction);
    }
}

TEST_CASE("devices sharing a GPU share its memory and its peak FLOP/s", "[simulator][shared-gpu]")
{
    const auto plan = fourStages({0, 0, 0, 0});
    const auto shared = planner::simulate(plan);
    const auto own = planner::simulate(fourStages({0, 1, 2, 3}));
    double peaks = 0;
    for (const auto& d : shared.devices)
        peaks += d.peak_memory_bytes;
    const double card = plan.cluster->typeOf(0).memory_bytes;
    for (std::size_t d = 0; d < shared.devices.size(); ++d) {
        // Each device has what the others' peaks leave of the card; its own peak is the one it would have alone.
        CHECK(shared.devices[d].memory_capacity_bytes
            == Approx(card - (peaks - shared.devices[d].peak_memory_bytes)).epsilon(1e-12));
        CHECK(own.devices[d].memory_capacity_bytes == card);
    }
    CHECK(shared.fitsMemory() == (peaks <= card));

    const auto perGpu = planner::flopsReport(plan, shared.throughput_samples_per_s);
    const auto perDevice = planner::flopsReport(fourStages({0, 1, 2, 3}), shared.throughput_samples_per_s);
    REQUIRE(perGpu);
    REQUIRE(perDevice);
    CHECK(perGpu->gpus == 1);
    CHECK(perGpu->devices == 4);
    CHECK(perDevice->gpus == 4);
    // The same throughput on one card is four times each card's rate on four.
    CHECK(perGpu->model_flops_per_s_per_gpu == Approx(4 * perDevice->model_flops_per_s_per_gpu));
    CHECK(perGpu->mfu == Approx(4 * perDevice->mfu));
}
