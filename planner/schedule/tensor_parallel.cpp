// SPDX-License-Identifier: MIT
// Tensor and context parallelism in schedules: generate on the logical plan (one device per model-parallel group of
// t c devices), then give every rank of a group a copy of the group's program (builder.h, "Tensor parallelism").
#include <string>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {

Plan tensorParallelRankPlan(const Plan& plan, int rank)
{
    const int t = plan.modelParallel();
    if (rank < 0 || rank >= t)
        throw InputError("model-parallel rank " + std::to_string(rank) + " of " + std::to_string(t));
    Plan logical = plan;
    logical.tensor_parallel = 1;
    logical.context_parallel = 1;
    logical.schedule.tp_comm_overlap = false; // a rank's own view has no group to overlap with
    for (auto& stage : logical.stages) {
        std::vector<int> devices;
        for (std::size_t i = static_cast<std::size_t>(rank); i < stage.devices.size(); i += t)
            devices.push_back(stage.devices[i]);
        stage.devices = std::move(devices);
    }
    return logical;
}

namespace {

/// expandTensorParallel giving the programs of the first `ranks` members of every group (all t, or 1).
Schedule expand(const Schedule& logical, const Plan& plan, int ranks)
{
    const int t = plan.modelParallel(); // group members: context rank k, tensor rank j at k tp + j
    const int tp = std::max(1, plan.tensor_parallel), cp = std::max(1, plan.context_parallel);
    if (t == 1)
        return logical;
    const int D = plan.cluster->deviceCount();
    // member[leader * t + j]: rank j of the group whose rank 0 is `leader`.
    std::vector<int> member(static_cast<std::size_t>(D) * t, -1);
    for (int s = 0; s < plan.pipelineDepth(); ++s) {
        const auto& devices = plan.stages[s].devices;
        for (std::size_t g = 0; g + t <= devices.size(); g += t)
            for (int j = 0; j < t; ++j)
                member[static_cast<std::size_t>(devices[g]) * t + j] = devices[g + j];
    }
    const auto rankOf = [&](int leader, int j) {
        const int d = leader >= 0 && leader < D ? member[static_cast<std::size_t>(leader) * t + j] : -1;
        if (d < 0)
            throw InputError("tensor parallelism: device " + std::to_string(leader)
                + " of the logical schedule leads no tensor-parallel group");
        return d;
    };

    Schedule out;
    out.kind = logical.kind;
    out.num_devices = logical.num_devices;
    out.num_stages = logical.num_stages;
    out.microbatches = logical.microbatches;
    out.microbatches_per_batch = logical.microbatches_per_batch;
    out.chunks = logical.chunks;
    out.devices.resize(logical.devices.size());
    // Data-parallel all-reduces run among the devices that hold the same weights: group g of the logical schedule
    // becomes tp groups, g tp + j among the tensor-rank-j devices of every replica and context rank (Megatron sums
    // gradients over data and context ranks together).
    for (const auto& group : logical.groups)
        for (int j = 0; j < tp; ++j) {
            CollectiveGroup g {group.stage, {}, group.purpose};
            for (int d : group.devices)
                for (int k = 0; k < cp; ++k)
                    g.devices.push_back(rankOf(d, k * tp + j));
            out.groups.push_back(std::move(g));
        }
    for (int leader = 0; leader < static_cast<int>(logical.devices.size()); ++leader) {
        const auto& list = logical.devices[leader];
        if (list.empty())
            continue;
        for (int j = 0; j < ranks; ++j) {
            auto& copy = out.devices[rankOf(leader, j)];
            copy = list;
            for (auto& a : copy) {
                if (isSend(a.kind) || isRecv(a.kind)) {
                    a.peer = rankOf(a.peer, j);
                    // Scatter/gather: each tensor rank moves its 1/t slice (§4.4.1) of its context rank's 1/c of
                    // the sequence.
                    a.bytes /= t;
                } else if (a.kind == ActionKind::AllReduce) {
                    a.group = a.group * tp + j % tp;
                    a.bytes /= tp; // the rank's shard of the stage's weights
                }
            }
        }
    }
    return out;
}

} // namespace

Schedule expandTensorParallel(const Schedule& logical, const Plan& plan)
{
    return expand(logical, plan, plan.modelParallel());
}

Schedule groupLeaderSchedule(const Schedule& logical, const Plan& plan)
{
    return expand(logical, plan, 1);
}

} // namespace pw::planner
