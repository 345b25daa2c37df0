// SPDX-License-Identifier: MIT
// Interleaved 1F1B (Megatron-LM): v model chunks per device, flushed per batch.
#include <algorithm>
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {
namespace {

// Megatron's forward_backward_pipelining_with_interleaving, per batch of m microbatches on rank r: virtual
// microbatch k = 0..m*v-1 has forward chunk cF(k) = (k mod pv) div p, backward chunk v-1-cF(k) and
// microbatch (k div pv)*p + k mod p. warm = m*v when m == p, else min(2(p-r-1) + (v-1)p, m*v); then pairs
// F(k+warm), B(k); then the remaining backwards. With one chunk the schedule is plain 1F1B with flush.
// With d replicas per stage (data parallelism) each pipeline copy runs m / d microbatches in that order.
class InterleavedGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "interleaved"; }
    std::string_view description() const override
    {
        return "Interleaved 1F1B (Megatron-LM): v chunks per device shrink the flush bubble by v; microbatches "
               "per pipeline copy must be a multiple of the pipeline depth";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.chunks = ChunkRule::WholeRounds, .replicas_alike = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        if (std::max(1, plan.schedule.chunks) == 1)
            return generateFlushedOneFOneB(plan, name());
        ScheduleBuilder b(plan, name());
        const int p = b.depth();
        const int v = b.chunks();
        const int m = b.microbatchesPerBatch();
        // Replicated stages: d data-parallel copies of the pipeline, every stage on d devices; copy j runs the
        // ids k with k mod d == j (the builder's deviceOf), m / d of them per batch in Megatron's order.
        const int d = b.replicas(0);
        for (int s = 0; s < b.stageCount(); ++s)
            if (b.replicas(s) != d)
                throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                    "'interleaved' runs replicated stages as equal copies of the pipeline, so every stage needs the "
                    "same number of replicas (stage 0 has "
                        + std::to_string(d) + ", stage " + std::to_string(s) + " has " + std::to_string(b.replicas(s))
                        + ")");
        if (m % d != 0 || (m / d) % p != 0)
            throw InputError({}, 0, "/schedule/microbatches",
                "'interleaved' needs the microbatches per batch (" + std::to_string(m) + ") to be a multiple of the "
                    + (d > 1 ? "replicas x pipeline depth " + std::to_string(d) + " x " : "pipeline depth ")
                    + std::to_string(p));
        const int local = m / d; // per pipeline copy and batch
        const int total = local * v;
        const auto chunkOf = [p, v](int k) { return (k % (p * v)) / p; };
        const auto microbatchOf = [p, v](int k) { return (k / (p * v)) * p + k % p; };
        for (int j = 0; j < d; ++j)
            for (int r = 0; r < p; ++r) {
                const int device = b.device(r, j);
                const int warm = local == p ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
                for (int batch = 0; batch < b.batches(); ++batch) {
                    const int base = batch * m + j;
                    oneFOneB(
                        total, warm, [&](int k) { b.forward(chunkOf(k) * p + r, base + d * microbatchOf(k), batch); },
                        [&](int k) { b.backward((v - 1 - chunkOf(k)) * p + r, base + d * microbatchOf(k), batch); });
                    for (int c = 0; c < v; ++c)
                        b.step(device, c * p + r, batch + 1);
                }
            }
        return b.finish();
    }
};

} // namespace

const ScheduleGenerator& interleavedGenerator()
{
    static const InterleavedGenerator generator;
    return generator;
}

} // namespace pw::planner
