// SPDX-License-Identifier: MIT
// Schedule generators: one per file, all listed in one registry; plus the validator.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "../plan.h"
#include "../schedule.h"
#include "traits.h"

namespace pw::planner {

class ScheduleGenerator
{
public:
    virtual ~ScheduleGenerator() = default;
    virtual std::string_view name() const = 0;
    virtual std::string_view description() const = 0;
    /// What every schedule this generator produces promises (traits.h).
    virtual const ScheduleTraits& traits() const = 0;
    /// Throws InputError when the plan's options do not suit this schedule.
    virtual Schedule generate(const Plan& plan) const = 0;
};

const std::vector<const ScheduleGenerator*>& scheduleGenerators();
const ScheduleGenerator* findScheduleGenerator(std::string_view name);
/// Generates the plan's schedule (plan.schedule.kind); throws InputError for an unknown kind.
Schedule generateSchedule(const Plan& plan);
/// generateSchedule with only the programs of every model-parallel group's first device (groupLeaderSchedule in
/// builder.h); generateSchedule itself without tensor or context parallelism.
Schedule generateGroupLeaderSchedule(const Plan& plan);
/// The plan seen by tensor-parallel rank `rank`: each stage keeps the rank-th device of every group of t c,
/// tensor_parallel = context_parallel = 1 (builder.h, "Tensor parallelism"): its groups (the tied embedding's) are
/// that rank's. Throws InputError for a rank outside [0, t c).
Plan tensorParallelRankPlan(const Plan& plan, int rank);
/// The plan's schedule.iterations raised to its kind's min_iterations (steadyIterations in plan.h); an unknown kind
/// keeps its own.
int simulatedIterations(const Plan& plan);

/// @brief What the validator found.
struct ValidationReport
{
    bool ok = true;
    std::vector<std::string> errors;
    std::size_t max_outstanding_sends = 0; ///< buffering a device needs in the worst case
};

/// Proves a schedule complete (every stage runs F and B of every microbatch exactly once, on the right
/// replica; every send has its receive) and deadlock-free under the semantics documented on Action.
ValidationReport validate(const Schedule& schedule, const Plan& plan);

} // namespace pw::planner
