// SPDX-License-Identifier: MIT
// The injectable cost model (issue 10, item 10) against closed forms: ring all-reduce, data-parallel gradients
// overlapping the backward pass bucket by bucket, and inter-node sends sharing a node's uplink.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// One stage of `layers` layers (F f ms, B b ms, `weights` bytes each) on `replicas` devices of one node whose
/// link moves `bandwidth` bytes/s with `latency` s; one microbatch per replica, 1f1b, free optimizer steps.
Plan replicatedPlan(int replicas, int layers, double f, double b, double weights, double bandwidth, double latency)
{
    Plan plan;
    for (int l = 0; l < layers; ++l) {
        Layer layer;
        layer.name = "l" + std::to_string(l);
        layer.forward_ms = f;
        layer.backward_ms = b;
        layer.weight_bytes = weights;
        plan.model.edit().layers.push_back(layer);
    }
    plan.cluster.edit().device_types = {{"gpu", 1e12, 100, 0, {}, 0}};
    plan.cluster.edit().nodes.push_back({"n0", "", 22, "", "gpu", replicas, bandwidth, latency});
    PlanStage stage {0, layers - 1, {}};
    for (int r = 0; r < replicas; ++r)
        stage.devices.push_back(r);
    plan.stages.push_back(stage);
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = replicas;
    plan.validate();
    return plan;
}

/// Two stages of one layer each: stage 0 on the k devices of node n0, stage 1 on the k devices of node n1; the
/// activation between them has `bytes` bytes; no weights (the all-reduces move nothing), free intra-node links.
Plan twoNodePlan(int k, double bytes, double interBandwidth, double interLatency)
{
    Plan plan;
    for (int l = 0; l < 2; ++l) {
        Layer layer;
        layer.name = "l" + std::to_string(l);
        layer.forward_ms = 1;
        layer.backward_ms = 2;
        layer.activation_bytes = bytes;
        plan.model.edit().layers.push_back(layer);
    }
    plan.cluster.edit().device_types = {{"gpu", 1e12, 100, 0, {}, 0}};
    plan.cluster.edit().nodes.push_back({"n0", "", 22, "", "gpu", k, 1e15, 0});
    plan.cluster.edit().nodes.push_back({"n1", "", 22, "", "gpu", k, 1e15, 0});
    plan.cluster.edit().inter_node_bandwidth_bytes_per_s = interBandwidth;
    plan.cluster.edit().inter_node_latency_s = interLatency;
    PlanStage first {0, 0, {}}, second {1, 1, {}};
    for (int r = 0; r < k; ++r) {
        first.devices.push_back(r);
        second.devices.push_back(k + r);
    }
    plan.stages = {first, second};
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = k;
    plan.validate();
    return plan;
}

/// Arrival times of the activations stage 0 sends, ascending.
std::vector<double> activationArrivals(const SimulationResult& r)
{
    std::vector<double> out;
    for (const auto& s : r.timeline.spans)
        if (s.lane == Lane::Send && s.kind == ActionKind::SendActivation)
            out.push_back(s.t1);
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

TEST_CASE("ring all-reduce of d replicas costs 2(d-1)/d bytes / bandwidth + 2(d-1) latency", "[cost-model]")
{
    const double bytes = 4e9, bw = 1e11, lat = 1e-5;
    for (int d : {2, 3, 4, 8}) {
        INFO("d = " << d);
        // One layer: its gradients are final when the backward ends, so nothing overlaps.
        const auto plan = replicatedPlan(d, 1, 1.0, 2.0, bytes, bw, lat);
        const auto r = simulate(plan);
        const double allReduce = 2.0 * (d - 1) / d * bytes / bw + 2.0 * (d - 1) * lat;
        CHECK(r.iteration_time_s == Approx(3e-3 + allReduce));
        auto cost = CostModel::fromPlan(plan);
        CHECK(cost.allReduceSeconds(plan.stages[0].devices, bytes) == Approx(allReduce));
    }
}

TEST_CASE("gradient buckets overlap the backward pass, only the tail after it shows", "[cost-model]")
{
    // 8 layers, B = 2 ms each; 2 replicas, so each bucket's all-reduce takes bytes / bandwidth.
    const int K = 8;
    const double f = 1.0, b = 2.0, bw = 1e10;
    const auto schedule = [](const Plan& plan) { return generateSchedule(plan); };

    SECTION("short buckets hide behind the backward: only the last one is exposed")
    {
        const double wire = 1e-3; // < B of one layer
        const auto plan = replicatedPlan(2, K, f, b, wire * bw, bw, 0);
        const auto cost = CostModel::fromPlan(plan);
        REQUIRE(cost.stage_buckets[0].size() == K);
        CHECK(simulate(plan).iteration_time_s == Approx(K * (f + b) * 1e-3 + wire));
        auto blocking = cost;
        blocking.overlap_gradient_allreduce = false;
        CHECK(simulate(plan, schedule(plan), blocking).iteration_time_s == Approx(K * (f + b) * 1e-3 + K * wire));
    }
    SECTION("long buckets: the link is the bottleneck from the first bucket on")
    {
        const double wire = 4e-3; // > B of one layer
        const auto plan = replicatedPlan(2, K, f, b, wire * bw, bw, 0);
        // The first bucket is final after one layer's backward; then K buckets back to back.
        CHECK(simulate(plan).iteration_time_s == Approx(K * f * 1e-3 + b * 1e-3 + K * wire));
    }
    SECTION("a long backward hides the whole all-reduce but the last bucket, latency included")
    {
        const double wire = 1e-4, lat = 1e-4;
        const auto plan = replicatedPlan(4, K, f, b, wire * bw, bw, lat);
        // 4 replicas: each bucket 2 (3/4) wire; the 6 latency steps hide behind the backward too.
        CHECK(simulate(plan).iteration_time_s == Approx(K * (f + b) * 1e-3 + 1.5 * wire));
    }
}

TEST_CASE("k concurrent transfers over one node's uplink take k times as long", "[cost-model]")
{
    const double bytes = 1e8, bw = 1e10, lat = 1e-5;
    const double one = bytes / bw;
    for (int k : {1, 2, 4}) {
        INFO("k = " << k);
        const auto plan = twoNodePlan(k, bytes, bw, lat);
        // Every replica of stage 0 finishes its forward at 1 ms and sends at once.
        const auto shared = activationArrivals(simulate(plan));
        REQUIRE(shared.size() == static_cast<std::size_t>(k));
        for (int i = 0; i < k; ++i)
            CHECK(shared[i] == Approx(1e-3 + (i + 1) * one + lat));
        CHECK(shared.back() - 1e-3 - lat == Approx(k * one));

        auto cost = CostModel::fromPlan(plan);
        cost.shared_node_uplink = false;
        for (double t : activationArrivals(simulate(plan, generateSchedule(plan), cost)))
            CHECK(t == Approx(1e-3 + one + lat));
    }
}

TEST_CASE("transfers inside a node do not share the uplink", "[cost-model]")
{
    // Both stages on one node of 4 devices: the same two-stage plan, no inter-node link in use.
    auto plan = twoNodePlan(2, 1e8, 1e10, 1e-5);
    plan.cluster.edit().nodes = {{"n0", "", 22, "", "gpu", 4, 1e10, 0}};
    for (double t : activationArrivals(simulate(plan)))
        CHECK(t == Approx(1e-3 + 1e8 / 1e10));
}

TEST_CASE("simulate takes an injected cost model", "[cost-model]")
{
    const auto plan = replicatedPlan(2, 4, 1.0, 2.0, 1e6, 1e10, 1e-6);
    const auto schedule = generateSchedule(plan);
    const auto base = simulate(plan, schedule);
    CHECK(simulate(plan, schedule, CostModel::fromPlan(plan)).iteration_time_s == base.iteration_time_s);

    // A calibrated model: measured forwards twice the profile's.
    auto measured = CostModel::fromPlan(plan);
    for (auto& t : measured.forward_s)
        t *= 2;
    CHECK(simulate(plan, schedule, measured).iteration_time_s
        == Approx(base.iteration_time_s + plan.model->layers.size() * 1e-3));

    auto broken = CostModel::fromPlan(plan);
    broken.device_node.pop_back();
    CHECK_THROWS_WITH(simulate(plan, schedule, broken), Catch::Contains("device nodes"));
    broken = CostModel::fromPlan(plan);
    broken.backward_s.clear();
    CHECK_THROWS_AS(simulate(plan, schedule, broken), InputError);
}

TEST_CASE("fromPlan buckets a stage's gradients by layer, last layer first", "[cost-model]")
{
    auto plan = replicatedPlan(2, 3, 1.0, 2.0, 100, 1e10, 0);
    plan.model.edit().layers[0].weight_bytes = 300; // the first layer's gradients are final last
    plan.model.edit().layers[2].backward_ms = 4.0; // the last layer runs its backward first
    const auto cost = CostModel::fromPlan(plan);
    REQUIRE(cost.stage_buckets[0].size() == 3);
    const auto& b = cost.stage_buckets[0];
    CHECK(b[0].bytes_fraction == Approx(0.2));
    CHECK(b[0].ready_fraction == Approx(0.5));
    CHECK(b[1].ready_fraction == Approx(0.75));
    CHECK(b[2].bytes_fraction == Approx(0.6));
    CHECK(b[2].ready_fraction == Approx(1.0));
}
