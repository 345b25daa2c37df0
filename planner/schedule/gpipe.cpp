// SPDX-License-Identifier: MIT
// GPipe: all forwards of a batch, then all backwards, then a flush and the optimizer step.
#include "builder.h"

namespace pw::planner {
namespace {

// With chunks, forwards go chunk by chunk (0..v-1) and backwards in reverse chunk order, microbatches
// ascending within a chunk: Megatron's all-forward-all-backward variant of interleaving.
class GPipeGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "gpipe"; }
    std::string_view description() const override
    {
        return "GPipe: all forwards then all backwards per batch, a flush and one optimizer step; stashes all "
               "m microbatches";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.stash = StashDepth::Batch, .chunks = ChunkRule::Any};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        ScheduleBuilder b(plan, name());
        const int m = b.microbatchesPerBatch();
        const int p = b.depth();
        const int v = b.chunks();
        for (int r = 0; r < p; ++r) {
            const int replicas = b.replicas(r);
            for (int j = 0; j < replicas; ++j) {
                const int device = b.device(r, j);
                for (int batch = 0; batch < b.batches(); ++batch) {
                    const auto ids = replicaMicrobatches(batch * m, (batch + 1) * m, j, replicas);
                    for (int c = 0; c < v; ++c)
                        for (int k : ids)
                            b.forward(c * p + r, k, batch);
                    for (int c = v - 1; c >= 0; --c)
                        for (int k : ids)
                            b.backward(c * p + r, k, batch);
                    for (int c = 0; c < v; ++c)
                        b.step(device, c * p + r, batch + 1);
                }
            }
        }
        return b.finish();
    }
};

} // namespace

const ScheduleGenerator& gpipeGenerator()
{
    static const GPipeGenerator generator;
    return generator;
}

} // namespace pw::planner
