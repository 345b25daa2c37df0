// SPDX-License-Identifier: MIT
// PipeDream's hierarchy levels for a request, shared by the paper and reference variants.
#include "../errors.h"
#include "builtin.h"

namespace pw::planner::detail {

/// Levels for the first `devices` devices: the cluster's hierarchy when they form whole nodes of equal
/// size, one flat level at the slowest link otherwise (or when asked).
std::vector<HierarchyLevel> pipeDreamLevels(const PartitionRequest& request, int devices, std::vector<Diagnostic>& diag)
{
    const auto& c = request.cluster;
    auto flat = [&] {
        std::vector<int> group(devices);
        for (int d = 0; d < devices; ++d)
            group[d] = d;
        return std::vector<HierarchyLevel> {{devices, devices > 1 ? c->groupBandwidth(group) : 0.0}};
    };
    if (request.options.flat)
        return flat();
    std::vector<HierarchyLevel> levels;
    try {
        levels = c->hierarchy();
    } catch (const InputError& e) {
        diag.push_back(
            {Diagnostic::Severity::Warning, "flat-hierarchy", std::string(e.message()) + "; planning one flat level"});
        return flat();
    }
    const int perNode = levels[0].count;
    if (devices == c->deviceCount())
        return levels;
    if (devices % perNode == 0) {
        int nodes = devices / perNode;
        levels.resize(nodes > 1 ? 2 : 1);
        if (nodes > 1)
            levels[1].count = nodes;
        return levels;
    }
    if (devices < perNode)
        return {{devices, levels[0].bandwidth_bytes_per_s}};
    diag.push_back({Diagnostic::Severity::Warning, "flat-hierarchy",
        std::to_string(devices) + " devices are not whole nodes of " + std::to_string(perNode)
            + "; planning one flat level"});
    return flat();
}

std::string levelsText(const std::vector<HierarchyLevel>& levels)
{
    std::string s;
    for (const auto& l : levels)
        s += (s.empty() ? "" : " x ") + std::to_string(l.count);
    return s;
}

} // namespace pw::planner::detail
