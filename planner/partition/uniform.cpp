// SPDX-License-Identifier: MIT
// Uniform: equal layer counts per stage (the first stages take one more when it does not divide).
#include "builtin.h"

namespace pw::planner {
namespace {

class UniformPartitioner final : public Partitioner
{
public:
    std::string_view name() const override { return "uniform"; }
    SharedOptionUse sharedOptions() const override { return {true, true, false}; }
    std::string_view description() const override { return "equal number of layers per stage"; }

    PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token) const override
    {
        std::vector<Diagnostic> diagnostics;
        auto devices = detail::usableDevices(request, diagnostics);
        if (!devices)
            return {std::nullopt, diagnostics};
        const int n = request.model.layerCount();
        const int stages = detail::requestedStages(request, *devices);
        if (stages > n)
            return detail::failure(
                "too-many-stages", std::to_string(stages) + " stages for " + std::to_string(n) + " layers");
        std::vector<int> boundaries;
        int last = -1;
        for (int s = 0; s + 1 < stages; ++s) {
            last += n / stages + (s < n % stages ? 1 : 0);
            boundaries.push_back(last);
        }
        auto result = detail::planFromBoundaries(request, name(), boundaries, *devices);
        if (result.plan)
            result.plan->objective_s = 0;
        if (progress)
            progress(1.0);
        return result;
    }
};

} // namespace

const Partitioner& uniformPartitioner()
{
    static const UniformPartitioner instance;
    return instance;
}

} // namespace pw::planner
