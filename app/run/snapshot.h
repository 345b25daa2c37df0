// SPDX-License-Identifier: MIT
// Everything the history holds about one run, read in one go: what the run monitor shows for a past run and what
// `pipewright-cli history show` prints. No Qt.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/history/history.h"
#include "app/run/comparison.h"
#include "app/run/diagnosis.h"
#include "planner/plan.h"
#include "planner/timeline.h"

namespace pw::app {

/// @brief One run as the history holds it.
struct RunSnapshot
{
    RunRecord record;
    std::optional<planner::Plan> plan; ///< nullopt when the stored plan no longer parses (plan_error says why)
    std::string plan_error;
    std::shared_ptr<const planner::Timeline> measured;
    std::shared_ptr<const planner::Timeline> predicted;
    std::vector<MetricSample> losses; ///< per step
    std::vector<MetricSample> tokens_per_s; ///< per step, over the steps so far
    std::vector<LogEntry> logs;
    std::vector<StallRecord> stalls; ///< the stall reports of a run that stalled
    std::vector<RecordedAction> flight_recorder; ///< its devices' last actions before the stall
    RunComparison comparison; ///< empty stages without a plan
    RunDiagnosis diagnosis; ///< time by cause and stragglers (empty without a plan)
};

/// Reads the run `id` (HistoryError for an unknown one).
RunSnapshot loadRunSnapshot(HistoryStore& history, const std::string& id);

} // namespace pw::app
