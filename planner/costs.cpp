// SPDX-License-Identifier: MIT
#include "costs.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <string_view>

#include "device_presets.h"

namespace pw::planner {

namespace {

bool sameName(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
        return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
    });
}

/// Peak TFLOP/s of the profile's device: a type of that name in `types`, else a preset; 0 when unknown.
double profiledPeak(const ModelProfile& model, const std::vector<DeviceType>& types)
{
    if (model.profiled_device.empty())
        return 0;
    for (const auto& t : types)
        if (sameName(t.name, model.profiled_device) && t.peak_tflops > 0)
            return t.peak_tflops;
    auto preset = devicePreset(model.profiled_device);
    return preset ? preset->peak_tflops : 0;
}

} // namespace

DeviceSpeed deviceSpeed(const DeviceType& type, const ModelProfile& model, const std::vector<DeviceType>& types)
{
    using Source = DeviceSpeed::Source;
    double profiled = 0, measured = 0;
    bool anyMeasured = false;
    for (const auto& layer : model.layers) {
        if (layer.device_times.empty() || isDataSource(layer))
            continue;
        if (auto it = layer.device_times.find(type.name); it != layer.device_times.end()) {
            anyMeasured = true;
            profiled += layer.forward_ms + layer.backward_ms;
            measured += it->second.forward_ms + it->second.backward_ms;
        }
    }
    if (type.relative_speed)
        return {*type.relative_speed, Source::Relative};
    if (anyMeasured)
        return {profiled > 0 && measured > 0 ? profiled / measured : 1.0, Source::Measured};
    if (!model.profiled_device.empty() && sameName(type.name, model.profiled_device))
        return {1.0, Source::Profiled};
    const double peak = profiledPeak(model, types);
    if (peak > 0 && type.peak_tflops > 0)
        return {type.peak_tflops / peak, Source::PeakRatio};
    return {1.0, Source::Unknown};
}

std::vector<DeviceSpeed> deviceSpeeds(const ModelProfile& model, const Cluster& cluster)
{
    std::vector<DeviceSpeed> out;
    out.reserve(cluster.device_types.size());
    for (const auto& type : cluster.device_types)
        out.push_back(deviceSpeed(type, model, cluster.device_types));
    return out;
}

std::string speedNote(const DeviceType& type, const ModelProfile& model, const DeviceSpeed& speed)
{
    if (!speed.estimated())
        return {};
    char factor[32];
    std::snprintf(factor, sizeof factor, "%.3g", speed.factor);
    return type.name + ": the model was not profiled on it; its speed is estimated as " + factor + " x "
        + model.profiled_device + " from peak TFLOP/s (give relative_speed or profile the model on it for a "
        + "better estimate)";
}

LayerTimes layerTimesOn(const Layer& layer, const DeviceType& type, double speed)
{
    if (isDataSource(layer))
        return {0, 0};
    if (auto it = layer.device_times.find(type.name); it != layer.device_times.end())
        return it->second;
    return {layer.forward_ms / speed, layer.backward_ms / speed};
}

double recomputedMs(const Layer& layer, const LayerTimes& times, Recompute recompute)
{
    switch (recompute) {
    case Recompute::Full:
        return times.forward_ms;
    case Recompute::Selective:
        return layer.forward_ms > 0 ? layer.selective_recompute_ms * times.forward_ms / layer.forward_ms : 0.0;
    case Recompute::None:
        break;
    }
    return 0.0;
}

RankTimes rankTimesOn(const Layer& layer, const DeviceType& type, double speed, int tp, bool sequenceParallel,
    Recompute recompute, int cp)
{
    const LayerTimes times = layerTimesOn(layer, type, speed);
    const int t = std::max(1, tp);
    const TensorParallelTimes* own = nullptr;
    if (t > 1 && !isDataSource(layer) && !layer.device_times.contains(type.name))
        for (const auto& e : layer.tensor_parallel_times)
            if (e.size == t)
                own = &e;
    RankTimes r;
    if (own) {
        r.forward_ms = (own->forward_ms + (sequenceParallel ? 0.0 : own->replicated_forward_ms)) / speed;
        r.backward_ms = (own->backward_ms + (sequenceParallel ? 0.0 : own->replicated_backward_ms)) / speed;
        r.backward_weight_ms = own->backward_weight_ms / speed;
    } else {
        r.forward_ms = times.forward_ms / t;
        r.backward_ms = times.backward_ms / t;
        r.backward_weight_ms = r.backward_ms * backwardWeightShare(layer);
    }
    const int c = std::max(1, cp);
    if (c > 1) {
        // A context rank's 1/c of the tokens: each part by its profiled ratio to the whole layer's, else 1/c.
        const ContextParallelTimes* split = nullptr;
        if (!isDataSource(layer) && !layer.device_times.contains(type.name))
            for (const auto& e : layer.context_parallel_times)
                if (e.size == c)
                    split = &e;
        const double weightMs = layer.backward_ms * backwardWeightShare(layer);
        const auto ratio = [c](double part, double whole) { return whole > 0 ? part / whole : 1.0 / c; };
        r.forward_ms *= split ? ratio(split->forward_ms, layer.forward_ms) : 1.0 / c;
        r.backward_ms *= split ? ratio(split->backward_ms, layer.backward_ms) : 1.0 / c;
        r.backward_weight_ms *= split ? ratio(split->backward_weight_ms, weightMs) : 1.0 / c;
    }
    // Full recomputation runs the rank's forward again; selective its share of the attention cores (split by heads,
    // and by queries over the context ranks).
    r.recompute_ms = recompute == Recompute::Full ? r.forward_ms : recomputedMs(layer, times, recompute) / t / c;
    return r;
}

double microbatchScale(const Plan& plan)
{
    if (plan.schedule.microbatch_size <= 0)
        return 1.0;
    return static_cast<double>(plan.schedule.microbatch_size) / std::max(1, plan.model->microbatch_size);
}

StageTotals stageTotals(const Plan& plan, int stage, const DeviceType& type)
{
    return stageTotals(plan, stage, type, deviceSpeed(type, plan.model, plan.cluster->device_types).factor);
}

StageTotals stageTotals(const Plan& plan, int stage, const DeviceType& type, double speed)
{
    const auto& st = plan.stages[stage];
    // A context rank holds 1/c of every sequence: every per-microbatch byte count below is of its share (scale), and
    // rankTimesOn gives the times of its share (at the profile's microbatch: timeScale).
    const int cp = std::max(1, plan.context_parallel);
    const double timeScale = microbatchScale(plan);
    const double scale = timeScale / cp;
    const double optFactor = optimizerStateFactor(plan.schedule, plan.model, plan.gradientReplicas(stage));
    StageTotals t;
    const int tp = std::max(1, plan.tensor_parallel);
    const bool sp = plan.schedule.sequence_parallel && tp > 1;
    const double spSplit = sp ? tp : 1.0;
    // The bytes crossing a cut: a chain's are the layer's output (no vector of every cut for each stage: the
    // search builds thousands of plans of a thousand layers); a graph's need the whole order.
    const std::vector<double> graphCut
        = plan.model->is_graph ? plan.model->cutBytes(plan.layer_order) : std::vector<double> {};
    const auto cutAt = [&](int pos) {
        return plan.model->is_graph ? graphCut[static_cast<std::size_t>(pos)]
                                    : plan.model->layers[plan.layerAt(pos)].activation_bytes;
    };
    // Recomputation's parts (per rank): the blocks' attention cores and checkpoints, the largest block's stash and
    // core, the stash of the layers without parts, the attention cores' forward time.
    double cores = 0, checkpoints = 0, largestStash = 0, largestCore = 0, unsplit = 0, largestWeights = 0;
    for (int pos = st.first_layer; pos <= st.last_layer; ++pos) {
        const auto& layer = plan.model->layers[plan.layerAt(pos)];
        const auto times = rankTimesOn(layer, type, speed, tp, sp, plan.schedule.recompute, cp);
        t.forward_s += times.forward_ms * 1e-3 * timeScale;
        t.backward_s += times.backward_ms * 1e-3 * timeScale;
        t.backward_weight_s += times.backward_weight_ms * 1e-3 * timeScale;
        t.recompute_s += times.recompute_ms * 1e-3 * timeScale;
        t.weight_bytes += layer.weight_bytes;
        t.fp8_weight_bytes += layer.fp8_weight_bytes;
        largestWeights = std::max(largestWeights, layer.weight_bytes);
        if (layer.weight_bytes > 0)
            ++t.weight_layers;
        t.optimizer_bytes += layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes);
        const double stash = tensorParallelStash(layer, scale, tp, sp);
        t.activation_bytes += stash;
        if (const auto& parts = layer.activation_parts) {
            const double core = parts->attention_core * scale / tp;
            cores += core;
            largestCore = std::max(largestCore, core);
            largestStash = std::max(largestStash, stash);
            if (pos > st.first_layer) // the first layer's input is the stage's, kept anyway
                checkpoints += parts->input * scale / spSplit;
        } else {
            unsplit += stash;
        }
        if (cp > 1 && layer.key_value_bytes > 0) {
            // The ring: the rank's K and V block (key/value heads split over t, or one per rank where t exceeds them)
            // against the attention core's step (its 1/c of the rank's share).
            const int kvHeads = plan.model->architecture ? plan.model->architecture->kvHeads() : tp;
            t.cp_step_bytes += layer.key_value_bytes * scale / std::min(tp, std::max(1, kvHeads));
            const auto core = rankTimesOn(layer, type, speed, tp, sp, Recompute::Selective, cp);
            const double ratio = times.forward_ms > 0 ? times.backward_ms / times.forward_ms : 2.0;
            t.cp_step_forward_s += core.recompute_ms * 1e-3 * timeScale / cp;
            t.cp_step_backward_s += core.recompute_ms * ratio * 1e-3 * timeScale / cp;
            ++t.cp_layers;
        }
        const double gradients
            = tp == 1 ? layer.weight_gradient_bytes * scale : tensorParallelWeightGradient(layer, scale, tp);
        t.weight_gradient_bytes += gradients;
        t.backward_working_bytes = std::max(t.backward_working_bytes, gradients);
        if (tp == 1)
            continue;
        const auto traffic = tensorParallelTraffic(layer, pos > 0 ? cutAt(pos - 1) : 0.0, scale, tp);
        t.tp_forward_allreduces += traffic.forward_allreduces;
        t.tp_forward_bytes += traffic.forward_bytes;
        t.tp_backward_allreduces += traffic.backward_allreduces;
        t.tp_backward_bytes += traffic.backward_bytes;
    }
    if (tp > 1) {
        t.weight_bytes /= tp;
        t.fp8_weight_bytes /= tp;
        t.optimizer_bytes /= tp;
        largestWeights /= tp;
    }
    // ZeRO: what a rank keeps of its weights and gradient between uses, and FSDP's gathers per microbatch, over the
    // devices that hold the same weights (data-parallel replicas times context ranks).
    const int d = plan.gradientReplicas(stage);
    const auto shares = residentShares(plan.schedule, d);
    t.gradient_bytes = t.weight_bytes * shares.gradients;
    t.resident_weight_bytes = t.weight_bytes * shares.weights;
    // The gathers and reduce-scatters run inside a shard group: every replica, or with HSDP its group of s.
    const int s = shardGroupSize(plan.schedule, d);
    if (plan.schedule.shard_weights && s > 1) {
        t.resident_weight_bytes = std::min(t.weight_bytes, t.resident_weight_bytes + 2 * largestWeights);
        // The shard group of the stage's first rank: replica j's rank 0 (Megatron's order, costs.h).
        std::vector<int> group;
        for (int j = 0; j < s; ++j)
            group.push_back(st.devices[static_cast<std::size_t>(j) * tp]);
        const double bw = plan.cluster->groupBandwidth(group), lat = plan.cluster->groupLatency(group);
        const double share = (s - 1.0) / s;
        const double gradientBytes = t.weight_bytes * gradientBytesPerWeightByte(plan.schedule, *plan.model);
        auto collective = [&](double bytes) {
            return (bw > 0 ? share * bytes / bw : std::numeric_limits<double>::infinity())
                + (s - 1.0) * lat * std::max(1, t.weight_layers);
        };
        t.weight_gather_forward_s = collective(t.weight_bytes);
        t.weight_gather_backward_s = collective(t.weight_bytes) + collective(gradientBytes);
    }
    // FP8 weight copies: of the weights a rank holds (all of them, or with ZeRO-3 its share).
    t.resident_weight_bytes += t.fp8_weight_bytes * shares.weights;
    if (st.first_layer > 0) {
        t.input_bytes = cutAt(st.first_layer - 1) * scale / spSplit;
    }
    switch (plan.schedule.recompute) {
    case Recompute::None:
        t.kept_bytes = t.activation_bytes;
        break;
    case Recompute::Selective:
        t.kept_bytes = t.activation_bytes - cores;
        t.recompute_working_bytes = largestCore;
        break;
    case Recompute::Full:
        t.kept_bytes = t.input_bytes + checkpoints;
        t.recompute_working_bytes = largestStash + unsplit;
        break;
    }
    return t;
}

StageMemoryInput memoryInput(const StageTotals& totals, int in_flight, int microbatches)
{
    StageMemoryInput in;
    in.weight_bytes = totals.weight_bytes;
    in.activation_bytes = totals.kept_bytes;
    in.input_bytes = totals.input_bytes;
    in.optimizer_bytes = totals.optimizer_bytes;
    in.in_flight = in_flight;
    in.microbatches = microbatches;
    in.weight_gradient_bytes = totals.weight_gradient_bytes;
    in.working_bytes = totals.recompute_working_bytes;
    in.backward_working_bytes = totals.backward_working_bytes;
    in.resident_weight_bytes = totals.resident_weight_bytes;
    in.gradient_bytes = totals.gradient_bytes;
    return in;
}

TensorParallelTraffic tensorParallelTraffic(const Layer& layer, double input_bytes, double scale, int t)
{
    TensorParallelTraffic r;
    if (t <= 1 || isDataSource(layer))
        return r;
    const double bytes = layer.activation_bytes * scale;
    if (layer.kind == "embedding") {
        r.forward_allreduces = 1;
    } else if (layer.kind == "head") {
        r.backward_allreduces = 1;
    } else {
        r.forward_allreduces = 2;
        r.backward_allreduces = 2;
    }
    r.forward_bytes = r.forward_allreduces * bytes;
    r.backward_bytes = r.backward_allreduces * bytes;
    if (layer.kind == "head") // the all-reduced gradient is that of the head's input (b s h), not of the logits
        r.backward_bytes = input_bytes * scale;
    return r;
}

double contextParallelSeconds(const StageTotals& totals, int c, double bandwidth, double latency, bool backward)
{
    if (c <= 1 || totals.cp_layers == 0)
        return 0;
    const double bytes = totals.cp_step_bytes * (backward ? 2.0 : 1.0);
    const double transfer = (bytes <= 0             ? 0.0
                                    : bandwidth > 0 ? bytes / bandwidth
                                                    : std::numeric_limits<double>::infinity())
        + latency * totals.cp_layers;
    const double compute = backward ? totals.cp_step_backward_s : totals.cp_step_forward_s;
    return (c - 1.0) * std::max(0.0, transfer - compute);
}

double pipelinedCommunicationSeconds(double comm, double compute, int chunks)
{
    if (comm <= 0 || chunks <= 1)
        return std::max(0.0, comm);
    return std::max(comm / chunks, comm - std::max(0.0, compute) * (chunks - 1) / chunks);
}

double overlappedTensorParallelTime(double comm_s, double compute_s, int t)
{
    return pipelinedCommunicationSeconds(comm_s, compute_s, t);
}

double tensorParallelTime(double bytes, int count, int t, double bandwidth, double latency)
{
    if (t <= 1 || count <= 0)
        return 0;
    const double wire = bytes <= 0 ? 0.0 : bandwidth > 0 ? bytes / bandwidth : std::numeric_limits<double>::infinity();
    return 2.0 * (t - 1) / t * wire + 2.0 * (t - 1) * latency * count;
}

double tensorParallelStash(const Layer& layer, double scale, int t, bool sequence_parallel)
{
    if (const auto& parts = layer.activation_parts) {
        const double replicated = parts->replicated * scale / (sequence_parallel && t > 1 ? t : 1);
        return replicated + (parts->sharded + parts->attention_core) * scale / std::max(1, t);
    }
    const double stash = layer.stashed_bytes.value_or(layer.activation_bytes) * scale;
    if (t <= 1)
        return stash;
    const double output = layer.activation_bytes * scale;
    const double replicated = std::min(stash, layer.kind == "transformer_layer" ? 5.0 * output : output);
    // Sequence parallelism splits the replicated part too.
    return (sequence_parallel ? replicated / t : replicated) + (stash - replicated) / t;
}

double tensorParallelWeightGradient(const Layer& layer, double scale, int t)
{
    const double bytes = layer.weight_gradient_bytes * scale;
    if (t <= 1 || layer.kind != "transformer_layer")
        return bytes; // the embedding's and the head's (b, s, h) output gradients are whole on every rank
    // Of a block's 11 b s h kept values the column-parallel products' output gradients (QKV 3, MLP up 4) are split
    // over the ranks; the row-parallel ones (attention projection, MLP down: 1 each) and the layer norms' (2) whole.
    const double replicated = bytes * 4.0 / 11.0;
    return replicated + (bytes - replicated) / t;
}

double stageMemoryBytes(const ScheduleTraits& traits, const StageMemoryInput& in)
{
    const int inFlight = std::max(1, in.in_flight);
    const int microbatches = std::max(1, in.microbatches);
    int versions = 1;
    if (traits.weight_versions == WeightVersions::InFlight)
        versions = inFlight;
    else if (traits.weight_versions == WeightVersions::Two)
        versions = 2;
    int stashes = inFlight;
    if (traits.stash == StashDepth::Batch)
        stashes = microbatches;
    else if (traits.stash == StashDepth::InFlightInBatch)
        stashes = std::min(inFlight, microbatches);
    double perStash = in.recompute ? in.input_bytes : in.activation_bytes;
    double working = (in.recompute ? in.activation_bytes : 0) + in.working_bytes;
    // A split backward keeps its output gradients from I to W: at most every stashed microbatch waits for its W.
    if (traits.splits_backward && in.weight_gradient_bytes > 0)
        working += std::clamp(in.awaiting_weight.value_or(stashes), 0, stashes) * in.weight_gradient_bytes;
    if (!traits.splits_backward)
        working += in.backward_working_bytes;
    return versions * in.resident_weight_bytes.value_or(in.weight_bytes) + in.gradient_bytes.value_or(in.weight_bytes)
        + in.optimizer_bytes + stashes * perStash + working;
}

double stageMemoryBytes(std::string_view kind, const StageMemoryInput& in)
{
    return stageMemoryBytes(scheduleTraits(kind), in);
}

double parameterServerSeconds(const Cluster& cluster, int device, double bytes, bool local)
{
    const int H = local ? 1 : static_cast<int>(cluster.nodes.size()); // local: one server, on this node
    const auto& node = cluster.nodes.at(cluster.device(device).node);
    const double latency = H > 1 ? cluster.inter_node_latency_s : node.intra_latency_s;
    if (bytes <= 0)
        return latency;
    double pcie = node.intra_bandwidth_bytes_per_s > 0 ? bytes / node.intra_bandwidth_bytes_per_s : 0.0;
    double remote = H > 1 && cluster.inter_node_bandwidth_bytes_per_s > 0
        ? (H - 1.0) / H * bytes / cluster.inter_node_bandwidth_bytes_per_s
        : 0.0;
    return latency + std::max(pcie, remote);
}

} // namespace pw::planner
