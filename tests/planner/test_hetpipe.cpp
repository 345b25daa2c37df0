// SPDX-License-Identifier: MIT
// HetPipe: the §1.3 toy and the worked WSP start times on the simulator, Table 3's allocations, the per-VW DP
// against brute force, the N_m memory limit, heterogeneity on the bundled 4x4 cluster, formats and errors.
// "digest" is shared/docs/papers/hetpipe-bapipe-madpipe.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/io/chrome_trace.h"
#include "planner/io/graph_txt.h"
#include "planner/io/json_file.h"
#include "planner/partition/hetpipe.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// The toy of digest §1.3: k balanced stages of one layer, F = 1 and B = 2 time units (seconds) per stage,
/// zero communication, free updates. VW v runs on node v, whose GPUs are `slowdown[v]` times slower.
Plan toyPlan(const std::vector<double>& slowdown, int k, int nm, int staleness, int minibatches)
{
    Plan plan;
    for (int i = 0; i < k; ++i) {
        Layer l;
        l.name = "layer" + std::to_string(i);
        l.forward_ms = 1000;
        l.backward_ms = 2000;
        plan.model.edit().layers.push_back(l);
    }
    for (std::size_t v = 0; v < slowdown.size(); ++v) {
        DeviceType t;
        t.name = "gpu" + std::to_string(v);
        t.memory_bytes = 1e15;
        t.relative_speed = 1.0 / slowdown[v];
        plan.cluster.edit().device_types.push_back(t);
        plan.cluster.edit().nodes.push_back({"n" + std::to_string(v), "", 22, "", t.name, k, 1e9, 0});
        for (int q = 0; q < k; ++q) {
            PlanStage st;
            st.first_layer = st.last_layer = q;
            st.devices = {static_cast<int>(v) * k + q};
            st.pipeline = static_cast<int>(v);
            plan.stages.push_back(st);
        }
    }
    plan.cluster.edit().inter_node_bandwidth_bytes_per_s = 1e9;
    plan.schedule.kind = "wsp";
    plan.schedule.optimizer = "sgd";
    plan.schedule.microbatches = minibatches;
    plan.schedule.concurrent_minibatches = nm;
    plan.schedule.staleness = staleness;
    return plan;
}

SimulationResult hetpipeRun(const Plan& plan)
{
    plan.validate();
    auto schedule = generateSchedule(plan);
    auto report = validate(schedule, plan);
    INFO((report.errors.empty() ? std::string() : report.errors.front()));
    REQUIRE(report.ok);
    return simulate(plan, schedule);
}

/// Start (or end) of the compute span of `kind` per microbatch on a device.
std::vector<double> times(const SimulationResult& sim, int device, ActionKind kind, bool end = false)
{
    std::map<int, double> t;
    for (const auto& s : sim.timeline.spans)
        if (s.device == device && s.lane == Lane::Compute && s.kind == kind)
            t[s.microbatch] = end ? s.t1 : s.t0;
    std::vector<double> out;
    for (auto& [k, v] : t)
        out.push_back(v);
    return out;
}

/// "F0 F1 B0 ..." of a device's first `n` compute actions in the schedule.
std::string hetpipeOrder(const Schedule& schedule, int device, std::size_t n)
{
    std::string s;
    std::size_t shown = 0;
    for (const auto& a : schedule.devices[device]) {
        if (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward)
            continue;
        if (shown++ == n)
            break;
        s += (s.empty() ? "" : " ") + std::string(a.kind == ActionKind::Forward ? "F" : "B")
            + std::to_string(a.microbatch + 1);
    }
    return s;
}

ModelProfile hetpipeGpt()
{
    return loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
}

Cluster hetCluster()
{
    return loadCluster(std::string(PW_DEMO_DIR) + "/hetpipe-cluster.json");
}

PartitionResult planHetPipe(const ModelProfile& model, const Cluster& cluster, nlohmann::json params,
    int minibatches = 8, const std::string& optimizer = "adam")
{
    PartitionOptions o;
    o.schedule.microbatches = minibatches;
    o.schedule.optimizer = optimizer;
    o.params = std::move(params);
    return findPartitioner("hetpipe")->partition({model, cluster, o}, {}, {});
}

} // namespace

TEST_CASE("the toy pipeline runs FIFO as in digest §1.3", "[hetpipe]")
{
    // digest §1.3: k = 4, F = 1, B = 2, N_m = 4, zero communication.
    auto plan = toyPlan({1.0}, 4, 4, 0, 40);
    auto schedule = generateSchedule(plan);
    // digest §1.3 "Operation order" (1-based minibatches).
    CHECK(hetpipeOrder(schedule, 0, 10) == "F1 F2 F3 F4 B1 F5 B2 F6 B3 F7");
    CHECK(hetpipeOrder(schedule, 1, 9) == "F1 F2 F3 F4 B1 B2 F5 B3 F6");
    CHECK(hetpipeOrder(schedule, 2, 9) == "F1 F2 F3 F4 B1 B2 B3 F5 B4");
    CHECK(hetpipeOrder(schedule, 3, 6) == "F1 B1 F2 B2 F3 B3");
    auto sim = hetpipeRun(plan);
    // The chart of digest §1.3: GPU1 runs B1 at 10-12, F5 at 12, B2 at 13, F6 at 15.
    auto f0 = times(sim, 0, ActionKind::Forward);
    auto b0 = times(sim, 0, ActionKind::Backward);
    CHECK(f0[4] == Approx(12));
    CHECK(b0[0] == Approx(10));
    CHECK(b0[1] == Approx(13));
    CHECK(f0[5] == Approx(15));
    // Steady state: one minibatch per 3 units (F + B of a stage).
    auto done = times(sim, 0, ActionKind::Backward, true);
    for (int k = 8; k < 36; ++k)
        CHECK(done[k + 1] - done[k] == Approx(3));
    // Peak activations held per GPU: [4, 4, 4, 1].
    std::vector<int> peaks;
    for (int d = 0; d < 4; ++d)
        peaks.push_back(sim.devices[d].peak_stashed_microbatches);
    CHECK(peaks == std::vector<int> {4, 4, 4, 1});

    // N_m = 1: naive model parallelism, 12 units per minibatch; N_m = 2: 6 units.
    for (auto [nm, per] : std::vector<std::pair<int, double>> {{1, 12.0}, {2, 6.0}}) {
        auto s = hetpipeRun(toyPlan({1.0}, 4, nm, 0, 12));
        auto end = times(s, 0, ActionKind::Backward, true);
        INFO("N_m = " << nm);
        // Minibatches complete in groups of N_m: nm minibatches per nm x per units.
        for (int k = 4; k + nm < 12; ++k)
            CHECK(end[k + nm] - end[k] == Approx(nm * per));
        if (nm == 1)
            CHECK(end[0] == Approx(12));
    }
}

TEST_CASE("WSP start times of two virtual workers match the worked example", "[hetpipe]")
{
    // digest §1.3 "WSP across two VWs": VW2 is 1.5x slower, D = 0, N_m = 4.
    const auto plan = toyPlan({1.0, 1.5}, 4, 4, 0, 20);
    const auto schedule = generateSchedule(plan);
    REQUIRE(validate(schedule, plan).ok);
    auto sim = simulate(plan, schedule);
    auto f = times(sim, 0, ActionKind::Forward); // VW1's first GPU; f[p-1] is minibatch p
    CHECK(f[4] == Approx(12));
    CHECK(f[5] == Approx(15));
    CHECK(f[6] == Approx(18));
    CHECK(f[7] == Approx(31.5));
    CHECK(f[8] == Approx(32.5));
    CHECK(f[9] == Approx(33.5));
    CHECK(f[10] == Approx(34.5));
    CHECK(f[11] == Approx(49.5));
    // VW1 finishes wave 0 at 21 and pushes; VW2's wave-0 push arrives at 31.5.
    std::map<int, double> push;
    for (const auto& s : sim.timeline.spans)
        if (s.kind == ActionKind::WavePush && (s.device == 0 || s.device == 4)
            && schedule.devices[s.device][s.action].wave == 0)
            push[s.device] = s.t1;
    CHECK(push[0] == Approx(21));
    CHECK(push[4] == Approx(31.5));

    // D = 1 moves VW1's first stall to minibatch 16; D = 2 has none within 16 minibatches. A stall is a start
    // later than without any gate (D large).
    auto free = times(hetpipeRun(toyPlan({1.0, 1.5}, 4, 4, 100, 20)), 0, ActionKind::Forward);
    auto firstStall = [&](int D) {
        auto g = times(hetpipeRun(toyPlan({1.0, 1.5}, 4, 4, D, 20)), 0, ActionKind::Forward);
        for (std::size_t k = 0; k < g.size(); ++k)
            if (g[k] > free[k] + 1e-9)
                return static_cast<int>(k) + 1;
        return 0;
    };
    CHECK(firstStall(0) == 8);
    CHECK(firstStall(1) == 16);
    const int d2 = firstStall(2);
    CHECK((d2 == 0 || d2 > 16));
}

TEST_CASE("the simulator replays wsp's order as FIFO with real link costs", "[hetpipe]")
{
    // digest §1.2.4 rule 3: on a middle stage, whenever a device starts F or B, the other one next in order
    // did not have its input earlier (backward first on ties). Inputs arrive by the senders' spans.
    auto fifo = [](const Plan& plan, int M) {
        auto sim = hetpipeRun(plan);
        std::map<std::tuple<int, int, int>, double> arrival; // (gradient, producer stage, minibatch)
        std::map<int, std::vector<const Span*>> compute;
        for (const auto& s : sim.timeline.spans) {
            if (s.kind == ActionKind::SendActivation || s.kind == ActionKind::SendGradient)
                arrival[{s.kind == ActionKind::SendGradient, s.stage, s.microbatch}] = s.t1;
            if (s.lane == Lane::Compute && (s.kind == ActionKind::Forward || s.kind == ActionKind::Backward))
                compute[s.stage].push_back(&s);
        }
        int contested = 0;
        for (int st = 0; st < plan.stageCount(); ++st) {
            if (plan.firstInPipeline(st) || plan.lastInPipeline(st))
                continue;
            auto& list = compute[st];
            REQUIRE(list.size() == 2u * M);
            std::sort(list.begin(), list.end(), [](const Span* a, const Span* b) { return a->t0 < b->t0; });
            int nextF = 0, nextB = 0;
            for (const Span* x : list) {
                const bool isB = x->kind == ActionKind::Backward;
                const double rF = nextF < M ? arrival.at({false, st - 1, nextF}) : 1e300;
                const double rB = nextB < nextF ? arrival.at({true, st + 1, nextB}) : 1e300;
                const double mine = isB ? rB : rF, other = isB ? rF : rB;
                if (other <= x->t0) {
                    ++contested;
                    INFO("stage " << st << " " << (isB ? "B" : "F") << x->microbatch << " at " << x->t0);
                    CHECK((isB ? mine <= other : mine < other));
                }
                (isB ? nextB : nextF) += 1;
            }
        }
        return contested;
    };
    // The toy with transfers (0.3 units, latency 0.05), a 1.5x slower second VW and a slower second stage
    // (F = 2, B = 4: inputs queue there); no pulls (D large).
    auto toy = toyPlan({1.0, 1.5}, 4, 4, 100, 24);
    for (auto& l : toy.model.edit().layers)
        l.activation_bytes = 3e8;
    toy.model.edit().layers[1].forward_ms = 2000;
    toy.model.edit().layers[1].backward_ms = 4000;
    for (auto& n : toy.cluster.edit().nodes)
        n.intra_latency_s = 0.05;
    CHECK(fifo(toy, 24) > 10);

    // Both VWs cross from node n0 (stages 0-1) to n1 (stages 2-3) at once: their sends share n0's and n1's uplinks,
    // and wsp's order follows the same booking (issue 10, item 10).
    for (double bytes : {3e8, 6e8, 1e9, 1.5e9}) {
        INFO("activations of " << bytes << " bytes");
        auto shared = toyPlan({1.0, 1.5}, 4, 4, 100, 24);
        for (auto& l : shared.model.edit().layers)
            l.activation_bytes = bytes;
        const std::vector<std::vector<int>> devices = {{0}, {1}, {4}, {5}, {2}, {3}, {6}, {7}};
        for (int s = 0; s < 8; ++s)
            shared.stages[s].devices = devices[s];
        shared.model.edit().layers[2].forward_ms = 2000;
        shared.model.edit().layers[2].backward_ms = 4000;
        CHECK(fifo(shared, 24) > 10);
    }
}

TEST_CASE("NP, ED and HD group the 4x4 cluster as Table 3", "[hetpipe]")
{
    // digest §1.2.1 Table 3: NP VVVV RRRR GGGG QQQQ; ED VRGQ x 4; HD VVQQ VVQQ RRGG RRGG.
    auto model = hetpipeGpt();
    auto c = hetCluster();
    auto np = hetpipe::allocateVirtualWorkers(model, c, 16, "np", 0, {});
    CHECK(np == std::vector<std::vector<int>> {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
    auto ed = hetpipe::allocateVirtualWorkers(model, c, 16, "ed", 0, {});
    CHECK(ed == std::vector<std::vector<int>> {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
    auto hd = hetpipe::allocateVirtualWorkers(model, c, 16, "hd", 0, {});
    CHECK(hd == std::vector<std::vector<int>> {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}});
    // By type name: TITAN V x2 + Quadro P4000 x2, then TITAN RTX x2 + GeForce RTX 2060 x2.
    for (int v : {0, 1}) {
        CHECK(c.typeOf(hd[v][0]).name == "TITAN V");
        CHECK(c.typeOf(hd[v][3]).name == "Quadro P4000");
    }
    for (int v : {2, 3}) {
        CHECK(c.typeOf(hd[v][0]).name == "TITAN RTX");
        CHECK(c.typeOf(hd[v][3]).name == "GeForce RTX 2060");
    }
    for (const auto& g : ed) {
        CHECK(c.typeOf(g[0]).name == "TITAN V");
        CHECK(c.typeOf(g[1]).name == "TITAN RTX");
        CHECK(c.typeOf(g[2]).name == "GeForce RTX 2060");
        CHECK(c.typeOf(g[3]).name == "Quadro P4000");
    }
    // The custom policy takes blocks of the given order.
    auto custom = hetpipe::allocateVirtualWorkers(model, c, 16, "custom", 2, {15, 0, 3, 7, 1, 2});
    CHECK(custom == std::vector<std::vector<int>> {{0, 3, 15}, {1, 2, 7}});
}

TEST_CASE("the per-VW DP equals brute force on small instances", "[hetpipe]")
{
    // digest §1.2.2: min over GPU orders and cuts of max_q E_q subject to Mem_q(N_m) <= Cap.
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.1, 1.0);
    int feasibleSeen = 0, infeasibleSeen = 0;
    for (int trial = 0; trial < 60; ++trial) {
        Plan base;
        const int L = 3 + trial % 5;
        for (int i = 0; i < L; ++i) {
            Layer l;
            l.name = "l" + std::to_string(i);
            l.forward_ms = 10 * u(rng);
            l.backward_ms = 20 * u(rng);
            l.activation_bytes = 1e6 * u(rng);
            l.weight_bytes = 1e6 * u(rng);
            base.model.edit().layers.push_back(l);
        }
        const double cap = 4e6 + 2e7 * u(rng);
        base.cluster.edit().device_types = {{"fast", cap, 0, 1e11, 2.0}, {"slow", cap * 0.6, 0, 5e10, 0.7}};
        base.cluster.edit().nodes.push_back({"a", "", 22, "", "fast", 2, 1e9, 1e-4});
        base.cluster.edit().nodes.push_back({"b", "", 22, "", "slow", 2, 1e9, 1e-4});
        base.cluster.edit().inter_node_bandwidth_bytes_per_s = 2e8;
        base.cluster.edit().inter_node_latency_s = 1e-3;
        base.schedule.optimizer = "momentum";
        std::vector<int> devices;
        for (int d = 0; d < 4; ++d)
            if ((trial >> d) % 2 == 1 || d == trial % 4)
                devices.push_back(d);
        const int k = std::min(static_cast<int>(devices.size()), L);
        devices.resize(k);
        const int nm = 1 + trial % 4;
        auto dp = hetpipe::partitionVirtualWorker(base, devices, nm, 1'000'000);

        hetpipe::StageCosts costs(base, devices);
        double brute = std::numeric_limits<double>::infinity();
        std::vector<int> perm = devices;
        std::sort(perm.begin(), perm.end());
        do {
            // Every composition of L into k non-empty parts: choose k-1 cut points among L-1.
            std::vector<int> cuts(k - 1);
            std::iota(cuts.begin(), cuts.end(), 0);
            for (;;) {
                double worst = 0;
                bool fits = true;
                for (int q = 0; q < k; ++q) {
                    const int first = q == 0 ? 0 : cuts[q - 1] + 1;
                    const int last = q + 1 < k ? cuts[q] : L - 1;
                    fits = fits && costs.stageMemoryBytes(k, q, first, last, nm) <= costs.capacity(perm[q]);
                    worst = std::max(worst, costs.stageSeconds(perm, q, first, last));
                }
                if (fits)
                    brute = std::min(brute, worst);
                int i = k - 2;
                while (i >= 0 && cuts[i] == L - 2 - (k - 2 - i))
                    --i;
                if (i < 0)
                    break;
                ++cuts[i];
                for (int j = i + 1; j < k - 1; ++j)
                    cuts[j] = cuts[j - 1] + 1;
            }
        } while (std::next_permutation(perm.begin(), perm.end()));
        INFO("trial " << trial << " L=" << L << " k=" << k << " N_m=" << nm);
        CHECK(dp.feasible == std::isfinite(brute));
        if (dp.feasible) {
            ++feasibleSeen;
            CHECK(dp.objective_s == Approx(brute).epsilon(1e-12));
            // The returned cut achieves the objective.
            double worst = 0;
            for (int q = 0; q < k; ++q) {
                const int first = q == 0 ? 0 : dp.boundaries[q - 1] + 1;
                const int last = q + 1 < k ? dp.boundaries[q] : L - 1;
                worst = std::max(worst, costs.stageSeconds(dp.order, q, first, last));
            }
            CHECK(worst == Approx(dp.objective_s).epsilon(1e-12));
        } else {
            ++infeasibleSeen;
        }
    }
    CHECK(feasibleSeen > 10);
    CHECK(infeasibleSeen > 0);

    // E_q by hand (digest §1.2.2): two layers on two GPUs of different nodes. Stage 0 = layer 0 on the fast
    // GPU receives the gradient over the inter-node link, stage 1 the activation.
    Plan base;
    base.model.edit().layers = {Layer {}, Layer {}};
    base.model.edit().layers[0].name = "a";
    base.model.edit().layers[0].forward_ms = 4;
    base.model.edit().layers[0].backward_ms = 6;
    base.model.edit().layers[0].activation_bytes = 2e6;
    base.model.edit().layers[1].name = "b";
    base.model.edit().layers[1].forward_ms = 4;
    base.model.edit().layers[1].backward_ms = 6;
    base.cluster.edit().device_types = {{"fast", 1e9, 0, 0, 2.0}, {"slow", 1e9, 0, 0, 0.5}};
    base.cluster.edit().nodes = {{"a", "", 22, "", "fast", 1, 0, 0}, {"b", "", 22, "", "slow", 1, 0, 0}};
    base.cluster.edit().inter_node_bandwidth_bytes_per_s = 1e9;
    base.cluster.edit().inter_node_latency_s = 1e-3;
    hetpipe::StageCosts costs(base, {0, 1});
    CHECK(costs.stageSeconds({0, 1}, 0, 0, 0) == Approx(0.005 + 0.001 + 0.002)); // 10 ms / 2 + 1 ms + 2 MB / 1 GB/s
    CHECK(costs.stageSeconds({0, 1}, 1, 1, 1) == Approx(0.020 + 0.001 + 0.002)); // 10 ms / 0.5 + the same
}

TEST_CASE("HetPipe gives faster GPUs more work and beats uniform on the 4x4 cluster", "[hetpipe]")
{
    auto model = hetpipeGpt();
    auto c = hetCluster();
    auto het = planHetPipe(model, c, nlohmann::json::object());
    INFO(het.errorText());
    REQUIRE(het.ok());
    const Plan& plan = *het.plan;
    CHECK(plan.pipelineCount() == 4);
    CHECK(plan.schedule.kind == "wsp");
    auto sim = hetpipeRun(plan);
    CHECK(sim.fitsMemory());
    // Every ED virtual worker holds one GPU of each type; the TITAN V gets more layers than the Quadro P4000.
    for (int first = 0; first < plan.stageCount(); first = plan.pipelineEnd(first)) {
        std::map<std::string, int> layers;
        for (int s = first; s < plan.pipelineEnd(first); ++s)
            layers[plan.cluster->typeOf(plan.stages[s].devices[0]).name] += plan.stages[s].layerCount();
        REQUIRE(layers.size() == 4);
        CHECK(layers["TITAN V"] > layers["Quadro P4000"]);
        CHECK(layers["TITAN V"] >= layers["TITAN RTX"]);
    }
    PartitionOptions o;
    o.schedule.microbatches = 8;
    auto uni = findPartitioner("uniform")->partition({model, c, o}, {}, {});
    REQUIRE(uni.ok());
    auto uniSim = hetpipeRun(*uni.plan);
    INFO("hetpipe " << sim.throughput_samples_per_s << " uniform " << uniSim.throughput_samples_per_s);
    CHECK(sim.throughput_samples_per_s > uniSim.throughput_samples_per_s);
    // HD and NP plan and simulate as well. digest §1.4 (Fig. 5, the robust check): ED > HD > NP, NP being
    // held to its slowest (Quadro) virtual worker by WSP.
    std::map<std::string, double> throughput {{"ed", sim.throughput_samples_per_s}};
    for (const char* policy : {"hd", "np"}) {
        auto r = planHetPipe(model, c, {{"policy", policy}});
        INFO(policy << ": " << r.errorText());
        REQUIRE(r.ok());
        auto s = hetpipeRun(*r.plan);
        CHECK(s.fitsMemory());
        throughput[policy] = s.throughput_samples_per_s;
    }
    CHECK(throughput["ed"] > throughput["hd"]);
    CHECK(throughput["hd"] > throughput["np"]);
}

TEST_CASE("the N_m memory limit holds in simulation", "[hetpipe]")
{
    // digest §1.2.2 memory model and §1.2.3: N_m up to the largest value every VW fits (Max_m), the best by
    // simulated throughput. A transformer layer of the demo GPT stashes 478 MB per minibatch, so the 6-24 GB
    // GPUs of the 4x4 cluster bound N_m.
    auto model = hetpipeGpt();
    auto c = hetCluster();
    auto r = planHetPipe(model, c, {{"policy", "ed"}, {"max-in-flight", 32}}, 32);
    INFO(r.errorText());
    REQUIRE(r.ok());
    CHECK(hetpipeRun(*r.plan).fitsMemory());
    int maxM = 0, firstRejected = 0;
    for (const auto& cand : r.candidates) {
        const int n = cand.config.value("concurrent_minibatches", 0);
        if (cand.feasible)
            maxM = std::max(maxM, n);
        else
            firstRejected = n;
    }
    // Memory, not the cap, ends the search: Max_m + 1 was tried and does not fit.
    REQUIRE(maxM > 1);
    CHECK(firstRejected == maxM + 1);
    CHECK(r.plan->schedule.concurrent_minibatches <= maxM);
    // At Max_m itself every device stays within its memory in simulation, and the limit is tight somewhere.
    auto atMax = planHetPipe(model, c, {{"policy", "ed"}, {"in-flight", maxM}}, 32);
    REQUIRE(atMax.ok());
    auto sim = hetpipeRun(*atMax.plan);
    double fullest = 0;
    for (std::size_t d = 0; d < sim.devices.size(); ++d) {
        INFO("device " << d);
        CHECK(sim.devices[d].peak_memory_bytes <= sim.devices[d].memory_capacity_bytes);
        fullest = std::max(fullest, sim.devices[d].peak_memory_bytes / sim.devices[d].memory_capacity_bytes);
    }
    CHECK(fullest > 0.8);
    // Asking for Max_m + 1 is an error that says why.
    auto bad = planHetPipe(model, c, {{"policy", "ed"}, {"in-flight", maxM + 1}}, 32);
    CHECK_FALSE(bad.ok());
    CHECK(bad.errorText().find("does not fit memory") != std::string::npos);
}

TEST_CASE("bad HetPipe options and plans give clear errors", "[hetpipe]")
{
    auto model = hetpipeGpt();
    auto c = hetCluster();
    auto error = [&](nlohmann::json params) {
        auto r = planHetPipe(model, c, std::move(params));
        CHECK_FALSE(r.ok());
        return r.errorText();
    };
    CHECK(error({{"staleness", -1}}).find("'staleness'") != std::string::npos);
    CHECK(error({{"in-flight", -2}}).find("'in-flight'") != std::string::npos);
    CHECK(error({{"in-flight", 0}}).find("'in-flight'") != std::string::npos);
    CHECK(error({{"virtual-workers", 0}}).find("'virtual-workers'") != std::string::npos);
    CHECK(error({{"policy", "hd"}, {"virtual-workers", 3}}).find("does not divide the 16 GPUs") != std::string::npos);
    CHECK(error({{"policy", "ed"}, {"virtual-workers", 3}}).find("must divide every node") != std::string::npos);
    CHECK(error({{"policy", "np"}, {"virtual-workers", 2}}).find("one virtual worker per node") != std::string::npos);
    CHECK(error({{"policy", "custom"}}).find("vw-devices") != std::string::npos);
    CHECK(error({{"policy", "custom"}, {"vw-devices", {1, 1}}}).find("twice") != std::string::npos);
    Cluster empty;
    auto none = findPartitioner("hetpipe")->partition({model, empty, PartitionOptions {}}, {}, {});
    CHECK_FALSE(none.ok());
    CHECK(none.errorText().find("no devices") != std::string::npos);
    CHECK_THROWS_WITH(hetpipe::allocateVirtualWorkers(model, c, 0, "ed", 0, {}), Catch::Contains("at least one GPU"));

    // Plans: pipelines numbered in order, each covering every layer; other schedules refuse several pipelines.
    auto plan = toyPlan({1.0, 1.5}, 4, 4, 0, 8);
    auto skip = plan;
    skip.stages[4].pipeline = 2;
    CHECK_THROWS_WITH(skip.validate(), Catch::Contains("pipelines must be numbered"));
    auto partial = plan;
    partial.stages.erase(partial.stages.begin() + 3);
    CHECK_THROWS_WITH(partial.validate(), Catch::Contains("every pipeline must place every layer"));
    auto negative = plan;
    negative.schedule.staleness = -1;
    CHECK_THROWS_WITH(negative.validate(), Catch::Contains("staleness"));
    auto other = plan;
    other.schedule.kind = "1f1b";
    CHECK_THROWS_WITH(generateSchedule(other), Catch::Contains("use kind wsp"));
}

TEST_CASE("HetPipe plans and wsp schedules round-trip and are checked", "[hetpipe]")
{
    auto plan = toyPlan({1.0, 1.5}, 4, 4, 1, 12);
    auto j = toJson(plan);
    CHECK(j["stages"][4]["pipeline"] == 1);
    CHECK(j["schedule"]["staleness"] == 1);
    auto back = planFromJson(j);
    CHECK(back.pipelineCount() == 2);
    CHECK(back.stages[5].pipeline == 1);
    CHECK(back.schedule.concurrent_minibatches == 4);
    CHECK(toJson(back) == j);
    CHECK(back.configString() == "1-1-1-1|1-1-1-1");
    // A single-pipeline plan writes none of the new fields.
    auto single = toyPlan({1.0}, 4, 0, 0, 4);
    auto js = toJson(single);
    CHECK_FALSE(js["stages"][0].contains("pipeline"));
    CHECK_FALSE(js["schedule"].contains("staleness"));
    CHECK_FALSE(js["schedule"].contains("concurrent_minibatches"));
    // N_m = 0 means the deepest pipeline's stage count: here 4.
    auto four = toyPlan({1.0}, 4, 4, 0, 4);
    CHECK(toJson(generateSchedule(single)) == toJson(generateSchedule(four)));
    CHECK(validate(generateSchedule(single), single).ok);

    auto schedule = generateSchedule(plan);
    auto sj = toJson(schedule);
    auto again = scheduleFromJson(sj);
    CHECK(toJson(again) == sj);
    CHECK(validate(again, plan).ok);
    CHECK(actionsCsv(schedule).find("WAVE_PUSH_W0") != std::string::npos);
    CHECK(actionsCsv(schedule).find("WAVE_PULL_W0") != std::string::npos);
    // Chrome trace of the simulated run: the wave pushes and pulls appear as slices; graph.txt refuses.
    auto trace = chromeTrace(simulate(plan, schedule).timeline).dump();
    CHECK(trace.find("WAVE_PUSH") != std::string::npos);
    CHECK(trace.find("WAVE_PULL") != std::string::npos);
    std::ostringstream graph;
    CHECK_THROWS_WITH(writeGraphTxt(graph, plan.model, &plan), Catch::Contains("pipelines"));

    // Dropping a pull breaks the staleness bound; a pull of a wave nobody pushes is reported.
    auto dropped = schedule;
    auto& list = dropped.devices[0];
    list.erase(std::find_if(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::WavePull; }));
    auto report = validate(dropped, plan);
    CHECK_FALSE(report.ok);
    CHECK(report.errors.front().find("before pulling wave") != std::string::npos);
    auto orphan = schedule;
    for (auto& a : orphan.devices[1])
        if (a.kind == ActionKind::WavePull)
            a.wave = 2; // 12 minibatches in waves of 4: wave 2 exists, but pulling it early deadlocks
    auto deadlock = validate(orphan, plan);
    CHECK_FALSE(deadlock.ok);
    CHECK(deadlock.errors.back().find("deadlock") != std::string::npos);
    CHECK_THROWS_AS(simulate(plan, orphan), InputError);
}

TEST_CASE("ED-local parameter servers keep pushes and pulls inside nodes", "[hetpipe]")
{
    // digest §1.2.6: ED-local exists only for ED, where stage q of every VW sits on the same node, so its
    // parameters are served by that node's PS; Table 4's HetPipe runs use it [H:270, 301].
    const auto c = hetCluster();
    auto local = planHetPipe(hetpipeGpt(), c, {{"policy", "ed"}, {"in-flight", 4}}, 16);
    INFO(local.errorText());
    REQUIRE(local.ok());
    const auto& plan = *local.plan;
    CHECK(plan.schedule.local_parameter_servers); // auto chose it
    CHECK(local.candidates.front().config["parameter_servers"] == "local");
    auto robin
        = planHetPipe(hetpipeGpt(), c, {{"policy", "ed"}, {"in-flight", 4}, {"parameter-servers", "round-robin"}}, 16);
    REQUIRE(robin.ok());
    CHECK_FALSE(robin.plan->schedule.local_parameter_servers);
    // A push of B bytes takes latency + B / PCIe instead of latency + max(B / PCIe, 3/4 B / InfiniBand).
    const double bytes = 1e9;
    const int d = plan.stages[0].devices[0];
    const auto& node = c.nodes[c.device(d).node];
    CHECK(parameterServerSeconds(c, d, bytes, true)
        == Approx(node.intra_latency_s + bytes / node.intra_bandwidth_bytes_per_s));
    CHECK(parameterServerSeconds(c, d, bytes, false)
        == Approx(c.inter_node_latency_s
            + std::max(bytes / node.intra_bandwidth_bytes_per_s, 0.75 * bytes / c.inter_node_bandwidth_bytes_per_s)));
    // The simulated pushes take exactly that, and the local run is no slower.
    const auto schedule = generateSchedule(plan);
    const auto sim = simulate(plan, schedule);
    int pushes = 0;
    for (const auto& s : sim.timeline.spans)
        if (s.kind == ActionKind::WavePush) {
            const auto& a = schedule.devices[s.device][s.action];
            CHECK(s.t1 - s.t0 == Approx(parameterServerSeconds(c, s.device, a.bytes, true)));
            if (++pushes >= 4)
                break;
        }
    CHECK(pushes > 0);
    CHECK(sim.throughput_samples_per_s >= simulate(*robin.plan).throughput_samples_per_s * (1 - 1e-9));
    // The flag round-trips, and a plan whose VWs differ cannot claim it.
    CHECK(planFromJson(toJson(plan)).schedule.local_parameter_servers);
    // SGD (8 bytes per bf16 parameter): with Adam's 16 the RTX 2060 VW of NP does not fit memory at all.
    auto np
        = planHetPipe(hetpipeGpt(), c, {{"policy", "np"}, {"in-flight", 2}, {"parameter-servers", "local"}}, 16, "sgd");
    CHECK_FALSE(np.ok());
    bool named = false;
    for (const auto& cand : np.candidates)
        named = named || cand.reason.find("local parameter servers") != std::string::npos;
    CHECK(named);
    auto broken = plan;
    broken.stages[plan.pipelineEnd(0)].devices = {plan.stages[plan.pipelineEnd(0) + 1].devices[0]};
    broken.stages[plan.pipelineEnd(0) + 1].devices = {plan.stages[plan.pipelineEnd(0)].devices[0]};
    CHECK_THROWS_WITH(broken.validate(), Catch::Contains("local_parameter_servers"));
}
