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

int coveredSteps(const planner::Plan& plan, int steps, const planner::Timeline& measured)
{
    // A step's program: a schedule that flushes repeats it every step, so action a of device d is in step
    // a / (its actions per step); one step more for those that do not flush (their steps are laid out unevenly).
    const auto one = runProgramSchedule(plan, 1);
    int needed = 1;
    for (const auto& s : measured.spans)
        if (s.device >= 0 && static_cast<std::size_t>(s.device) < one.devices.size()
            && !one.devices[static_cast<std::size_t>(s.device)].empty())
            needed = std::max(
                needed, s.action / static_cast<int>(one.devices[static_cast<std::size_t>(s.device)].size()) + 1);
    return std::clamp(needed + 1, 1, std::max(1, steps));
}

RunDiagnosis diagnoseRun(const planner::Plan& plan, int steps, const planner::Timeline& measured,
    const planner::Timeline& predicted, const planner::StragglerRule& rule)
{
    return diagnoseRun(runProgramSchedule(plan, coveredSteps(plan, steps, measured)), measured, predicted, rule);
}

RunDiagnosis diagnoseRun(const planner::Schedule& program, const planner::Timeline& measured,
    const planner::Timeline& predicted, const planner::StragglerRule& rule)
{
    return {planner::timeByCause(measured, predicted, program),
        planner::findStragglers(measured, predicted, program, rule)};
}

} // namespace pw::app
