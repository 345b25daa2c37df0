// SPDX-License-Identifier: MIT
// Per-layer and per-stage costs of a model on a device type: the numbers partitioners and the simulator share.
#pragma once

#include <optional>

#include "cluster.h"
#include "model_profile.h"
#include "plan.h"
#include "schedule/traits.h"

namespace pw::planner {

/// @brief How fast a device type runs a model, relative to the device its profile was measured on.
struct DeviceSpeed
{
    /// Where the factor comes from, best first.
    enum class Source {
        Relative, ///< the type's relative_speed
        Measured, ///< layers carry device_times for this type: profile time / measured time over those layers
        Profiled, ///< the type is the profile's device (profiled_device, case-insensitive)
        PeakRatio, ///< peak_tflops over the profiled device's: a roofline guess (diagnostic "estimated-speed")
        Unknown, ///< nothing known: the profile's times are used as they are (factor 1)
    };
    double factor = 1.0; ///< the profile's times are divided by it
    Source source = Source::Unknown;
    bool estimated() const { return source == Source::PeakRatio; }
};

/// The speed of `type` on `model`, for the layers without their own device_times for it (those always win,
/// see layerTimesOn): relative_speed, else the ratio of profile to measured times over the layers that have
/// them, else 1 on the profiled device, else the ratio of peak_tflops to the profiled device's peak (looked up
/// by name in `types`, e.g. the cluster's device types, then among the device presets), else 1 (Unknown).
DeviceSpeed deviceSpeed(const DeviceType& type, const ModelProfile& model, const std::vector<DeviceType>& types = {});
/// deviceSpeed of every type of the cluster, indexed like cluster.device_types.
std::vector<DeviceSpeed> deviceSpeeds(const ModelProfile& model, const Cluster& cluster);
/// One sentence for a speed that was guessed from peak FLOP/s ("estimated-speed" diagnostics, the cluster
/// editor's tooltip); empty when the speed is not an estimate.
std::string speedNote(const DeviceType& type, const ModelProfile& model, const DeviceSpeed& speed);

/// Times of `layer` on `type`: the layer's own times for that type when profiled, else the profile's
/// times divided by `speed` (deviceSpeed(type, model).factor). Data-source layers cost nothing.
LayerTimes layerTimesOn(const Layer& layer, const DeviceType& type, double speed);

/// The forward time `layer` computes again before its backward under `recompute`, on a device where it runs in
/// `times` (layerTimesOn): its whole forward (full), its selective_recompute_ms scaled like its forward (selective),
/// 0 (none).
double recomputedMs(const Layer& layer, const LayerTimes& times, Recompute recompute);

/// @brief One tensor-parallel rank's milliseconds for a layer per microbatch (at the profile's microbatch).
struct RankTimes
{
    double forward_ms = 0;
    double backward_ms = 0;
    double backward_weight_ms = 0; ///< the weight-gradient part of backward_ms
    double recompute_ms = 0; ///< what the rank computes again before its backward (recomputedMs's share)

    bool operator==(const RankTimes&) const = default;
};

/// A rank's times for `layer` in a group of `tp` devices on `type`: the layer's tensor_parallel_times for that size
/// (plus their replicated part without sequence parallelism) over `speed`, else layerTimesOn / tp. A layer measured
/// on `type` (device_times) is divided by tp. tp = 1 gives layerTimesOn. With `cp` > 1 context ranks, the rank's 1/cp
/// of the tokens: those times scaled by the layer's context_parallel_times for that size over its whole times (each
/// part by its own ratio), else / cp; the attention core a selective recomputation runs again / cp.
RankTimes rankTimesOn(const Layer& layer, const DeviceType& type, double speed, int tp, bool sequenceParallel,
    Recompute recompute, int cp = 1);

/// Seconds of `comm` split into `chunks` pipelined with `compute` of as many chunks: the first chunk's share shows, the
/// rest only where it outlasts the compute, max(comm / chunks, comm - compute (chunks - 1) / chunks). Megatron's
/// --tp-comm-overlap (overlappedTensorParallelTime) and FSDP's layer-by-layer prefetch are both this.
double pipelinedCommunicationSeconds(double comm, double compute, int chunks);

/// Factor from the profile's microbatch to the plan's (times and bytes scale linearly).
double microbatchScale(const Plan& plan);

/// @brief Per-microbatch totals of a contiguous range of layers in a plan's order.
struct StageTotals
{
    double forward_s = 0;
    double backward_s = 0;
    /// The weight-gradient part of backward_s (each layer's backwardWeightShare); the rest is the input gradient.
    double backward_weight_s = 0;
    double weight_bytes = 0;
    double activation_bytes = 0; ///< activation memory the stage keeps per microbatch for its backward pass
    /// What the stage's input gradient (I) keeps for its weight gradient (W) per microbatch, on top of
    /// activation_bytes (the layers' weight_gradient_bytes; divided by t like the compute): only the kinds that
    /// split the backward hold it, from a microbatch's I to its W.
    double weight_gradient_bytes = 0;
    double input_bytes = 0; ///< bytes received from the previous stage (split by t with sequence parallelism)
    double optimizer_bytes = 0; ///< optimizer state (layer values where given, else factor x weights)
    // Recomputation (plan.schedule.recompute), per microbatch on one rank:
    /// What a microbatch keeps from its forward to its backward: activation_bytes without recomputation; less the
    /// layers' attention cores with selective; with full the stage's input plus every later block's input (the
    /// checkpoints Megatron keeps; layers without activation_parts are recomputed from the stage's input).
    double kept_bytes = 0;
    /// What the backward holds on top while it recomputes: selective, the largest layer's attention core; full, the
    /// largest block's stash (one block is recomputed at a time) plus the stash of the layers without
    /// activation_parts (recomputed together from the stage's input); none, 0.
    double recompute_working_bytes = 0;
    double recompute_s = 0; ///< the forward computed again before the backward (its compute; divided by t)
    // Tensor parallelism (plan.tensor_parallel = t > 1; all zero when t = 1): the ring all-reduces a rank
    // runs per microbatch inside its forward and backward passes, and their total payload.
    int tp_forward_allreduces = 0;
    double tp_forward_bytes = 0;
    int tp_backward_allreduces = 0;
    double tp_backward_bytes = 0;
    // ZeRO (plan.schedule's distributed_optimizer, shard_gradients, shard_weights over the stage's d replicas):
    /// The weights a rank keeps: weight_bytes, or with shard_weights its 1/d plus the two layers that are whole at a
    /// time (the one computing and the next, prefetched); with FP8 products, plus their copies (fp8_weight_bytes).
    double resident_weight_bytes = 0;
    /// The layers' FP8 weight copies and scaling state (Layer::fp8_weight_bytes, divided by t), counted in
    /// resident_weight_bytes at the weights' share.
    double fp8_weight_bytes = 0;
    /// The weight-sized gradient a rank keeps: weight_bytes, or its 1/d with shard_gradients.
    double gradient_bytes = 0;
    /// With shard_weights, per microbatch on one rank: the all-gather of the stage's weights before the forward, and
    /// before the backward the same again plus the reduce-scatter of its gradients, each (d-1)/d of the bytes over
    /// the data-parallel group's slowest link (seconds, before overlap: CostModel::fromPlan pipelines them with the
    /// pass's compute, layer by layer); and how many layers with weights they are split into.
    double weight_gather_forward_s = 0;
    double weight_gather_backward_s = 0;
    int weight_layers = 0;
    // Context parallelism (plan.context_parallel = c > 1; all zero when c = 1), per microbatch on one rank, whose
    // compute and activations above are its 1/c of every sequence: one step of the ring attention summed over the
    // stage's layers with keys and values (Layer::key_value_bytes). A step sends the rank's current K and V block
    // (its 1/c of the sequence, over t) to the next rank while the attention core computes on the one it holds.
    double cp_step_bytes = 0; ///< K and V of one step, all layers (the backward sends twice that: K, V and their grads)
    double cp_step_forward_s = 0; ///< the attention core's forward compute one step covers, all layers
    double cp_step_backward_s = 0; ///< and its backward's
    /// What a fused backward holds on top of the stashes while it runs: one layer's activation gradients at a time
    /// (the largest of the layers' weight_gradient_bytes, divided by t like the compute; a split backward keeps them
    /// from I to W instead, weight_gradient_bytes).
    double backward_working_bytes = 0;
    int cp_layers = 0; ///< layers that exchange (a latency each per step)
};

/// What shows of the ring exchanges of `totals` (a rank's, stageTotals) among c context-parallel ranks over a link of
/// `bandwidth` and `latency`, per microbatch: c - 1 steps, each max(0, transfer - the attention compute it runs under)
/// (Megatron's and Transformer Engine's ring attention, K and V round the ring; the backward also passes their
/// gradients: twice the bytes). 0 when c = 1.
double contextParallelSeconds(const StageTotals& totals, int c, double bandwidth, double latency, bool backward);

/// Totals of one tensor-parallel rank on `type` (at deviceSpeed(type, plan.model, plan.cluster.device_types)). With t =
/// plan.tensor_parallel > 1 compute, weights, optimizer state and the split part of the stashed activations are divided
/// by t (tensorParallelStash); the stage input stays whole (replicated on every rank); the all-reduces come from
/// tensorParallelTraffic. Their time depends on the group's links: see tensorParallelTime (CostModel::fromPlan adds it
/// to F and B).
StageTotals stageTotals(const Plan& plan, int stage, const DeviceType& type);
/// The same with `type`'s deviceSpeed factor given (a caller costing many stages finds it once: it reads every layer).
StageTotals stageTotals(const Plan& plan, int stage, const DeviceType& type, double speed);

// ---- Tensor parallelism (Megatron-LM, digest megatron-gavel.md §2.2-2.3) --------------------------------

/// @brief Ring all-reduces of one layer on one tensor-parallel rank per microbatch.
struct TensorParallelTraffic
{
    int forward_allreduces = 0;
    double forward_bytes = 0; ///< total payload of the forward all-reduces
    int backward_allreduces = 0;
    double backward_bytes = 0;
};

/// Megatron's split: a transformer layer (and any layer that is not an embedding or a head) all-reduces its
/// output (b s h values, activation_bytes x scale) twice in the forward (g after attention and after the MLP)
/// and twice in the backward (f); a vocabulary-parallel embedding once in the forward (partial lookups are
/// summed); the head (vocabulary-parallel logits) once in the backward: the gradient of its replicated
/// input, `input_bytes` (the cut before it, at the profile's microbatch). Data sources have none. Zero
/// traffic when t = 1.
TensorParallelTraffic tensorParallelTraffic(const Layer& layer, double input_bytes, double scale, int t);

/// What shows of `comm_s` of tensor-parallel communication when it is pipelined with `compute_s` of GEMMs in t
/// chunks (Transformer Engine's userbuffer overlap, Megatron's --tp-comm-overlap): chunk i's transfer runs under chunk
/// i + 1's GEMM, so the first chunk's (comm / t) always shows, and the rest shows where it outlasts the GEMMs:
/// max(comm / t, comm - compute (t - 1) / t). 0 without communication.
double overlappedTensorParallelTime(double comm_s, double compute_s, int t);

/// Time of `count` ring all-reduces moving `bytes` in total among t ranks:
/// 2 (t-1)/t bytes / bandwidth + 2 (t-1) latency x count (0 when t = 1).
double tensorParallelTime(double bytes, int count, int t, double bandwidth, double latency);

/// Activation bytes one of t ranks stashes for `layer` per microbatch without recomputation. A layer with
/// activation_parts: its replicated part (split by t too with `sequence_parallel`) plus its sharded part and attention
/// core over t. Otherwise a replicated part R plus (stash - R)/t.
/// R for a transformer layer is 5 x its output bytes, Korthikanti et al. (2022) 10sbh of sbh(34 + 5as/h) at
/// 2 bytes per value (layer-norm inputs, the attention and MLP inputs, dropout masks: what Megatron keeps
/// whole without sequence parallelism); for any other layer its output (activation_bytes). t = 1: the stash.
double tensorParallelStash(const Layer& layer, double scale, int t, bool sequence_parallel = false);

/// What one of t ranks keeps from `layer`'s I for its W per microbatch (weight_gradient_bytes x scale): a
/// transformer layer's column-parallel output gradients (QKV 3 b s h, MLP up 4 b s h of its 11) split by t, the
/// rest whole (the row-parallel products' and layer norms' b s h, every other layer's); t = 1: all of it.
double tensorParallelWeightGradient(const Layer& layer, double scale, int t);

/// @brief The memory a device of a stage needs at its peak under a schedule kind.
struct StageMemoryInput
{
    double weight_bytes = 0;
    double activation_bytes = 0;
    double input_bytes = 0;
    double optimizer_bytes = 0;
    int in_flight = 1; ///< microbatches whose activations are stashed at once (1F1B warm-up depth)
    int microbatches = 1; ///< microbatches of one batch on this device (GPipe stashes them all)
    /// Stage-level recomputation (the PipeDream-2BW, BaPipe and MadPipe papers' model): a stash is input_bytes and one
    /// full activation_bytes is live during a backward. Leave false and give kept activation_bytes and working_bytes
    /// for a plan's own recomputation (memoryInput).
    bool recompute = false;
    /// Kinds that split the backward (traits.splits_backward) only: the bytes a microbatch's I keeps for its W
    /// (StageTotals::weight_gradient_bytes), and how many microbatches wait between their I and their W at the
    /// stage's peak (awaitingWeight); absent: every stash, an upper bound (the last stage of a straight pipeline
    /// reaches it under zb-h1 and zb-h2).
    double weight_gradient_bytes = 0;
    std::optional<int> awaiting_weight;
    double working_bytes = 0; ///< live during one backward on top of the stashes (StageTotals::recompute_working_bytes)
    /// ZeRO's shares (StageTotals::resident_weight_bytes, gradient_bytes); absent: weight_bytes each.
    std::optional<double> resident_weight_bytes;
    std::optional<double> gradient_bytes;
    /// Kinds with a fused backward only: live during it (StageTotals::backward_working_bytes).
    double backward_working_bytes = 0;
};

/// The memory input of a stage with `totals` (under its plan's recomputation: kept_bytes stashed per microbatch,
/// recompute_working_bytes live during a backward), `in_flight` and `microbatches` as in StageMemoryInput.
StageMemoryInput memoryInput(const StageTotals& totals, int in_flight, int microbatches);

/// Weights x versions kept + gradients + optimizer state + stashed activations, by the schedule's traits.
/// Versions (traits.weight_versions): 1, 2 or in_flight. Stashes (traits.stash): all microbatches, in_flight,
/// or in_flight at most microbatches. With recomputation a stash is the stage input and one full set of
/// activations is live during a backward pass. Split-backward kinds add awaiting_weight x weight_gradient_bytes
/// (at most one per stash).
double stageMemoryBytes(const ScheduleTraits& traits, const StageMemoryInput& in);
/// The same for a registered schedule kind; throws InputError for an unknown kind.
double stageMemoryBytes(std::string_view schedule_kind, const StageMemoryInput& in);

// HetPipe (schedule "wsp"): parameter-server traffic.
/// Seconds for `device` to push (or pull) `bytes` of its partition to (from) the parameter servers. One PS
/// runs on every node and layers are spread round-robin over them (HetPipe's default placement, digest
/// §1.2.6). All the bytes leave the GPU over its intra-node link (PCIe: to the node's own PS or to the NIC),
/// and (H-1)/H of them also cross the inter-node link to the other H-1 nodes' servers; both legs stream at
/// once: latency + max(bytes / intra, (H-1)/H bytes / inter). The latency is the inter-node one when H > 1. A leg whose
/// bandwidth is 0 is not modelled (free). With `local` (ED-local placement) the partition's parameters live on the
/// device's own node: latency + bytes / intra over the intra-node link only.
double parameterServerSeconds(const Cluster& cluster, int device, double bytes, bool local = false);

} // namespace pw::planner
