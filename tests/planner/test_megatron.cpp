// SPDX-License-Identifier: MIT
// Megatron PTD-P: the bubble and Eq. 4.1 on the simulator, Eq. 4.3 on Table 4.1, the tensor-parallel volume,
// tensor parallelism in plans, schedules and the simulator, memory-driven choices, rules of thumb, errors.
// "digest" = shared/docs/papers/megatron-gavel.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "planner/costs.h"
#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "planner/transformer_shape.h"
#include "tests/planner/fixtures.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

/// One node type: `nodes` x `perNode` devices of `memory` bytes, free optimizer steps (no memory bandwidth).
Cluster megatronCluster(int nodes, int perNode, double memory, double latency = 5e-6)
{
    Cluster c;
    auto h100 = *devicePreset("H100");
    h100.memory_bytes = memory;
    h100.memory_bandwidth_bytes_per_s = 0;
    c.device_types = {h100};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", h100.name, perNode, 4.5e11, latency});
    c.inter_node_bandwidth_bytes_per_s = 2.5e10;
    c.inter_node_latency_s = latency;
    return c;
}

ModelProfile megatronGpt(int layers, int hidden, int heads, int seq, int microbatch = 1)
{
    TransformerConfig c {layers, hidden, heads, seq, 51200, microbatch, 2};
    return transformerProfile(c, *devicePreset("H100"));
}

PartitionResult runMegatron(const ModelProfile& model, const Cluster& c, json params, int microbatches = 8)
{
    PartitionOptions o;
    o.schedule.microbatches = microbatches;
    o.params = std::move(params);
    return findPartitioner("megatron")->partition({model, c, o}, {}, {});
}

megatron::Config chosen(const Plan& plan)
{
    const auto& j = plan.algorithm_options.at("chosen");
    return {j.at("p").get<int>(), j.at("t").get<int>(), j.at("d").get<int>(), j.at("b").get<int>(),
        j.at("v").get<int>(), recomputeNamed(j.at("recompute").get<std::string>(), "recompute"), j.at("m").get<int>()};
}

bool megatronHasCode(const PartitionResult& r, const std::string& code)
{
    return std::any_of(r.diagnostics.begin(), r.diagnostics.end(), [&](const auto& d) { return d.code == code; });
}

} // namespace

TEST_CASE("bubble (p-1)/(v m) and Eq. 4.1 hold on the simulator", "[megatron]")
{
    // digest §1.4 "Simulator test vector": makespan = m (t_f + t_b) + (p-1)(t_f + t_b)/v exactly, for
    // p in {2, 3, 4, 8}, v in {1..4}, m in {p, 2p, 4p}, zero communication; §2.5 Eq. 4.1 is the same model.
    for (int p : {2, 3, 4, 8})
        for (int v : {1, 2, 3, 4})
            for (int k : {1, 2, 4}) {
                const int m = k * p;
                const auto model = pw::test::uniformChain(p * v * 2);
                const auto c = megatronCluster(1, p, 1e15, 0.0);
                PartitionRequest request {model, c, {}};
                const megatron::Config config {p, 1, 1, 1, v, Recompute::None, m};
                const Plan plan = megatron::configPlan(request, config);
                REQUIRE_NOTHROW(plan.validate());
                const auto schedule = generateSchedule(plan);
                REQUIRE(validate(schedule, plan).ok);
                const auto sim = simulate(plan, schedule);
                // Per device per microbatch: 2 layers x v chunks; t_f = 2v ms, t_b = 4v ms.
                const double tf = 2e-3 * v, tb = 4e-3 * v;
                INFO("p=" << p << " v=" << v << " m=" << m);
                CHECK(sim.makespan_s == Approx(megatron::batchTime(p, v, m, tf, tb)).epsilon(1e-9));
                CHECK(sim.bubble_overhead == Approx(megatron::bubbleFraction(p, v, m)).epsilon(1e-9));
                // The analytical estimate is the same closed form when nothing is communicated.
                const auto est = megatron::estimate(plan, config);
                CHECK(est.pipeline_s == Approx(sim.makespan_s).epsilon(1e-9));
            }
    // The digest's worked example (§1.4, p = 4, v = 2, m = 8, chunk F = 1, B = 2): makespan 57 = 48 + 9,
    // non-interleaved 66, and "Peak in-flight chunk stashes: 11, 9, 7, 5", in the formula and the simulator.
    CHECK(megatron::batchTime(4, 2, 8, 2, 4) == Approx(57));
    CHECK(megatron::batchTime(4, 1, 8, 2, 4) == Approx(66));
    const auto model = pw::test::uniformChain(8);
    const auto c = megatronCluster(1, 4, 1e15, 0.0);
    PartitionRequest request {model, c, {}};
    const auto sim = simulate(megatron::configPlan(request, {4, 1, 1, 1, 2, Recompute::None, 8}));
    CHECK(sim.makespan_s == Approx(57e-3));
    const std::vector<int> stashes {11, 9, 7, 5};
    for (int r = 0; r < 4; ++r) {
        CHECK(megatron::peakStashes(4, 2, 8, r) == stashes[r]);
        CHECK(sim.devices[r].peak_stashed_microbatches == stashes[r]);
        CHECK(megatron::peakStashes(4, 1, 8, r) == 4 - r); // §1.3: "4, 3, 2, 1 (in general p - r)"
    }
}

TEST_CASE("interleaving with data parallelism: every pipeline copy keeps (p-1)/(v m)", "[megatron]")
{
    // Megatron interleaves with d > 1 (digest §4.2, Table 4.1): each of the d copies runs its m microbatches in
    // the interleaved order, so its makespan and stashes are those of §1.4 for m; the all-reduce of 1 kB
    // weights adds nanoseconds.
    for (int d : {2, 3})
        for (int p : {2, 4})
            for (int v : {2, 3}) {
                const int m = 2 * p; // per copy
                const auto model = pw::test::uniformChain(p * v * 2);
                const auto c = megatronCluster(1, p * d, 1e15, 0.0);
                PartitionRequest request {model, c, {}};
                const megatron::Config config {p, 1, d, 1, v, Recompute::None, m};
                const Plan plan = megatron::configPlan(request, config);
                INFO("d=" << d << " p=" << p << " v=" << v);
                REQUIRE(plan.stages.front().replicas() == d);
                const auto schedule = generateSchedule(plan);
                const auto report = validate(schedule, plan);
                INFO((report.errors.empty() ? "" : report.errors.front()));
                REQUIRE(report.ok);
                const auto sim = simulate(plan, schedule);
                const double tf = 2e-3 * v, tb = 4e-3 * v;
                CHECK(sim.makespan_s == Approx(megatron::batchTime(p, v, m, tf, tb)).epsilon(1e-6));
                for (int r = 0; r < p; ++r)
                    for (int j = 0; j < d; ++j)
                        CHECK(sim.devices[plan.stages[r].devices[j]].peak_stashed_microbatches
                            == megatron::peakStashes(p, v, m, r));
            }
}

TEST_CASE("the chosen plan's simulated bubble is (p-1)/(v m)", "[megatron]")
{
    // digest §1.4 L1460-1462 on the partitioner's own choice: 16 equal layers on 4 devices, p fixed to 4; Megatron's
    // own kinds (the zero-bubble ones would win: tests/planner/test_zero_bubble_search.cpp).
    const auto model = pw::test::uniformChain(16);
    const auto c = megatronCluster(1, 4, 1e15, 0.0);
    for (int v : {1, 2}) {
        auto r = runMegatron(
            model, c, {{"pipeline-sizes", {4}}, {"chunks", {v}}, {"recompute", "off"}, {"zero-bubble", false}}, 16);
        REQUIRE(r.ok());
        const auto config = chosen(*r.plan);
        CHECK(config.p == 4);
        CHECK(config.v == v);
        CHECK(r.plan->schedule.kind == (v == 1 ? "1f1b" : "interleaved"));
        CHECK(r.plan->stageCount() == 4 * v);
        const auto sim = simulate(*r.plan);
        CHECK(sim.bubble_overhead == Approx(megatron::bubbleFraction(4, v, config.m)).epsilon(1e-9));
        CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
        // The best configuration comes first, and every evaluated one is listed.
        REQUIRE(r.candidates.size() >= 2);
        CHECK(r.candidates.front().description == config.text());
    }
}

TEST_CASE("Eq. 4.3 gives Table 4.1's parameter counts, the profile's weights agree", "[megatron]")
{
    // digest §4.2 Table 4.1 (P in billions, heads, h, layers; V = 51,200, s = 2048) and §3.2 Eq. 4.3:
    // "Eq. 4.3 reproduces every P to 0.1B".
    struct Row
    {
        double billions;
        int heads, hidden, layers;
    };
    const std::vector<Row> rows {{1.7, 24, 2304, 24}, {3.6, 32, 3072, 30}, {7.5, 32, 4096, 36}, {18.4, 48, 6144, 40},
        {39.1, 64, 8192, 48}, {76.1, 80, 10240, 60}, {145.6, 96, 12288, 80}, {310.1, 128, 16384, 96},
        {529.6, 128, 20480, 105}, {1008.0, 160, 25600, 128}};
    for (const auto& row : rows) {
        TransformerConfig config {row.layers, row.hidden, row.heads, 2048, 51200, 1, 2};
        const double P = megatronParameterCount(config);
        INFO(row.billions << "B");
        CHECK(std::abs(P / 1e9 - row.billions) < 0.05);
        const double l = row.layers, h = row.hidden;
        CHECK(P == Approx(12 * l * h * h + 13 * l * h + (51200.0 + 2048) * h).epsilon(1e-12));
        // The generator's weights: Eq. 4.3 plus the head's tied copy of the word embedding (V h + 2h), 2 bytes.
        const auto profile = transformerProfile(config, *devicePreset("A100"));
        CHECK(profile.totalWeightBytes() == Approx((P + 51200.0 * h + 2 * h) * 2).epsilon(1e-12));
    }
}

TEST_CASE("tensor-parallel traffic is 8bsh(t-1)/t per layer and microbatch", "[megatron]")
{
    // digest §2.3: "8 b s h (t-1)/t per layer per device per microbatch" (2 all-reduces in F, 2 in B, ring).
    const auto model = megatronGpt(4, 1024, 16, 512, 2);
    const auto& layer = model.layers[1];
    REQUIRE(layer.kind == "transformer_layer");
    const double b = 2, s = 512, h = 1024, bpe = 2;
    for (int t : {2, 4, 8}) {
        const auto traffic = tensorParallelTraffic(layer, model.layers[0].activation_bytes, 1.0, t);
        CHECK(traffic.forward_allreduces == 2);
        CHECK(traffic.backward_allreduces == 2);
        // On-wire bytes per device = time x bandwidth with zero latency.
        const double wire = tensorParallelTime(traffic.forward_bytes, 2, t, 1.0, 0.0)
            + tensorParallelTime(traffic.backward_bytes, 2, t, 1.0, 0.0);
        CHECK(wire == Approx(megatron::tensorParallelVolume(b, s, h, t) * bpe).epsilon(1e-12));
    }
    CHECK(megatron::tensorParallelVolume(1, 2048, 12288, 8) == Approx(8.0 * 2048 * 12288 * 7 / 8));
    CHECK(megatron::tensorParallelVolume(4, 1024, 1024, 1) == 0);
}

TEST_CASE("a t=2 plan validates, simulates and halves the compute plus the TP all-reduces", "[megatron]")
{
    // digest §2.2-2.3 (Megatron's split: compute / t, 4 all-reduces of b s h per layer) and §5.1 (scatter/gather).
    // The digest's compute / t: the profile's per-rank times (timed by the rank's shapes) are left out here.
    auto model = megatronGpt(8, 1024, 16, 1024, 1);
    for (auto& layer : model.layers)
        layer.tensor_parallel_times.clear();
    const auto c = megatronCluster(1, 4, 80e9);
    PartitionRequest request {model, c, {}};
    const megatron::Config one {2, 1, 1, 1, 1, Recompute::None, 4};
    const megatron::Config two {2, 2, 1, 1, 1, Recompute::None, 4};
    const Plan p2 = megatron::configPlan(request, two);
    REQUIRE(p2.tensor_parallel == 2);
    REQUIRE(p2.stages[0].devices == std::vector<int> {0, 1});
    REQUIRE(p2.stages[1].devices == std::vector<int> {2, 3});
    // The same layer split with t = 1 (configPlan balances t = 1 on its own and may cut elsewhere).
    Plan p1 = megatron::configPlan(request, one);
    p1.stages = p2.stages;
    p1.stages[0].devices = {0};
    p1.stages[1].devices = {1};
    REQUIRE_NOTHROW(p2.validate());
    const auto schedule = generateSchedule(p2);
    const auto report = validate(schedule, p2);
    INFO((report.errors.empty() ? "" : report.errors.front()));
    REQUIRE(report.ok);
    // Rank 1 sends to rank 1 of the next group, half the boundary bytes (scatter/gather).
    const double cut = model.cutBytes()[p2.stages[0].last_layer];
    int sends = 0;
    for (const auto& a : schedule.devices[1])
        if (a.kind == ActionKind::SendActivation) {
            CHECK(a.peer == 3);
            CHECK(a.bytes == Approx(cut / 2));
            ++sends;
        }
    CHECK(sends == 4);

    const auto s1 = simulate(p1);
    const auto s2 = simulate(p2);
    // Expected TP time of stage 0 per microbatch, from the digest's formula: per transformer layer
    // 8bsh(t-1)/t bytes-elements over the NVLink + 4 x 2(t-1) latencies; the embedding's one forward all-reduce.
    const double b = 1, s = 1024, h = 1024, bpe = 2, bw = 4.5e11, lat = 5e-6;
    const int layers = p2.stages[0].last_layer; // stage 0 = embedding + `layers` transformer layers
    REQUIRE(layers >= 1);
    const double perLayer = megatron::tensorParallelVolume(b, s, h, 2) * bpe / bw + 4 * 2 * lat;
    const double embedding = 2.0 * 1 / 2 * b * s * h * bpe / bw + 2 * lat;
    const double tpPerMicrobatch = layers * perLayer + embedding;
    CHECK(s2.devices[0].busy_s == Approx(s1.devices[0].busy_s / 2 + 4 * tpPerMicrobatch).epsilon(1e-9));
    CHECK(s2.devices[1].busy_s == Approx(s2.devices[0].busy_s).epsilon(1e-12));
    // Weights and optimizer state are split: the static memory of a rank is half.
    const auto cost1 = CostModel::fromPlan(p1), cost2 = CostModel::fromPlan(p2);
    CHECK(cost2.stage_weight_bytes[0] == Approx(cost1.stage_weight_bytes[0] / 2));
    CHECK(s2.devices[0].peak_memory_bytes < s1.devices[0].peak_memory_bytes);
    CHECK(s2.fitsMemory());

    // The validator rejects ranks of a group that run their compute in different orders.
    auto broken = schedule;
    auto& list = broken.devices[1];
    auto f0 = std::find_if(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::Forward; });
    auto f1 = std::find_if(f0 + 1, list.end(), [](const Action& a) { return a.kind == ActionKind::Forward; });
    std::iter_swap(f0, f1);
    const auto bad = validate(broken, p2);
    CHECK_FALSE(bad.ok);
    CHECK(std::any_of(bad.errors.begin(), bad.errors.end(),
        [](const std::string& e) { return e.find("same forwards") != std::string::npos; }));
}

TEST_CASE("tensor_parallel round-trips through plan JSON and is validated", "[megatron]")
{
    const auto model = megatronGpt(4, 512, 8, 256, 1);
    const auto c = megatronCluster(1, 4, 80e9);
    PartitionRequest request {model, c, {}};
    const Plan plan = megatron::configPlan(request, {1, 2, 2, 1, 1, Recompute::None, 2});
    const auto j = toJson(plan);
    CHECK(j.at("tensor_parallel") == 2);
    const Plan back = planFromJson(j);
    CHECK(back.tensor_parallel == 2);
    CHECK(back.dataReplicas(0) == 2);
    CHECK_FALSE(toJson(megatron::configPlan(request, {1, 1, 4, 1, 1, Recompute::None, 1})).contains("tensor_parallel"));
    auto zero = j;
    zero["tensor_parallel"] = 0;
    CHECK_THROWS_AS(planFromJson(zero), InputError);
    auto uneven = j;
    uneven["tensor_parallel"] = 3;
    CHECK_THROWS_WITH(planFromJson(uneven), Catch::Contains("not a multiple of tensor_parallel"));
    // A tensor-parallel interleaved plan: p 2, t 2, v 2 (4 virtual stages on 2 groups of 2).
    const Plan inter = megatron::configPlan(request, {2, 2, 1, 1, 2, Recompute::None, 2});
    CHECK(inter.schedule.kind == "interleaved");
    CHECK(inter.stageCount() == 4);
    CHECK(validate(generateSchedule(inter), inter).ok);
    CHECK(simulate(inter).bubble_overhead > 0);
}

TEST_CASE("a model that does not fit one device gets model parallelism that fits", "[megatron]")
{
    // digest §2.4 Takeaway #2: the model-parallel size t p just large enough for memory, data parallelism after.
    const auto model = megatronGpt(24, 2048, 16, 1024, 1); // about 1.3 B parameters: 4 x 2.6 GB of weight state
    const double capacity = 8e9;
    const auto c = megatronCluster(1, 8, capacity);
    auto r = runMegatron(model, c, {{"global-batch", 16}});
    INFO(r.errorText());
    REQUIRE(r.ok());
    const auto config = chosen(*r.plan);
    CHECK(config.t * config.p > 1);
    const auto sim = simulate(*r.plan);
    double simPeak = 0;
    for (const auto& d : sim.devices) {
        CHECK(d.peak_memory_bytes <= capacity);
        simPeak = std::max(simPeak, d.peak_memory_bytes);
    }
    // The memory formula (digest §8: weights + gradients + optimizer state + p - r stashes) is what the
    // simulator's accounting reaches with one chunk; with interleaving it is an upper bound.
    const auto est = megatron::estimate(*r.plan, config);
    if (config.v == 1)
        CHECK(est.peak_memory_bytes == Approx(simPeak).epsilon(1e-9));
    else
        CHECK(est.peak_memory_bytes >= simPeak);
    // Pure data parallelism was evaluated and rejected for memory.
    bool dpRejected = false;
    for (const auto& cand : r.candidates)
        if (cand.config.at("t") == 1 && cand.config.at("p") == 1) {
            CHECK_FALSE(cand.feasible);
            CHECK(cand.peak_memory_bytes > capacity);
            dpRejected = true;
        }
    CHECK(dpRejected);
    // With unlimited memory Megatron's own search (1F1B and interleaving, whose bubbles grow with p) prefers more
    // data parallelism (smaller t p). The zero-bubble kinds are left out: without a memory limit they make a deep
    // pipeline nearly free of bubbles, and the fp32 cross-entropy's head then favours one.
    auto roomy = runMegatron(model, megatronCluster(1, 8, 1e15), {{"global-batch", 16}, {"zero-bubble", false}});
    REQUIRE(roomy.ok());
    const auto free = chosen(*roomy.plan);
    INFO("memory-bound " << config.text() << ", free " << free.text());
    CHECK(free.t * free.p <= config.t * config.p);
}

TEST_CASE("only t > 1 fits: the plan uses tensor parallelism", "[megatron]")
{
    // One deep stage's weights exceed a device; splitting layers across p would not help with p fixed to 1.
    const auto model = megatronGpt(4, 4096, 32, 512, 1); // ~1.0 B params: weights + grads + Adam = 8 bytes/param
    const double capacity = 6e9;
    const auto c = megatronCluster(1, 4, capacity);
    auto r = runMegatron(model, c, {{"global-batch", 4}, {"pipeline-sizes", {1}}});
    INFO(r.errorText());
    REQUIRE(r.ok());
    CHECK(r.plan->tensor_parallel > 1);
    const auto sim = simulate(*r.plan);
    CHECK(sim.fitsMemory());
    CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
}

TEST_CASE("rules of thumb: t within a node and t divides the heads", "[megatron]")
{
    // digest §2.7 rule 1 (Takeaway #1, L1535) and §2.2 [EXT]: heads must divide by t.
    const auto model = megatronGpt(16, 2048, 16, 1024, 1);
    const auto c = megatronCluster(2, 4, 6e9); // tight: some model parallelism is needed
    auto r = runMegatron(model, c, {{"global-batch", 16}});
    INFO(r.errorText());
    REQUIRE(r.ok());
    const auto config = chosen(*r.plan);
    CHECK(config.t <= 4);
    const auto& stage = r.plan->stages[0].devices;
    for (std::size_t g = 0; g < stage.size(); g += config.t)
        for (int i = 1; i < config.t; ++i)
            CHECK(c.sameNode(stage[g], stage[g + i]));
    bool sawCrossNode = false;
    for (const auto& cand : r.candidates)
        if (cand.config.at("t") == 8) {
            CHECK_FALSE(cand.feasible);
            CHECK(cand.reason.find("rule of thumb 1") != std::string::npos);
            sawCrossNode = true;
        }
    CHECK(sawCrossNode);
    // Without the rule, t = 8 configurations are judged on their cost alone.
    auto free = runMegatron(model, c, {{"global-batch", 16}, {"tensor-within-node", false}});
    REQUIRE(free.ok());
    CHECK(std::any_of(free.candidates.begin(), free.candidates.end(), [](const Candidate& x) {
        return x.config.at("t") == 8 && x.reason.find("rule of thumb") == std::string::npos;
    }));
    // 12 heads: t = 8 cannot split them, so it is not searched at all.
    auto odd = runMegatron(megatronGpt(8, 768, 12, 512, 1), megatronCluster(1, 8, 80e9), {{"global-batch", 16}});
    REQUIRE(odd.ok());
    CHECK(megatronHasCode(odd, "heads"));
    for (const auto& cand : odd.candidates)
        CHECK(12 % cand.config.at("t").get<int>() == 0);
}

TEST_CASE("profiles without an architecture are searched with t = 1", "[megatron]")
{
    const auto model = pw::test::uniformChain(12);
    auto r = runMegatron(model, megatronCluster(1, 4, 1e15), json::object());
    REQUIRE(r.ok());
    CHECK(megatronHasCode(r, "no-architecture"));
    CHECK(r.plan->tensor_parallel == 1);
    for (const auto& cand : r.candidates)
        CHECK(cand.config.at("t") == 1);
}

TEST_CASE("bad megatron options give clear errors", "[megatron]")
{
    const auto model = megatronGpt(8, 1024, 16, 512, 1);
    const auto c = megatronCluster(1, 8, 80e9);
    auto negative = runMegatron(model, c, {{"global-batch", -4}});
    CHECK_FALSE(negative.ok());
    CHECK(negative.errorText().find("global-batch") != std::string::npos);
    auto indivisible = runMegatron(model, c, {{"global-batch", 10}, {"microbatch-sizes", {4}}});
    CHECK_FALSE(indivisible.ok());
    CHECK(indivisible.errorText().find("divisible by d x b") != std::string::npos);
    auto noMicrobatches = runMegatron(model, c, json::object(), 0);
    CHECK_FALSE(noMicrobatches.ok());
    CHECK(noMicrobatches.errorText().find("microbatches") != std::string::npos);
    Cluster empty = c;
    empty.nodes.clear();
    auto none = runMegatron(model, empty, json::object());
    CHECK_FALSE(none.ok());
    CHECK(megatronHasCode(none, "no-devices"));
    PartitionOptions o;
    o.devices = -2;
    auto negativeDevices = findPartitioner("megatron")->partition({model, c, o}, {}, {});
    CHECK_FALSE(negativeDevices.ok());
    CHECK(negativeDevices.errorText().find("-2") != std::string::npos);
    auto tooSmall = runMegatron(model, megatronCluster(1, 8, 1e6), {{"global-batch", 8}});
    CHECK_FALSE(tooSmall.ok());
    CHECK(megatronHasCode(tooSmall, "over-memory"));
    CHECK_FALSE(tooSmall.candidates.empty());
}

TEST_CASE("megatron plans the demo model on the demo cluster", "[megatron]")
{
    const auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    const auto c = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    auto r = runMegatron(model, c, json::object());
    INFO(r.errorText());
    REQUIRE(r.ok());
    const auto schedule = generateSchedule(*r.plan);
    CHECK(validate(schedule, *r.plan).ok);
    const auto sim = simulate(*r.plan, schedule);
    CHECK(sim.fitsMemory());
    // The default global batch is --microbatches x the profile's microbatch: 8 x 4.
    CHECK(r.plan->algorithm_options.at("global_batch") == 32);
    const auto config = chosen(*r.plan);
    CHECK(config.p * config.t * config.d == 8);
    CHECK(config.m * config.b * config.d == 32);
}

TEST_CASE("a stage's time per microbatch is what the simulation charges: compute, recomputed forward and TP "
          "all-reduces",
    "[megatron][simulator]")
{
    // issue 19 item 9: the stage table showed F + B of the profile alone. With t = 2 and recomputation the
    // simulator charges F + B + F again + the group's all-reduces (twice in the forward, once more for the
    // recomputed one, and in the backward); the parts must add up to the spans it puts on the compute lane.
    const auto model = megatronGpt(8, 1024, 16, 1024, 1);
    const auto c = megatronCluster(1, 4, 80e9);
    PartitionRequest request {model, c, {}};
    const Plan plan = megatron::configPlan(request, {2, 2, 1, 1, 1, Recompute::Full, 4});
    REQUIRE(plan.tensor_parallel == 2);
    REQUIRE(plan.schedule.recompute == Recompute::Full);
    const auto sim = simulate(plan);
    for (int s = 0; s < plan.stageCount(); ++s) {
        INFO("stage " << s);
        const auto& charge = sim.stages[s].charge;
        const auto totals = stageTotals(plan, s, c.typeOf(plan.stages[s].devices[0]));
        const std::vector<int> group(plan.stages[s].devices.begin(), plan.stages[s].devices.begin() + 2);
        const double bw = c.groupBandwidth(group), lat = c.groupLatency(group);
        const double tpForward = tensorParallelTime(totals.tp_forward_bytes, totals.tp_forward_allreduces, 2, bw, lat);
        const double tpBackward
            = tensorParallelTime(totals.tp_backward_bytes, totals.tp_backward_allreduces, 2, bw, lat);
        REQUIRE(tpForward > 0);
        CHECK(charge.forward_s == Approx(totals.forward_s));
        CHECK(charge.backward_s == Approx(totals.backward_s));
        CHECK(charge.recompute_s == Approx(totals.forward_s));
        CHECK(charge.tensor_parallel_s == Approx(2 * tpForward + tpBackward));
        CHECK(charge.total_s() > totals.forward_s + totals.backward_s); // what the old "F+B" column showed
        // The spans of the stage's first device: microbatches x the charge.
        double spans = 0;
        for (const auto& span : sim.timeline.spans)
            if (span.device == plan.stages[s].devices[0] && span.lane == Lane::Compute
                && (span.kind == ActionKind::Forward || span.kind == ActionKind::Backward))
                spans += span.t1 - span.t0;
        CHECK(spans == Approx(plan.schedule.microbatches * charge.total_s()).epsilon(1e-9));
    }
}
