// SPDX-License-Identifier: MIT
// PipeDream: asynchronous 1F1B without flushes, one update per backward pass, weight stashing.
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {
namespace {

// Inputs = microbatches x iterations, admitted NOAM = ceil(devices / r_0) at a time per input replica; stage
// s keeps ceil(W_s / r_s) in flight. After every backward: all-reduce among the replicas (the n-th backward
// of every replica meets in round n) and a step creating version = steps so far on the device. A forward
// uses the device's latest version and its backward the same one (stashed).
class PipeDreamGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "pipedream"; }
    std::string_view description() const override
    {
        return "PipeDream: asynchronous 1F1B, an update after every backward, weight stashing (stage s keeps "
               "up to p-s versions)";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.synchronous = false,
            .flush_per_batch = false,
            .update_per_backward = true,
            .weight_versions = WeightVersions::InFlight,
            .stash = StashDepth::InFlight,
            .steady_state = SteadyState::LastStagePace,
            .replicas_divide_inputs = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        ScheduleBuilder b(plan, name());
        if (b.chunks() > 1)
            throw InputError({}, 0, "/schedule/chunks", "'pipedream' runs one chunk per device");
        const int total = b.totalMicrobatches();
        for (int s = 0; s < b.stageCount(); ++s)
            if (total % b.replicas(s) != 0) {
                const int valid = pipeDreamMicrobatches(plan);
                throw InputError({}, 0, "/schedule/microbatches",
                    "'pipedream' needs the inputs (microbatches x iterations = " + std::to_string(total)
                        + ") to be a multiple of every stage's replica count; stage " + std::to_string(s) + " has "
                        + std::to_string(b.replicas(s)) + " replicas"
                        + (valid > 0 ? "; use " + std::to_string(valid) + " microbatches (--microbatches "
                                    + std::to_string(valid) + ")"
                                     : std::string("; no microbatch count within the limits fits")));
            }
        std::vector<int> stashed;
        for (int s = 0; s < b.stageCount(); ++s) {
            const int r = b.replicas(s);
            for (int j = 0; j < r; ++j) {
                const int device = b.device(s, j);
                const auto ids = replicaMicrobatches(0, total, j, r);
                stashed.assign(ids.size(), 0);
                int latest = 0;
                oneFOneB(
                    static_cast<int>(ids.size()), b.inFlight(s) - 1,
                    [&](int i) {
                        stashed[i] = latest;
                        b.forward(s, ids[i], latest);
                    },
                    [&](int i) {
                        b.backward(s, ids[i], stashed[i]);
                        b.step(device, s, ++latest);
                    });
            }
        }
        return b.finish();
    }
};

} // namespace

const ScheduleGenerator& pipedreamGenerator()
{
    static const PipeDreamGenerator generator;
    return generator;
}

} // namespace pw::planner
