// SPDX-License-Identifier: MIT
// PipeDream-2BW: 1F1B without flushes, gradients accumulated over a batch, two weight versions.
#include <algorithm>
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {
namespace {

/// Batches a 2BW plan simulates at least: its steady state, with one weight update per batch, is measured from
/// the end of the first batch on (one batch is only its fill and drain).
constexpr int kSteadyIterations = 3;

// Microbatch k (global, 0-based) of batch t = k / m runs F and B with version max(t - 1, 0). The backward that
// finishes batch t on a device (its last microbatch of t) is followed by the all-reduce (replicated stages)
// and the step producing version t + 1.
class TwoBwGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "2bw"; }
    std::string_view description() const override
    {
        return "PipeDream-2BW: 1F1B without flushes, one update per batch of m >= p microbatches, at most two "
               "weight versions";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.synchronous = false,
            .flush_per_batch = false,
            .weight_versions = WeightVersions::Two,
            .stash = StashDepth::InFlight,
            .steady_state = SteadyState::BatchToBatch,
            .min_iterations = kSteadyIterations,
            .batch_covers_pipeline = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        ScheduleBuilder b(plan, name());
        if (b.chunks() > 1)
            throw InputError({}, 0, "/schedule/chunks", "'2bw' runs one chunk per device");
        const int m = b.microbatchesPerBatch();
        if (m < b.depth())
            throw InputError({}, 0, "/schedule/microbatches",
                "'2bw' needs at least as many microbatches per batch as stages (" + std::to_string(m) + " < "
                    + std::to_string(b.depth()) + ")");
        for (int s = 0; s < b.stageCount(); ++s)
            if (m < b.replicas(s))
                throw InputError({}, 0, "/schedule/microbatches",
                    "'2bw' needs every replica to see each batch: stage " + std::to_string(s) + " has "
                        + std::to_string(b.replicas(s)) + " replicas but a batch only " + std::to_string(m)
                        + " microbatches");
        const int total = b.totalMicrobatches();
        int pipelineDevices = 0;
        for (int s = 0; s < b.stageCount(); ++s)
            pipelineDevices += b.replicas(s);
        for (int s = 0; s < b.stageCount(); ++s) {
            const int r = b.replicas(s);
            for (int j = 0; j < r; ++j) {
                const int device = b.device(s, j);
                const auto ids = replicaMicrobatches(0, total, j, r);
                const int count = static_cast<int>(ids.size());
                int latest = 0;
                oneFOneB(
                    count, b.inFlight(s) - 1,
                    [&](int i) {
                        const int version = std::max(ids[i] / m - 1, 0);
                        if (version > latest)
                            throw InputError({}, 0, "/schedule/microbatches",
                                "'2bw': stage " + std::to_string(s) + " would run microbatch " + std::to_string(ids[i])
                                    + " before version " + std::to_string(version)
                                    + " exists; use more microbatches per batch (as many as the "
                                    + std::to_string(pipelineDevices) + " pipeline devices always work)");
                        b.forward(s, ids[i], version);
                    },
                    [&](int i) {
                        const int batch = ids[i] / m;
                        b.backward(s, ids[i], std::max(batch - 1, 0));
                        if (i + 1 == count || ids[i + 1] / m != batch) {
                            b.step(device, s, batch + 1);
                            latest = batch + 1;
                        }
                    });
            }
        }
        return b.finish();
    }
};

} // namespace

const ScheduleGenerator& twoBwGenerator()
{
    static const TwoBwGenerator generator;
    return generator;
}

} // namespace pw::planner
