// SPDX-License-Identifier: MIT
#include "physical_gpu.h"

#include <map>
#include <sstream>

namespace pw::planner {

std::optional<std::string> physicalGpu(const Cluster& cluster, int device)
{
    const DeviceRef ref = cluster.device(device);
    const auto& node = cluster.nodes.at(static_cast<std::size_t>(ref.node));
    if (node.gpus.empty())
        return std::nullopt;
    const int gpu = node.gpus.at(static_cast<std::size_t>(ref.local));
    std::string physical = std::to_string(gpu);
    // The mask renumbers the visible GPUs: index k of the agent's is the mask's k-th entry. A redacted mask is
    // unknown; the index then stands for itself.
    if (const auto mask = node.env.find("CUDA_VISIBLE_DEVICES");
        mask != node.env.end() && mask->second != kRedactedValue) {
        std::istringstream entries(mask->second);
        std::string entry;
        for (int k = 0; std::getline(entries, entry, ','); ++k)
            if (k == gpu)
                physical = entry;
    }
    return (node.host.empty() ? node.name : node.host) + "/" + physical;
}

std::vector<int> sharedGpus(const Cluster& cluster, const std::vector<int>& devices)
{
    std::map<std::string, std::vector<int>> byGpu;
    std::vector<std::string> order;
    for (int d : devices)
        if (const auto gpu = physicalGpu(cluster, d)) {
            auto& members = byGpu[*gpu];
            if (members.empty())
                order.push_back(*gpu);
            members.push_back(d);
        }
    std::vector<int> out(static_cast<std::size_t>(cluster.deviceCount()), -1);
    int next = 0;
    for (const auto& gpu : order)
        if (const auto& members = byGpu[gpu]; members.size() > 1) {
            for (int d : members)
                out.at(static_cast<std::size_t>(d)) = next;
            ++next;
        }
    return out;
}

} // namespace pw::planner
