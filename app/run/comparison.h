// SPDX-License-Identifier: MIT
// Predicted against measured: per stage, the compute time, idle time and iteration time of a run's measured
// timeline next to the simulator's prediction for the same plan and steps; the same per action kind (F, B, I, W,
// send, receive, all-reduce, optimizer), which tells which part of the cost model is off.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
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
/// @brief The rows of the comparison per action kind: the schedule's kinds as the cost model prices them. The two
/// sends (activation, gradient) are one row, the two receives another: one link model times both.
enum class KindRow : std::uint8_t {
    Forward, ///< F
    Backward, ///< B: the fused backward (input and weight gradients together)
    BackwardInput, ///< I: zero-bubble schedules' input gradient
    BackwardWeight, ///< W: zero-bubble schedules' weight gradient
    Send, ///< SendActivation and SendGradient
    Receive, ///< RecvActivation and RecvGradient
    AllReduce,
    OptimizerStep,
    WavePush, ///< HetPipe's asynchronous schedule (wsp)
    WavePull,
};
/// "F", "B", "I", "W", "send", "receive", "all-reduce", "optimizer", "wave push", "wave pull".
std::string_view toString(KindRow row);
KindRow kindRow(planner::ActionKind kind);

/// @brief One timeline's figures for one KindRow, per step.
///
/// time_s: the durations of the row's spans summed over every device, divided by the steps (device time, so that
/// the compute rows add up to the per-stage compute: F + B + I + W + optimizer = the sum over stages of their compute
/// times their replicas). actions: how many actions of the row all devices run per step. mean_s: time_s / actions,
/// one action's mean duration.
///
/// What a span's duration is differs between the two sides for the transfers:
/// - receive: the time the device is blocked until the data is there, on both sides: the simulator's receive waits
///   from when the device reaches it (or the send started) to the data's arrival, the engine's from when it reaches
///   the receive to when the data is in. Both include the wait for a late sender, so the row is the link's cost
///   and the sender's lateness together. The simulator records a receive only when it waits: its receive count is
///   that of the sends it pairs with (one each), and a receive whose data was already there counts with 0 s.
/// - send: the simulator times the transfer from its start to its arrival at the peer; the engine times the
///   sending device's own part (posting the transfer: it completes in the background and shows in the receiver's
///   receive). A measured send far shorter than predicted is the expected case, not an error of the link model.
struct KindTimes
{
    double time_s = 0;
    double actions = 0;
    double mean_s = 0;

    bool operator==(const KindTimes&) const = default;
};

struct KindComparison
{
    KindRow kind = KindRow::Forward;
    KindTimes predicted;
    KindTimes measured;
    /// measured / predicted - 1 of the row's time per step (0 without a prediction of it). Where the counts agree,
    /// also the error of one action's mean duration.
    double error = 0;
    /// false when there is a prediction and the actions per step differ: the run did not run the plan's actions (or
    /// stopped within a step, whose actions count for a step that did not finish)
    bool counts_match = true;

    bool operator==(const KindComparison&) const = default;
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
    /// Per action kind present in either timeline: compareKinds
    std::vector<KindComparison> kinds;

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
/// One timeline's figures per KindRow over `steps` steps (rows without spans left out). `simulated`: the timeline
/// is the simulator's, whose receives are counted as the sends they pair with (see KindTimes).
std::map<KindRow, KindTimes> kindTimes(const planner::Timeline& timeline, int steps, bool simulated);
/// Every KindRow present in either timeline, in KindRow's order; the predicted timeline is the simulator's.
std::vector<KindComparison> compareKinds(
    const planner::Timeline& predicted, int predictedSteps, const planner::Timeline& measured, int measuredSteps);
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
