// SPDX-License-Identifier: MIT
// The registry of schedule generators: every built-in kind, looked up by name.
// The semantics all generators share (placement, transfers, versions, warm-up) are documented in builder.h.
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {

const std::vector<const ScheduleGenerator*>& scheduleGenerators()
{
    static const std::vector<const ScheduleGenerator*> generators = {
        &gpipeGenerator(),
        &oneFOneBGenerator(),
        &pipedreamGenerator(),
        &twoBwGenerator(),
        &interleavedGenerator(),
        &oneFOneBSoGenerator(),
        &oneFOneBAsGenerator(),
        &wspGenerator(),
        &zbH1Generator(),
        &zbH2Generator(),
        &zbvGenerator(),
        &dualPipeVGenerator(),
        &vHalfGenerator(),
        &vMinGenerator(),
    };
    return generators;
}

const ScheduleGenerator* findScheduleGenerator(std::string_view name)
{
    for (const auto* g : scheduleGenerators())
        if (g->name() == name)
            return g;
    return nullptr;
}

namespace {

const ScheduleGenerator& generatorOrThrow(std::string_view kind)
{
    const auto* g = findScheduleGenerator(kind);
    if (!g) {
        std::string known;
        for (const auto* k : scheduleGenerators())
            known += (known.empty() ? "" : ", ") + std::string(k->name());
        throw InputError(
            {}, 0, "/schedule/kind", "unknown schedule kind '" + std::string(kind) + "' (known: " + known + ")");
    }
    return *g;
}

} // namespace

const ScheduleTraits* findScheduleTraits(std::string_view kind)
{
    const auto* g = findScheduleGenerator(kind);
    return g ? &g->traits() : nullptr;
}

const ScheduleTraits& scheduleTraits(std::string_view kind)
{
    return generatorOrThrow(kind).traits();
}

int simulatedIterations(const Plan& plan)
{
    const auto* traits = findScheduleTraits(plan.schedule.kind);
    return steadyIterations(plan, traits ? traits->min_iterations : 1);
}

Schedule generateSchedule(const Plan& plan)
{
    const auto* g = &generatorOrThrow(plan.schedule.kind);
    if (plan.modelParallel() > 1) {
        plan.validate();
        return expandTensorParallel(g->generate(tensorParallelRankPlan(plan, 0)), plan);
    }
    return g->generate(plan);
}

Schedule generateGroupLeaderSchedule(const Plan& plan)
{
    if (plan.modelParallel() == 1)
        return generateSchedule(plan);
    plan.validate();
    return groupLeaderSchedule(generatorOrThrow(plan.schedule.kind).generate(tensorParallelRankPlan(plan, 0)), plan);
}

} // namespace pw::planner
