// SPDX-License-Identifier: MIT
// Planning at cluster scale: the searches that work over worker counts (PipeDream's threshold search of a large
// top level) give the optimum of the exact searches they replace, on random instances compared exhaustively.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "planner/partition/pipedream_dp.h"

using namespace pw::planner;

namespace {

PipeDreamSolution solveWith(const PipeDreamProblem& p, bool prune, PipeDreamSolveOptions::TopLevel top)
{
    PipeDreamSolveOptions o;
    o.prune = prune;
    o.top_level = top;
    return solvePipeDream(p, o);
}

/// A random chain: zero compute, zero weights and free cuts included, one or two levels.
PipeDreamProblem randomProblem(std::mt19937& rng, int maxLayers, int maxWorkers, bool twoLevels)
{
    std::uniform_real_distribution<double> u(0.0, 1.0);
    PipeDreamProblem p;
    const int n = 1 + static_cast<int>(rng() % maxLayers);
    for (int l = 0; l < n; ++l) {
        p.compute_s.push_back(u(rng) < 0.1 ? 0.0 : 0.1 + 10 * u(rng));
        p.weight_bytes.push_back(u(rng) < 0.3 ? 0.0 : 1000 * u(rng));
        p.cut_bytes.push_back(u(rng) < 0.2 ? 0.0 : 500 * u(rng));
        p.activation_bytes.push_back(100 * u(rng));
        p.optimizer_bytes.push_back(2 * p.weight_bytes.back());
    }
    const int workers = 1 + static_cast<int>(rng() % maxWorkers);
    if (twoLevels)
        p.levels = {{1 + static_cast<int>(rng() % 3), 200 + 2000 * u(rng)}, {workers, 20 + 200 * u(rng)}};
    else
        p.levels = {{workers, 50 + 1000 * u(rng)}};
    return p;
}

/// The plan covers every layer once and uses every device of the hierarchy.
void planningScaleCheckPlan(const PipeDreamProblem& p, const PipeDreamSolution& s)
{
    int devices = 0, next = 0;
    for (const auto& st : s.stages) {
        CHECK(st.first_layer == next);
        next = st.last_layer + 1;
        devices += static_cast<int>(st.devices.size());
    }
    CHECK(next == static_cast<int>(p.compute_s.size()));
    int total = 1;
    for (const auto& l : p.levels)
        total *= l.count;
    CHECK(devices == total);
}

} // namespace

TEST_CASE("PipeDream's threshold search equals the textbook recurrence on 3000 random small instances",
    "[pipedream_dp][scale]")
{
    // The textbook recurrence is itself checked against exhaustive search (test_pipedream_dp.cpp).
    std::mt19937 rng(2311);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    int feasible = 0, infeasible = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        const bool twoLevels = trial % 2 == 1;
        PipeDreamProblem p = randomProblem(rng, twoLevels ? 6 : 8, twoLevels ? 6 : 12, twoLevels);
        p.straight = trial % 5 == 0;
        p.per_worker_allreduce = trial % 3 == 0;
        if (twoLevels && trial % 4 == 1) { // the memory rule applies to the devices' level (the table's)
            p.memory_capacity_bytes = 2000 + 6000 * u(rng);
            p.microbatches = 4;
        }
        if (trial % 11 == 0) // no bandwidth at the top level: replicas and cuts there cost infinitely much
            p.levels.back().bandwidth_bytes_per_s = 0;
        const auto textbook = solveWith(p, false, PipeDreamSolveOptions::TopLevel::Table);
        const auto threshold = solveWith(p, true, PipeDreamSolveOptions::TopLevel::Threshold);
        INFO("trial " << trial << " layers " << p.compute_s.size() << " top workers " << p.levels.back().count);
        REQUIRE(threshold.feasible == textbook.feasible);
        if (!textbook.feasible) {
            ++infeasible;
            continue;
        }
        CHECK(threshold.objective_s == textbook.objective_s);
        planningScaleCheckPlan(p, threshold);
        ++feasible;
    }
    CHECK(feasible > 2000);
    CHECK(infeasible > 0);
}

TEST_CASE("PipeDream's threshold search equals the pruned table on larger instances", "[pipedream_dp][scale]")
{
    std::mt19937 rng(2312);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int trial = 0; trial < 60; ++trial) {
        const bool twoLevels = trial % 2 == 1;
        PipeDreamProblem p = randomProblem(rng, 60, twoLevels ? 40 : 150, twoLevels);
        // Realistic magnitudes: the all-reduce matters without dominating every stage.
        for (auto& w : p.weight_bytes)
            w *= 1e-2 * (1 + trial % 4);
        p.straight = trial % 7 == 0;
        p.per_worker_allreduce = trial % 3 == 0;
        const auto table = solveWith(p, true, PipeDreamSolveOptions::TopLevel::Table);
        const auto threshold = solveWith(p, true, PipeDreamSolveOptions::TopLevel::Threshold);
        INFO("trial " << trial << " layers " << p.compute_s.size() << " top workers " << p.levels.back().count);
        REQUIRE(threshold.feasible == table.feasible);
        if (table.feasible) {
            CHECK(threshold.objective_s == table.objective_s);
            planningScaleCheckPlan(p, threshold);
        }
    }
}
