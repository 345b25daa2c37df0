// SPDX-License-Identifier: MIT
// Context parallelism (issue 31 item 3): each data-parallel replica of a stage split over c ranks along the sequence,
// K and V passed round a ring inside every attention (Megatron's --context-parallel-size), in plans, the cost and
// memory model, schedules, the simulator, the Megatron search and the exports.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/io/hf_config.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// `nodes` nodes of 8 H100s (the preset, named "gpu"), NVLink 450 GB/s inside, 50 GB/s and 10 us between them on a NIC
/// per GPU.
Cluster contextParallelH100Nodes(int nodes)
{
    Cluster cluster = pw::test::uniformCluster(nodes, 8, {80e9, 100, 4.5e11, 5e-6, 5e10, 1e-5});
    cluster.device_types[0] = *devicePreset("H100");
    cluster.device_types[0].name = "gpu";
    for (auto& n : cluster.nodes)
        n.inter_node_links = 8;
    return cluster;
}

/// Llama 3 8B from its config.json at `sequence` tokens (Llama 3.1 8B: the same block with rotary positions scaled to
/// 131,072), microbatch 1, bf16, profiled on the H100 preset.
ModelProfile llama8b(int sequence)
{
    auto c = loadHfConfig(std::string(PW_TEST_DATA_DIR) + "/hf/llama-3-8b.config.json", RunShape {8192, 1, 2});
    c.sequence = sequence;
    c.validate();
    return transformerProfile(c, *devicePreset("H100"));
}

PartitionRequest request(const ModelProfile& model, int nodes, int microbatches = 8)
{
    PartitionOptions o;
    o.schedule.microbatches = microbatches;
    o.schedule.distributed_optimizer = true;
    return {model, contextParallelH100Nodes(nodes), o};
}

megatron::Config config(int p, int t, int c, int d, int m = 8)
{
    megatron::Config k {p, t, d, 1, 1, Recompute::None, m};
    k.sequence_parallel = t > 1;
    k.distributed_optimizer = true;
    k.c = c;
    return k;
}

} // namespace

TEST_CASE("context parallelism: the ring's exposed time by its closed form", "[context]")
{
    // c - 1 steps, each max(0, transfer - the attention compute under it); the backward passes K, V and their
    // gradients: twice the bytes.
    StageTotals t;
    t.cp_step_bytes = 1e9;
    t.cp_layers = 4;
    t.cp_step_forward_s = 4e-3;
    t.cp_step_backward_s = 8e-3;
    // transfer 1e9 / 1e11 = 10 ms + 4 x 10 us = 10.04 ms; 3 x (10.04 - 4) = 18.12 ms
    CHECK(contextParallelSeconds(t, 4, 1e11, 1e-5, false) == Approx(18.12e-3));
    // 20 ms + 0.04 ms - 8 ms = 12.04 ms, three times
    CHECK(contextParallelSeconds(t, 4, 1e11, 1e-5, true) == Approx(36.12e-3));
    // The attention covers a fast link's transfers; one rank exchanges nothing.
    CHECK(contextParallelSeconds(t, 4, 1e12, 0, false) == 0);
    CHECK(contextParallelSeconds(t, 1, 1e11, 1e-5, false) == 0);
}

TEST_CASE("context parallelism: a rank computes and keeps its 1/c of every sequence and all of the weights",
    "[context][memory]")
{
    const auto model = llama8b(16384);
    const Plan whole = megatron::configPlan(request(model, 2), config(1, 8, 1, 2));
    const Plan split = megatron::configPlan(request(model, 2), config(1, 8, 2, 1));
    REQUIRE_NOTHROW(split.validate());
    CHECK(split.context_parallel == 2);
    CHECK(split.configString() == "1 t=8 c=2");
    CHECK(split.dataReplicas(0) == 1);
    CHECK(split.gradientReplicas(0) == 2); // the distributed optimizer shards over both context ranks
    const auto& type = split.cluster->typeOf(0);
    const auto a = stageTotals(whole, 0, type), b = stageTotals(split, 0, type);
    // Half the tokens through thinner products: a little over half the time (8,192 tokens a rank keep the GEMMs busy).
    CHECK(b.forward_s > a.forward_s / 2);
    CHECK(b.forward_s < a.forward_s / 2 * 1.02);
    CHECK(b.backward_s > a.backward_s / 2);
    CHECK(b.backward_s < a.backward_s / 2 * 1.02);
    CHECK(b.activation_bytes == Approx(a.activation_bytes / 2));
    CHECK(b.weight_bytes == Approx(a.weight_bytes));
    CHECK(b.optimizer_bytes == Approx(a.optimizer_bytes)); // sharded over d c = 2 ranks either way
    CHECK(a.cp_layers == 0);
    // Every block passes its K and V: 2 b s kv_heads head_dim x 2 bytes = 2 x 16384 x 8 x 128 x 2, a rank's half of
    // the sequence over its tensor group of 8 (one key/value head each), 32 layers.
    REQUIRE(b.cp_layers == 32);
    CHECK(b.cp_step_bytes == Approx(32 * 2.0 * 16384 * 8 * 128 * 2 / 2 / 8));
    CHECK(b.cp_step_forward_s > 0);
    CHECK(b.cp_step_backward_s > b.cp_step_forward_s);

    // The simulator charges the exposed ring on the replica's link: devices 0 and 8 are on two nodes.
    const auto cost = CostModel::fromPlan(split);
    const auto charge = cost.charge(0, 0);
    const double ring
        = contextParallelSeconds(b, 2, 5e10, 1e-5, false) + contextParallelSeconds(b, 2, 5e10, 1e-5, true);
    CHECK(charge.context_parallel_s == Approx(ring));
    CHECK(charge.total_s() == Approx(cost.forward(0, 0) + cost.backward(0, 0)));
    CHECK(cost.boundary_bytes.size() == 1);
}

TEST_CASE("context parallelism: a rank's products get thinner, and the profile times them by their shapes",
    "[context][transformer]")
{
    // At 2,048 tokens the shape model's rank time (its 1/c of the tokens through every product, its queries against
    // every key) grows past 1/c of the layer's as the products thin: the search must not think context parallelism
    // free on short sequences. Sizes are the powers of two that cut the sequence into 2c chunks.
    const auto model = llama8b(2048);
    const auto& block = model.layers[1];
    std::vector<int> sizes;
    double previous = 1.0;
    for (const auto& e : block.context_parallel_times) {
        sizes.push_back(e.size);
        const double loss = e.forward_ms * e.size / block.forward_ms; // 1: no loss of rate
        CHECK(loss > previous);
        previous = loss;
        CHECK(e.backward_weight_ms < e.backward_ms);
    }
    CHECK(sizes == std::vector<int> {2, 4, 8, 16, 32, 64});
    CHECK(block.context_parallel_times[0].forward_ms * 2 / block.forward_ms < 1.1); // 1,024 tokens: nearly free
    CHECK(block.context_parallel_times[2].forward_ms * 8 / block.forward_ms > 1.5); // 256 tokens: not
    // A plan charges the profiled ratio; a profile without entries (or a flat model) divides by c.
    const auto& type = *devicePreset("H100");
    const auto four = rankTimesOn(block, type, 1.0, 1, false, Recompute::None, 4);
    CHECK(four.forward_ms == Approx(block.context_parallel_times[1].forward_ms));
    Layer plain = block;
    plain.context_parallel_times.clear();
    CHECK(rankTimesOn(plain, type, 1.0, 1, false, Recompute::None, 4).forward_ms == Approx(block.forward_ms / 4));
    // The entries survive the profile's JSON.
    CHECK(modelFromJson(toJson(model)) == model);
}

TEST_CASE("context parallelism: schedules run every context rank alike and sum gradients over d c devices",
    "[context][schedule]")
{
    const auto model = llama8b(8192);
    // p = 2, t = 2, c = 2, d = 2 on two nodes: a stage's replica is devices {0, 1} and {2, 3}.
    const Plan plan = megatron::configPlan(request(model, 2), config(2, 2, 2, 2));
    REQUIRE(plan.stages[0].devices.size() == 8);
    const Schedule schedule = generateSchedule(plan);
    const auto report = validate(schedule, plan);
    INFO((report.errors.empty() ? std::string() : report.errors.front()));
    CHECK(report.ok);
    int gradientGroups = 0;
    for (const auto& g : schedule.groups)
        if (g.purpose == CollectivePurpose::Replicas) {
            ++gradientGroups;
            CHECK(g.devices.size() == 4); // two replicas x two context ranks of one tensor rank
        }
    CHECK(gradientGroups == 2 * 2); // per stage, one per tensor rank
    // Every rank of a replica runs the same forwards and backwards; the whole simulation and the reduced one agree.
    const auto sim = simulate(plan, SimulationOptions {false, false});
    const auto fast = simulateDataParallel(plan, SimulationOptions {false, false});
    CHECK(fast.iteration_time_s == Approx(sim.iteration_time_s).epsilon(1e-9));
    CHECK(sim.throughput_samples_per_s == Approx(8 * 2 / sim.iteration_time_s)); // m d samples of b = 1 per batch
    // A replica's context ranks share a node: NVLink's transfers hide under the attention (or show as the formula
    // says).
    const auto totals = stageTotals(plan, 0, plan.cluster->typeOf(0));
    CHECK(sim.stages[0].charge.context_parallel_s
        == Approx(contextParallelSeconds(totals, 2, 4.5e11, 5e-6, false)
            + contextParallelSeconds(totals, 2, 4.5e11, 5e-6, true)));
}

TEST_CASE("context parallelism: the Megatron search takes it where a long sequence leaves nothing else that fits",
    "[context][megatron]")
{
    // Llama 3 8B at 131,072 tokens on 16 H100s, t = 8 and one stage: without context parallelism a rank keeps 64 k
    // tokens' activations over 8 and the fp32 logits and is over 80 GB; with c = 2 half of that.
    const auto model = llama8b(131072);
    auto req = request(model, 2, 2);
    PartitionOptions& o = req.options;
    using nlohmann::json;
    o.params = {{"tensor-sizes", json::array({8})}, {"pipeline-sizes", json::array({1})},
        {"context-sizes", json::array({1, 2})}, {"recompute", "none"}, {"microbatch-sizes", json::array({1})}};
    const auto r = findPartitioner("megatron")->partition(req, {}, {});
    REQUIRE(r.ok());
    CHECK(r.plan->context_parallel == 2);
    CHECK(r.plan->dataReplicas(0) == 1);
    CHECK(simulate(*r.plan).fitsMemory());
    bool refusedWhole = false;
    for (const auto& c : r.candidates)
        if (c.config.at("c") == 1) {
            CHECK_FALSE(c.feasible);
            CHECK_THAT(c.reason, Catch::Contains("needs") && Catch::Contains("activations"));
            refusedWhole = true;
        }
    CHECK(refusedWhole);

    // A sequence that does not split into 2c chunks is skipped, and said so.
    auto odd = request(llama8b(8194), 2, 2); // 8194 tokens are not 4 chunks
    odd.options.params = {{"tensor-sizes", json::array({8})}, {"pipeline-sizes", json::array({1})},
        {"context-sizes", json::array({1, 2})}};
    const auto skipped = findPartitioner("megatron")->partition(odd, {}, {});
    REQUIRE(skipped.ok());
    CHECK(skipped.plan->context_parallel == 1);
    CHECK(std::any_of(skipped.diagnostics.begin(), skipped.diagnostics.end(),
        [](const Diagnostic& d) { return d.code == "sequence"; }));
}

TEST_CASE("context parallelism: plan files carry it and bad values are refused naming the field", "[context][plan]")
{
    const auto model = llama8b(8192);
    Plan plan = megatron::configPlan(request(model, 2), config(1, 4, 2, 2));
    const auto j = toJson(plan);
    CHECK(j.at("context_parallel") == 2);
    CHECK(planFromJson(j) == plan);
    CHECK_FALSE(toJson(megatron::configPlan(request(model, 2), config(1, 4, 1, 4))).contains("context_parallel"));

    Plan bad = plan;
    bad.context_parallel = 0;
    CHECK_THROWS_WITH(bad.validate(), Catch::StartsWith("/context_parallel: must be >= 1"));
    bad.context_parallel = 3; // 16 devices of a stage are not whole groups of t c = 12
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("not a multiple of tensor_parallel 4 x context_parallel 3"));
    auto longer = llama8b(8196); // 8196 tokens do not split into 2 x 4 = 8 chunks (plans check, configPlan does not)
    Plan uneven = megatron::configPlan(request(longer, 2), config(1, 2, 4, 2));
    CHECK_THROWS_WITH(uneven.validate(), Catch::StartsWith("/context_parallel:") && Catch::Contains("8196"));
}

TEST_CASE("context parallelism: the exports carry it where the runtime has it", "[context][exports]")
{
    const auto model = llama8b(8192);
    const Plan plan = megatron::configPlan(request(model, 2), config(2, 2, 2, 2));
    const auto megatronArgs = findPlanExporter("megatron")->write(plan);
    std::string text;
    for (const auto& f : megatronArgs.files)
        text += f.text;
    CHECK_THAT(text, Catch::Contains("--context-parallel-size 2") && Catch::Contains("2 x 2 x 2 x 2 = 16 GPUs"));
    std::string toml;
    for (const auto& f : findPlanExporter("torchtitan")->write(plan).files)
        toml += f.text;
    CHECK_THAT(toml, Catch::Contains("context_parallel_degree = 2"));
    Plan flat = megatron::configPlan(request(model, 2), config(2, 1, 2, 4));
    flat.schedule.sequence_parallel = false;
    CHECK_THROWS_WITH(findPlanExporter("deepspeed")->write(flat), Catch::StartsWith("/context_parallel:"));
}

TEST_CASE("the costs of one data-parallel pipeline stand for the whole plan's", "[context][megatron][zero]")
{
    // The Megatron search estimates thousands of configurations; at 16,384 GPUs their whole cost models were most of
    // its time. Where the pipelines cost alike, one pipeline's model with the whole group's shards and gathers gives
    // every replica's charge and memory.
    const auto model = llama8b(8192);
    auto k = config(2, 2, 2, 4);
    k.shard_gradients = k.shard_weights = true; // FSDP: gathers over the whole group of d c = 8
    const Plan plan = megatron::configPlan(request(model, 4), k);
    REQUIRE(plan.schedule.shard_weights);
    Plan reduced;
    const auto fast = reducedCostModel(plan, reduced);
    REQUIRE(fast);
    CHECK(reduced.stages[0].devices.size() == 8); // a replica of t c = 4 fills half a node: q = 2 of d = 4
    // One entry per model-parallel group (its first device) of the two pipelines' stages.
    CHECK(fast->forward_s.size() == static_cast<std::size_t>(plan.stageCount()) * 2);
    const auto whole = CostModel::fromPlan(plan);
    for (int s = 0; s < plan.stageCount(); ++s) {
        INFO("stage " << s);
        for (auto [mine, theirs] : {std::pair {0, 0}, {1, 7}, {1, 12}}) {
            const auto a = fast->charge(s, mine), b = whole.charge(s, theirs);
            CHECK(a.forward_s == Approx(b.forward_s));
            CHECK(a.backward_s == Approx(b.backward_s));
            CHECK(a.tensor_parallel_s == Approx(b.tensor_parallel_s));
            CHECK(a.weight_gather_s == Approx(b.weight_gather_s));
            CHECK(a.context_parallel_s == Approx(b.context_parallel_s));
        }
        CHECK(fast->residentWeightBytes(s) == Approx(whole.residentWeightBytes(s)));
        CHECK(fast->gradientBytes(s) == Approx(whole.gradientBytes(s)));
        CHECK(fast->stage_optimizer_bytes[s] == Approx(whole.stage_optimizer_bytes[s]));
    }
    // A layout whose pipelines do not cost alike is left to the whole plan.
    Plan odd = plan;
    odd.stages[1].devices.pop_back();
    CHECK_FALSE(reducedCostModel(odd, reduced));
}

TEST_CASE(
    "context parallelism: a few of the data-parallel pipelines simulate the whole plan exactly", "[context][simulator]")
{
    // p = 2, t = 2, c = 2, d = 4 on four nodes: a replica's t c = 4 devices fill half a node, so two of the four
    // pipelines stand for all of them; each gradient all-reduce is charged as the whole group of d c = 8.
    const auto model = llama8b(8192);
    const Plan plan = megatron::configPlan(request(model, 4), config(2, 2, 2, 4));
    REQUIRE(dataParallelAsymmetry(plan, SimulationOptions {false, false}).empty());
    const auto whole = simulate(plan, SimulationOptions {false, false});
    const auto reduced = simulateDataParallel(plan, SimulationOptions {false, false});
    CHECK(reduced.simulated_actions < whole.simulated_actions);
    CHECK(reduced.iteration_time_s == Approx(whole.iteration_time_s).epsilon(1e-12));
    CHECK(reduced.throughput_samples_per_s == Approx(whole.throughput_samples_per_s).epsilon(1e-12));
    for (std::size_t s = 0; s < whole.stages.size(); ++s)
        CHECK(reduced.stages[s].peak_memory_bytes == Approx(whole.stages[s].peak_memory_bytes).epsilon(1e-12));
}
