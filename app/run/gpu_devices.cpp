// SPDX-License-Identifier: MIT
#include "gpu_devices.h"

#include <map>
#include <set>

#include "planner/errors.h"
#include "planner/physical_gpu.h"

namespace pw::app {

std::optional<int> cudaDeviceOf(const planner::Cluster& cluster, int device)
{
    const planner::DeviceRef ref = cluster.device(device);
    const auto& gpus = cluster.nodes[static_cast<std::size_t>(ref.node)].gpus;
    if (gpus.empty())
        return std::nullopt;
    return gpus.at(static_cast<std::size_t>(ref.local));
}

agents::Transport runTransport(const planner::Plan& plan)
{
    if (!trainsOnGpus(plan))
        return agents::Transport::Gloo;
    std::set<int> devices; // a device may hold several stages (interleaved schedules)
    for (const auto& stage : plan.stages)
        devices.insert(stage.devices.begin(), stage.devices.end());
    std::set<std::string> gpus;
    for (int d : devices)
        if (!gpus.insert(*planner::physicalGpu(*plan.cluster, d)).second)
            return agents::Transport::Gloo; // two devices on one GPU: NCCL cannot make them two ranks
    return agents::Transport::Nccl;
}

std::vector<std::vector<int>> agentDevices(const planner::Plan& plan)
{
    std::set<int> devices;
    for (const auto& stage : plan.stages)
        devices.insert(stage.devices.begin(), stage.devices.end());
    std::vector<std::vector<int>> agents;
    std::map<std::string, std::size_t> agentOfGpu;
    for (int d : devices) {
        const auto gpu = planner::physicalGpu(*plan.cluster, d);
        if (gpu) {
            if (const auto it = agentOfGpu.find(*gpu); it != agentOfGpu.end()) {
                agents[it->second].push_back(d);
                continue;
            }
            agentOfGpu[*gpu] = agents.size();
        }
        agents.push_back({d});
    }
    return agents;
}

bool trainsOnGpus(const planner::Plan& plan)
{
    bool any = false;
    for (const auto& stage : plan.stages)
        for (int d : stage.devices) {
            if (!cudaDeviceOf(*plan.cluster, d))
                return false;
            any = true;
        }
    return any;
}

agents::Precision gpuPrecision(const planner::Plan& plan)
{
    const std::string weights = planner::weightPrecision(plan.schedule, *plan.model);
    if (weights == "bf16")
        return agents::Precision::Bf16;
    if (weights == "fp32")
        return agents::Precision::Fp32;
    throw planner::InputError({}, 0, "/schedule/precision",
        "the plan's weights are " + weights + ", and the engine trains on a GPU in fp32 or bf16: plan with "
            + "`--precision bf16` or `--precision fp32`");
}

void assignDevices(agents::RunSpec& spec, const planner::Plan& plan)
{
    std::vector<int> cuda;
    bool any = false;
    for (int d : spec.devices) {
        const auto gpu = cudaDeviceOf(*plan.cluster, d);
        cuda.push_back(gpu.value_or(-1));
        any = any || gpu.has_value();
    }
    spec.cuda_devices.clear();
    spec.precision = agents::Precision::Fp32;
    if (!any)
        return;
    spec.cuda_devices = std::move(cuda);
    spec.precision = gpuPrecision(plan);
}

} // namespace pw::app
