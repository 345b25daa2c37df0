// SPDX-License-Identifier: MIT
// Hybrid sharding (issue 31 item 3: PyTorch's HSDP, Megatron's --num-distributed-optimizer-instances): ZeRO's shards
// over groups of s gradient replicas, each group a whole copy, the groups summing their shards once per step; in
// plans, the memory model, the gathers, the simulator's step, the Megatron search and the exports.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// A 1.3 B GPT in bf16 (its head untied) on two nodes of 8 H100s: NVLink 450 GB/s and 5 us inside, 50 GB/s and 10 us
/// per GPU (one NIC each) between them.
PartitionRequest hsdpRequest()
{
    TransformerConfig c {24, 2048, 16, 2048, 51200, 1, 2};
    c.tied_embeddings = false;
    Cluster cluster = pw::test::uniformCluster(2, 8, {80e9, 100, 4.5e11, 5e-6, 5e10, 1e-5});
    cluster.device_types[0] = *devicePreset("H100");
    cluster.device_types[0].name = "gpu";
    for (auto& n : cluster.nodes)
        n.inter_node_links = 8;
    PartitionOptions o;
    o.schedule.gradient_precision = "fp32";
    return {transformerProfile(c, *devicePreset("H100")), cluster, o};
}

/// One stage, d = 16 over both nodes, ZeRO stage `stage`, shard groups of `group` replicas (0: all 16), the gradient
/// sum after the backward (so that its span is the whole collective).
Plan hsdpPlan(int stage, int group)
{
    megatron::Config c {1, 1, 16, 1, 1, Recompute::None, 8};
    c.distributed_optimizer = stage >= 1;
    c.shard_gradients = stage >= 2;
    c.shard_weights = stage >= 3;
    Plan p = megatron::configPlan(hsdpRequest(), c);
    p.schedule.shard_group = group;
    p.schedule.overlap_grad_reduce = false;
    p.validate();
    return p;
}

/// The stage's gradient all-reduce span on device 0, its bytes the schedule's.
Span allReduce(const Plan& hsdpPlan, const SimulationResult& r)
{
    double bytes = 0;
    const Schedule schedule = generateSchedule(hsdpPlan);
    for (const auto& a : schedule.devices[0])
        if (a.kind == ActionKind::AllReduce)
            bytes = a.bytes;
    for (auto s : r.timeline.spans)
        if (s.device == 0 && s.kind == ActionKind::AllReduce) {
            s.bytes = bytes;
            return s;
        }
    FAIL("no all-reduce span");
    return {};
}

} // namespace

TEST_CASE("HSDP: each group of s replicas keeps 1/s of what ZeRO shards", "[zero][hsdp]")
{
    ScheduleOptions o;
    o.gradient_precision = "fp32";
    setZeroStage(o, 3);
    const auto req = hsdpRequest();
    const auto& model = *req.model;
    CHECK(trainingBytesPerParameter(o, model, 16) == Approx(18.0 / 16));
    o.shard_group = 8;
    CHECK(shardGroupSize(o, 16) == 8);
    CHECK(shardGroupSize(o, 4) == 4); // a group larger than the replicas is all of them
    CHECK(trainingBytesPerParameter(o, model, 16) == Approx(18.0 / 8));

    const Plan whole = hsdpPlan(3, 0), hybrid = hsdpPlan(3, 8);
    const auto& type = whole.cluster->typeOf(0);
    const auto a = stageTotals(whole, 0, type), b = stageTotals(hybrid, 0, type);
    CHECK(b.optimizer_bytes == Approx(2 * a.optimizer_bytes));
    CHECK(b.gradient_bytes == Approx(2 * a.gradient_bytes));
    CHECK(b.resident_weight_bytes > a.resident_weight_bytes);
    // The gathers stay inside a node: NVLink's 450 GB/s instead of the NIC's 50.
    CHECK(b.weight_gather_forward_s < a.weight_gather_forward_s / 5);
    CHECK(b.weight_gather_forward_s
        == Approx(7.0 / 8 * b.weight_bytes / 4.5e11 + 7 * 5e-6 * b.weight_layers).epsilon(1e-9));
}

TEST_CASE("HSDP: the step sums each member's 1/s shard across the groups", "[zero][hsdp]")
{
    // FSDP over all 16: the gradients were reduce-scattered in every backward, the step moves nothing.
    const auto fsdp = simulate(hsdpPlan(3, 0));
    CHECK(allReduce(hsdpPlan(3, 0), fsdp).t1 - allReduce(hsdpPlan(3, 0), fsdp).t0 == Approx(0).margin(1e-12));
    // HSDP, groups of 8: the two groups' ranks all-reduce their 1/8 over the NICs (a ring of 2).
    const auto hsdp = simulate(hsdpPlan(3, 8));
    const Span h = allReduce(hsdpPlan(3, 8), hsdp);
    REQUIRE(h.bytes > 0);
    CHECK(h.t1 - h.t0 == Approx(2.0 * 1 / 2 * h.bytes / 8 / 5e10 + 2 * 1e-5).epsilon(1e-9));
    // ZeRO-1 in groups of 8: reduce-scatter and all-gather inside the node, then the shard across the groups.
    const auto one = simulate(hsdpPlan(1, 8));
    const Span z = allReduce(hsdpPlan(1, 8), one);
    CHECK(z.t1 - z.t0
        == Approx(2.0 * 7 / 8 * z.bytes / 4.5e11 + 2 * 7 * 5e-6 + z.bytes / 8 / 5e10 + 2 * 1e-5).epsilon(1e-9));
    // ... faster than one ring of 16 over the NICs.
    const Span r = allReduce(hsdpPlan(1, 0), simulate(hsdpPlan(1, 0)));
    CHECK(z.t1 - z.t0 < r.t1 - r.t0);
    // A few of the 16 replicas simulated stand for all of them.
    for (const Plan& p : {hsdpPlan(3, 8), hsdpPlan(1, 8)}) {
        const auto reduced = simulateDataParallel(p, SimulationOptions {false, false});
        const auto all = simulate(p, SimulationOptions {false, false});
        CHECK(reduced.iteration_time_s == Approx(all.iteration_time_s).epsilon(1e-9));
        CHECK(worstMemory(reduced).peak_bytes == Approx(worstMemory(all).peak_bytes).epsilon(1e-9));
    }
}

TEST_CASE(
    "HSDP: plan files carry the group, bad ones are refused naming the field, exports say it", "[zero][hsdp][exports]")
{
    const Plan p = hsdpPlan(3, 8);
    const auto j = toJson(p);
    CHECK(j.at("schedule").at("shard_group") == 8);
    CHECK(toJson(planFromJson(j)) == j);
    CHECK_FALSE(toJson(hsdpPlan(3, 0)).at("schedule").contains("shard_group"));

    Plan bad = p;
    bad.schedule.shard_group = 3;
    CHECK_THROWS_WITH(
        bad.validate(), Catch::StartsWith("/schedule/shard_group: 3 does not divide stage 0's 16 gradient replicas"));
    bad.schedule.shard_group = -1;
    CHECK_THROWS_WITH(bad.validate(), Catch::StartsWith("/schedule/shard_group: must be >= 0"));
    Plan plain = hsdpPlan(0, 0);
    plain.schedule.shard_group = 8;
    CHECK_THROWS_WITH(plain.validate(), Catch::Contains("needs distributed_optimizer"));

    std::string toml;
    for (const auto& f : findPlanExporter("torchtitan")->write(p).files)
        toml += f.text;
    CHECK_THAT(toml, Catch::Contains("data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 8"));
    std::string args;
    for (const auto& f : findPlanExporter("megatron")->write(hsdpPlan(1, 8)).files)
        args += f.text;
    CHECK_THAT(args, Catch::Contains("--num-distributed-optimizer-instances 2"));
    CHECK_THROWS_WITH(
        findPlanExporter("deepspeed")->write(hsdpPlan(1, 8)), Catch::StartsWith("/schedule/shard_group:"));
}

TEST_CASE("HSDP: the Megatron search keeps the group and skips shapes it does not divide", "[zero][hsdp][megatron]")
{
    auto req = hsdpRequest();
    req.options.schedule.microbatches = 8;
    setZeroStage(req.options.schedule, 3);
    req.options.schedule.shard_group = 8;
    using nlohmann::json;
    req.options.params = {{"tensor-sizes", json::array({1, 2})}, {"pipeline-sizes", json::array({1, 2})}};
    auto r = findPartitioner("megatron")->partition(req, {}, {});
    REQUIRE(r.ok());
    CHECK(r.plan->schedule.shard_group == 8);
    CHECK((r.plan->gradientReplicas(0) <= 8 || r.plan->gradientReplicas(0) % 8 == 0));
    CHECK(simulate(*r.plan).fitsMemory());

    // d = 16, 8 and 4 are not whole groups of 3; 2 and 1 are one group. With no such shape it says why.
    req.options.schedule.shard_group = 3;
    r = findPartitioner("megatron")->partition(req, {}, {});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.errorText(), Catch::Contains("--shard-group 3"));
    req.options.params["pipeline-sizes"] = json::array({1, 2, 4, 8});
    r = findPartitioner("megatron")->partition(req, {}, {});
    INFO(r.errorText());
    REQUIRE(r.ok());
    CHECK(r.plan->gradientReplicas(0) <= 3);
    CHECK(std::any_of(
        r.diagnostics.begin(), r.diagnostics.end(), [](const Diagnostic& d) { return d.code == "shard-group"; }));
}
