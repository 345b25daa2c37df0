// SPDX-License-Identifier: MIT
// simulateDataParallel: a plan's d identical data-parallel pipelines simulated through the fewest of them that fill
// whole nodes, each all-reduce charged as the whole group; the metrics are those of simulating the whole plan.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>

#include "../costs.h"
#include "../schedule/generator.h"
#include "model_parallel_groups.h"
#include "simulation_metrics.h"
#include "simulator.h"

namespace pw::planner {
namespace {

/// How a plan's pipelines reduce: t ranks per model-parallel group (tensor times context ranks), d pipelines, q of
/// them simulated (q t devices of a stage fill whole nodes); `why` is non-empty where they may not be simulated apart.
struct Layout
{
    int t = 1;
    int tp = 1; ///< of which tensor-parallel
    int d = 1;
    int q = 1;
    std::string why;
};

/// `costsOnly`: whether the pipelines cost alike (the cluster and the layout), leaving out what only their simulation
/// needs (the schedule kind, its batches and microbatches, what is recorded).
Layout layoutOf(const Plan& plan, const SimulationOptions& options, bool costsOnly = false)
{
    Layout l;
    auto refuse = [&](std::string why) {
        l.why = std::move(why);
        return l;
    };
    if (!costsOnly && (options.record_spans || options.record_memory))
        return refuse("it records spans or memory counters");
    if (const auto* traits = findScheduleTraits(plan.schedule.kind); !costsOnly && !(traits && traits->replicas_alike))
        return refuse("schedule kind '" + plan.schedule.kind + "' is not known to run its replicas alike");
    if (plan.stages.empty() || plan.pipelineCount() != 1)
        return refuse("it has no stages or several independent pipelines");
    const auto& cluster = *plan.cluster;
    if (cluster.nodes.empty() || !cluster.isHomogeneous())
        return refuse("the cluster is not homogeneous");
    const auto& first = cluster.nodes[0];
    for (const auto& n : cluster.nodes)
        if (n.intra_bandwidth_bytes_per_s != first.intra_bandwidth_bytes_per_s
            || n.intra_latency_s != first.intra_latency_s || n.inter_node_links != first.inter_node_links)
            return refuse("its nodes' links differ");
    const int perNode = first.count;
    l.t = plan.modelParallel();
    l.tp = std::max(1, plan.tensor_parallel);
    const std::size_t replicas = plan.stages[0].devices.size();
    for (const auto& st : plan.stages)
        if (st.devices.size() != replicas)
            return refuse("its stages have different numbers of replicas");
    if (perNode <= 0 || replicas % l.t != 0)
        return refuse("its stages' devices are not whole tensor-parallel groups");
    l.d = static_cast<int>(replicas) / l.t;
    l.q = std::lcm(l.t, perNode) / l.t;
    if (l.d % l.q != 0 || l.q >= l.d)
        return refuse("no fewer than its " + std::to_string(l.d) + " pipelines fill whole nodes");
    // Transfers that share an uplink (tensor-parallel ranks, pipelines of a node) take turns in the order the dataflow
    // reaches them. That order is the same in every block of nodes and in the reduced run until the first all-reduce
    // ends, which releases the members of all blocks in turn: after it, with another batch to run, blocks may differ.
    if (!costsOnly && plan.schedule.iterations > 1)
        return refuse("it runs " + std::to_string(plan.schedule.iterations)
            + " batches, whose transfers after an all-reduce may take their turns differently in every pipeline");
    if (!costsOnly && (plan.schedule.microbatches < l.d || plan.schedule.microbatches % l.d != 0))
        return refuse("its microbatches do not split evenly among its pipelines");
    // Each block of q pipelines of a stage: consecutive devices from a node's first on, so whole nodes that hold
    // nothing else (a device is in one physical stage), laid out like every other block. The physical stages in
    // device order, as their reduced copies: the simulator then meets each block's devices in the same order.
    const int block = l.q * l.t;
    for (int r = 1; r < plan.pipelineDepth(); ++r)
        if (plan.stages[r].devices[0] <= plan.stages[r - 1].devices[0])
            return refuse("its stages are not in device order");
    for (const auto& st : plan.stages)
        for (std::size_t b = 0; b < replicas; b += block) {
            const int start = st.devices[b];
            if (start % perNode != 0)
                return refuse("a node holds devices of two stages or of pipelines simulated apart");
            for (int i = 1; i < block; ++i)
                if (st.devices[b + i] != start + i)
                    return refuse("a pipeline's devices of a stage are not consecutive");
        }
    return l;
}

/// The plan on q of its pipelines: each stage keeps its first q t devices, renumbered onto as many nodes of the
/// same kind, and q/d of the microbatches.
Plan reducedPlan(const Plan& plan, const Layout& l, std::vector<int>& reducedOf)
{
    const auto& cluster = *plan.cluster;
    const int block = l.q * l.t, depth = plan.pipelineDepth();
    const int perNode = cluster.nodes[0].count;
    Cluster small = cluster.firstNodes(depth * block / perNode);
    // Every device of the whole plan to its counterpart: block b of physical stage r, offset i -> r q t + i.
    reducedOf.assign(cluster.deviceCount(), -1);
    for (int r = 0; r < depth; ++r) {
        const auto& devices = plan.stages[r].devices;
        for (std::size_t k = 0; k < devices.size(); ++k)
            reducedOf[devices[k]] = r * block + static_cast<int>(k % block);
    }
    Plan reduced = plan;
    reduced.cluster = Shared<Cluster>(std::move(small));
    for (auto& st : reduced.stages) {
        std::vector<int> devices;
        for (int i = 0; i < block; ++i)
            devices.push_back(reducedOf[st.devices[i]]);
        st.devices = std::move(devices);
    }
    reduced.schedule.microbatches = plan.schedule.microbatches / l.d * l.q;
    // HSDP's groups are the whole plan's: q replicas need not split into them (wholeGroupShares and the stand-in rings
    // charge the whole plan's shards and sums).
    reduced.schedule.shard_group = 0;
    return reduced;
}

/// One pipeline (q = 1) has no data-parallel group, so its generator adds no all-reduce: the ones it would add with
/// replicas,
/// one group per (stage, tensor-parallel rank) and an all-reduce of the rank's share of the stage's gradients before
/// each optimizer step (ScheduleBuilder::step, expandTensorParallel).
void addAllReduces(Schedule& schedule, const Plan& reduced, int t, int tp)
{
    const double gradientScale = gradientBytesPerWeightByte(reduced.schedule, *reduced.model);
    std::vector<double> bytes;
    for (int s = 0; s < reduced.stageCount(); ++s) {
        const auto& st = reduced.stages[s];
        double weights = 0.0;
        for (int pos = st.first_layer; pos <= st.last_layer; ++pos)
            weights += reduced.model->layers.at(reduced.layerAt(pos)).weight_bytes;
        bytes.push_back(weights * gradientScale / tp); // a tensor rank's share; context ranks hold it all
    }
    const int base = static_cast<int>(schedule.groups.size()); // the tied weights' groups, when there are some
    for (int s = 0; s < reduced.stageCount(); ++s)
        for (int j = 0; j < t; ++j)
            schedule.groups.push_back({s, {reduced.stages[s].devices[j]}});
    for (int dev = 0; dev < schedule.num_devices; ++dev) {
        auto& list = schedule.devices[dev];
        std::vector<Action> out;
        out.reserve(list.size() + list.size() / 8);
        bool added = false; // this step's replicas' all-reduce, which goes before its tied weights' one
        for (const auto& a : list) {
            const bool tied = a.kind == ActionKind::AllReduce
                && schedule.groups[static_cast<std::size_t>(a.group)].purpose == CollectivePurpose::TiedWeights;
            if ((tied || a.kind == ActionKind::OptimizerStep) && !added) {
                const auto& devices = reduced.stages[a.stage].devices;
                const int j = static_cast<int>(std::find(devices.begin(), devices.end(), dev) - devices.begin());
                out.push_back({ActionKind::AllReduce, a.stage, -1, -1, 0, base + a.stage * t + j, bytes[a.stage]});
                added = true;
            }
            if (a.kind == ActionKind::OptimizerStep)
                added = false;
            out.push_back(a);
        }
        list = std::move(out);
    }
}

/// The optimizer state as the whole group keeps it: the distributed optimizer shards it over the plan's d
/// replicas, not over the q of `reduced` (issue 31: the search's simulation ignored --distributed-optimizer). So do
/// ZeRO's shards of gradients and weights, and FSDP's gathers over the whole group's d members and link.
void wholeGroupShares(const Plan& plan, CostModel& cost)
{
    if (!plan.schedule.distributed_optimizer)
        return;
    cost.shard_group = plan.schedule.shard_group; // the reduced plan has none (reducedPlan)
    const auto speeds = deviceSpeeds(plan.model, plan.cluster); // once: each reads every layer
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& type = plan.cluster->typeOf(plan.stages[s].devices.at(0));
        const auto whole = stageTotals(plan, s, type, speeds.at(plan.cluster->findType(type.name)).factor);
        const auto at = static_cast<std::size_t>(s);
        cost.stage_optimizer_bytes[at] = whole.optimizer_bytes;
        cost.stage_resident_weight_bytes[at] = whole.resident_weight_bytes;
        cost.stage_gradient_bytes[at] = whole.gradient_bytes;
        if (!plan.schedule.shard_weights)
            continue;
        const double forward
            = pipelinedCommunicationSeconds(whole.weight_gather_forward_s, whole.forward_s, whole.weight_layers);
        const double backward = pipelinedCommunicationSeconds(
            whole.weight_gather_backward_s, whole.backward_s + whole.recompute_s, whole.weight_layers);
        // Every replica's entry (one per group with groupLeaderCosts).
        const std::size_t end = at + 1 < cost.stage_offset.size() ? static_cast<std::size_t>(cost.stage_offset[at + 1])
                                                                  : cost.forward_s.size();
        for (std::size_t i = static_cast<std::size_t>(cost.stage_offset[at]); i < end; ++i) {
            cost.forward_s[i] += forward - cost.weight_gather_forward_s[i];
            cost.backward_s[i] += backward - cost.weight_gather_backward_s[i];
            cost.weight_gather_forward_s[i] = forward;
            cost.weight_gather_backward_s[i] = backward;
        }
    }
}

} // namespace

std::string dataParallelAsymmetry(const Plan& plan, const SimulationOptions& options)
{
    return layoutOf(plan, options).why;
}

std::optional<CostModel> reducedCostModel(const Plan& plan, Plan& reduced)
{
    const Layout l = layoutOf(plan, {}, true);
    if (!l.why.empty())
        return std::nullopt;
    std::vector<int> reducedOf;
    reduced = reducedPlan(plan, l, reducedOf);
    reduced.schedule.microbatches = std::max(1, reduced.schedule.microbatches);
    CostModel cost = CostModel::groupLeaderCosts(reduced);
    wholeGroupShares(plan, cost);
    return cost;
}

SimulationResult simulateDataParallel(const Plan& plan, const SimulationOptions& options)
{
    const Layout l = layoutOf(plan, options);
    if (!l.why.empty())
        return simulate(plan, options);
    std::vector<int> reducedOf;
    const Plan reduced = reducedPlan(plan, l, reducedOf);
    Schedule schedule = generateGroupLeaderSchedule(reduced); // each model-parallel group runs once
    if (l.q == 1)
        addAllReduces(schedule, reduced, l.t, l.tp);
    CostModel cost = CostModel::fromPlan(reduced);
    wholeGroupShares(plan, cost);
    // Each stage's all-reduces are charged as the whole group's ring: d c members (the replicas' context ranks) and
    // the slowest link they cross (groupLink on the whole cluster's nodes; every tensor-parallel rank's group crosses
    // alike).
    const auto& cluster = *plan.cluster;
    CostModel whole;
    for (const auto& ref : cluster.devices())
        whole.device_node.push_back(ref.node);
    for (const auto& node : cluster.nodes)
        whole.node_links.push_back({node.intra_bandwidth_bytes_per_s, node.intra_latency_s});
    whole.inter_node = {cluster.inter_node_bandwidth_bytes_per_s, cluster.inter_node_latency_s};
    for (const auto& st : plan.stages) {
        std::vector<int> group;
        const int members = l.d * (l.t / l.tp);
        for (int k = 0; k < members; ++k)
            group.push_back(st.devices[static_cast<std::size_t>(k) * l.tp]);
        // HSDP's groups: the first s members (consecutive replicas, as Megatron orders them).
        const int s = shardGroupSize(plan.schedule, members);
        cost.stage_rings.push_back(
            {members, whole.groupLink(group), whole.groupLink({group.begin(), group.begin() + s})});
    }
    SimulationResult part = simulateGroupLeaders(reduced, schedule, cost, options);

    // Every device gets its counterpart's metrics; the run's metrics are recomputed over all of them.
    const int D = cluster.deviceCount();
    SimulationResult r;
    r.timeline.source = part.timeline.source;
    r.timeline.label = part.timeline.label;
    for (int dev = 0; dev < D; ++dev)
        r.timeline.device_names.push_back(cluster.deviceName(dev));
    r.makespan_s = part.makespan_s;
    r.iteration_time_s = part.iteration_time_s;
    r.batch_ends_s = part.batch_ends_s;
    r.stages = part.stages;
    r.simulated_actions = part.simulated_actions;
    r.devices.resize(D);
    std::vector<bool> used(D, false);
    // The reduced device whose program a device runs (its model-parallel group's first, as the simulation ran it).
    const ModelParallelGroups groups = groupsOf(reduced, schedule.num_devices);
    const auto leaderOf = [&groups](int d) { return groups.active() ? groups.leader[d] : d; };
    for (int dev = 0; dev < D; ++dev) {
        if (reducedOf[dev] >= 0) {
            r.devices[dev] = part.devices[reducedOf[dev]];
            r.devices[dev].bubble_fraction = 0;
            used[dev] = !schedule.devices[leaderOf(reducedOf[dev])].empty();
        } else {
            r.devices[dev].memory_capacity_bytes = cluster.typeOf(dev).memory_bytes;
        }
    }
    bubbleMetrics(r, used);
    r.throughput_samples_per_s = throughput(plan, plan.schedule.microbatches, r.iteration_time_s);
    return r;
}

} // namespace pw::planner
