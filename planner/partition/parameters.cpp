// SPDX-License-Identifier: MIT
// Balanced by parameters (DeepSpeed's `parameters` method): stages with the most even weight bytes.
#include <algorithm>

#include "builtin.h"

namespace pw::planner {
namespace {

class ParametersPartitioner final : public Partitioner
{
public:
    std::string_view name() const override { return "parameters"; }
    SharedOptionUse sharedOptions() const override { return {true, true, false}; }
    std::string_view description() const override
    {
        return "contiguous stages minimising the largest stage's parameter bytes (DeepSpeed 'parameters')";
    }

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
        std::vector<double> weights;
        for (const auto& l : request.model.layers)
            weights.push_back(l.weight_bytes);
        auto result
            = detail::planFromBoundaries(request, name(), detail::balancedBoundaries(weights, stages), *devices);
        if (result.plan) {
            double worst = 0;
            for (const auto& st : result.plan->stages) {
                double sum = 0;
                for (int l = st.first_layer; l <= st.last_layer; ++l)
                    sum += weights[l];
                worst = std::max(worst, sum);
            }
            result.plan->algorithm_options = {{"largest_stage_weight_bytes", worst}};
        }
        if (progress)
            progress(1.0);
        return result;
    }
};

} // namespace

const Partitioner& parametersPartitioner()
{
    static const ParametersPartitioner instance;
    return instance;
}

} // namespace pw::planner
