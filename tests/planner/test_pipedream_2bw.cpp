// SPDX-License-Identifier: MIT
// PipeDream-2BW's planner: the closed-form memory and throughput models (digest pipedream-2bw.md §4) against
// the simulator, the search over (d, p, b, recomputation) under memory, placement, options and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "planner/device_presets.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/partition/pipedream_2bw.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using Catch::Detail::Approx;

namespace {

/// A uniform chain: L layers of F, B seconds, w weight bytes, `stash` bytes kept per layer, `out` bytes sent
/// on every cut; p stages of L/p layers on one node of identical devices with `bandwidth`.
Plan chainPlan(const std::string& kind, int L, int p, int m, double F, double B, double w, double stash, double out,
    double bandwidth = 1e12)
{
    Plan plan;
    for (int i = 0; i < L; ++i) {
        Layer l;
        l.name = "layer" + std::to_string(i);
        l.forward_ms = F * 1000;
        l.backward_ms = B * 1000;
        l.activation_bytes = out;
        l.stashed_bytes = stash;
        l.weight_bytes = w;
        plan.model.edit().layers.push_back(l);
    }
    DeviceType gpu;
    gpu.name = "gpu";
    gpu.memory_bytes = 1e15;
    plan.cluster.edit().device_types.push_back(gpu);
    plan.cluster.edit().nodes.push_back({"n0", "", 22, "", "gpu", p, bandwidth, 0});
    for (int s = 0; s < p; ++s)
        plan.stages.push_back({s * L / p, (s + 1) * L / p - 1, {s}});
    plan.schedule.kind = kind;
    plan.schedule.microbatches = m;
    plan.schedule.optimizer = "sgd";
    return plan;
}

SimulationResult pipedream2bwRun(const Plan& plan)
{
    auto schedule = generateSchedule(plan);
    REQUIRE(validate(schedule, plan).ok);
    return simulate(plan, schedule);
}

Cluster nodes(int count, int perNode, double memory, double inter = 5e10)
{
    Cluster c;
    auto h100 = *devicePreset("H100");
    h100.memory_bytes = memory;
    c.device_types = {h100};
    for (int n = 0; n < count; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", h100.name, perNode, 4.5e11, 5e-6});
    c.inter_node_bandwidth_bytes_per_s = inter;
    c.inter_node_latency_s = 1e-5;
    return c;
}

ModelProfile demoModel()
{
    return loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
}

PartitionResult plan2bw(const ModelProfile& model, const Cluster& cluster, nlohmann::json params, int microbatches = 32)
{
    PartitionOptions o;
    o.schedule.microbatches = microbatches;
    o.params = std::move(params);
    return findPartitioner("pipedream-2bw")->partition({model, cluster, o}, {}, {});
}

} // namespace

TEST_CASE("D:1235 / D:1239: 2BW memory per stage equals the simulator's peak", "[pipedream-2bw]")
{
    // digest §4.3: each stage holds |W|/p weights and |A^total|/p activations; 2BW keeps two weight versions.
    // The simulator also counts one gradient buffer (|W|/p) and optimizer state (none with SGD).
    const int L = 8, p = 4, m = 8;
    const double w = 1e6, stash = 3e6, out = 5e5;
    const double W = L * w, A = L * stash;
    for (bool recompute : {false, true}) {
        INFO("recompute " << recompute);
        auto plan = chainPlan("2bw", L, p, m, 1, 2, w, stash, out);
        plan.schedule.recompute = recompute ? Recompute::Full : Recompute::None;
        plan.schedule.iterations = 3;
        auto sim = pipedream2bwRun(plan);
        const double paper = twobw::paperMemoryBytes(W, A, out, p, recompute, /*input_term=*/false);
        if (recompute)
            CHECK(paper == Approx(2 * W / p + A / p + p * out)); // D:1239 as printed
        else
            CHECK(paper == Approx(2 * W / p + p * A / p)); // D:1235 without the p|A^input| term (§4.3)
        CHECK(twobw::paperMemoryBytes(W, A, out, p, false, true) == Approx(2 * W / p + A + p * out));
        for (int s = 0; s < p; ++s) {
            INFO("stage " << s);
            CHECK(sim.stages[s].peak_weight_versions == 2);
            // Stage s keeps p - s microbatches in flight; the paper's formula is the first stage's worst case p.
            CHECK(sim.stages[s].peak_stashed_microbatches == p - s);
            const double gradient = W / p;
            if (!recompute) {
                CHECK(sim.stages[s].peak_memory_bytes - gradient == Approx(paper - s * A / p));
            } else if (s > 0) {
                // The first stage receives nothing (its input is the data loader's), so its stashes are free here.
                CHECK(sim.stages[s].peak_memory_bytes - gradient == Approx(paper - s * out));
            }
        }
    }
}

TEST_CASE("D:1197-1205: the pipelined time per microbatch is the simulator's 2BW steady state", "[pipedream-2bw]")
{
    // Balanced stages, no communication: t = max_i T_i^comp, throughput b / t per pipeline; PipeDream-Flush pays
    // the (p - 1)/m bubble on top (digest §4.2 note, §3.7).
    for (int p : {2, 3, 4})
        for (int m : {4, 8, 16}) {
            if (m < p)
                continue;
            INFO("p=" << p << " m=" << m);
            const double F = 1, B = 2;
            auto plan = chainPlan("2bw", 2 * p, p, m, F, B, 1, 1, 0);
            plan.schedule.iterations = 4;
            std::vector<twobw::StageCost> costs(p, {2 * (F + B), 0, 0});
            const double t = twobw::pipelinedTime(costs, m);
            CHECK(t == Approx(2 * (F + B)));
            auto sim = pipedream2bwRun(plan);
            CHECK(sim.throughput_samples_per_s == Approx(1.0 / t)); // b = 1 sample per microbatch
            plan.schedule.kind = "1f1b";
            plan.schedule.iterations = 1;
            auto flush = pipedream2bwRun(plan);
            CHECK(flush.iteration_time_s == Approx(t * m * (1 + twobw::flushBubble(p, m))));
            CHECK(flush.bubble_overhead == Approx(twobw::flushBubble(p, m)));
        }
    // Without pipelining (D:1191) the stages run one after another.
    std::vector<twobw::StageCost> costs {{3, 1, 0}, {2, 1, 0}, {4, 0, 20}};
    CHECK(twobw::unpipelinedTime(costs, 2) == Approx(4 + 3 + 10));
    CHECK(twobw::pipelinedTime(costs, 2) == Approx(10)); // the all-reduce, amortised over m = 2, dominates
    CHECK(twobw::pipelinedTime(costs, 10) == Approx(4));
    CHECK(twobw::ringAllReduceBytes(800, 4) == Approx(1200)); // 2 (d-1)/d |W|
    CHECK(twobw::ringAllReduceBytes(800, 1) == 0);
}

TEST_CASE("the planner's closed-form time is the simulated 2BW steady state without communication", "[pipedream-2bw]")
{
    // D:1197-1205 through the planner itself: with nothing to send and nothing to all-reduce, every
    // configuration's predicted time per microbatch times the microbatches of a pipeline is the simulator's
    // batch time, and its throughput d b / t the simulated one (profile times scale linearly with b).
    const auto base = chainPlan("2bw", 8, 4, 8, 1, 2, /*w=*/0, 1e3, /*out=*/0);
    for (int stages : {1, 2, 4})
        for (int b : {1, 2}) {
            INFO("p=" << stages << " b=" << b);
            PartitionOptions o;
            o.stages = stages;
            o.schedule.optimizer = "sgd";
            o.params = {{"batch-size", 32}, {"microbatch-sizes", {b}}, {"recompute", "off"}, {"pipelining", "on"},
                {"placement", "replicas-together"}};
            auto r = findPartitioner("pipedream-2bw")->partition({base.model, base.cluster, o}, {}, {});
            INFO(r.errorText());
            REQUIRE(r.ok());
            const auto& chosen = r.candidates.front();
            REQUIRE(chosen.config["pipeline_depth"] == stages);
            const int d = chosen.config["data_parallel"];
            const double t = chosen.config["time_per_microbatch_s"];
            CHECK(t == Approx(b * 3.0 * 8 / stages)); // (F + B) x b x layers per stage, F = 1 s, B = 2 s
            CHECK(r.plan->schedule.iterations == scheduleTraits("2bw").min_iterations);
            const auto sim = pipedream2bwRun(*r.plan);
            const int m = chosen.config["microbatches_per_pipeline"];
            CHECK(sim.iteration_time_s == Approx(m * t));
            CHECK(sim.throughput_samples_per_s == Approx(chosen.throughput_samples_per_s));
            CHECK(chosen.throughput_samples_per_s == Approx(d * b / t));
        }
}

TEST_CASE("the search keeps only configurations that fit and picks the fastest", "[pipedream-2bw]")
{
    auto model = demoModel();
    auto roomy = plan2bw(model, nodes(1, 8, 80e9), {});
    INFO(roomy.errorText());
    REQUIRE(roomy.ok());
    REQUIRE(roomy.candidates.size() > 10);
    const auto& chosen = roomy.candidates.front();
    CHECK(chosen.feasible);
    for (const auto& c : roomy.candidates) {
        if (!c.feasible)
            continue;
        CHECK(c.throughput_samples_per_s <= chosen.throughput_samples_per_s * (1 + 1e-9));
        CHECK(c.config["data_parallel"].get<int>() * c.config["pipeline_depth"].get<int>() == 8);
    }
    // Memory so tight that the whole model (two weight versions, gradients, Adam) cannot sit on one device:
    // every p = 1 configuration is rejected with its reason and the chosen plan is pipelined.
    double pureDataParallel = 1e300;
    for (const auto& c : roomy.candidates)
        if (c.config["pipeline_depth"] == 1)
            pureDataParallel = std::min(pureDataParallel, c.peak_memory_bytes);
    auto tight = plan2bw(model, nodes(1, 8, 0.6 * pureDataParallel), {});
    INFO(tight.errorText());
    REQUIRE(tight.ok());
    CHECK(tight.plan->pipelineDepth() > 1);
    for (const auto& c : tight.candidates)
        if (c.config["pipeline_depth"] == 1) {
            CHECK_FALSE(c.feasible);
            CHECK(c.reason.find("needs") != std::string::npos);
        }
    auto sim = simulate(*tight.plan);
    CHECK(sim.fitsMemory());
    for (const auto& st : tight.plan->stages)
        CHECK(st.replicas() == tight.plan->stages.front().replicas()); // equi-replicated stages
    // Nothing fits at all: a clear error that names the closest configuration.
    auto none = plan2bw(model, nodes(1, 8, 1e6), {});
    CHECK_FALSE(none.ok());
    CHECK(none.errorText().find("fits device memory") != std::string::npos);
    CHECK_FALSE(none.candidates.empty());
}

TEST_CASE("recomputation is chosen exactly when memory needs it", "[pipedream-2bw]")
{
    auto model = demoModel();
    auto all = plan2bw(model, nodes(1, 8, 80e9), {{"placement", "replicas-together"}});
    REQUIRE(all.ok());
    double minWithout = 1e300, minWith = 1e300;
    for (const auto& c : all.candidates) {
        if (c.peak_memory_bytes <= 0)
            continue; // rejected before its memory was evaluated (m < p)
        if (c.config["execution"] == "pipelined")
            minWithout = std::min(minWithout, c.peak_memory_bytes);
        if (c.config["execution"] == "pipelined + recompute")
            minWith = std::min(minWith, c.peak_memory_bytes);
    }
    REQUIRE(minWith < minWithout);
    // Without memory pressure recomputation only costs time (4/3-style extra forward), so it is not chosen.
    CHECK(all.plan->schedule.recompute == Recompute::None);
    auto tight = plan2bw(model, nodes(1, 8, (minWith + minWithout) / 2), {{"pipelining", "on"}});
    INFO(tight.errorText());
    REQUIRE(tight.ok());
    CHECK(tight.plan->schedule.recompute == Recompute::Full);
    CHECK(simulate(*tight.plan).fitsMemory());
    auto off = plan2bw(model, nodes(1, 8, (minWith + minWithout) / 2), {{"pipelining", "on"}, {"recompute", "off"}});
    CHECK_FALSE(off.ok());
}

TEST_CASE("placement: all-reduce on the fast links when weights dominate", "[pipedream-2bw]")
{
    // 2 nodes x 4 devices joined by a slow link. d = 4, p = 2: packing replicas keeps each stage's all-reduce
    // inside a node (D:1148: expensive communication over intra-server links).
    auto model = demoModel();
    auto result = plan2bw(model, nodes(2, 4, 80e9, 1e9), {{"microbatch-sizes", {4}}, {"recompute", "off"}}, 8);
    REQUIRE(result.ok());
    double replicas = 0, pipelines = 0;
    for (const auto& c : result.candidates)
        if (c.config["data_parallel"] == 4 && c.config["execution"] == "pipelined") {
            (c.config["placement"] == "replicas-together" ? replicas : pipelines) = c.throughput_samples_per_s;
        }
    REQUIRE(replicas > 0);
    REQUIRE(pipelines > 0);
    CHECK(replicas > pipelines);
}

TEST_CASE("equal blocks per stage (D:1215) and PipeDream-Flush", "[pipedream-2bw]")
{
    auto model = demoModel(); // embedding, 24 transformer layers, head
    auto result = plan2bw(model, nodes(1, 8, 80e9),
        {{"split", "equal-blocks"}, {"pipelining", "on"}, {"placement", "replicas-together"}, {"flush", true}}, 64);
    INFO(result.errorText());
    REQUIRE(result.ok());
    const auto& plan = *result.plan;
    CHECK(plan.schedule.kind == "1f1b");
    const int p = plan.pipelineDepth();
    const int blocks = 24 / p;
    for (int s = 0; s < p; ++s) {
        int count = 0;
        for (int l = plan.stages[s].first_layer; l <= plan.stages[s].last_layer; ++l)
            count += model.layers[l].kind == "transformer_layer";
        CHECK(count == blocks);
    }
    // p must divide the 24 blocks: p = 16 on 16 devices does not, and says so.
    auto bad = plan2bw(model, nodes(2, 8, 80e9), {{"split", "equal-blocks"}}, 64);
    bool reported = false;
    for (const auto& c : bad.candidates)
        if (c.config["pipeline_depth"] == 16)
            reported = reported || c.reason.find("does not divide") != std::string::npos;
    CHECK(reported);
}

TEST_CASE("pipedream-2bw: bad options are clear errors", "[pipedream-2bw]")
{
    auto model = demoModel();
    auto c = nodes(1, 4, 80e9);
    auto zeroBatch = plan2bw(model, c, {{"batch-size", 0}});
    CHECK_FALSE(zeroBatch.ok());
    CHECK(zeroBatch.errorText().find("batch-size") != std::string::npos);
    auto negative = plan2bw(model, c, {{"batch-size", -8}});
    CHECK_FALSE(negative.ok());
    auto badSize = plan2bw(model, c, {{"microbatch-sizes", {0}}});
    CHECK_FALSE(badSize.ok());
    CHECK(badSize.errorText().find("microbatch-sizes") != std::string::npos);
    auto unknown = plan2bw(model, c, {{"no-such", 1}});
    CHECK_FALSE(unknown.ok());
    Cluster empty;
    auto none = plan2bw(model, empty, {});
    CHECK_FALSE(none.ok());
    CHECK(none.errorText().find("no devices") != std::string::npos);
    PartitionOptions o;
    o.schedule.chunks = 2;
    auto chunks = findPartitioner("pipedream-2bw")->partition({model, c, o}, {}, {});
    CHECK_FALSE(chunks.ok());
    CHECK(chunks.errorText().find("chunks") != std::string::npos);
    // A batch too small for any d x b: says what to raise.
    auto tiny = plan2bw(model, c, {{"batch-size", 1}, {"microbatch-sizes", {2}}});
    CHECK_FALSE(tiny.ok());
    CHECK(tiny.errorText().find("batch") != std::string::npos);
}
