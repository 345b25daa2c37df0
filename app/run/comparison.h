// SPDX-License-Identifier: MIT
// Predicted against measured: per stage, the compute time, idle time and iteration time of a run's measured
// timeline next to the simulator's prediction for the same plan and steps.
#pragma once

#include <map>
#include <vector>

#include "planner/plan.h"
#include "planner/sim/simulator.h"
#include "planner/timeline.h"

namespace pw::app {

/// @brief Per-step times of one (virtual) stage (the mean over its replicas), in seconds.
struct StageTimes
{
    double compute_s = 0; ///< the stage's forward, backward and optimizer spans
    /// its device's window minus all the device's compute (with interleaving, shared by the device's virtual stages)
    double idle_s = 0;
    double iteration_s = 0; ///< the device's first start to its last end, divided by the steps

    bool operator==(const StageTimes&) const = default;
};

struct StageComparison
{
    int stage = 0;
    StageTimes predicted;
    StageTimes measured;
    /// measured / predicted - 1 of the stage's compute per step (0.1: 10 % slower than predicted); 0 without a
    /// prediction: how well the costs (profile or calibrated) predict the stage's own work
    double compute_error = 0;
    /// measured / predicted - 1 of its device's window per step (compute and idle): the schedule's effect as well
    double iteration_error = 0;

    bool operator==(const StageComparison&) const = default;
};

/// @brief One device's memory: the planner's predicted peak against the peak the device's backend measured
/// (the engine's buffers on it: weights, gradients, optimizer state, stashed activations, workspaces).
struct DeviceMemory
{
    int device = 0;
    double predicted_peak_bytes = 0; ///< the simulator's peak for the device (its stages' memory model)
    double measured_peak_bytes = 0; ///< the largest "device_memory_peak" sample of the device
    double error = 0; ///< measured / predicted - 1 (0 without a prediction)

    bool operator==(const DeviceMemory&) const = default;
};
struct RunComparison
{
    std::vector<StageComparison> stages;
    /// The plan's predicted iteration time: planIterationTime, the number `pipewright-cli plan` prints
    double predicted_iteration_s = 0;
    double measured_iteration_s = 0;
    double iteration_error = 0;
    /// Per device with a measured peak: compareMemory (filled where the plan's simulation may run: not on a UI
    /// thread)
    std::vector<DeviceMemory> memory;

    bool operator==(const RunComparison&) const = default;
};

/// Every device with a measured peak (device -> bytes), next to the simulator's peak for it; the plan's metrics
/// from a simulation without spans. Devices without a sample are left out.
std::vector<DeviceMemory> compareMemory(const planner::Plan& plan, const std::map<int, double>& measuredPeak);
/// The largest kDeviceMemoryPeakCounter sample of each device of a measured timeline.
std::map<int, double> measuredPeakMemory(const planner::Timeline& measured);

/// Times per (virtual) stage of one timeline: one entry per stage of the plan, its compute from the spans of that
/// stage on the devices the plan gives it.
std::vector<StageTimes> stageTimes(const planner::Plan& plan, const planner::Timeline& timeline, int steps);
/// The one predicted iteration time of a plan: the simulator's iteration_time_s for the plan as it stands (its
/// schedule's iterations), under `cost` (the profile's when null). What `pipewright-cli plan` and `simulate` print,
/// the app's metrics panel shows and a run's comparison uses: a prediction of the first steps of a run would give
/// another number where steps overlap (HetPipe's waves: 20 steps back to back share their fill and drain). 0 when the
/// plan cannot be simulated.
double planIterationTime(const planner::Plan& plan, const planner::CostModel* cost = nullptr);
/// Per step: the prediction covers `predictedSteps` steps (often fewer than the run), the measured timeline
/// `measuredSteps` (the steps that finished). The predicted iteration time is planIterationTime(plan, cost).
RunComparison compareRun(const planner::Plan& plan, const planner::Timeline& predicted, int predictedSteps,
    const planner::Timeline& measured, int measuredSteps, const planner::CostModel* cost = nullptr);
/// The same with the plan's iteration time already known (planIterationTime simulates the plan: a caller on a UI
/// thread computes it in the background once).
RunComparison compareRun(const planner::Plan& plan, const planner::Timeline& predicted, int predictedSteps,
    const planner::Timeline& measured, int measuredSteps, double planIterationS);
/// The simulator's timeline of `steps` steps of the plan under `cost` (a calibrated model, planner/sim/calibration.h):
/// what a run's measured timeline is compared with, as the controller's stored prediction is under the profile's.
planner::Timeline predictSteps(const planner::Plan& plan, int steps, const planner::CostModel& cost);

} // namespace pw::app
