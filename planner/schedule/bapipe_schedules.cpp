// SPDX-License-Identifier: MIT
// BaPipe's flushed 1F1B variants: 1F1B-SO (doubled warm-up hides communication) and 1F1B-AS (streamed transfers).
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {
namespace {

// BaPipe (Zhao et al.) Table II, digest §2.3: stage i of N (1-based) runs W_i warm-up forwards and then
// alternates F and B. 1F1B-SNO is the project's "1f1b" (W_i = N - i, N - i + 1 in flight); 1F1B-SO doubles
// the microbatches in flight to 2(N - i + 1), i.e. W_i = 2(N - i) + 1, so that the transfers of one
// microbatch overlap the computation of the next ones. With replicas the straight count N - i + 1 is the
// builder's ceil(W_s / r_s); an explicit schedule.in_flight is used as given.
class OneFOneBSoGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "1f1b-so"; }
    std::string_view description() const override
    {
        return "BaPipe's 1F1B-SO: 1F1B with a flush per batch and twice the warm-up (2(p-s) in flight) so that "
               "communication overlaps computation; twice 1f1b's stashed activations";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.in_flight_factor = 2};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        ScheduleBuilder b(plan, name());
        if (b.chunks() > 1)
            throw InputError({}, 0, "/schedule/chunks", "'1f1b-so' runs one chunk per device");
        const bool given = !plan.schedule.in_flight.empty();
        const int m = b.microbatchesPerBatch();
        for (int s = 0; s < b.stageCount(); ++s) {
            const int r = b.replicas(s);
            const int inFlight = given ? b.inFlight(s) : 2 * b.inFlight(s);
            for (int j = 0; j < r; ++j) {
                for (int batch = 0; batch < b.batches(); ++batch) {
                    const auto ids = replicaMicrobatches(batch * m, (batch + 1) * m, j, r);
                    oneFOneB(
                        static_cast<int>(ids.size()), inFlight - 1, [&](int i) { b.forward(s, ids[i], batch); },
                        [&](int i) { b.backward(s, ids[i], batch); });
                    b.step(b.device(s, j), s, batch + 1);
                }
            }
        }
        return b.finish();
    }
};

// BaPipe's asynchronous mode (Table I, digest §2.2): an accelerator streams its output while computing, so a
// transfer overlaps the op that produces it. The op order is the flushed 1F1B's; the simulator times the
// transfers of this kind as streamed (ScheduleTraits::streams_transfers). Every device of the plan must declare
// streaming_execution in its device type.
class OneFOneBAsGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "1f1b-as"; }
    std::string_view description() const override
    {
        return "BaPipe's 1F1B-AS: flushed 1F1B on streaming accelerators (device types with streaming_execution); "
               "transfers overlap the op producing them";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.streams_transfers = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        for (std::size_t s = 0; s < plan.stages.size(); ++s)
            for (int d : plan.stages[s].devices) {
                if (d < 0 || d >= plan.cluster.deviceCount())
                    continue; // the builder reports it
                const auto& type = plan.cluster.typeOf(d);
                if (!type.streaming_execution)
                    throw InputError({}, 0, "/schedule/kind",
                        "'1f1b-as' needs streaming accelerators, but stage " + std::to_string(s) + " runs on '"
                            + type.name + "', whose device type does not set streaming_execution");
            }
        return generateFlushedOneFOneB(plan, name());
    }
};

} // namespace

const ScheduleGenerator& oneFOneBSoGenerator()
{
    static const OneFOneBSoGenerator generator;
    return generator;
}

const ScheduleGenerator& oneFOneBAsGenerator()
{
    static const OneFOneBAsGenerator generator;
    return generator;
}

} // namespace pw::planner
