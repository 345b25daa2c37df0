// SPDX-License-Identifier: MIT
// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1F1B with the backward split into I and W, the W
// of later stages deferred into the cool-down bubbles; 1F1B's peak memory, a third of its bubble.
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {

// Per batch and replica, stage s runs zeroBubbleOrder with n_s = ceil(W_s / r_s) (builder.h; p - s on a straight
// pipeline):
// - ZB-H1: warm = n_s - 1 (1F1B's), defer = n_0 - n_s: stage s holds back n_0 - n_s weight gradients, so that every
//   stage keeps at most n_0 = p microbatches in flight (1F1B's peak, on stage 0). With T_W <= T_F and no transfer
//   cost a batch takes m (T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W), T_B the input gradient (the paper's §3.1).
// - ZB-H2: warm = 2(n_s - 1), defer = 2(n_0 - n_s): every stage keeps 2 n_0 - 1 = 2p - 1 microbatches in flight;
//   the batches form a parallelogram (no stage waits for another's step), and with m >= 2p - 1 each batch adds
//   m (T_F + T_B + T_W) + (p - 1) max(0, T_F + T_B - 2 T_W) once the pipeline runs (batch to batch).
// A microbatch's activations are freed by its W (the simulator's memory model), which is what "in flight" counts.
Schedule generateZeroBubble(const Plan& plan, std::string_view kind, bool h2)
{
    ScheduleBuilder b(plan, kind);
    if (b.chunks() > 1)
        throw InputError({}, 0, "/schedule/chunks",
            "'" + std::string(kind) + "' runs one chunk per device (" + std::to_string(b.chunks()) + " given)");
    const int m = b.microbatchesPerBatch();
    const int factor = h2 ? 2 : 1;
    const int first = b.inFlight(0);
    for (int s = 0; s < b.stageCount(); ++s) {
        const int r = b.replicas(s);
        const int n = b.inFlight(s);
        const int warm = factor * (n - 1);
        const int defer = std::max(0, factor * (first - n));
        for (int j = 0; j < r; ++j) {
            for (int batch = 0; batch < b.batches(); ++batch) {
                const auto ids = replicaMicrobatches(batch * m, (batch + 1) * m, j, r);
                zeroBubbleOrder(
                    static_cast<int>(ids.size()), warm, defer, [&](int i) { b.forward(s, ids[i], batch); },
                    [&](int i) { b.backwardInput(s, ids[i], batch); },
                    [&](int i) { b.backwardWeight(s, ids[i], batch); });
                b.step(b.device(s, j), s, batch + 1);
            }
        }
    }
    return b.finish();
}

namespace {

class ZbH1Generator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "zb-h1"; }
    std::string_view description() const override
    {
        return "ZB-H1 (Qi et al. 2024): 1F1B with the backward split into input and weight gradients, the weight "
               "gradients filling the cool-down: 1F1B's memory, a third of its bubble";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {
            .in_flight_limit = InFlightLimit::FirstStage, .splits_backward = true, .replicas_alike = true};
        return traits;
    }
    Schedule generate(const Plan& plan) const override { return generateZeroBubble(plan, name(), false); }
};

} // namespace

const ScheduleGenerator& zbH1Generator()
{
    static const ZbH1Generator generator;
    return generator;
}

} // namespace pw::planner
