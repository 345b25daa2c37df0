// SPDX-License-Identifier: MIT
// The model-parallel groups the simulator runs once (model_parallel_groups.h).
#include "model_parallel_groups.h"

#include <algorithm>
#include <map>
#include <utility>

namespace pw::planner {

namespace {

double perDevice(const std::vector<double>& values, int d)
{
    return static_cast<std::size_t>(d) < values.size() ? values[static_cast<std::size_t>(d)] : 0.0;
}

} // namespace

ModelParallelGroups groupsOf(const Plan& plan, int D)
{
    ModelParallelGroups g;
    const int t = plan.modelParallel();
    if (t < 2 || D != plan.cluster->deviceCount())
        return g;
    std::vector<int> members(static_cast<std::size_t>(D) * t, -1), leader(D, -1);
    for (const auto& st : plan.stages) {
        if (st.devices.size() % t != 0)
            return g;
        for (std::size_t first = 0; first < st.devices.size(); first += t) {
            const int lead = st.devices[first];
            for (int j = 0; j < t; ++j) {
                const int d = st.devices[first + j];
                if (d < 0 || d >= D)
                    return g;
                auto& m = members[static_cast<std::size_t>(lead) * t + j];
                if ((m >= 0 && m != d) || (leader[d] >= 0 && leader[d] != lead))
                    return g; // a device in two groups, or a group that differs between stages
                m = d;
                leader[d] = lead;
            }
        }
    }
    for (int d = 0; d < D; ++d)
        if (leader[d] < 0)
            leader[d] = d;
    g.size = t;
    g.members = std::move(members);
    g.leader = std::move(leader);
    return g;
}

ModelParallelGroups modelParallelGroups(const Plan& plan, const Schedule& s, const CostModel& cost)
{
    const int D = s.num_devices;
    ModelParallelGroups g = groupsOf(plan, D);
    if (!g.active())
        return g;
    const int t = g.size;
    const auto& members = g.members;
    const auto& leader = g.leader;
    ModelParallelGroups none;
    // Every member costs what its leader does (the same stage, replica offset j).
    for (int st = 0; st < plan.stageCount(); ++st) {
        const auto& devices = plan.stages[st].devices;
        for (std::size_t r = 0; r < devices.size(); ++r) {
            const int lead = static_cast<int>(r - r % t);
            const auto& c = cost;
            if (c.forward(st, static_cast<int>(r)) != c.forward(st, lead)
                || c.backward(st, static_cast<int>(r)) != c.backward(st, lead)
                || c.recompute(st, static_cast<int>(r)) != c.recompute(st, lead)
                || c.backwardWeight(st, static_cast<int>(r)) != c.backwardWeight(st, lead)
                || perDevice(c.device_memory_capacity, devices[r]) != perDevice(c.device_memory_capacity, devices[lead])
                || perDevice(c.device_memory_bandwidth, devices[r])
                    != perDevice(c.device_memory_bandwidth, devices[lead]))
                return none;
        }
    }
    // Collectives of a member and of its leader: the same size, purpose, stage and charge (memoised per pair).
    std::map<std::pair<int, int>, bool> alikeGroups;
    const auto alike = [&](int a, int b) {
        if (a == b)
            return true;
        if (a < 0 || b < 0 || a >= static_cast<int>(s.groups.size()) || b >= static_cast<int>(s.groups.size()))
            return false;
        auto [it, added] = alikeGroups.try_emplace({a, b}, false);
        if (added) {
            const auto &x = s.groups[a], &y = s.groups[b];
            const auto shard = [&](const CollectiveGroup& group) {
                const std::size_t n = cost.shard_group > 0
                    ? std::min<std::size_t>(group.devices.size(), static_cast<std::size_t>(cost.shard_group))
                    : group.devices.size();
                return cost.groupLink({group.devices.begin(), group.devices.begin() + n});
            };
            it->second = x.devices.size() == y.devices.size() && x.purpose == y.purpose && x.stage == y.stage
                && cost.groupLink(x.devices) == cost.groupLink(y.devices) && shard(x) == shard(y);
        }
        return it->second;
    };
    for (int lead = 0; lead < D; ++lead) {
        if (leader[lead] != lead)
            continue; // a member: compared with its leader
        if (g.member(lead, 0) != lead) {
            if (!s.devices[lead].empty())
                return none; // a device outside every group runs a program
            continue;
        }
        const auto& mine = s.devices[lead];
        for (int j = 1; j < t; ++j) {
            const auto& theirs = s.devices[members[static_cast<std::size_t>(lead) * t + j]];
            if (theirs.size() != mine.size())
                return none;
            for (std::size_t i = 0; i < mine.size(); ++i) {
                const Action &x = mine[i], &y = theirs[i];
                if (isWaveSync(x.kind) || x.kind != y.kind || x.stage != y.stage || x.microbatch != y.microbatch
                    || x.weight_version != y.weight_version || x.bytes != y.bytes || x.wave != y.wave)
                    return none;
                if (isSend(x.kind) || isRecv(x.kind)) {
                    if (x.peer < 0 || x.peer >= D || g.member(x.peer, 0) != x.peer
                        || y.peer != members[static_cast<std::size_t>(x.peer) * t + j])
                        return none;
                } else if (x.kind == ActionKind::AllReduce && !alike(x.group, y.group)) {
                    return none;
                }
            }
        }
    }
    return g;
}

} // namespace pw::planner
