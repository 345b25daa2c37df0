// SPDX-License-Identifier: MIT
// MadPipe: 1F1B* (worked example and the stored-activation property on the simulator), the phase-1 DP and the
// corrected Algorithm 1 on the digest's toy instance, the exact contiguous search, memory awareness checked by
// simulation, options and errors. Digest: shared/docs/papers/hetpipe-bapipe-madpipe.md §3.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "planner/io/graph_txt.h"
#include "planner/io/json_file.h"
#include "planner/partition/madpipe.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using namespace pw::planner::madpipe;

namespace {

/// One layer per stage with F, B in seconds, nothing to transfer (zero bytes, zero latency), free optimizer
/// steps, and the given in-flight counts under the "2bw" kind: 1F1B* without communication.
Plan starPlan(const std::vector<double>& F, const std::vector<double>& B, const std::vector<int>& inFlight, int m)
{
    Plan plan;
    const int n = static_cast<int>(F.size());
    for (int i = 0; i < n; ++i) {
        Layer l;
        l.name = "layer" + std::to_string(i);
        l.forward_ms = F[i] * 1000;
        l.backward_ms = B[i] * 1000;
        l.activation_bytes = 0;
        l.weight_bytes = 1000;
        plan.model.edit().layers.push_back(l);
    }
    DeviceType gpu;
    gpu.name = "gpu";
    gpu.memory_bytes = 1e15;
    plan.cluster.edit().device_types.push_back(gpu);
    Node node;
    node.name = "n0";
    node.device_type = "gpu";
    node.count = n;
    node.intra_bandwidth_bytes_per_s = 1e12;
    plan.cluster.edit().nodes.push_back(node);
    for (int s = 0; s < n; ++s)
        plan.stages.push_back({s, s, {s}});
    plan.schedule.kind = "2bw";
    plan.schedule.microbatches = m;
    plan.schedule.iterations = 2;
    plan.schedule.optimizer = "sgd";
    plan.schedule.in_flight = inFlight;
    return plan;
}

/// Every F and B the simulator runs starts no later than in the unrolled 1F1B* pattern (batch k's op with
/// shift h starts at (k + h) T + t): the ASAP run of the same per-GPU order dominates any valid pattern.
void checkDominatedByPattern(const SimulationResult& sim, const StarPattern& p)
{
    int checked = 0;
    for (const auto& s : sim.timeline.spans) {
        if (s.lane != Lane::Compute || (s.kind != ActionKind::Forward && s.kind != ActionKind::Backward))
            continue;
        const bool fwd = s.kind == ActionKind::Forward;
        const double t = (s.microbatch + (fwd ? p.forward_shift[s.stage] : p.backward_shift[s.stage])) * p.period
            + (fwd ? p.forward_start[s.stage] : p.backward_start[s.stage]);
        INFO("stage " << s.stage << (fwd ? " F" : " B") << s.microbatch << ": simulated " << s.t0 << ", pattern " << t);
        CHECK(s.t0 <= t + 1e-9);
        ++checked;
    }
    CHECK(checked > 0);
}

/// The digest's toy instance (§3.6): L = 8, beta = 20, u_B = 2 u_F, W, a_0..a_8; units are abstract.
Chain toyChain(double memory)
{
    const std::vector<double> uF {2, 2, 3, 3, 2, 2, 1, 1};
    const std::vector<double> W {1, 1, 2, 4, 8, 8, 16, 16};
    const std::vector<double> a {20, 40, 40, 20, 20, 10, 10, 5, 1}; // a_0 .. a_8
    Chain c;
    c.layers = 8;
    c.forward_prefix = {0};
    c.backward_prefix = {0};
    c.weight_prefix = {0};
    c.optimizer_prefix = {0};
    c.stash_prefix = {0};
    for (int l = 0; l < 8; ++l) {
        c.forward_prefix.push_back(c.forward_prefix.back() + uF[l]);
        c.backward_prefix.push_back(c.backward_prefix.back() + 2 * uF[l]);
        c.weight_prefix.push_back(c.weight_prefix.back() + W[l]);
        c.optimizer_prefix.push_back(0);
        c.stash_prefix.push_back(c.stash_prefix.back() + a[l]); // layer l+1 stashes its input a_l
        c.cut_bytes.push_back(a[l + 1]);
    }
    c.capacity = memory;
    c.bandwidth = 20;
    c.latency = 0;
    return c;
}

/// The same toy as a model profile and a 3-GPU cluster (ms and bytes: beta = 20 bytes/ms).
std::pair<ModelProfile, Cluster> toyProblem(double memory)
{
    const std::vector<double> uF {2, 2, 3, 3, 2, 2, 1, 1};
    const std::vector<double> W {1, 1, 2, 4, 8, 8, 16, 16};
    const std::vector<double> a {20, 40, 40, 20, 20, 10, 10, 5, 1};
    ModelProfile m;
    m.name = "madpipe-toy";
    for (int l = 0; l < 8; ++l) {
        Layer layer;
        layer.name = "l" + std::to_string(l + 1);
        layer.forward_ms = uF[l];
        layer.backward_ms = 2 * uF[l];
        layer.weight_bytes = W[l];
        layer.activation_bytes = a[l + 1];
        layer.stashed_bytes = a[l];
        m.layers.push_back(layer);
    }
    Cluster c;
    DeviceType gpu;
    gpu.name = "gpu";
    gpu.memory_bytes = memory;
    c.device_types.push_back(gpu);
    Node node;
    node.name = "n0";
    node.device_type = "gpu";
    node.count = 3;
    node.intra_bandwidth_bytes_per_s = 20000;
    c.nodes.push_back(node);
    return {m, c};
}

PartitionResult runMadPipe(
    const ModelProfile& m, const Cluster& c, nlohmann::json params = nlohmann::json::object(), int microbatches = 16)
{
    PartitionOptions o;
    o.schedule.microbatches = microbatches;
    o.schedule.optimizer = "sgd";
    o.params = std::move(params);
    return findPartitioner("madpipe")->partition({m, c, o}, {}, {});
}

} // namespace

TEST_CASE("1F1B* worked example: groups, pattern and simulated stashes", "[madpipe]")
{
    // Digest §3.2 worked example: U_F = [1,1,2,1], U_B = [2,2,3,2], T = 6.
    const std::vector<double> F {1, 1, 2, 1}, B {2, 2, 3, 2};
    CHECK(starGroups({3, 3, 5, 3}, 6) == std::vector<int> {3, 3, 2, 1});
    const auto p = starPattern(F, B, 6);
    CHECK(p.group == std::vector<int> {3, 3, 2, 1});
    CHECK(p.forward_start == std::vector<double> {0, 1, 2, 4});
    CHECK(p.forward_shift == std::vector<int> {0, 0, 0, 0});
    CHECK(p.backward_start == std::vector<double> {4, 2, 4, 5});
    CHECK(p.backward_shift == std::vector<int> {2, 2, 1, 0});

    // On the project's simulator: the 2bw kind with in-flight = group index stores exactly that many.
    auto plan = starPlan(F, B, p.group, 24);
    auto schedule = generateSchedule(plan);
    REQUIRE(validate(schedule, plan).ok);
    auto sim = simulate(plan, schedule);
    for (int s = 0; s < 4; ++s)
        CHECK(sim.stages[s].peak_stashed_microbatches == p.group[s]);
    checkDominatedByPattern(sim, p);
    // Steady state between the largest load (5) and T = 6 per microbatch.
    const double perMicrobatch = sim.iteration_time_s / plan.schedule.microbatches;
    CHECK(perMicrobatch <= 6 + 1e-9);
    CHECK(perMicrobatch >= 5 - 1e-9);
}

TEST_CASE("1F1B* on random chains: stored activations equal the group index", "[madpipe]")
{
    // Digest §3.2: "in 3,000 random chains ... the measured peak active batches equalled the group index".
    std::mt19937 rng(20201126);
    std::uniform_int_distribution<int> stages(2, 7);
    std::uniform_real_distribution<double> fwd(0.2, 3.0), ratio(1.0, 3.0), where(0.0, 1.0);
    int chains = 0, multiGroup = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const int n = stages(rng);
        std::vector<double> F(n), B(n), U(n);
        double maxU = 0, sumU = 0;
        for (int i = 0; i < n; ++i) {
            F[i] = fwd(rng);
            B[i] = F[i] * ratio(rng);
            U[i] = F[i] + B[i];
            maxU = std::max(maxU, U[i]);
            sumU += U[i];
        }
        const double T = maxU + where(rng) * (sumU - maxU);
        const auto p = starPattern(F, B, T);
        const int G = *std::max_element(p.group.begin(), p.group.end());
        multiGroup += G > 1;
        auto plan = starPlan(F, B, p.group, std::max(n, G) + 6);
        auto schedule = generateSchedule(plan);
        INFO("trial " << trial << " n=" << n << " T=" << T);
        REQUIRE(validate(schedule, plan).ok);
        auto sim = simulate(plan, schedule);
        for (int s = 0; s < n; ++s)
            CHECK(sim.stages[s].peak_stashed_microbatches == p.group[s]);
        checkDominatedByPattern(sim, p);
        ++chains;
    }
    CHECK(chains == 300);
    CHECK(multiGroup > 200); // most draws exercise several groups
}

TEST_CASE("1F1B* least valid period of the PipeDream partition on the toy", "[madpipe]")
{
    // Digest §3.6, M = 260: {1-2}, {3-4}, {5-8} needs T = 34, groups [2,2,2,1,1] on the 5-element chain
    // (stage {1-2} would need g = 3: 266 > 260).
    Chain c = toyChain(260);
    const Cuts cuts {0, 2, 4, 8};
    const auto s = starChain(c, cuts);
    std::vector<double> loads;
    for (std::size_t e = 0; e < s.forward.size(); ++e)
        loads.push_back(s.forward[e] + s.backward[e]);
    CHECK(loads == std::vector<double> {12, 4, 18, 2, 18});
    CHECK(c.memory(0, 2, 3) == Approx(266));
    CHECK(c.memory(0, 2, 2) == Approx(206));
    CHECK(starGroups(loads, 34) == std::vector<int> {2, 2, 2, 1, 1});
    auto star = minimalStarPeriod(c, cuts);
    REQUIRE(star);
    CHECK(star->period == Approx(34));
    CHECK(star->in_flight == std::vector<int> {2, 2, 1});
    // Memory not binding: the largest load, 18.
    auto loose = minimalStarPeriod(toyChain(1000), cuts);
    REQUIRE(loose);
    CHECK(loose->period == Approx(18));
}

TEST_CASE("MadPipe-DP and Algorithm 1 on the toy instance", "[madpipe]")
{
    Phase1Settings settings; // the paper's 101 / 11 / 51 grids, K = 10

    SECTION("M = 1000: period 18 with a non-contiguous allocation")
    {
        // Digest §3.6: "MadPipe returns period 18 with a genuinely non-contiguous allocation".
        Chain c = toyChain(1000);
        auto r = algorithm1(c, 3, settings, {});
        REQUIRE(r.best);
        CHECK(r.best_period == Approx(18));
        int specials = 0;
        for (const auto& s : r.best->stages)
            specials += s.special;
        CHECK(specials >= 1);
        // The contiguous optimum with 1F1B* also reaches 18 (the PipeDream-style DP's {1-2},{3-4},{5-8}).
        auto cuts = bestContiguous(c, 3, {});
        REQUIRE(cuts);
        CHECK(minimalStarPeriod(c, *cuts)->period == Approx(18));
    }

    SECTION("M = 260: the corrected update survives the infeasible first call")
    {
        // Digest §3.6: T^ = 16 (infeasible), 39.25, 28.6, 23.3, 20.7, 19.3 (DP = 21), ..., T~ -> 20.08.
        Chain c = toyChain(260);
        CHECK(phase1Dp(c, 3, 16, settings, kInf, nullptr, {}) == kInf);
        auto r = algorithm1(c, 3, settings, {});
        REQUIRE(r.steps.size() == 10);
        CHECK(r.steps[0].target == Approx(16));
        CHECK_FALSE(r.steps[0].exact); // not below ub: here infeasible
        CHECK(r.steps[1].target == Approx(39.25));
        CHECK(r.steps[2].target == Approx(28.625));
        CHECK(r.steps[3].target == Approx(23.3125));
        CHECK(r.steps[4].target == Approx(20.65625));
        CHECK(r.steps[5].target == Approx(19.328125));
        CHECK_FALSE(r.steps[5].exact); // DP = 21 is not below ub = 20.66, so the bounded DP stops at "> ub"
        CHECK(phase1Dp(c, 3, r.steps[5].target, settings, kInf, nullptr, {}) == Approx(21));
        CHECK(r.steps[5].lb == Approx(19.328125)); // lb <- min(T, T^) = T^
        REQUIRE(r.best);
        CHECK(r.best_period == Approx(20.08).margin(0.05));
        CHECK_FALSE(r.diverged);
        // Its allocation is the PipeDream partition with {1-2} alone on the special GPU, costed with g - 1.
        REQUIRE(r.best->stages.size() == 3);
        CHECK(r.best->stages[0].first == 0);
        CHECK(r.best->stages[0].end == 2);
        CHECK(r.best->stages[0].special);
        CHECK(r.best->stages[1].end == 4);
    }

    SECTION("M = 260: the literal update diverges")
    {
        // Digest §3.4 ERR: lb <- max(lb, min(T_i, T~_i)) = T_i = infinity after the infeasible first call.
        Chain c = toyChain(260);
        auto literal = settings;
        literal.literal_lb_update = true;
        auto r = algorithm1(c, 3, literal, {});
        CHECK(r.diverged);
        CHECK_FALSE(r.best);
        REQUIRE(r.steps.size() == 1);
        CHECK(r.steps[0].lb == kInf);
    }
}

TEST_CASE("the contiguous search is exact", "[madpipe]")
{
    // Brute force over every contiguous partition into at most P stages, each scheduled with 1F1B* at its least
    // valid period (digest §3.2 "minimal valid period ... scan the breakpoints").
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> t(0.5, 4), bytes(0, 60), w(0, 20);
    int feasible = 0;
    for (int trial = 0; trial < 150; ++trial) {
        const int L = 3 + trial % 6, P = 2 + trial % 3;
        Chain c;
        c.layers = L;
        c.forward_prefix = c.backward_prefix = c.weight_prefix = c.optimizer_prefix = c.stash_prefix = {0};
        for (int l = 0; l < L; ++l) {
            const double f = t(rng);
            c.forward_prefix.push_back(c.forward_prefix.back() + f);
            c.backward_prefix.push_back(c.backward_prefix.back() + 2 * f);
            c.weight_prefix.push_back(c.weight_prefix.back() + w(rng));
            c.optimizer_prefix.push_back(0);
            c.stash_prefix.push_back(c.stash_prefix.back() + bytes(rng));
            c.cut_bytes.push_back(bytes(rng));
        }
        c.bandwidth = 20;
        c.capacity = 150 + 10 * (trial % 20);
        double brute = kInf;
        for (int mask = 0; mask < (1 << (L - 1)); ++mask) {
            Cuts cuts {0};
            for (int l = 1; l < L; ++l)
                if (mask & (1 << (l - 1)))
                    cuts.push_back(l);
            cuts.push_back(L);
            if (static_cast<int>(cuts.size()) - 1 > P)
                continue;
            if (auto s = minimalStarPeriod(c, cuts))
                brute = std::min(brute, s->period);
        }
        auto best = bestContiguous(c, P, {});
        INFO("trial " << trial);
        CHECK(best.has_value() == std::isfinite(brute));
        if (best) {
            ++feasible;
            CHECK(minimalStarPeriod(c, *best)->period == Approx(brute).epsilon(1e-9));
        }
    }
    CHECK(feasible > 50);
}

TEST_CASE("madpipe plans the toy: the non-contiguous allocation falls back to a contiguous one", "[madpipe]")
{
    auto [model, cluster] = toyProblem(1000);
    auto r = runMadPipe(model, cluster);
    INFO(r.errorText());
    REQUIRE(r.ok());
    bool warned = false;
    for (const auto& d : r.diagnostics)
        warned = warned || (d.code == "non-contiguous" && d.severity == Diagnostic::Severity::Warning);
    CHECK(warned);
    const auto& plan = *r.plan;
    CHECK(plan.schedule.kind == "2bw");
    CHECK(plan.objective_s == Approx(0.018)); // 18 ms, the contiguous 1F1B* optimum
    auto schedule = generateSchedule(plan);
    CHECK(validate(schedule, plan).ok);
    auto sim = simulate(plan, schedule, {false, false});
    CHECK(sim.fitsMemory());
    for (int s = 0; s < plan.stageCount(); ++s)
        CHECK(sim.stages[s].peak_stashed_microbatches == plan.schedule.in_flight[s]);
    CHECK(plan.algorithm_options.at("phase1").at("period_estimate_s").get<double>() == Approx(0.018));
    CHECK_FALSE(plan.algorithm_options.at("phase1").at("contiguous").get<bool>());
}

TEST_CASE("madpipe toy at M = 260: phase 1 is optimistic, the plan still fits", "[madpipe]")
{
    auto [model, cluster] = toyProblem(260);
    auto r = runMadPipe(model, cluster);
    INFO(r.errorText());
    REQUIRE(r.ok());
    const auto& plan = *r.plan;
    // Phase 1's estimate (~20.08 ms) is below what any contiguous allocation can run at with 1F1B*.
    const double estimate = plan.algorithm_options.at("phase1").at("period_estimate_s").get<double>();
    CHECK(estimate == Approx(0.02008).margin(5e-5));
    CHECK(plan.objective_s > estimate);
    CHECK(plan.objective_s <= 0.034 + 1e-12); // never worse than phase 1's own partition re-checked (34)
    auto sim = simulate(plan, SimulationOptions {false, false});
    CHECK(sim.fitsMemory());
    for (int s = 0; s < plan.stageCount(); ++s)
        CHECK(sim.stages[s].peak_stashed_microbatches == plan.schedule.in_flight[s]);

    // Without refinement the plan is phase 1's own partition at its least 1F1B* period, 34 ms.
    auto raw = runMadPipe(model, cluster, {{"refine", false}});
    REQUIRE(raw.ok());
    CHECK(raw.plan->objective_s == Approx(0.034));
    CHECK(raw.plan->schedule.in_flight == std::vector<int> {2, 2, 1});

    // The literal Algorithm 1 fails with a clear error.
    auto literal = runMadPipe(model, cluster, {{"lb-update", "literal"}});
    CHECK_FALSE(literal.ok());
    CHECK(literal.errorText().find("literal") != std::string::npos);
}

TEST_CASE("madpipe is memory aware where a memory-blind split is not", "[madpipe]")
{
    // A CNN-like chain: large activations early, large weights late; 4 GPUs. The uniform split run with the
    // same 2BW schedule (1F1B warm-up p - s) overflows the first GPU; MadPipe's plan fits, by simulation.
    ModelProfile m;
    m.name = "cnn-like";
    const int L = 16;
    for (int l = 0; l < L; ++l) {
        Layer layer;
        layer.name = "l" + std::to_string(l);
        layer.forward_ms = 1.0;
        layer.backward_ms = 2.0;
        layer.activation_bytes = 400e6 / (1 << (l / 2));
        layer.weight_bytes = 10e6 * (1 << (l / 3));
        m.layers.push_back(layer);
    }
    Cluster c;
    DeviceType gpu;
    gpu.name = "gpu";
    gpu.memory_bytes = 4e9;
    c.device_types.push_back(gpu);
    Node node;
    node.name = "n0";
    node.device_type = "gpu";
    node.count = 4;
    node.intra_bandwidth_bytes_per_s = 1e12;
    c.nodes.push_back(node);

    PartitionOptions o;
    o.schedule.kind = "2bw";
    o.schedule.microbatches = 16;
    o.schedule.optimizer = "sgd";
    auto blind = findPartitioner("uniform")->partition({m, c, o}, {}, {});
    REQUIRE(blind.ok());
    auto blindSim = simulate(*blind.plan, SimulationOptions {false, false});
    CHECK_FALSE(blindSim.fitsMemory());

    auto aware = findPartitioner("madpipe")->partition({m, c, o}, {}, {});
    INFO(aware.errorText());
    REQUIRE(aware.ok());
    auto sim = simulate(*aware.plan, SimulationOptions {false, false});
    CHECK(sim.fitsMemory());
    for (const auto& d : sim.devices)
        CHECK(d.peak_memory_bytes <= d.memory_capacity_bytes);
    for (int s = 0; s < aware.plan->stageCount(); ++s)
        CHECK(sim.stages[s].peak_stashed_microbatches == aware.plan->schedule.in_flight[s]);
}

TEST_CASE("madpipe options and errors", "[madpipe]")
{
    const auto toy = toyProblem(1000);
    const auto& model = toy.first;
    const auto& cluster = toy.second;
    auto expectError = [&](nlohmann::json params, const std::string& needle) {
        auto r = runMadPipe(model, cluster, std::move(params));
        INFO(r.errorText());
        CHECK_FALSE(r.ok());
        CHECK(r.errorText().find(needle) != std::string::npos);
    };
    expectError({{"t-grid", 1}}, "t-grid");
    expectError({{"m-grid", 0}}, "m-grid");
    expectError({{"iterations", 0}}, "iterations");
    expectError({{"lb-update", "printed"}}, "lb-update");
    expectError({{"v-rounding", "nearest"}}, "v-rounding");
    expectError({{"no-such-option", 1}}, "no-such-option");

    PartitionOptions o;
    o.schedule.chunks = 2;
    auto chunks = findPartitioner("madpipe")->partition({model, cluster, o}, {}, {});
    CHECK_FALSE(chunks.ok());
    CHECK(chunks.errorText().find("chunks") != std::string::npos);

    auto tiny = toyProblem(10); // not even the weights fit
    auto none = runMadPipe(tiny.first, tiny.second);
    CHECK_FALSE(none.ok());
    bool overMemory = false;
    for (const auto& d : none.diagnostics)
        overMemory = overMemory || d.code == "over-memory";
    CHECK(overMemory);

    std::stop_source stop;
    stop.request_stop();
    auto cancelled = findPartitioner("madpipe")->partition({model, cluster, {}}, {}, stop.get_token());
    CHECK_FALSE(cancelled.ok());
    CHECK(cancelled.diagnostics.at(0).code == "cancelled");

    // v-rounding=down and other grids still give a valid plan.
    auto down = runMadPipe(model, cluster, {{"v-rounding", "down"}, {"t-grid", 51}, {"v-grid", 21}});
    CHECK(down.ok());
}

TEST_CASE("madpipe plans the demo GPT and PipeDream profiles that fit and validate", "[madpipe]")
{
    auto gpt = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto dgx = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    std::vector<std::pair<std::string, ModelProfile>> models {{"gpt-demo", gpt}};
    for (const char* name : {"vgg16", "resnet50", "gnmt"})
        models.emplace_back(name, loadGraphTxt(std::string(PW_PROFILES_DIR) + "/pipedream/" + name + "/graph.txt"));
    for (const auto& [name, model] : models) {
        PartitionOptions o;
        o.schedule.microbatches = 16;
        auto r = findPartitioner("madpipe")->partition({model, dgx, o}, {}, {});
        INFO(name << ": " << r.errorText());
        REQUIRE(r.ok());
        auto schedule = generateSchedule(*r.plan);
        CHECK(validate(schedule, *r.plan).ok);
        CHECK(simulate(*r.plan, schedule, {false, false}).fitsMemory());
    }
}
