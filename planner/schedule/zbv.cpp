// SPDX-License-Identifier: MIT
// ZBV (Qi et al. 2024, §6): two chunks per device in a V (virtual stage s on the devices of stage s for s < p and
// of stage 2p - 1 - s after), the backward split into I and W; no bubble at 1F1B's activation memory.
#include <algorithm>
#include <string>

#include "builder.h"

namespace pw::planner {
namespace {

/// One device's ZBV order over `count` microbatches as rank `rank` of p: torch.distributed.pipelining's
/// ScheduleZBVZeroBubble, itself the paper's handcrafted ZB-V. The order is built for max(2p - 1, count)
/// microbatches and the ones past `count` are left out (a short batch keeps the same relative order). op(chunk,
/// kind, i) appends chunk 0 (virtual stage rank) or 1 (virtual stage 2p - 1 - rank).
template <class Op> void zbvOrder(int p, int rank, int count, Op&& op)
{
    const int n = std::max(2 * p - 1, count);
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto emit = [&](int chunk, ActionKind kind, int i) {
        if (i < count)
            op(chunk, kind, i);
    };
    // Warm-up: chunk 0 forwards until the V's turn reaches this device, then both chunks, then chunk 1 starts its
    // backwards (the loss is at the bottom of the V, on device 0's chunk 1).
    for (int i = 0; i < 2 * (p - rank) - 1; ++i)
        emit(0, ActionKind::Forward, f0++);
    for (int i = 0; i < rank; ++i) {
        emit(1, ActionKind::Forward, f1++);
        emit(0, ActionKind::Forward, f0++);
    }
    for (int i = 0; i < p - rank; ++i) {
        emit(1, ActionKind::Forward, f1++);
        emit(1, ActionKind::BackwardInput, b1);
        emit(1, ActionKind::BackwardWeight, b1++);
    }
    // Steady state: F I W of each chunk in turn.
    while (f1 < f0 || f0 < n) {
        if (f0 < n)
            emit(0, ActionKind::Forward, f0++);
        emit(0, ActionKind::BackwardInput, b0);
        emit(0, ActionKind::BackwardWeight, b0++);
        emit(1, ActionKind::Forward, f1++);
        emit(1, ActionKind::BackwardInput, b1);
        emit(1, ActionKind::BackwardWeight, b1++);
    }
    // Cool-down: the input gradients first, the weight gradients filling the gaps and the end.
    int w0 = b0, w1 = b1;
    for (int i = 0; i < rank; ++i) {
        emit(0, ActionKind::BackwardInput, b0++);
        emit(1, ActionKind::BackwardInput, b1++);
    }
    for (int i = 0; i < p - rank; ++i) {
        emit(0, ActionKind::BackwardInput, b0++);
        emit(0, ActionKind::BackwardWeight, w0++);
    }
    while (w1 < b1)
        emit(1, ActionKind::BackwardWeight, w1++);
    while (w0 < b0)
        emit(0, ActionKind::BackwardWeight, w0++);
}

class ZbvGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "zbv"; }
    std::string_view description() const override
    {
        return "ZBV (Qi et al. 2024): two chunks per device in a V, the backward split into input and weight "
               "gradients: no bubble at 1F1B's activation memory once the batch has 2p - 1 microbatches";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.in_flight_limit = InFlightLimit::FirstStage,
            .steady_state = SteadyState::BatchToBatch,
            .min_iterations = 3,
            .chunks = ChunkRule::V,
            .splits_backward = true,
            .replicas_alike = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        return buildV(plan, name(), [](int p, int count) {
            VPrograms ranks(p);
            for (int rank = 0; rank < p; ++rank)
                zbvOrder(p, rank, count, [&](int chunk, ActionKind kind, int i) {
                    ranks[rank].push_back({chunk, kind, i});
                });
            return ranks;
        });
    }
};

} // namespace

const ScheduleGenerator& zbvGenerator()
{
    static const ZbvGenerator generator;
    return generator;
}

} // namespace pw::planner
