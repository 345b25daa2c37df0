// SPDX-License-Identifier: MIT
// Megatron's analytical model (docs/algorithms/megatron.md, "Analytical model"): the closed forms of the schedules'
// bubbles and stashes, the plan of one configuration (configPlan) and its estimate. The search over configurations
// that uses them is megatron.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "../costs.h"
#include "../schedule/generator.h"
#include "../sim/simulator.h"
#include "../units.h"
#include "builtin.h"
#include "megatron.h"

namespace pw::planner {
namespace megatron {

double bubbleFraction(int p, int v, int m)
{
    return (p - 1.0) / (static_cast<double>(std::max(1, v)) * std::max(1, m));
}

double batchTime(int p, int v, int m, double forward_s, double backward_s)
{
    return (m + (p - 1.0) / std::max(1, v)) * (forward_s + backward_s);
}

double tensorParallelVolume(double b, double s, double h, int t)
{
    return 8.0 * b * s * h * (t - 1.0) / std::max(1, t);
}

int peakStashes(int p, int v, int m, int rank)
{
    if (v <= 1)
        return std::max(1, std::min(p - rank, m));
    if (m == p)
        return m * v;
    return std::min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v);
}

bool vShaped(std::string_view kind)
{
    const auto* traits = findScheduleTraits(kind);
    return traits && traits->chunks == ChunkRule::V;
}

double pipelineBubble(std::string_view kind, int p, int v, int m, double forward_s, double input_s, double weight_s)
{
    if (const auto* g = findScheduleGenerator(kind))
        if (const auto bubble = g->uniformBubble(p, m, {forward_s, input_s, weight_s}))
            return *bubble;
    const double steps = p - 1.0;
    if (kind == "zb-h1")
        return steps * (forward_s + input_s - std::min(weight_s, forward_s));
    if (kind == "zb-h2" || kind == "zbv")
        return steps * std::max(0.0, forward_s + input_s - 2 * weight_s);
    if (kind == "dualpipev") // per chunk, half the device's times (megatron.h)
        return (steps * (2 * forward_s + input_s - std::min(weight_s, forward_s))
                   + std::max(0, p - 2) * std::max(0.0, input_s - forward_s))
            / 2;
    return steps * (forward_s + input_s + weight_s) / std::max(1, v);
}

int kindPeakStashes(std::string_view kind, int p, int v, int m, int rank)
{
    if (const auto* g = findScheduleGenerator(kind))
        if (const auto peak = g->uniformPeakActivationBytes(p, m, rank, 1, 0))
            return static_cast<int>(*peak);
    if (kind == "zb-h1")
        return std::max(1, std::min(p, m));
    if (kind == "zb-h2")
        return std::max(1, std::min(2 * p - 1, m));
    if (kind == "zbv")
        return 2 * p;
    if (kind == "dualpipev")
        return 2 * p + 1;
    return peakStashes(p, v, m, rank);
}

double kindPeakActivationBytes(std::string_view kind, int p, int v, int m, int rank, double stash, double kept)
{
    if (const auto* g = findScheduleGenerator(kind))
        if (const auto peak = g->uniformPeakActivationBytes(p, m, rank, stash, kept))
            return *peak;
    const double stashes = kindPeakStashes(kind, p, v, m, rank) * stash;
    if (kind == "zb-h1" || kind == "zb-h2") {
        // zeroBubbleOrder(m, warm, defer) on a straight pipeline (n_s = p - rank): the peak follows an I, when the
        // deferred W, the I's own and the pairs' I since the warm-up all wait; a short batch bounds them.
        const int factor = kind == "zb-h2" ? 2 : 1;
        const int warm = std::min(factor * (p - rank - 1), m), defer = factor * rank;
        return stashes + std::max(1, std::min({defer + 1, m - warm + 1, m})) * kept;
    }
    if (kind == "zbv") {
        // Torch's ZBV order: in the steady state every I is followed by its W (one waits, at 2p chunk stashes);
        // the cool-down runs `rank` input gradients of each chunk before their W, with p + rank chunk stashes left.
        const double steady = stashes + kept;
        return m >= 2 * p - 1 ? std::max(steady, (p + rank) * stash + (2 * rank + 1) * kept) : steady;
    }
    if (kind == "dualpipev") // an F&B pair's forward before its backward frees; the warm-up's I beside 2p stashes
        return std::max(stashes, (2 * p) * stash + kept);
    return stashes;
}

std::string Estimate::memoryPartsText() const
{
    const auto& m = memory_parts;
    std::string text = "weights " + formatBytes(m.weights) + ", gradients " + formatBytes(m.gradients)
        + ", optimizer state " + formatBytes(m.optimizer) + ", activations " + formatBytes(m.activations);
    if (m.working > 0)
        text += ", recomputation " + formatBytes(m.working);
    return text;
}

std::string Config::scheduleKind() const
{
    return !kind.empty() ? kind : v > 1 ? "interleaved" : "1f1b";
}

std::string Config::text() const
{
    return "p=" + std::to_string(p) + " t=" + std::to_string(t) + " d=" + std::to_string(d) + " b=" + std::to_string(b)
        + " v=" + std::to_string(v) + " m=" + std::to_string(m) + (c > 1 ? " c=" + std::to_string(c) : "")
        + (sequence_parallel ? " sp" : "")
        + (shard_weights                ? " zero3"
                : shard_gradients       ? " zero2"
                : distributed_optimizer ? " dist-opt"
                                        : "")
        + (recompute != Recompute::None ? std::string(" recompute=") + name(recompute) : std::string())
        + (kind.empty() ? "" : " " + kind);
}

std::vector<double> balanceWeights(const PartitionRequest& request, const Config& c)
{
    const auto& model = request.model;
    const int profileSize = std::max(1, model->microbatch_size);
    const bool sp = c.sequence_parallel;
    const bool overlap = request.options.schedule.tp_comm_overlap && sp && c.t > 1;
    // Balance the p v virtual stages by a tensor-parallel rank's time per microbatch (its share of the
    // compute plus its all-reduces): the embedding and head stages get fewer transformer layers.
    const double scale = static_cast<double>(c.b) / profileSize;
    const auto& type = request.cluster->typeOf(0);
    std::vector<int> group;
    for (int i = 0; i < c.t; ++i)
        group.push_back(i);
    const double bw = request.cluster->groupBandwidth(group), lat = request.cluster->groupLatency(group);
    const auto cut = model->cutBytes();
    const double speed = deviceSpeed(type, model, request.cluster->device_types).factor;
    std::vector<double> weights;
    for (int l = 0; l < model->layerCount(); ++l) {
        const auto& layer = model->layers[l];
        const auto times = rankTimesOn(layer, type, speed, c.t, sp, c.recompute, c.c);
        const bool full = c.recompute == Recompute::Full;
        double w = (times.forward_ms + times.recompute_ms + times.backward_ms) * 1e-3 * scale;
        const auto traffic = tensorParallelTraffic(layer, l > 0 ? cut[l - 1] : 0.0, scale / c.c, c.t);
        double tpF = tensorParallelTime(traffic.forward_bytes, traffic.forward_allreduces, c.t, bw, lat);
        double tpB = tensorParallelTime(traffic.backward_bytes, traffic.backward_allreduces, c.t, bw, lat);
        if (overlap) {
            tpF = overlappedTensorParallelTime(tpF, times.forward_ms * 1e-3 * scale, c.t);
            tpB = overlappedTensorParallelTime(tpB, times.backward_ms * 1e-3 * scale, c.t);
        }
        w += tpF * (full ? 2 : 1) + tpB;
        weights.push_back(w);
    }
    return weights;
}

Plan configPlan(const PartitionRequest& request, const Config& c)
{
    return configPlan(request, c, balanceWeights(request, c));
}

Plan configPlan(const PartitionRequest& request, const Config& c, const std::vector<double>& weights)
{
    return configPlanCut(request, c, detail::balancedBoundaries(weights, c.p * c.v));
}

Plan configPlanCut(const PartitionRequest& request, const Config& c, const std::vector<int>& bounds)
{
    const auto& model = request.model;
    Plan plan = detail::basePlan(request, "megatron");
    plan.tensor_parallel = c.t;
    plan.context_parallel = c.c;
    plan.schedule.kind = c.scheduleKind();
    plan.schedule.chunks = c.v;
    plan.schedule.microbatches = c.m * c.d;
    plan.schedule.recompute = c.recompute;
    plan.schedule.sequence_parallel = c.sequence_parallel;
    // The request's --tp-comm-overlap where the configuration can have it (t > 1 with sequence parallelism).
    plan.schedule.tp_comm_overlap = request.options.schedule.tp_comm_overlap && c.sequence_parallel && c.t > 1;
    plan.schedule.distributed_optimizer = c.distributed_optimizer || request.options.schedule.distributed_optimizer;
    // ZeRO 2 and 3 (the configuration's, or the request's --zero-stage) where the optimizer is sharded over replicas.
    const bool sharded = plan.schedule.distributed_optimizer && c.d * c.c > 1; // over data and context ranks
    plan.schedule.shard_gradients
        = sharded && (c.shard_gradients || c.shard_weights || request.options.schedule.shard_gradients);
    plan.schedule.shard_weights = sharded && (c.shard_weights || request.options.schedule.shard_weights);
    // The request's --overlap-param-gather where the configuration shards the optimizer.
    plan.schedule.overlap_param_gather
        = request.options.schedule.overlap_param_gather && plan.schedule.distributed_optimizer;
    plan.schedule.in_flight.clear();
    const int profileSize = std::max(1, model->microbatch_size);
    plan.schedule.microbatch_size = request.options.schedule.microbatch_size == 0 && c.b == profileSize ? 0 : c.b;

    const int perStage = c.d * c.c * c.t;
    int first = 0;
    for (int s = 0; s < c.p * c.v; ++s) {
        const int last = s < static_cast<int>(bounds.size()) ? bounds[s] : model->layerCount() - 1;
        PlanStage st {first, last, {}};
        const int r = vShaped(c.kind) && s >= c.p ? 2 * c.p - 1 - s : s % c.p; // zbv, dualpipev: the V
        for (int i = 0; i < perStage; ++i)
            st.devices.push_back(r * perStage + i);
        plan.stages.push_back(std::move(st));
        first = last + 1;
    }
    plan.schedule.iterations = simulatedIterations(plan); // zb-h2 and zbv measure batch to batch (traits)
    return plan;
}

CostModel estimateCosts(const Plan& plan)
{
    // The costs of one of the identical data-parallel pipelines stand for all of them where they cost alike (at 16,384
    // GPUs the whole plan's cost model was most of the search's time), and a model-parallel group's first device for
    // the group; the data-parallel groups are the whole plan's.
    Plan reduced;
    std::optional<CostModel> fast = reducedCostModel(plan, reduced);
    return fast ? std::move(*fast) : CostModel::groupLeaderCosts(plan);
}

Estimate estimate(const Plan& plan, const Config& c)
{
    return estimate(plan, c, estimateCosts(plan));
}

Estimate estimate(const Plan& plan, const Config& c, const CostModel& cost)
{
    const int p = plan.pipelineDepth(), S = plan.stageCount(), t = c.t;
    const auto& cluster = plan.cluster;
    const std::string& kind = plan.schedule.kind;
    const bool splitsBackward = scheduleTraits(kind).splits_backward;
    // The stages of rank r: every p-th (Megatron's loop), or s and 2p - 1 - s (the V of zbv and dualpipev).
    const bool v = vShaped(kind);
    const auto onRank = [&](int s, int r) { return v && s >= p ? 2 * p - 1 - s == r : s % p == r; };
    Estimate e;
    double worstRatio = -1, slowestForward = 0, slowestWeight = 0;
    for (int r = 0; r < p; ++r) {
        const auto& devices = plan.stages[r].devices;
        const std::size_t costedReplicas = static_cast<std::size_t>(
            (r + 1 < S ? cost.stage_offset[r + 1] : static_cast<int>(cost.forward_s.size())) - cost.stage_offset[r]);
        // The rank's v stages, found once: every device of the rank (d t of them) sums over these alone.
        std::vector<int> mine;
        for (int s = 0; s < S; ++s)
            if (onRank(s, r))
                mine.push_back(s);
        for (std::size_t i = 0; i < costedReplicas; ++i) {
            double time = 0, forward = 0, weight = 0;
            for (int s : mine) {
                time += cost.forward(s, static_cast<int>(i)) + cost.recompute(s, static_cast<int>(i))
                    + cost.backward(s, static_cast<int>(i));
                forward += cost.forward(s, static_cast<int>(i));
                weight += cost.backwardWeight(s, static_cast<int>(i));
            }
            if (time > e.stage_time_s) {
                e.stage_time_s = time;
                slowestForward = forward;
                slowestWeight = weight;
            }
        }
        // Tensor rank 0 of each replica and context rank: the data-parallel all-reduce among the d c devices holding
        // the same slice.
        double dp = 0, opt = 0, weights = 0, gradients = 0, optimizer = 0, stash = 0, working = 0, kept = 0;
        std::vector<int> dpGroup;
        const int g = c.d * c.c;
        for (int j = 0; j < g; ++j)
            dpGroup.push_back(devices[static_cast<std::size_t>(j) * t]);
        const double bw = cluster->groupBandwidth(dpGroup), lat = cluster->groupLatency(dpGroup);
        // HSDP: the sum inside shard groups of sg (their own link), then each member's 1/sg across the groups.
        const int sg = shardGroupSize(plan.schedule, g), across = g / sg;
        const std::vector<int> shardGroup(dpGroup.begin(), dpGroup.begin() + sg);
        const double innerBw = cluster->groupBandwidth(shardGroup), innerLat = cluster->groupLatency(shardGroup);
        const auto ring = [](int n, double bytes, double b, double l) {
            return n < 2
                ? 0.0
                : 2.0 * (n - 1) / n * (b > 0 ? bytes / b : std::numeric_limits<double>::infinity()) + 2.0 * (n - 1) * l;
        };
        const auto& type = cluster->typeOf(devices[0]);
        for (int s = 0; s < S; ++s) {
            if (!onRank(s, r))
                continue;
            const double w = cost.stage_weight_bytes[s], o = cost.stage_optimizer_bytes[s];
            if (g > 1 && !plan.schedule.shard_weights) // FSDP sums microbatch by microbatch, inside B
                dp += (plan.schedule.overlap_param_gather ? 0.5 : 1.0) * ring(sg, w, innerBw, innerLat);
            dp += ring(across, w / sg, bw, lat);
            if (type.memory_bandwidth_bytes_per_s > 0)
                opt += (3 * w + 2 * o) / type.memory_bandwidth_bytes_per_s;
            weights += cost.residentWeightBytes(s);
            gradients += cost.gradientBytes(s);
            optimizer += o;
            stash = std::max(stash, cost.keptBytes(s));
            // A fused backward holds one layer's activation gradients at a time besides what it recomputes.
            const double gradients = !splitsBackward && !cost.stage_backward_working_bytes.empty()
                ? cost.stage_backward_working_bytes[s]
                : 0.0;
            working = std::max(working, cost.recomputeWorkingBytes(s) + gradients);
            if (splitsBackward)
                kept = std::max(
                    kept, cost.stage_weight_gradient_bytes.empty() ? 0.0 : cost.stage_weight_gradient_bytes[s]);
        }
        e.data_parallel_s = std::max(e.data_parallel_s, dp);
        e.optimizer_s = std::max(e.optimizer_s, opt);
        // A split backward keeps what W needs from I to W; with recomputation that includes the activations the I
        // recomputed, so every microbatch waiting for its W holds a full set (not just the one being worked on).
        if (splitsBackward && c.recompute != Recompute::None) {
            kept += working;
            working = 0;
        }
        const double activations = kindPeakActivationBytes(kind, p, c.v, c.m, r, stash, kept);
        const double memory = weights + gradients + optimizer + activations + working;
        const double capacity = type.memory_bytes;
        const double ratio = capacity > 0 ? memory / capacity : std::numeric_limits<double>::infinity();
        if (ratio > worstRatio) {
            worstRatio = ratio;
            e.peak_memory_bytes = memory;
            e.memory_capacity_bytes = capacity;
            e.memory_parts = {weights, gradients, optimizer, activations, working};
        }
    }
    e.fits = worstRatio <= 1.0;
    for (int s = 0; s + 1 < S; ++s) {
        const int a = plan.stages[s].devices[0], b = plan.stages[s + 1].devices[0];
        if (a == b)
            continue; // zbv's turn at the bottom of the V stays on its device
        const double bw = cluster->bandwidth(a, b);
        const double bytes = cost.boundary_bytes[s];
        e.p2p_s = std::max(e.p2p_s,
            cluster->latency(a, b)
                + (bytes <= 0    ? 0.0
                        : bw > 0 ? bytes / bw
                                 : std::numeric_limits<double>::infinity()));
    }
    // The recomputed forward runs before the input gradient: it counts with I.
    e.bubble_s = pipelineBubble(
        kind, p, c.v, c.m, slowestForward, e.stage_time_s - slowestForward - slowestWeight, slowestWeight);
    e.pipeline_s = c.m * e.stage_time_s + e.bubble_s + 2.0 * (c.v * p - 1) * e.p2p_s;
    if (!plan.schedule.overlap_communication)
        e.pipeline_s += 2.0 * c.v * c.m * e.p2p_s; // blocking sends: every chunk sends both ways per microbatch
    e.batch_time_s = e.pipeline_s + e.data_parallel_s + e.optimizer_s;
    const double samples = static_cast<double>(c.m) * c.d * c.b;
    e.throughput_samples_per_s = e.batch_time_s > 0 && std::isfinite(e.batch_time_s) ? samples / e.batch_time_s : 0;
    return e;
}

} // namespace megatron

} // namespace pw::planner
