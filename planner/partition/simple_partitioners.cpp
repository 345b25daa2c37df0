// SPDX-License-Identifier: MIT
// Helpers shared by the uniform, parameters and manual partitioners.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "../schedule/traits.h"
#include "builtin.h"

namespace pw::planner::detail {

int requestedStages(const PartitionRequest& request, int devices)
{
    int p = request.options.stages > 0 ? request.options.stages : devices;
    return p * std::max(1, request.options.schedule.chunks);
}

PartitionResult planFromBoundaries(
    const PartitionRequest& request, std::string_view algorithm, const std::vector<int>& boundaries, int devices)
{
    const int n = request.model->layerCount();
    const int stages = static_cast<int>(boundaries.size()) + 1;
    const int v = std::max(1, request.options.schedule.chunks);
    if (stages % v != 0)
        return failure("bad-chunks",
            std::to_string(stages) + " stages cannot be split into " + std::to_string(v) + " chunks per device");
    const int p = stages / v;
    if (p > devices)
        return failure("too-many-stages",
            std::to_string(p) + " pipeline stages need at least " + std::to_string(p) + " devices, only "
                + std::to_string(devices) + " available");
    int prev = -1;
    for (std::size_t i = 0; i < boundaries.size(); ++i) {
        int b = boundaries[i];
        if (b <= prev || b >= n - 1)
            return failure("bad-boundaries",
                "boundary " + std::to_string(i) + " (" + std::to_string(b) + ") must be increasing and within 0.."
                    + std::to_string(n - 2));
        prev = b;
    }
    Plan plan = basePlan(request, algorithm);
    const int replicas = request.options.straight ? 1 : devices / p;
    // Virtual stages reuse the physical stages' devices in a loop, or in a V for a kind that runs two chunks so.
    const auto* traits = findScheduleTraits(request.options.schedule.kind);
    const bool vShape = traits && traits->chunks == ChunkRule::V && v == 2;
    int first = 0;
    for (int s = 0; s < stages; ++s) {
        PlanStage st;
        st.first_layer = first;
        st.last_layer = s + 1 < stages ? boundaries[s] : n - 1;
        const int physical = s < p ? s : vShape ? 2 * p - 1 - s : s % p;
        for (int r = 0; r < replicas; ++r)
            st.devices.push_back(physical * replicas + r);
        first = st.last_layer + 1;
        plan.stages.push_back(std::move(st));
    }
    std::vector<Diagnostic> diagnostics;
    if (replicas * p < devices)
        diagnostics.push_back({Diagnostic::Severity::Info, "unused-devices",
            std::to_string(devices - replicas * p) + " device(s) left unused"});
    return validated(std::move(plan), std::move(diagnostics));
}

std::vector<int> balancedBoundaries(const std::vector<double>& weights, int parts)
{
    const int n = static_cast<int>(weights.size());
    parts = std::clamp(parts, 1, std::max(1, n));
    // Greedy: fewest ranges with sums <= cap. Feasible caps are monotone, so bisect on candidate sums.
    auto cuts = [&](double cap, std::vector<int>* out) {
        int count = 1;
        double sum = 0;
        for (int i = 0; i < n; ++i) {
            if (weights[i] > cap)
                return n + 1;
            if (sum + weights[i] > cap) {
                if (out)
                    out->push_back(i - 1);
                ++count;
                sum = 0;
            }
            sum += weights[i];
        }
        return count;
    };
    double lo = *std::max_element(weights.begin(), weights.end());
    double hi = std::accumulate(weights.begin(), weights.end(), 0.0);
    for (int iter = 0; iter < 200 && hi - lo > 1e-12 * std::max(1.0, hi); ++iter) {
        double mid = 0.5 * (lo + hi);
        if (cuts(mid, nullptr) <= parts)
            hi = mid;
        else
            lo = mid;
    }
    std::vector<int> out;
    cuts(hi, &out);
    // Fewer ranges than asked: split the widest ranges (never raises the bottleneck).
    while (static_cast<int>(out.size()) + 1 < parts) {
        std::vector<int> starts {0};
        for (int b : out)
            starts.push_back(b + 1);
        starts.push_back(n);
        int best = -1, width = 1;
        for (std::size_t r = 0; r + 1 < starts.size(); ++r)
            if (starts[r + 1] - starts[r] > width) {
                width = starts[r + 1] - starts[r];
                best = static_cast<int>(r);
            }
        if (best < 0)
            break;
        out.push_back(starts[best] + width / 2 - 1);
        std::sort(out.begin(), out.end());
    }
    return out;
}

} // namespace pw::planner::detail
