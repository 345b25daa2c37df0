// SPDX-License-Identifier: MIT
// Activation memory as Megatron computes it (issue 31 item 2): Korthikanti et al. (2022, "Reducing Activation
// Recomputation in Large Transformer Models") Table 2 per layer under tensor and sequence parallelism and each
// recomputation granularity, recomputation that saves memory on large stages, and the search's simulation honouring
// the distributed optimizer (item 5).
#include <catch2/catch.hpp>

#include <string>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/export/export.h"
#include "planner/io/hf_config.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "planner/transformer_shape.h"

using namespace pw::planner;

namespace {

/// `nodes` nodes of 8 H100s (80 GiB, the preset's speed, named "gpu"), NVLink inside, `interNode` bytes/s between.
Cluster h100Nodes(int nodes, double interNode)
{
    Cluster cluster = pw::test::uniformCluster(nodes, 8, {80e9, 100, 4.5e11, 5e-6, interNode, 1e-5});
    cluster.device_types[0] = *devicePreset("H100");
    cluster.device_types[0].name = "gpu";
    return cluster;
}

/// `config`'s profile on `stages` x `t` devices (one node per stage): stage 0 the embedding and the first block,
/// the last stage the last block and the head, the middle stage the rest, each one tensor-parallel group.
Plan threeStagePlan(const TransformerConfig& config, int t, Recompute recompute, bool sequenceParallel)
{
    Plan plan;
    plan.model = transformerProfile(config, *devicePreset("H100"));
    Cluster cluster = pw::test::uniformCluster(3, t, {80e9, 100, 4.5e11, 5e-6, 5e10, 1e-5});
    cluster.device_types[0] = *devicePreset("H100");
    cluster.device_types[0].name = "gpu";
    plan.cluster = cluster;
    const int L = plan.model->layerCount();
    const int bounds[][2] = {{0, 1}, {2, L - 3}, {L - 2, L - 1}};
    for (int s = 0; s < 3; ++s) {
        PlanStage st {bounds[s][0], bounds[s][1], {}};
        for (int i = 0; i < t; ++i)
            st.devices.push_back(s * t + i);
        plan.stages.push_back(st);
    }
    plan.tensor_parallel = t;
    plan.schedule.microbatches = 4;
    plan.schedule.recompute = recompute;
    plan.schedule.sequence_parallel = sequenceParallel;
    plan.validate();
    return plan;
}

} // namespace

TEST_CASE("a block's stash per rank follows Korthikanti et al.'s Table 2", "[memory][korthikanti]")
{
    // GPT-3 175B's block (a = 96, h = 12288, s = 2048) at b = 1, t = 8, with the paper's dropout and materialized
    // scores. Per layer, in s b h bytes: no parallelism 34 + 5as/h; tensor parallel 10 + 24/t + 5as/(ht); with
    // sequence parallelism 34/t + 5as/(ht); selective recomputation drops the 5as/(ht) term; full keeps 2 (2/t with
    // sequence parallelism, Megatron's checkpoints are split like the rest).
    TransformerConfig c {8, 12288, 96, 2048, 51200, 1, 2};
    c.flash_attention = false;
    const double s = 2048, h = 12288, a = 96, t = 8, sbh = s * h;
    const int middle = c.layers - 2; // blocks of the middle stage
    struct Row
    {
        Recompute recompute;
        bool sp;
        double perLayer; // s b h units
    };
    const Row rows[] = {
        {Recompute::None, false, 10 + 24 / t + 5 * a * s / (h * t)},
        {Recompute::None, true, 34 / t + 5 * a * s / (h * t)},
        {Recompute::Selective, false, 10 + 24 / t},
        {Recompute::Selective, true, 34 / t},
    };
    for (const auto& row : rows) {
        INFO(name(row.recompute) << (row.sp ? " with SP" : ""));
        const Plan plan = threeStagePlan(c, static_cast<int>(t), row.recompute, row.sp);
        const auto totals = stageTotals(plan, 1, plan.cluster->device_types[0]);
        CHECK(totals.kept_bytes / middle == Approx(row.perLayer * sbh).epsilon(1e-9));
    }
    // Full: each block's input after the stage's first (whose input is the stage's, received and kept), and one
    // block's whole stash while it recomputes.
    for (bool sp : {false, true}) {
        const Plan plan = threeStagePlan(c, static_cast<int>(t), Recompute::Full, sp);
        const auto totals = stageTotals(plan, 1, plan.cluster->device_types[0]);
        const double input = 2 * sbh / (sp ? t : 1);
        CHECK(totals.input_bytes == Approx(input));
        CHECK(totals.kept_bytes == Approx(middle * input).epsilon(1e-9));
        CHECK(totals.recompute_working_bytes
            == Approx((sp ? 34 / t : 10 + 24 / t) * sbh + 5 * a * s * s / t).epsilon(1e-9));
        // Recomputing runs the blocks' forward again, and its tensor-parallel all-reduces.
        CHECK(totals.recompute_s == Approx(totals.forward_s));
    }
    // Without parallelism, 34 + 5as/h (the paper's Eq. 1).
    const Plan one = threeStagePlan(c, 1, Recompute::None, false);
    CHECK(stageTotals(one, 1, one.cluster->device_types[0]).kept_bytes / middle
        == Approx((34 + 5 * a * s / h) * sbh).epsilon(1e-9));
}

TEST_CASE("recomputation saves memory on large stages and costs what it recomputes", "[memory][korthikanti]")
{
    // issue 31: Llama 3 8B kept 100.74 GiB per device with and without recomputation (the whole stage counted as
    // the working set). One block at a time is recomputed now.
    const auto c = loadHfConfig(std::string(PW_TEST_DATA_DIR) + "/hf/llama-3-8b.config.json", RunShape {8192, 1, 2});
    const auto none = threeStagePlan(c, 1, Recompute::None, false);
    const auto selective = threeStagePlan(c, 1, Recompute::Selective, false);
    const auto full = threeStagePlan(c, 1, Recompute::Full, false);
    const auto& type = none.cluster->device_types[0];
    const auto n = stageTotals(none, 1, type), sel = stageTotals(selective, 1, type), f = stageTotals(full, 1, type);
    // Flash attention keeps no scores: selective saves only the log-sum-exp (4 bytes per head and token).
    CHECK(n.kept_bytes - sel.kept_bytes == Approx(30 * 4.0 * 32 * 8192));
    CHECK(sel.recompute_s > 0);
    // At 8192 tokens the attention core is a quarter of a block's forward FLOPs (4 s^2 h of 2 s 218 M + 4 s^2 h).
    CHECK(sel.recompute_s < 0.35 * n.forward_s);
    // Full: 30 blocks' inputs (2 s h bytes each, the first one's the stage input) instead of their whole stash.
    CHECK(f.kept_bytes == Approx(30 * 2.0 * 8192 * 4096));
    CHECK(f.kept_bytes + f.recompute_working_bytes < 0.2 * n.kept_bytes);
    CHECK(f.recompute_s == Approx(f.forward_s));

    // Simulated: full recomputation's peak is far below the plan without, and the backward is longer by a forward.
    const auto simNone = simulate(none), simFull = simulate(full), simSel = simulate(selective);
    // (Stage 1 keeps 2 microbatches in flight; its 30 blocks' weights and optimizer state are the same either way.)
    CHECK(simNone.stages[1].peak_memory_bytes - simFull.stages[1].peak_memory_bytes > 0.8 * 2 * n.kept_bytes);
    CHECK(simSel.stages[1].peak_memory_bytes < simNone.stages[1].peak_memory_bytes);
    CHECK(simFull.stages[1].charge.recompute_s == Approx(simFull.stages[1].charge.forward_s).epsilon(1e-9));
    CHECK(simSel.stages[1].charge.recompute_s == Approx(sel.recompute_s).epsilon(1e-9));
    // What stageMemoryBytes says agrees with the simulation under each mode.
    for (const auto* pair : {&none, &selective, &full}) {
        const auto sim = simulate(*pair);
        for (int s = 0; s < 3; ++s) {
            const auto totals = stageTotals(*pair, s, type);
            const auto in = memoryInput(totals, 3 - s, 4);
            INFO(name(pair->schedule.recompute) << " stage " << s);
            CHECK(stageMemoryBytes("1f1b", in) == Approx(sim.stages[s].peak_memory_bytes).epsilon(1e-9));
        }
    }
}

TEST_CASE("plans keep their recomputation mode and sequence parallelism", "[memory][plan-format]")
{
    TransformerConfig c {4, 256, 4, 64, 1000, 1, 2};
    auto plan = threeStagePlan(c, 2, Recompute::Selective, true);
    const auto j = toJson(plan);
    CHECK(j["schedule"]["recompute"] == "selective");
    CHECK(j["schedule"]["sequence_parallel"] == true);
    CHECK(planFromJson(j) == plan);
    // The first format's booleans.
    auto old = j;
    old["schedule"]["recompute"] = true;
    CHECK(planFromJson(old).schedule.recompute == Recompute::Full);
    old["schedule"]["recompute"] = false;
    CHECK(planFromJson(old).schedule.recompute == Recompute::None);
    old["schedule"]["recompute"] = "partial";
    CHECK_THROWS_WITH(planFromJson(old), "/schedule/recompute: 'partial' is not one of none | selective | full");
}

TEST_CASE("a data-parallel simulation shards the distributed optimizer over every replica", "[memory][megatron]")
{
    // issue 31: the search's simulation (simulateDataParallel, q of d pipelines) sharded the optimizer state over
    // the q simulated replicas only, refusing layouts that fit.
    TransformerConfig c {8, 1024, 16, 1024, 51200, 1, 2};
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster = h100Nodes(8, 5e10);
    PartitionOptions o;
    o.schedule.distributed_optimizer = true;
    const PartitionRequest request {model, cluster, o};
    const megatron::Config config {2, 4, 8, 1, 1, Recompute::None, 8};
    const Plan plan = megatron::configPlan(request, config);
    REQUIRE(plan.schedule.distributed_optimizer);
    REQUIRE(dataParallelAsymmetry(plan, {false, false}).empty()); // it is reduced to fewer pipelines
    const auto whole = simulate(plan, SimulationOptions {false, true});
    const auto reduced = simulateDataParallel(plan, SimulationOptions {false, false});
    for (std::size_t s = 0; s < whole.stages.size(); ++s)
        CHECK(reduced.stages[s].peak_memory_bytes == Approx(whole.stages[s].peak_memory_bytes).epsilon(1e-9));
}

TEST_CASE("the search's analytic estimate agrees with its simulation on Llama-family plans", "[megatron][families]")
{
    // issue 31 item 5: the search ranks by the estimate and simulates its leaders; the two must agree for the ranking
    // to mean anything. Every simulated candidate, Llama 3 8B on 8 and 70B on 64 H100s, with the distributed optimizer.
    struct Case
    {
        const char* file;
        int nodes;
        int microbatches;
    };
    for (const auto& k : {Case {"llama-3-8b", 1, 64}, Case {"llama-3-70b", 8, 128}}) {
        INFO(k.file);
        const auto c
            = loadHfConfig(std::string(PW_TEST_DATA_DIR) + "/hf/" + k.file + ".config.json", RunShape {8192, 1, 2});
        const auto model = transformerProfile(c, *devicePreset("H100"));
        const Cluster cluster = h100Nodes(k.nodes, 5e10);
        PartitionOptions o;
        o.schedule.microbatches = k.microbatches;
        o.schedule.distributed_optimizer = true;
        const auto r = findPartitioner("megatron")->partition({model, cluster, o}, {}, {});
        REQUIRE(r.ok());
        int simulated = 0;
        for (const auto& cand : r.candidates) {
            if (!cand.config.contains("simulated_batch_time_s") || !cand.feasible)
                continue;
            ++simulated;
            INFO(cand.description);
            const double analytic = cand.config.at("analytic_throughput").get<double>();
            CHECK(analytic == Approx(cand.throughput_samples_per_s).epsilon(0.05));
        }
        CHECK(simulated >= 1);
        // The chosen plan fits, with sequence parallelism wherever it has tensor parallelism.
        CHECK(simulate(*r.plan).fitsMemory());
        if (r.plan->tensor_parallel > 1)
            CHECK(r.plan->schedule.sequence_parallel);
    }
}

TEST_CASE("waiting for the data-parallel all-reduce is not the pipeline's bubble", "[simulator][bubble]")
{
    // issue 31 item 5: a p = 1 plan reported its data-parallel waiting (22-23 %) as "bubble".
    TransformerConfig c {8, 1024, 16, 1024, 51200, 1, 2};
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster = h100Nodes(2, 2e9); // a slow uplink
    const PartitionRequest request {model, cluster, {}};
    const Plan plan = megatron::configPlan(request, {1, 1, 16, 1, 1, Recompute::None, 4});
    const auto sim = simulate(plan);
    CHECK(sim.bubble_fraction == Approx(0).margin(1e-9)); // one stage: no pipeline to wait for
    CHECK(sim.data_parallel_wait_fraction > 0.2);
    for (const auto& d : sim.devices) {
        CHECK(d.busy_s / sim.makespan_s + d.data_parallel_wait_fraction + d.bubble_fraction == Approx(1));
        CHECK(d.collective_wait_s == Approx(d.data_parallel_wait_fraction * sim.makespan_s));
    }
    // A pipeline without replicas (nor tied weights to sum between its ends) waits for nothing but the pipeline.
    c.layers = 16;
    c.tied_embeddings = false;
    const PartitionRequest deep {transformerProfile(c, *devicePreset("H100")), cluster, {}};
    const auto pipeline = simulate(megatron::configPlan(deep, {16, 1, 1, 1, 1, Recompute::None, 16}));
    CHECK(pipeline.data_parallel_wait_fraction == 0);
    CHECK(pipeline.bubble_fraction > 0.3);
}

TEST_CASE(
    "without overlap-grad-reduce the gradient sum starts after the backward and all of it shows", "[simulator][bubble]")
{
    // Megatron's --overlap-grad-reduce (the default, as PyTorch DDP) against its older local DDP, which all-reduced
    // after the backward: a plan setting, written to the plan file and to Megatron's arguments.
    TransformerConfig c {8, 1024, 16, 1024, 51200, 1, 2};
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster = h100Nodes(2, 2e9);
    Plan plan = megatron::configPlan({model, cluster, {}}, {1, 1, 16, 1, 1, Recompute::None, 4});
    const auto overlapped = simulate(plan);
    plan.schedule.overlap_grad_reduce = false;
    const auto after = simulate(plan);
    CHECK(after.data_parallel_wait_fraction > overlapped.data_parallel_wait_fraction);
    CHECK(after.iteration_time_s > overlapped.iteration_time_s);
    CHECK(planFromJson(toJson(plan)).schedule.overlap_grad_reduce == false);
    CHECK(toJson(plan).at("schedule").at("overlap_grad_reduce") == false);
    const auto args = [&](const Plan& p) {
        std::string text;
        for (const auto& f : findPlanExporter("megatron")->write(p).files)
            text += f.text;
        return text;
    };
    CHECK_THAT(args(plan), !Catch::Contains("--overlap-grad-reduce"));
    plan.schedule.overlap_grad_reduce = true;
    CHECK_THAT(args(plan), Catch::Contains("--overlap-grad-reduce"));
}

TEST_CASE("overlap-param-gather leaves the distributed optimizer's step its reduce-scatter", "[simulator][bubble]")
{
    // Megatron's --overlap-param-gather: the updated parameters' all-gather runs under the next forward, so the step's
    // collective is charged as half of the ring. It needs the distributed optimizer.
    TransformerConfig c {8, 1024, 16, 1024, 51200, 1, 2};
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster = h100Nodes(2, 2e9);
    PartitionOptions o;
    o.schedule.overlap_grad_reduce = false; // the whole collective after the backward: its length is plain to see
    megatron::Config config {1, 1, 16, 1, 1, Recompute::None, 4};
    config.distributed_optimizer = true;
    Plan plan = megatron::configPlan({model, cluster, o}, config);
    const auto whole = simulate(plan);
    plan.schedule.overlap_param_gather = true;
    REQUIRE_NOTHROW(plan.validate());
    const auto half = simulate(plan);
    const double before = whole.iteration_time_s * whole.data_parallel_wait_fraction;
    const double after = half.iteration_time_s * half.data_parallel_wait_fraction;
    CHECK(after == Approx(before / 2).epsilon(0.02));
    CHECK(planFromJson(toJson(plan)).schedule.overlap_param_gather);
    std::string args;
    for (const auto& f : findPlanExporter("megatron")->write(plan).files)
        args += f.text;
    CHECK_THAT(args, Catch::Contains("--overlap-param-gather"));
    plan.schedule.distributed_optimizer = false;
    CHECK_THROWS_WITH(plan.validate(), Catch::Contains("/schedule/overlap_param_gather"));
    // The search keeps the request's setting wherever a configuration shards the optimizer.
    o.schedule.overlap_param_gather = true;
    CHECK(megatron::configPlan({model, cluster, o}, config).schedule.overlap_param_gather);
    config.distributed_optimizer = false;
    CHECK_FALSE(megatron::configPlan({model, cluster, o}, config).schedule.overlap_param_gather);
}

TEST_CASE("the search proposes Llama 3 70B on 64 H100s with sequence parallelism and the distributed optimizer",
    "[megatron][families]")
{
    // issue 31 acceptance: a layout with SP and a distributed optimizer that fits 80 GB, found without being asked.
    const auto c = loadHfConfig(std::string(PW_TEST_DATA_DIR) + "/hf/llama-3-70b.config.json", RunShape {8192, 1, 2});
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster = h100Nodes(8, 5e10);
    PartitionOptions o;
    o.schedule.microbatches = 128;
    const auto r = findPartitioner("megatron")->partition({model, cluster, o}, {}, {});
    REQUIRE(r.ok());
    const Plan& plan = *r.plan;
    INFO(plan.configString());
    CHECK(plan.tensor_parallel > 1);
    CHECK(plan.schedule.sequence_parallel);
    CHECK(plan.dataReplicas(0) > 1);
    CHECK(plan.schedule.distributed_optimizer);
    const auto sim = simulate(plan, SimulationOptions {false, true});
    CHECK(sim.fitsMemory());
    CHECK(worstMemory(sim).peak_bytes <= 80.0 * (1 << 30));
    // Forbidding both is refused when it contradicts the request, and otherwise searched without them.
    o.params["distributed-optimizer"] = "false";
    o.params["sequence-parallel"] = "false";
    const auto without = findPartitioner("megatron")->partition({model, cluster, o}, {}, {});
    if (without.ok()) {
        CHECK_FALSE(without.plan->schedule.sequence_parallel);
        CHECK_FALSE(without.plan->schedule.distributed_optimizer);
    }
    o.schedule.distributed_optimizer = true;
    const auto contradiction = findPartitioner("megatron")->partition({model, cluster, o}, {}, {});
    CHECK_FALSE(contradiction.ok());
    CHECK_THAT(contradiction.errorText(), Catch::Contains("contradict"));
}

TEST_CASE("tensor-parallel communication overlapped with its GEMMs shows its first chunk and what outlasts them",
    "[megatron][overlap]")
{
    // issue 31 item 3: Megatron's --tp-comm-overlap. t chunks pipelined: max(comm / t, comm - compute (t - 1) / t).
    CHECK(overlappedTensorParallelTime(8e-3, 100e-3, 8) == Approx(1e-3)); // GEMMs cover all but the first chunk
    CHECK(overlappedTensorParallelTime(8e-3, 4e-3, 8) == Approx(8e-3 - 4e-3 * 7 / 8)); // communication outlasts them
    CHECK(overlappedTensorParallelTime(0, 1, 8) == 0);
    CHECK(overlappedTensorParallelTime(5e-3, 1, 1) == 5e-3); // no group, nothing to pipeline

    TransformerConfig c {8, 4096, 32, 2048, 51200, 1, 2};
    auto plan = threeStagePlan(c, 4, Recompute::None, true);
    const auto plain = simulate(plan);
    plan.schedule.tp_comm_overlap = true;
    plan.validate();
    const auto overlapped = simulate(plan);
    for (int s = 0; s < 3; ++s) {
        INFO("stage " << s);
        const auto& a = plain.stages[s].charge;
        const auto& b = overlapped.stages[s].charge;
        CHECK(b.forward_s == Approx(a.forward_s));
        CHECK(b.backward_s == Approx(a.backward_s));
        CHECK(b.tensor_parallel_s < a.tensor_parallel_s);
        CHECK(b.tensor_parallel_s >= a.tensor_parallel_s / 4 - 1e-12); // at least the first of t = 4 chunks
    }
    CHECK(overlapped.throughput_samples_per_s > plain.throughput_samples_per_s);
    // It pipelines sequence parallelism's collectives: without them it is refused, naming the field.
    plan.schedule.sequence_parallel = false;
    CHECK_THROWS_WITH(plan.validate(), Catch::StartsWith("/schedule/tp_comm_overlap: overlaps the all-gathers"));
    const auto j = toJson(threeStagePlan(c, 4, Recompute::None, true));
    CHECK_FALSE(j["schedule"].contains("tp_comm_overlap"));
}
