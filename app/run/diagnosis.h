// SPDX-License-Identifier: MIT
// Why a run is slow, for one run of the history or a live one: its time by cause and its stragglers
// (planner/analysis/time_by_cause.h) over the program its devices ran (the plan over the run's steps).
#pragma once

#include <vector>

#include "planner/analysis/time_by_cause.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "planner/timeline.h"

namespace pw::app {

/// @brief The run's time by cause and stragglers.
struct RunDiagnosis
{
    planner::TimeByCause causes;
    std::vector<planner::Straggler> stragglers;
    bool operator==(const RunDiagnosis&) const = default;
};

/// The program every device of a run of `plan` over `steps` steps executes: the spans' action indices (as the
/// engine numbers them: engine::runSchedule).
planner::Schedule runProgramSchedule(const planner::Plan& plan, int steps);

/// The steps of a run of `plan` over `steps` planned steps whose actions `measured` reaches: the program the diagnosis
/// needs (a run of a million steps stopped after ten needs eleven, not a million).
int coveredSteps(const planner::Plan& plan, int steps, const planner::Timeline& measured);

/// The diagnosis of a run of `plan` over `steps` planned steps from what it measured so far and its prediction (over
/// coveredSteps of the program).
RunDiagnosis diagnoseRun(const planner::Plan& plan, int steps, const planner::Timeline& measured,
    const planner::Timeline& predicted, const planner::StragglerRule& rule = {});
/// The same with the program already made (runProgramSchedule): what a live monitor asks every step.
RunDiagnosis diagnoseRun(const planner::Schedule& program, const planner::Timeline& measured,
    const planner::Timeline& predicted, const planner::StragglerRule& rule = {});

} // namespace pw::app
