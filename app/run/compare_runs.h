// SPDX-License-Identifier: MIT
// Several recorded runs side by side, for "what changed, and why is this one slower?": the configuration fields
// that differ between them (and only those), per stage the measured compute and idle (bubble) time per step with
// each run's delta against the first, and a summary of each run's metrics. `pipewright-cli history compare`; the
// history browser's compare view.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/run/snapshot.h"

namespace pw::app {

/// @brief One configuration field whose value differs between the runs ("/schedule/microbatches": "4", "8").
struct ConfigDifference
{
    std::string field; ///< JSON pointer into the run's configuration (the plan, with /run for the run's own)
    std::vector<std::string> values; ///< per run, as JSON text; "(none)" where a run lacks it

    bool operator==(const ConfigDifference&) const = default;
};

/// @brief One run's figures.
struct RunFigures
{
    std::string run_id;
    std::string label;
    std::string status;
    int steps = 0; ///< done (RunRecord::steps_done: with a loss; an imported run's, all of its complete steps)
    double first_loss = 0, final_loss = 0; ///< NaN without steps
    /// The plan's tokens per step / iteration_s: the same measurement as iteration_s, so the two agree on the screen
    /// (the last "tokens_per_s" sample, an average since the start, where the plan or the steps are unknown); 0
    /// without steps.
    double tokens_per_s = 0;
    double iteration_s = 0; ///< measured per step (the slowest stage's device span / steps)
    double predicted_iteration_s = 0; ///< the planner's prediction stored with the run (0: none)
    double prediction_error = 0; ///< measured / predicted - 1
    std::vector<StageTimes> stages; ///< measured, per stage of its plan
    /// Time by cause per step, the mean over its devices (app/run/diagnosis.h; zero without spans or a plan).
    planner::TimeCauses causes;

    bool operator==(const RunFigures&) const = default;
};

struct RunsComparison
{
    std::vector<RunFigures> runs;
    std::vector<ConfigDifference> differences;
    /// [stage][run]: run's compute and idle per step minus the first run's (stages both have; NaN beyond)
    std::vector<std::vector<double>> compute_delta_s, idle_delta_s;
    /// [run]: the cause that grew most per step against the first run, and by how much ("late peer +12.40 ms per
    /// step"); empty for the first run and where none grew.
    std::vector<std::string> grew;
};

/// Compares the runs (at least two); the first is the reference of the deltas.
RunsComparison compareRuns(const std::vector<RunSnapshot>& runs);

/// What a metric overlay puts on its x axis.
enum class OverlayAxis : std::uint8_t {
    Step, ///< the step (1, 2, ...)
    WallClock, ///< seconds from the run's start
    Relative, ///< the fraction of the run's recorded steps (0..1]: runs of different lengths side by side
};

/// @brief One run's curve in a metric overlay.
struct OverlaySeries
{
    std::string run_id;
    std::vector<double> x, y;

    bool operator==(const OverlaySeries&) const = default;
};

/// Each run's "loss" or "tokens_per_s" per step against `axis`, smoothed by an exponential moving average of weight
/// `smoothing` in [0, 1) (0: the raw values), debiased as TensorBoard does so that the first points are not pulled
/// towards zero: a constant stays that constant.
std::vector<OverlaySeries> overlay(
    const std::vector<RunSnapshot>& runs, const std::string& metric, OverlayAxis axis, double smoothing);

} // namespace pw::app
