// SPDX-License-Identifier: MIT
// 1F1B with a flush after every batch: PipeDream-Flush / Megatron's default schedule, with 1F1B-RR replicas.
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {

Schedule generateFlushedOneFOneB(const Plan& plan, std::string_view kind)
{
    ScheduleBuilder b(plan, kind);
    if (b.chunks() > 1)
        throw InputError({}, 0, "/schedule/chunks",
            "'" + std::string(kind) + "' runs one chunk per device; use 'interleaved' for " + std::to_string(b.chunks())
                + " chunks");
    const int m = b.microbatchesPerBatch();
    for (int s = 0; s < b.stageCount(); ++s) {
        const int r = b.replicas(s);
        // Megatron: warm = min(p - s - 1, m) extra forwards; with replicas ceil(W_s / r_s) - 1.
        const int warm = b.inFlight(s) - 1;
        for (int j = 0; j < r; ++j) {
            for (int batch = 0; batch < b.batches(); ++batch) {
                const auto ids = replicaMicrobatches(batch * m, (batch + 1) * m, j, r);
                oneFOneB(
                    static_cast<int>(ids.size()), warm, [&](int i) { b.forward(s, ids[i], batch); },
                    [&](int i) { b.backward(s, ids[i], batch); });
                b.step(b.device(s, j), s, batch + 1);
            }
        }
    }
    return b.finish();
}

namespace {

class OneFOneBGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "1f1b"; }
    std::string_view description() const override
    {
        return "1F1B with a pipeline flush per batch (PipeDream-Flush, Megatron): one weight version, at most "
               "p stashed microbatches";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.replicas_alike = true};
        return traits;
    }
    Schedule generate(const Plan& plan) const override { return generateFlushedOneFOneB(plan, name()); }
};

} // namespace

const ScheduleGenerator& oneFOneBGenerator()
{
    static const OneFOneBGenerator generator;
    return generator;
}

} // namespace pw::planner
