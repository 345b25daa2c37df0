// SPDX-License-Identifier: MIT
#include "diagnosis.h"

#include <algorithm>

#include "planner/schedule/generator.h"

namespace pw::app {

planner::Schedule runProgramSchedule(const planner::Plan& plan, int steps)
{
    planner::Plan p = plan;
    p.schedule.iterations = std::max(1, steps);
    return planner::generateSchedule(p);
}

RunDiagnosis diagnoseRun(const planner::Plan& plan, int steps, const planner::Timeline& measured,
    const planner::Timeline& predicted, const planner::StragglerRule& rule)
{
    return diagnoseRun(runProgramSchedule(plan, steps), measured, predicted, rule);
}

RunDiagnosis diagnoseRun(const planner::Schedule& program, const planner::Timeline& measured,
    const planner::Timeline& predicted, const planner::StragglerRule& rule)
{
    return {planner::timeByCause(measured, predicted, program),
        planner::findStragglers(measured, predicted, program, rule)};
}

} // namespace pw::app
