// SPDX-License-Identifier: MIT
// ZB-H2 (Qi et al. 2024): twice 1F1B's warm-up forwards and deferred weight gradients make each batch a
// parallelogram without bubbles when T_F + T_B <= 2 T_W; about twice 1F1B's activations (2p - 1 microbatches).
#include "builder.h"

namespace pw::planner {
namespace {

// The order is generateZeroBubble's (zb_h1.cpp) with twice the warm-up and deferral. The steady state is measured
// batch to batch: no stage waits for another's optimizer step (steps are per stage, as the paper's post-validation
// makes them), so a batch's fill overlaps the previous batch's drain.
class ZbH2Generator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "zb-h2"; }
    std::string_view description() const override
    {
        return "ZB-H2 (Qi et al. 2024): zero bubble once T_F + T_B <= 2 T_W, at 2p - 1 stashed microbatches per "
               "stage (about twice 1F1B's)";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.in_flight_limit = InFlightLimit::FirstStage,
            .in_flight_factor = 2,
            .steady_state = SteadyState::BatchToBatch,
            .min_iterations = 3,
            .splits_backward = true,
            .replicas_alike = true};
        return traits;
    }
    Schedule generate(const Plan& plan) const override { return generateZeroBubble(plan, name(), true); }
};

} // namespace

const ScheduleGenerator& zbH2Generator()
{
    static const ZbH2Generator generator;
    return generator;
}

} // namespace pw::planner
