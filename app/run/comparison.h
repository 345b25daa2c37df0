// SPDX-License-Identifier: MIT
// Predicted against measured: per stage, the compute time, idle time and iteration time of a run's measured
// timeline next to the simulator's prediction for the same plan and steps.
#pragma once

#include <vector>

#include "planner/plan.h"
#include "planner/sim/simulator.h"
#include "planner/timeline.h"

namespace pw::app {

/// @brief Per-step times of one stage (the mean over its devices), in seconds.
struct StageTimes
{
    double compute_s = 0; ///< forward, backward and optimizer spans
    double idle_s = 0; ///< iteration time minus compute
    double iteration_s = 0; ///< the device's first start to its last end, divided by the steps

    bool operator==(const StageTimes&) const = default;
};

struct StageComparison
{
    int stage = 0;
    StageTimes predicted;
    StageTimes measured;
    /// measured / predicted - 1 of the iteration time (0.1: 10 % slower than predicted); 0 without a prediction
    double iteration_error = 0;

    bool operator==(const StageComparison&) const = default;
};

struct RunComparison
{
    std::vector<StageComparison> stages;
    double predicted_iteration_s = 0; ///< makespan / steps
    double measured_iteration_s = 0;
    double iteration_error = 0;

    bool operator==(const RunComparison&) const = default;
};

/// Times per stage of one timeline: devices map to the first stage of the plan that lists them.
std::vector<StageTimes> stageTimes(const planner::Plan& plan, const planner::Timeline& timeline, int steps);
/// Per step: the prediction covers `predictedSteps` steps (often fewer than the run), the measured timeline
/// `measuredSteps` (the steps that finished).
RunComparison compareRun(const planner::Plan& plan, const planner::Timeline& predicted, int predictedSteps,
    const planner::Timeline& measured, int measuredSteps);
/// The simulator's timeline of `steps` steps of the plan under `cost` (a calibrated model, planner/sim/calibration.h):
/// what a run's measured timeline is compared with, as the controller's stored prediction is under the profile's.
planner::Timeline predictSteps(const planner::Plan& plan, int steps, const planner::CostModel& cost);

} // namespace pw::app
