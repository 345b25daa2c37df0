// SPDX-License-Identifier: MIT
// PipeDream's DP: the digest's test vectors (§2.8), exhaustive search on random small instances, and the
// pruned search against the textbook recurrence on larger ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "planner/costs.h"
#include "planner/partition/pipedream_dp.h"

using namespace pw::planner;

namespace {

constexpr double kPipedreamDpInf = std::numeric_limits<double>::infinity();

std::string pipedreamDpConfig(const PipeDreamSolution& s)
{
    std::string out;
    for (const auto& st : s.stages)
        out += (out.empty() ? "" : "-") + std::to_string(st.devices.size());
    return out;
}

PipeDreamProblem chain(
    std::vector<double> t, std::vector<double> w, std::vector<double> a, std::vector<HierarchyLevel> levels)
{
    PipeDreamProblem p;
    p.compute_s = std::move(t);
    p.weight_bytes = std::move(w);
    p.cut_bytes = std::move(a);
    p.levels = std::move(levels);
    p.activation_bytes.assign(p.compute_s.size(), 0.0);
    p.optimizer_bytes.assign(p.compute_s.size(), 0.0);
    return p;
}

PipeDreamSolution solve(const PipeDreamProblem& p, bool prune = true)
{
    PipeDreamSolveOptions o;
    o.prune = prune;
    return solvePipeDream(p, o);
}

/// Exhaustive search, written independently of the DP: enumerate the first stage (its end and replica
/// count) and recurse on the rest with the workers left; every worker must be used.
double exhaustive(const PipeDreamProblem& p, int level, int i, int j, int workers, int remaining,
    const std::function<double(int, int)>& inner)
{
    const auto& lv = p.levels[level - 1];
    double best = kPipedreamDpInf;
    for (int end = i; end <= j; ++end) {
        for (int r = 1; r <= remaining; ++r) {
            if (p.straight && r != 1)
                continue;
            if ((end == j) != (r == remaining))
                continue;
            double w = 0, act = 0, opt = 0;
            for (int l = i; l <= end; ++l) {
                w += p.weight_bytes[l];
                act += p.activation_bytes[l];
                opt += p.optimizer_bytes[l];
            }
            if (level == 1 && p.memory_capacity_bytes > 0) {
                const int factor = scheduleTraits(p.schedule_kind).in_flight_factor;
                StageMemoryInput in {w, act, i > 0 ? p.cut_bytes[i - 1] : 0.0, opt, factor * ((remaining + r - 1) / r),
                    (p.microbatches + r - 1) / r, p.recompute};
                if (stageMemoryBytes(p.schedule_kind, in) > p.memory_capacity_bytes)
                    continue;
            }
            double sync = r > 1 && w > 0 ? 2.0 * (r - 1) * w / lv.bandwidth_bytes_per_s : 0.0;
            if (p.per_worker_allreduce)
                sync /= r;
            double v = std::max(inner(i, end), sync) / r;
            if (end < j) {
                double a = p.cut_bytes[end];
                v = std::max(v, a > 0 ? 2.0 * a / lv.bandwidth_bytes_per_s : 0.0);
                v = std::max(v, exhaustive(p, level, end + 1, j, workers, remaining - r, inner));
            }
            best = std::min(best, v);
        }
    }
    (void)workers;
    return best;
}

double exhaustive(const PipeDreamProblem& p)
{
    const int n = static_cast<int>(p.compute_s.size());
    std::function<double(int, int)> level0 = [&](int a, int b) {
        double s = 0;
        for (int l = a; l <= b; ++l)
            s += p.compute_s[l];
        return s;
    };
    if (p.levels.size() == 1)
        return exhaustive(p, 1, 0, n - 1, p.levels[0].count, p.levels[0].count, level0);
    std::function<double(int, int)> level1
        = [&](int a, int b) { return exhaustive(p, 1, a, b, p.levels[0].count, p.levels[0].count, level0); };
    return exhaustive(p, 2, 0, n - 1, p.levels[1].count, p.levels[1].count, level1);
}

} // namespace

TEST_CASE("digest 2.8: two layers of Figure 2.7 give 2-1", "[pipedream_dp]")
{
    auto p = chain({6, 3}, {0, 100}, {0, 0}, {{3, 10}});
    auto s = solve(p);
    REQUIRE(s.feasible);
    CHECK(s.objective_s == Approx(3.0));
    CHECK(pipedreamDpConfig(s) == "2-1");
    CHECK(s.stages[0].last_layer == 0);
}

TEST_CASE("digest 2.8: VGG-like toy replicates conv layers, not FC", "[pipedream_dp]")
{
    auto make = [](int workers) {
        return chain({3, 3, 3, 3, 3, 1}, {1, 1, 1, 1, 1, 400}, {50, 50, 50, 50, 50, 1}, {{workers, 100}});
    };
    auto s2 = solve(make(2));
    CHECK(s2.objective_s == Approx(8.0));
    CHECK(pipedreamDpConfig(s2) == "2");
    auto s4 = solve(make(4));
    CHECK(s4.objective_s == Approx(4.0));
    CHECK(pipedreamDpConfig(s4) == "3-1");
    CHECK(s4.stages[0].last_layer == 3);
    auto s16 = solve(make(16));
    CHECK(s16.objective_s == Approx(1.0));
    CHECK(pipedreamDpConfig(s16) == "15-1");
    CHECK(s16.stages[0].last_layer == 4);
}

TEST_CASE("digest 2.8: two-level toy is bound by the slow level", "[pipedream_dp]")
{
    auto p = chain({3, 3, 3, 3, 3, 1}, {1, 1, 1, 1, 1, 400}, {50, 50, 50, 50, 50, 1}, {{4, 100}, {4, 10}});
    auto s = solve(p);
    CHECK(s.objective_s == Approx(10.0));
    // The digest's split (layer 0 on 3 servers, layers 1-5 on one server as 3-1) is one of several ties at
    // 10.0, all bound by 2 a / B_2 across servers; whichever is returned uses whole servers per top stage.
    int devices = 0;
    for (const auto& st : s.stages)
        devices += static_cast<int>(st.devices.size());
    CHECK(devices == 16);
    auto flat = solve(chain({3, 3, 3, 3, 3, 1}, {1, 1, 1, 1, 1, 400}, {50, 50, 50, 50, 50, 1}, {{16, 10}}));
    CHECK(flat.objective_s == Approx(10.0));
    CHECK(pipedreamDpConfig(flat) == "15-1");
}

TEST_CASE("the DP equals exhaustive search on 1,200 random small instances", "[pipedream_dp]")
{
    std::mt19937 rng(20261122);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    int checked = 0, infeasible = 0;
    for (int trial = 0; trial < 1200; ++trial) {
        const bool twoLevels = trial % 2 == 1;
        const int n = 1 + static_cast<int>(rng() % (twoLevels ? 5 : 7));
        PipeDreamProblem p;
        for (int l = 0; l < n; ++l) {
            p.compute_s.push_back(u(rng) < 0.1 ? 0.0 : 0.1 + 10 * u(rng));
            p.weight_bytes.push_back(u(rng) < 0.3 ? 0.0 : 1000 * u(rng));
            p.cut_bytes.push_back(u(rng) < 0.2 ? 0.0 : 500 * u(rng));
            p.activation_bytes.push_back(100 * u(rng));
            p.optimizer_bytes.push_back(2 * p.weight_bytes.back());
        }
        if (twoLevels)
            p.levels = {{1 + static_cast<int>(rng() % 3), 200 + 2000 * u(rng)},
                {1 + static_cast<int>(rng() % 3), 20 + 200 * u(rng)}};
        else
            p.levels = {{1 + static_cast<int>(rng() % 6), 50 + 1000 * u(rng)}};
        p.straight = trial % 5 == 0;
        p.per_worker_allreduce = trial % 7 == 0;
        if (trial % 3 == 0) {
            p.memory_capacity_bytes = 2000 + 6000 * u(rng);
            const char* kinds[] = {"pipedream", "1f1b", "1f1b-so", "gpipe"};
            p.schedule_kind = kinds[(trial / 3) % 4];
            p.microbatches = 4;
        }
        double expect = exhaustive(p);
        auto got = solve(p);
        auto textbook = solve(p, false);
        INFO("trial " << trial << " n=" << n << " levels=" << p.levels.size());
        if (std::isinf(expect)) {
            CHECK_FALSE(got.feasible);
            CHECK_FALSE(textbook.feasible);
            ++infeasible;
            continue;
        }
        REQUIRE(got.feasible);
        CHECK(got.objective_s == Approx(expect).epsilon(1e-12));
        CHECK(textbook.objective_s == Approx(expect).epsilon(1e-12));
        // The reconstructed plan uses every worker and covers every layer once.
        int devices = 0, next = 0;
        for (const auto& st : got.stages) {
            CHECK(st.first_layer == next);
            next = st.last_layer + 1;
            devices += static_cast<int>(st.devices.size());
        }
        CHECK(next == n);
        int total = 1;
        for (const auto& l : p.levels)
            total *= l.count;
        CHECK(devices == total);
        ++checked;
    }
    CHECK(checked > 900);
    CHECK(infeasible > 0);
}

TEST_CASE("pruned search equals the textbook recurrence on larger instances", "[pipedream_dp]")
{
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int trial = 0; trial < 40; ++trial) {
        const int n = 20 + static_cast<int>(rng() % 40);
        PipeDreamProblem p;
        for (int l = 0; l < n; ++l) {
            p.compute_s.push_back(0.001 + u(rng));
            p.weight_bytes.push_back(u(rng) < 0.5 ? 1e3 * u(rng) : 1e6 * u(rng));
            p.cut_bytes.push_back(1e5 * u(rng));
            p.activation_bytes.push_back(0);
            p.optimizer_bytes.push_back(0);
        }
        if (trial % 2)
            p.levels = {{2 + static_cast<int>(rng() % 4), 1e7}, {2 + static_cast<int>(rng() % 3), 1e6}};
        else
            p.levels = {{2 + static_cast<int>(rng() % 15), 1e6 + 1e7 * u(rng)}};
        p.straight = trial % 4 == 0 && n >= 20;
        auto fast = solve(p);
        auto slow = solve(p, false);
        INFO("trial " << trial);
        REQUIRE(fast.feasible == slow.feasible);
        if (fast.feasible)
            CHECK(fast.objective_s == slow.objective_s);
    }
}

TEST_CASE("the solver honours its stop token", "[pipedream_dp]")
{
    PipeDreamProblem p = chain(
        std::vector<double>(200, 1.0), std::vector<double>(200, 1.0), std::vector<double>(200, 1.0), {{16, 1e9}});
    std::stop_source stop;
    stop.request_stop();
    PipeDreamSolveOptions o;
    o.stop = stop.get_token();
    bool cancelled = false;
    auto s = solvePipeDream(p, o, &cancelled);
    CHECK(cancelled);
    CHECK_FALSE(s.feasible);
}
