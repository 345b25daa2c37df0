// SPDX-License-Identifier: MIT
// Timing helpers for the benchmarks: best of N wall-clock runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "planner/plan.h"

namespace pw::bench {

/// Best wall time in seconds over `repeats` runs of `fn`.
inline double bestOf(int repeats, const std::function<void()>& fn)
{
    double best = 1e300;
    for (int i = 0; i < repeats; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    return best;
}

/// A chain of `stages` layers (1 ms forward, 2 ms backward), one stage per GPU on one node, 1F1B with
/// `microbatches`: the Gantt benchmarks' schedule (64 x 2900 gives about a million actions).
inline planner::Plan chainPlan(int stages, int microbatches)
{
    using namespace planner;
    Plan plan;
    plan.model.name = "bench";
    for (int l = 0; l < stages; ++l)
        plan.model.layers.push_back({"l" + std::to_string(l), "layer", 1.0, 2.0, 1e6, 1e6, {}, {}, {}, {}});
    plan.cluster.device_types = {DeviceType {"gpu", 80e9, 100, 0, {}, 0}};
    plan.cluster.nodes.push_back({"n0", "", 22, "", "gpu", stages, 1e11, 1e-6});
    for (int s = 0; s < stages; ++s)
        plan.stages.push_back({s, s, {s}});
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = microbatches;
    return plan;
}

} // namespace pw::bench
