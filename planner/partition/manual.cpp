// SPDX-License-Identifier: MIT
// Manual: the stage boundaries the user gives (from the command line or by dragging in the app).
#include "builtin.h"

namespace pw::planner {
namespace {

class ManualPartitioner final : public Partitioner
{
public:
    std::string_view name() const override { return "manual"; }
    SharedOptionUse sharedOptions() const override { return {false, true, false}; }
    std::string_view description() const override { return "stage boundaries given by the user"; }

    PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token) const override
    {
        std::vector<Diagnostic> diagnostics;
        auto devices = detail::usableDevices(request, diagnostics);
        if (!devices)
            return {std::nullopt, diagnostics};
        auto result = detail::planFromBoundaries(request, name(), request.options.boundaries, *devices);
        if (result.plan)
            result.plan->algorithm_options = {{"boundaries", request.options.boundaries}};
        if (progress)
            progress(1.0);
        return result;
    }
};

} // namespace

const Partitioner& manualPartitioner()
{
    static const ManualPartitioner instance;
    return instance;
}

} // namespace pw::planner
