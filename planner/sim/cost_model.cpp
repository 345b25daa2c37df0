// SPDX-License-Identifier: MIT
// The simulator's cost model: what an action costs (compute per replica, links, collectives, parameter servers,
// optimizer steps) and the bytes it moves or keeps, built from a plan (CostModel::fromPlan) or injected.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "../costs.h"
#include "../errors.h"
#include "simulator.h"

namespace pw::planner {

namespace {

constexpr std::size_t kMaxBuckets = 32;

/// A layer's backward time on `type` up to a factor common to the stage's layers (only the shares matter): its
/// measured time for that type when profiled, else the profile's.
double backwardShare(const Layer& layer, const DeviceType& type)
{
    if (isDataSource(layer))
        return 0;
    const auto it = layer.device_times.find(type.name);
    return it != layer.device_times.end() ? it->second.backward_ms : layer.backward_ms;
}

/// A stage's all-reduce buckets: one per layer with weights, in backward order (last layer first), each final when
/// the backward has run the layers from the stage's end down to it; merged to at most kMaxBuckets.
std::vector<GradientBucket> gradientBuckets(const Plan& plan, int s)
{
    const auto& stage = plan.stages[s];
    if (stage.devices.empty())
        return {GradientBucket {}};
    const auto& type = plan.cluster->typeOf(stage.devices[0]);
    std::vector<std::pair<double, double>> layers; // (weight bytes, backward ms up to and including it)
    double weights = 0, backward = 0;
    for (int pos = stage.last_layer; pos >= stage.first_layer; --pos) {
        const auto& layer = plan.model->layers[plan.layerAt(pos)];
        backward += backwardShare(layer, type);
        if (layer.weight_bytes > 0) {
            layers.emplace_back(layer.weight_bytes, backward);
            weights += layer.weight_bytes;
        }
    }
    if (layers.empty() || weights <= 0)
        return {GradientBucket {}};
    const std::size_t per = (layers.size() + kMaxBuckets - 1) / kMaxBuckets;
    std::vector<GradientBucket> buckets;
    for (std::size_t i = 0; i < layers.size(); i += per) {
        GradientBucket b {0, 1};
        const std::size_t end = std::min(layers.size(), i + per);
        for (std::size_t j = i; j < end; ++j)
            b.bytes_fraction += layers[j].first / weights;
        b.ready_fraction = backward > 0 ? std::min(1.0, layers[end - 1].second / backward) : 1.0;
        buckets.push_back(b);
    }
    return buckets;
}

} // namespace

double LinkCost::wireSeconds(double bytes) const
{
    if (bytes <= 0)
        return 0;
    return bandwidth_bytes_per_s > 0 ? bytes / bandwidth_bytes_per_s : std::numeric_limits<double>::infinity();
}

const LinkCost& CostModel::link(int a, int b) const
{
    return sameNode(a, b) ? node_links[device_node[a]] : inter_node;
}

LinkCost CostModel::groupLink(const std::vector<int>& group) const
{
    if (group.size() < 2)
        return {};
    std::map<int, int> perNode;
    for (int d : group)
        perNode[device_node.at(d)] += 1;
    LinkCost slowest {std::numeric_limits<double>::infinity(), 0};
    for (auto [node, members] : perNode)
        if (members > 1) {
            slowest.bandwidth_bytes_per_s
                = std::min(slowest.bandwidth_bytes_per_s, node_links[node].bandwidth_bytes_per_s);
            slowest.latency_s = std::max(slowest.latency_s, node_links[node].latency_s);
        }
    if (perNode.size() > 1) {
        slowest.bandwidth_bytes_per_s = std::min(slowest.bandwidth_bytes_per_s, inter_node.bandwidth_bytes_per_s);
        slowest.latency_s = std::max(slowest.latency_s, inter_node.latency_s);
    }
    return slowest;
}

double CostModel::allReduceSeconds(const std::vector<int>& group, double bytes) const
{
    const int n = static_cast<int>(group.size());
    if (n < 2)
        return 0;
    return ringAllReduceSeconds(n, groupLink(group), bytes);
}

double CostModel::ringAllReduceSeconds(int n, const LinkCost& link, double bytes)
{
    if (n < 2)
        return 0;
    return 2.0 * (n - 1) / n * link.wireSeconds(bytes) + 2.0 * (n - 1) * link.latency_s;
}

double CostModel::parameterServerSeconds(int device, double bytes, bool local) const
{
    const int H = local ? 1 : static_cast<int>(node_links.size()); // local: one server, on this node
    const auto& node = node_links.at(device_node.at(device));
    const double latency = H > 1 ? inter_node.latency_s : node.latency_s;
    if (bytes <= 0)
        return latency;
    double pcie = node.bandwidth_bytes_per_s > 0 ? bytes / node.bandwidth_bytes_per_s : 0.0;
    double remote = H > 1 && inter_node.bandwidth_bytes_per_s > 0
        ? (H - 1.0) / H * bytes / inter_node.bandwidth_bytes_per_s
        : 0.0;
    return latency + std::max(pcie, remote);
}

StageCharge CostModel::charge(int stage, int replica) const
{
    const std::size_t i = static_cast<std::size_t>(stage_offset[stage] + replica);
    const double tpForward = i < tp_forward_s.size() ? tp_forward_s[i] : 0.0;
    const double tpBackward = i < tp_backward_s.size() ? tp_backward_s[i] : 0.0;
    const double gatherForward = i < weight_gather_forward_s.size() ? weight_gather_forward_s[i] : 0.0;
    const double gatherBackward = i < weight_gather_backward_s.size() ? weight_gather_backward_s[i] : 0.0;
    const double cpForward = i < cp_forward_s.size() ? cp_forward_s[i] : 0.0;
    const double cpBackward = i < cp_backward_s.size() ? cp_backward_s[i] : 0.0;
    StageCharge c;
    c.forward_s = forward_s[i] - tpForward - gatherForward - cpForward;
    c.backward_s = backward_s[i] - tpBackward - gatherBackward - cpBackward;
    c.context_parallel_s = cpForward + cpBackward + (i < recompute_cp_s.size() ? recompute_cp_s[i] : 0.0);
    c.weight_gather_s = gatherForward + gatherBackward;
    c.recompute_s = i < recompute_s.size() ? recompute_s[i] : 0.0;
    c.tensor_parallel_s = tpForward + tpBackward + (i < recompute_tp_s.size() ? recompute_tp_s[i] : 0.0);
    return c;
}

double CostModel::recompute(int stage, int replica) const
{
    const std::size_t i = static_cast<std::size_t>(stage_offset[stage] + replica);
    return (i < recompute_s.size() ? recompute_s[i] : 0.0) + (i < recompute_tp_s.size() ? recompute_tp_s[i] : 0.0)
        + (i < recompute_cp_s.size() ? recompute_cp_s[i] : 0.0);
}

double CostModel::backwardWeight(int stage, int replica) const
{
    const std::size_t i = static_cast<std::size_t>(stage_offset[stage] + replica);
    const double compute = backward_s[i] - (i < tp_backward_s.size() ? tp_backward_s[i] : 0.0)
        - (i < weight_gather_backward_s.size() ? weight_gather_backward_s[i] : 0.0)
        - (i < cp_backward_s.size() ? cp_backward_s[i] : 0.0);
    return std::max(0.0, compute) * (i < backward_weight_share.size() ? backward_weight_share[i] : 0.5);
}

double CostModel::optimizerStepSeconds(int device, int stage) const
{
    const double bandwidth = device_memory_bandwidth[device];
    const double bytes = 3 * stage_weight_bytes[stage] + 2 * stage_optimizer_bytes[stage];
    return bandwidth > 0 ? bytes / bandwidth : 0.0;
}

CostModel CostModel::fromPlan(const Plan& plan)
{
    return build(plan, false);
}

CostModel CostModel::groupLeaderCosts(const Plan& plan)
{
    return build(plan, true);
}

CostModel CostModel::build(const Plan& plan, bool leadersOnly)
{
    CostModel c;
    const int S = plan.stageCount();
    auto cut = plan.model->cutBytes(plan.layer_order);
    const double scale = microbatchScale(plan);
    const int tp = std::max(1, plan.tensor_parallel), cp = std::max(1, plan.context_parallel), mp = tp * cp;
    // Every device's node and type in one pass over the nodes (typeOf per device looks both up again); each type's
    // speed once (deviceSpeed reads every layer).
    const auto refs = plan.cluster->devices();
    const auto speeds = deviceSpeeds(plan.model, plan.cluster);
    for (int s = 0; s < S; ++s) {
        c.stage_offset.push_back(static_cast<int>(c.forward_s.size()));
        StageTotals first;
        const auto& devices = plan.stages[s].devices;
        // A stage's totals depend only on the device type, a group's link only on the group: computed once each
        // (a data-parallel stage of 16,384 GPUs has thousands of devices of one type).
        std::vector<std::optional<StageTotals>> byType(plan.cluster->device_types.size());
        double bw = 0, lat = 0;
        std::vector<std::pair<double, double>> ringLink(static_cast<std::size_t>(tp)); // per tensor rank j
        const std::size_t step = leadersOnly ? static_cast<std::size_t>(mp) : 1;
        for (std::size_t r = 0; r < devices.size(); r += step) {
            const int dev = devices[r];
            const int known = dev >= 0 && static_cast<std::size_t>(dev) < refs.size() ? refs[dev].type : -1;
            const DeviceType& type // typeOf throws for an unknown type or device
                = known >= 0 ? plan.cluster->device_types[known] : plan.cluster->typeOf(dev);
            const auto typeIndex = static_cast<std::size_t>(&type - plan.cluster->device_types.data());
            auto& totals = byType[typeIndex];
            if (!totals)
                totals = stageTotals(plan, s, type, speeds[typeIndex].factor);
            const StageTotals& t = *totals;
            double tpForward = 0, tpBackward = 0;
            if (tp > 1) {
                // Tensor parallelism: the rank's share of the compute plus its group's all-reduces (costs.h).
                const std::size_t first = r - r % tp, last = std::min(devices.size(), first + tp);
                if (r == first) {
                    const std::vector<int> group(devices.begin() + first, devices.begin() + last);
                    bw = plan.cluster->groupBandwidth(group);
                    lat = plan.cluster->groupLatency(group);
                }
                tpForward = tensorParallelTime(t.tp_forward_bytes, t.tp_forward_allreduces, tp, bw, lat);
                tpBackward = tensorParallelTime(t.tp_backward_bytes, t.tp_backward_allreduces, tp, bw, lat);
                if (plan.schedule.tp_comm_overlap) {
                    tpForward = overlappedTensorParallelTime(tpForward, t.forward_s, tp);
                    tpBackward = overlappedTensorParallelTime(tpBackward, t.backward_s, tp);
                }
            }
            double cpForward = 0, cpBackward = 0;
            if (cp > 1) {
                // Context parallelism: the ring of tensor rank j's c context ranks (stride t inside the replica).
                const std::size_t i = r % mp, j = i % tp, base = r - i;
                if (i < static_cast<std::size_t>(tp)) { // context rank 0: the group's link, once
                    std::vector<int> ring;
                    for (int k = 0; k < cp; ++k)
                        ring.push_back(devices[base + static_cast<std::size_t>(k) * tp + j]);
                    ringLink[j] = {plan.cluster->groupBandwidth(ring), plan.cluster->groupLatency(ring)};
                }
                cpForward = contextParallelSeconds(t, cp, ringLink[j].first, ringLink[j].second, false);
                cpBackward = contextParallelSeconds(t, cp, ringLink[j].first, ringLink[j].second, true);
            }
            // FSDP: the gathers pipelined with the pass's compute layer by layer (the next layer's prefetched).
            const double gatherForward
                = pipelinedCommunicationSeconds(t.weight_gather_forward_s, t.forward_s, t.weight_layers);
            const double gatherBackward = pipelinedCommunicationSeconds(
                t.weight_gather_backward_s, t.backward_s + t.recompute_s, t.weight_layers);
            c.weight_gather_forward_s.push_back(gatherForward);
            c.weight_gather_backward_s.push_back(gatherBackward);
            c.forward_s.push_back(t.forward_s + tpForward + gatherForward + cpForward);
            c.backward_s.push_back(t.backward_s + tpBackward + gatherBackward + cpBackward);
            c.tp_forward_s.push_back(tpForward);
            c.tp_backward_s.push_back(tpBackward);
            c.cp_forward_s.push_back(cpForward);
            c.cp_backward_s.push_back(cpBackward);
            c.recompute_cp_s.push_back(plan.schedule.recompute == Recompute::Full ? cpForward : 0.0);
            c.backward_weight_share.push_back(t.backward_s > 0 ? t.backward_weight_s / t.backward_s : 0.5);
            c.recompute_s.push_back(t.recompute_s);
            // Full recomputation runs the forward's tensor-parallel all-reduces again; the attention core has none.
            c.recompute_tp_s.push_back(plan.schedule.recompute == Recompute::Full ? tpForward : 0.0);
            if (r == 0)
                first = t;
        }
        c.stage_weight_bytes.push_back(first.weight_bytes);
        c.stage_resident_weight_bytes.push_back(first.resident_weight_bytes);
        c.stage_gradient_bytes.push_back(first.gradient_bytes);
        c.stage_activation_bytes.push_back(first.activation_bytes);
        c.stage_input_bytes.push_back(first.input_bytes);
        c.stage_kept_bytes.push_back(first.kept_bytes);
        c.stage_recompute_working_bytes.push_back(first.recompute_working_bytes);
        c.stage_weight_gradient_bytes.push_back(first.weight_gradient_bytes);
        c.stage_backward_working_bytes.push_back(first.backward_working_bytes);
        c.stage_optimizer_bytes.push_back(first.optimizer_bytes);
        // With tensor parallelism each rank sends its 1/t slice (Megatron's scatter/gather, §4.4.1) of its context
        // rank's 1/c of the sequence.
        c.boundary_bytes.push_back(!plan.lastInPipeline(s) ? cut[plan.stages[s].last_layer] * scale / mp : 0.0);
    }
    const auto common = [&c, &plan] {
        c.overlap_gradient_allreduce = plan.schedule.overlap_grad_reduce;
        c.overlap_param_gather = plan.schedule.overlap_param_gather && plan.schedule.distributed_optimizer;
        c.zero_sum_after_microbatches = plan.schedule.shard_weights;
        c.shard_group = plan.schedule.distributed_optimizer ? plan.schedule.shard_group : 0;
        c.samples_per_microbatch = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size
                                                                     : std::max(1, plan.model->microbatch_size);
    };
    common();
    if (leadersOnly)
        return c; // no per-device tables or buckets: what estimates read of a group
    // Each node's inter-node links, numbered over the cluster: device k of a node sends on its link k mod links.
    std::vector<int> firstUplink;
    int uplinks = 0;
    for (const auto& node : plan.cluster->nodes) {
        firstUplink.push_back(uplinks);
        uplinks += std::max(1, node.inter_node_links);
    }
    for (const auto& ref : refs) {
        const auto& type = plan.cluster->device_types[ref.type];
        c.device_memory_capacity.push_back(type.memory_bytes);
        c.device_memory_bandwidth.push_back(type.memory_bandwidth_bytes_per_s);
        c.device_node.push_back(ref.node);
        const auto& node = plan.cluster->nodes[ref.node];
        c.device_uplink.push_back(firstUplink[ref.node] + ref.local % std::max(1, node.inter_node_links));
    }
    for (const auto& node : plan.cluster->nodes)
        c.node_links.push_back({node.intra_bandwidth_bytes_per_s, node.intra_latency_s});
    c.inter_node = {plan.cluster->inter_node_bandwidth_bytes_per_s, plan.cluster->inter_node_latency_s};
    for (int s = 0; s < S; ++s)
        c.stage_buckets.push_back(gradientBuckets(plan, s));
    return c;
}

void CostModel::check(const Plan& plan, int devices) const
{
    const auto& c = *this;
    const std::size_t S = plan.stageCount(), D = static_cast<std::size_t>(devices);
    std::size_t replicas = 0;
    for (const auto& st : plan.stages)
        replicas += st.devices.size();
    auto bad = [](const std::string& what, std::size_t has, std::size_t needs) {
        throw InputError(
            "the cost model has " + std::to_string(has) + " " + what + ", the plan needs " + std::to_string(needs));
    };
    if (c.stage_offset.size() != S)
        bad("stage offsets", c.stage_offset.size(), S);
    if (c.forward_s.size() != replicas || c.backward_s.size() != replicas)
        bad("forward/backward times", std::min(c.forward_s.size(), c.backward_s.size()), replicas);
    for (auto* v : {&c.tp_forward_s, &c.tp_backward_s})
        if (!v->empty() && v->size() != replicas)
            bad("tensor-parallel all-reduce times", v->size(), replicas);
    if (!c.backward_weight_share.empty() && c.backward_weight_share.size() != replicas)
        bad("weight-gradient shares", c.backward_weight_share.size(), replicas);
    for (auto* v : {&c.cp_forward_s, &c.cp_backward_s})
        if (!v->empty() && v->size() != replicas)
            bad("context-parallel exchange times", v->size(), replicas);
    for (auto* v : {&c.recompute_s, &c.recompute_tp_s, &c.recompute_cp_s})
        if (!v->empty() && v->size() != replicas)
            bad("recomputation times", v->size(), replicas);
    for (auto* v : {&c.stage_kept_bytes, &c.stage_recompute_working_bytes})
        if (!v->empty() && v->size() != S)
            bad("per-stage recomputation byte counts", v->size(), S);
    for (auto* v : {&c.stage_weight_bytes, &c.stage_activation_bytes, &c.stage_input_bytes, &c.stage_optimizer_bytes,
             &c.boundary_bytes})
        if (v->size() != S)
            bad("per-stage byte counts", v->size(), S);
    if (!c.stage_weight_gradient_bytes.empty() && c.stage_weight_gradient_bytes.size() != S)
        bad("per-stage weight-gradient byte counts", c.stage_weight_gradient_bytes.size(), S);
    if (!c.stage_backward_working_bytes.empty() && c.stage_backward_working_bytes.size() != S)
        bad("per-stage backward working byte counts", c.stage_backward_working_bytes.size(), S);
    if (!c.stage_buckets.empty() && c.stage_buckets.size() != S)
        bad("stages of gradient buckets", c.stage_buckets.size(), S);
    if (!c.stage_rings.empty() && c.stage_rings.size() != S)
        bad("stages of all-reduce rings", c.stage_rings.size(), S);
    for (auto* v : {&c.device_memory_capacity, &c.device_memory_bandwidth})
        if (v->size() != D)
            bad("per-device values", v->size(), D);
    if (c.device_node.size() != D)
        bad("device nodes", c.device_node.size(), D);
    for (int node : c.device_node)
        if (node < 0 || static_cast<std::size_t>(node) >= c.node_links.size())
            throw InputError("the cost model places a device on node " + std::to_string(node) + " of "
                + std::to_string(c.node_links.size()));
    if (!c.device_uplink.empty() && c.device_uplink.size() != D)
        bad("device uplinks", c.device_uplink.size(), D);
    for (int u : c.device_uplink)
        if (u < 0)
            throw InputError("the cost model gives a device the uplink " + std::to_string(u));
}

} // namespace pw::planner
