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
class InterleavedGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "interleaved"; }
    std::string_view description() const override
    {
        return "Interleaved 1F1B (Megatron-LM): v chunks per device shrink the flush bubble by v; microbatches "
               "must be a multiple of the pipeline depth";
    }

    Schedule generate(const Plan& plan) const override
    {
        if (std::max(1, plan.schedule.chunks) == 1)
            return generateFlushedOneFOneB(plan, name());
        ScheduleBuilder b(plan, name());
        const int p = b.depth();
        const int v = b.chunks();
        const int m = b.microbatchesPerBatch();
        if (b.replicated())
            throw InputError({}, 0, "/stages",
                "'interleaved' with " + std::to_string(v)
                    + " chunks needs one device per stage (replicated stages are not supported)");
        if (m % p != 0)
            throw InputError({}, 0, "/schedule/microbatches",
                "'interleaved' needs the microbatches per batch (" + std::to_string(m)
                    + ") to be a multiple of the pipeline depth " + std::to_string(p));
        const int total = m * v;
        const auto chunkOf = [p, v](int k) { return (k % (p * v)) / p; };
        const auto microbatchOf = [p, v](int k) { return (k / (p * v)) * p + k % p; };
        for (int r = 0; r < p; ++r) {
            const int device = b.device(r, 0);
            const int warm = m == p ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
            for (int batch = 0; batch < b.batches(); ++batch) {
                const int base = batch * m;
                oneFOneB(
                    total, warm, [&](int k) { b.forward(chunkOf(k) * p + r, base + microbatchOf(k), batch); },
                    [&](int k) { b.backward((v - 1 - chunkOf(k)) * p + r, base + microbatchOf(k), batch); });
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
