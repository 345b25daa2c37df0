// SPDX-License-Identifier: MIT
// ZeRO stages 2 and 3 (issue 31 item 3): gradients and then weights sharded over a stage's data-parallel replicas,
// FSDP's gathers every microbatch pipelined with the compute, in plans, the memory model, the simulator, the Megatron
// search and the exports.
#include <catch2/catch.hpp>

#include <string>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/export/export.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

constexpr double kZeroGiB = 1024.0 * 1024.0 * 1024.0;

/// A 1.3 B GPT in bf16 (its head untied, so that no tied weights are summed between the stages) on `nodes` nodes of 8
/// H100s with `intraNode` bytes/s in a node, 50 GB/s per GPU (one NIC each) between them.
PartitionRequest zeroRequest(int nodes, double intraNode, ScheduleOptions schedule = {})
{
    TransformerConfig c {24, 2048, 16, 2048, 51200, 1, 2};
    c.tied_embeddings = false;
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster = pw::test::uniformCluster(nodes, 8, {80e9, 100, intraNode, 5e-6, 5e10, 1e-5});
    cluster.device_types[0] = *devicePreset("H100");
    cluster.device_types[0].name = "gpu";
    for (auto& n : cluster.nodes)
        n.inter_node_links = 8;
    PartitionOptions o;
    o.schedule = schedule;
    o.schedule.gradient_precision = "fp32"; // Megatron's default beside bf16 weights
    return {model, cluster, o};
}

/// p = 2, t = 1, d = 8 over two nodes (a stage's replicas in one node), 8 microbatches per pipeline, ZeRO stage
/// `stage`.
Plan zeroPlan(int stage, double intraNode = 4.5e11)
{
    megatron::Config c {2, 1, 8, 1, 1, Recompute::None, 8};
    c.distributed_optimizer = stage >= 1;
    c.shard_gradients = stage >= 2;
    c.shard_weights = stage >= 3;
    return megatron::configPlan(zeroRequest(2, intraNode), c);
}

} // namespace

TEST_CASE("ZeRO: a parameter costs 2 + 16/d bytes at stage 2 and 18/d at stage 3", "[zero]")
{
    // bf16 weights with fp32 gradients and Adam: 2 + 4 + 12 = 18 bytes whole (Megatron's default); the distributed
    // optimizer 6 + 12/d (stage 1); gradients sharded too 2 + 16/d (stage 2); everything 18/d (stage 3).
    const auto model = zeroRequest(1, 4.5e11).model;
    ScheduleOptions o;
    o.gradient_precision = "fp32";
    const int d = 8;
    CHECK(trainingBytesPerParameter(o, *model, d) == Approx(18));
    o.distributed_optimizer = true;
    CHECK(trainingBytesPerParameter(o, *model, d) == Approx(6 + 12.0 / d));
    o.shard_gradients = true;
    CHECK(trainingBytesPerParameter(o, *model, d) == Approx(2 + 16.0 / d));
    CHECK(optimizerStateFactor(o, *model, d) == Approx(7.0 / d)); // (4 - 2) / d extra width + 12 / d, over 2 bytes
    o.shard_weights = true;
    CHECK(trainingBytesPerParameter(o, *model, d) == Approx(18.0 / d));
    CHECK(residentShares(o, d) == ResidentShares {1.0 / d, 1.0 / d});
}

TEST_CASE("ZeRO: each stage keeps less memory and the formula still agrees with the simulation", "[zero]")
{
    double previous = 1e300;
    for (int stage = 0; stage <= 3; ++stage) {
        INFO("stage " << stage);
        const Plan plan = zeroPlan(stage);
        REQUIRE_NOTHROW(plan.validate());
        const auto totals = stageTotals(plan, 0, plan.cluster->typeOf(0));
        if (stage >= 2)
            CHECK(totals.gradient_bytes == Approx(totals.weight_bytes / 8));
        else
            CHECK(totals.gradient_bytes == totals.weight_bytes);
        if (stage == 3) {
            // Its 1/8 plus two whole blocks (the largest layer is the embedding here: 2 x its bytes, capped).
            CHECK(totals.resident_weight_bytes > totals.weight_bytes / 8);
            CHECK(totals.resident_weight_bytes <= totals.weight_bytes);
        } else {
            CHECK(totals.resident_weight_bytes == totals.weight_bytes);
        }
        const auto sim = simulate(plan, SimulationOptions {false, true});
        const double peak = sim.devices[0].peak_memory_bytes;
        CHECK(peak < previous);
        previous = peak;
        // The search's closed form counts what the simulator does (1F1B, one chunk).
        megatron::Config c {2, 1, 8, 1, 1, Recompute::None, 8};
        c.distributed_optimizer = stage >= 1;
        c.shard_gradients = stage >= 2;
        c.shard_weights = stage >= 3;
        const auto e = megatron::estimate(plan, c);
        CHECK(e.peak_memory_bytes == Approx(std::max(peak, sim.devices[8].peak_memory_bytes)).epsilon(1e-6));
        CHECK(e.memory_parts.gradients == Approx(totals.gradient_bytes).epsilon(1e-9));
    }
}

TEST_CASE("ZeRO-3: gathers every microbatch, hidden by the compute on a fast link, the step sums nothing", "[zero]")
{
    const Plan one = zeroPlan(1);
    const Plan three = zeroPlan(3);
    const auto a = simulate(one);
    const auto b = simulate(three);
    // The gradient sum happened inside the backwards: nothing is left to wait for at the step.
    CHECK(b.data_parallel_wait_fraction < a.data_parallel_wait_fraction);
    CHECK(b.data_parallel_wait_fraction == Approx(0).margin(1e-9));
    const auto& charge = b.stages[0].charge;
    CHECK(charge.weight_gather_s >= 0);
    // Each pass shows at least its first layer's share: max(comm / layers, comm - compute (layers - 1) / layers).
    const auto totals = stageTotals(three, 0, three.cluster->typeOf(0));
    CHECK(charge.weight_gather_s
        == Approx(pipelinedCommunicationSeconds(totals.weight_gather_forward_s, totals.forward_s, totals.weight_layers)
            + pipelinedCommunicationSeconds(
                totals.weight_gather_backward_s, totals.backward_s + totals.recompute_s, totals.weight_layers)));
    CHECK(totals.weight_gather_forward_s > 0);
    CHECK(totals.weight_gather_backward_s > totals.weight_gather_forward_s); // gather again, and reduce-scatter
    // On a slow link they show: the plan is slower than stage 1's.
    const auto slow = simulate(zeroPlan(3, 1e9));
    CHECK(slow.stages[0].charge.weight_gather_s > charge.weight_gather_s);
    CHECK(slow.iteration_time_s > simulate(zeroPlan(1, 1e9)).iteration_time_s);
    // q of the d pipelines simulated: the same metrics, the gathers over the whole group.
    const auto reduced = simulateDataParallel(three, SimulationOptions {false, false});
    const auto whole = simulate(three, SimulationOptions {false, false});
    CHECK(reduced.iteration_time_s == Approx(whole.iteration_time_s).epsilon(1e-9));
    CHECK(reduced.stages[0].charge.weight_gather_s == Approx(whole.stages[0].charge.weight_gather_s).epsilon(1e-9));
}

TEST_CASE("ZeRO: plan files, checks and exports", "[zero]")
{
    Plan plan = zeroPlan(3);
    CHECK(planFromJson(toJson(plan)).schedule.shard_weights);
    CHECK(planFromJson(toJson(plan)).schedule.shard_gradients);
    auto bad = plan;
    bad.schedule.shard_gradients = false;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("/schedule/shard_weights"));
    bad = plan;
    bad.schedule.distributed_optimizer = false;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("/schedule/shard_gradients"));
    // Exports: torchtitan shards (FSDP) at stage 3 and has no stage 2; Megatron-LM and DeepSpeed's pipeline engine
    // stop at stage 1. Each refusal names the field.
    auto text = [](const PlanExport& e) {
        std::string all;
        for (const auto& f : e.files)
            all += f.text;
        return all;
    };
    CHECK_THAT(text(findPlanExporter("torchtitan")->write(plan)), Catch::Contains("data_parallel_shard_degree = 8"));
    CHECK_THROWS_WITH(findPlanExporter("megatron")->write(plan), Catch::Contains("/schedule/shard_weights"));
    CHECK_THROWS_WITH(findPlanExporter("deepspeed")->write(plan), Catch::Contains("/schedule/shard_weights"));
    plan = zeroPlan(2);
    CHECK_THROWS_WITH(findPlanExporter("torchtitan")->write(plan), Catch::Contains("/schedule/shard_gradients"));
    CHECK_THROWS_WITH(findPlanExporter("megatron")->write(plan), Catch::Contains("/schedule/shard_gradients"));
}

TEST_CASE("ZeRO: the Megatron search takes a stage for every configuration with replicas", "[zero][megatron]")
{
    auto r = zeroRequest(2, 4.5e11);
    r.options.schedule.microbatches = 16;
    r.options.params = {{"zero-stage", "3"}, {"pipeline-sizes", {2}}, {"tensor-sizes", {1}}, {"simulate-top", 2}};
    const auto result = findPartitioner("megatron")->partition(r, {}, {});
    INFO(result.errorText());
    REQUIRE(result.ok());
    CHECK(result.plan->schedule.shard_weights);
    CHECK(result.plan->algorithm_options.at("chosen").at("zero_stage") == 3);
    // Left to the search (auto), the request's --zero-stage 3 is what it reports and plans.
    r.options.schedule.distributed_optimizer = r.options.schedule.shard_gradients = true;
    r.options.schedule.shard_weights = true;
    r.options.params = {{"pipeline-sizes", {2}}, {"tensor-sizes", {1}}, {"simulate-top", 2}};
    const auto requested = findPartitioner("megatron")->partition(r, {}, {});
    REQUIRE(requested.ok());
    CHECK(requested.plan->schedule.shard_weights);
    CHECK(requested.plan->algorithm_options.at("chosen").at("zero_stage") == 3);
    r.options.params = {{"zero-stage", "1"}};
    CHECK_THAT(findPartitioner("megatron")->partition(r, {}, {}).errorText(), Catch::Contains("contradicts"));
    r.options.schedule = {};
    r.options.schedule.microbatches = 16;
    // A contradiction with the distributed optimizer's setting is refused.
    r.options.params = {{"zero-stage", "2"}, {"distributed-optimizer", "false"}};
    const auto refused = findPartitioner("megatron")->partition(r, {}, {});
    CHECK_FALSE(refused.ok());
    CHECK_THAT(refused.errorText(), Catch::Contains("zero-stage"));
}
