// SPDX-License-Identifier: MIT
// Schedule generators: one per file, all listed in one registry; plus the validator.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../plan.h"
#include "../schedule.h"
#include "traits.h"

namespace pw::planner {

/// @brief A device's times per microbatch (all its chunks together) in a pipeline whose devices all run alike: what
/// the Megatron search estimates a kind with.
struct UniformStageTimes
{
    double forward_s = 0;
    double input_s = 0; ///< the input gradient (the fused backward is input + weight)
    double weight_s = 0;

    bool operator==(const UniformStageTimes&) const = default;
};

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
    /// Idle time per device and batch of this kind's order on p devices running m microbatches at `times`, nothing
    /// transferred; nullopt where the kind leaves it to the caller's closed form (megatron::pipelineBubble).
    virtual std::optional<double> uniformBubble(int p, int m, const UniformStageTimes& times) const
    {
        (void)p, (void)m, (void)times;
        return std::nullopt;
    }
    /// Activation bytes device `rank` of p holds at its peak over m microbatches: `stash` per chunk forward until its
    /// W (or fused B), `kept` per input gradient until its W; nullopt as above (megatron::kindPeakActivationBytes).
    virtual std::optional<double> uniformPeakActivationBytes(int p, int m, int rank, double stash, double kept) const
    {
        (void)p, (void)m, (void)rank, (void)stash, (void)kept;
        return std::nullopt;
    }
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
