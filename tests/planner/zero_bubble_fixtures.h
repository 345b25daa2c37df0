// SPDX-License-Identifier: MIT
// What the tests of the split-backward schedules share (zero-bubble, V kinds): a schedule generated, proved by the
// validator and simulated; a plan of 2p one-layer virtual stages in a V.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "fixtures.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

namespace pw::test {

/// The plan's schedule, required validator-clean (its first error shown), simulated.
inline planner::SimulationResult validatedRun(const planner::Plan& plan)
{
    const auto schedule = planner::generateSchedule(plan);
    const auto report = planner::validate(schedule, plan);
    INFO((report.errors.empty() ? std::string() : report.errors.front()));
    REQUIRE(report.ok);
    return planner::simulate(plan, schedule);
}

/// @brief Per virtual stage (one chunk) times in ms: forward, input gradient, weight gradient.
struct ChunkTimes
{
    double f = 1, i = 1, w = 1;
};

/// 2p virtual stages of one layer in a V on p devices (virtual stage s on device s for s < p, on 2p - 1 - s after),
/// nothing transferred, no latency, a free optimizer step; each layer stashes `stash` bytes, keeps `kept` bytes from
/// its I to its W, and has no weights.
inline planner::Plan vPlan(
    int p, int m, const std::string& kind, ChunkTimes t = {}, int iterations = 1, double kept = 0, double stash = 1e6)
{
    planner::Plan plan = chainPlan(2 * p, m, kind, {t.f, t.i + t.w, 0, 0, stash}, {80e9, 100, 1e11, 0, 0, 0});
    for (auto& layer : plan.model.edit().layers) {
        layer.backward_input_ms = t.i;
        layer.backward_weight_ms = t.w;
        layer.weight_gradient_bytes = kept;
    }
    plan.cluster.edit().nodes[0].count = p;
    for (int s = p; s < 2 * p; ++s)
        plan.stages[s].devices = {2 * p - 1 - s};
    plan.schedule.chunks = 2;
    plan.schedule.iterations = iterations;
    return plan;
}

} // namespace pw::test
