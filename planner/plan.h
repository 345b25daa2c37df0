// SPDX-License-Identifier: MIT
// Plan: which layers run on which devices, and how the schedule is to run them.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "model_profile.h"
#include "shared.h"

namespace pw::planner {

inline constexpr int kPlanFormatVersion = 1;
inline constexpr long long kMaxMicrobatches = 1'000'000;
struct Plan;
/// The iterations a plan simulates: its own, raised towards `minimum` (its schedule kind's
/// ScheduleTraits::min_iterations, see simulatedIterations in schedule/generator.h) as far as the plan's size
/// limits (kMaxMicrobatches, kMaxStageMicrobatches) allow.
int steadyIterations(const Plan& plan, int minimum);
inline constexpr long long kMaxStageMicrobatches = 5'000'000; ///< ~30 M actions, ~1 GB simulated
/// The "pipedream" schedule deals inputs round-robin over a stage's replicas: the smallest microbatch count >=
/// the plan's for which microbatches x iterations is a multiple of every stage's replica count; -1 when that
/// exceeds kMaxMicrobatches.
int pipeDreamMicrobatches(const Plan& plan);

/// @brief A contiguous range of layers (in the plan's layer order) replicated over `devices`.
/// With interleaving these are virtual stages; virtual stage s runs on the devices of stage s mod p, or with two
/// chunks in a V (schedule "zbv") virtual stage s >= p on those of stage 2p - 1 - s.
struct PlanStage
{
    int first_layer = 0;
    int last_layer = 0; ///< inclusive
    std::vector<int> devices; ///< one entry per replica, global device indices
    /// Independent pipeline the stage belongs to (HetPipe's virtual workers): a plan's stages are grouped
    /// pipeline after pipeline (0, 1, ...), and each pipeline's stages are contiguous and cover every layer
    /// once. 0 for the usual single-pipeline plan; written to JSON only when the plan has several.
    int pipeline = 0;

    int layerCount() const { return last_layer - first_layer + 1; }
    int replicas() const { return static_cast<int>(devices.size()); }

    bool operator==(const PlanStage&) const = default;
};

/// @brief Which activations the backward computes again instead of keeping them (Korthikanti et al. 2022).
enum class Recompute {
    None, ///< every activation is kept from the forward to the backward
    /// The attention core (scores, softmax, dropout) is recomputed, the rest kept: Megatron's
    /// --recompute-activations. On layers without activation_parts nothing changes.
    Selective,
    /// Every block keeps only its input and runs its forward again before its backward (Megatron's
    /// --recompute-granularity full --recompute-method uniform --recompute-num-layers 1); layers without
    /// activation_parts are recomputed from the stage's input.
    Full,
};
/// "none" | "selective" | "full".
const char* name(Recompute recompute);
/// The mode called `text` ("none", "selective", "full"); throws InputError at `field` otherwise.
Recompute recomputeNamed(const std::string& text, const std::string& field);

/// @brief How the schedule generator and simulator run the plan.
struct ScheduleOptions
{
    /// gpipe | 1f1b | pipedream | 2bw | interleaved | 1f1b-so | 1f1b-as | wsp | zb-h1 | zb-h2 | zbv
    std::string kind = "1f1b";
    int microbatches = 8; ///< per batch (per pipeline replica set); inputs simulated for pipedream
    int microbatch_size = 0; ///< 0 = the profile's
    int chunks = 1; ///< virtual stages per device (interleaved; 2 for zbv)
    int iterations = 1; ///< batches to simulate
    Recompute recompute = Recompute::None; ///< activation recomputation
    /// Megatron's sequence parallelism (with tensor_parallel > 1): the norms and dropouts run on 1/t of the sequence
    /// each, so the activations tensor parallelism keeps whole (ActivationParts::replicated, a block's input) are split
    /// over the group too; its all-reduces become reduce-scatters and all-gathers of the same bytes. No effect at t
    /// = 1.
    bool sequence_parallel = false;
    /// Megatron's --tp-comm-overlap (Transformer Engine's userbuffers; needs sequence_parallel and t > 1): each
    /// all-gather and reduce-scatter is split into t chunks pipelined with the GEMM beside it, so only the first chunk
    /// and what the GEMMs cannot cover show (overlappedTensorParallelTime in costs.h).
    bool tp_comm_overlap = false;
    /// Megatron's --overlap-grad-reduce (PyTorch DDP's default too): the data-parallel gradient sum starts bucket by
    /// bucket while the last backward still runs, so only what is left when the backward ends shows. false: it starts
    /// after the backward (Megatron's older local DDP).
    bool overlap_grad_reduce = true;
    /// Megatron's --overlap-param-gather (with the distributed optimizer): the all-gather of the updated parameters
    /// after the step runs bucket by bucket under the next batch's forward, so the step's collective shows only its
    /// reduce-scatter (half of the all-reduce's traffic). false: the all-gather follows the reduce-scatter.
    bool overlap_param_gather = false;
    std::string optimizer = "adam"; ///< sgd | momentum | adam (moments kept: 0, 1, 2)
    /// fp32 | bf16 | fp16 | fp8: the weights' precision; "" = the profile's (weightPrecision). Below fp32 training
    /// is mixed precision: the optimizer keeps fp32 master weights. fp8: 16-bit weights whose block products run in
    /// FP8 (a profile made with `profile transformer --precision fp8`, whose times and memory are FP8's).
    std::string precision;
    std::string gradient_precision; ///< fp32 | bf16 | fp16; "" = the weights' (Megatron's bf16 default is fp32)
    /// Megatron's distributed optimizer (ZeRO stage 1): master weights and moments sharded over the
    /// data-parallel replicas of a stage.
    bool distributed_optimizer = false;
    /// ZeRO stage 2 (with distributed_optimizer): each data-parallel replica keeps only its 1/d of the gradients,
    /// reduce-scattered into its shard; the gradient sum moves what the all-reduce moved.
    bool shard_gradients = false;
    /// ZeRO stage 3, PyTorch's FSDP (with shard_gradients): each replica keeps 1/d of the weights and all-gathers a
    /// layer's before its forward and again before its backward, prefetching the next under the current one's
    /// compute, and reduce-scatters the gradients every microbatch; two layers are whole at a time.
    bool shard_weights = false;
    /// Hybrid sharding (PyTorch's HSDP, Megatron's --num-distributed-optimizer-instances d c / shard_group): ZeRO's
    /// shards (optimizer state, and with shard_gradients and shard_weights the gradients and weights) are split over
    /// groups of this many consecutive gradient replicas instead of all of them; each group keeps a whole copy, and
    /// the groups all-reduce their shards' gradients once per step. 0: one group of every replica (plain ZeRO/FSDP).
    /// Needs distributed_optimizer; must divide every stage's gradient replicas.
    int shard_group = 0;
    bool overlap_communication = true; ///< false: sends and receives block the compute lane
    /// Per virtual stage: microbatches a replica keeps in flight in the 1F1B order (warm-up forwards + 1).
    /// Empty = the kind's default (ceil(W_s / r_s)); BaPipe's 1F1B-SO and MadPipe's 1F1B* set it.
    std::vector<int> in_flight;
    // HetPipe ("wsp"): wave synchronous parallel across the plan's pipelines (virtual workers).
    /// N_m: minibatches in flight per pipeline, which is also the wave size (the same in every pipeline);
    /// 0 = the stage count of the deepest pipeline.
    int concurrent_minibatches = 0;
    int staleness = 0; ///< D: clock distance (in waves) a pipeline may run ahead of the slowest one
    /// wsp: HetPipe's ED-local parameter placement: stage q's parameters live on the PS of the node holding
    /// stage q of every pipeline, so pushes and pulls stay on intra-node links. Needs every pipeline to have
    /// the same stages (layers) with stage q of all of them on one node. false: round-robin over all nodes.
    bool local_parameter_servers = false;

    bool operator==(const ScheduleOptions&) const = default;
};

/// The ZeRO stage the options describe: 3 with shard_weights, 2 with shard_gradients, 1 with distributed_optimizer,
/// else 0.
int zeroStage(const ScheduleOptions& options);
/// Sets distributed_optimizer, shard_gradients and shard_weights to ZeRO stage `stage` (0-3; clamped).
void setZeroStage(ScheduleOptions& options, int stage);

/// Bytes per value of "fp32" (4), "bf16" or "fp16" (2), and at the weights' path "/schedule/precision" of "fp8"
/// (2: FP8 products keep 16-bit weights); throws InputError at JSON path `path` for other names.
double precisionBytes(const std::string& precision, const std::string& path = "/schedule/precision");
/// The weights' precision: options.precision, else the profile's (architecture.fp8: "fp8"; bytes_per_element 2:
/// "bf16", 4: "fp32"), else "fp32" (PipeDream's profiles were measured in fp32).
std::string weightPrecision(const ScheduleOptions& options, const ModelProfile& model);
/// How many gradient replicas ZeRO shards over among `replicas`: options.shard_group (HSDP) when it is smaller, else
/// all of them.
int shardGroupSize(const ScheduleOptions& options, int replicas);
/// @brief What share of a stage's weights and of its weight-sized gradient a data-parallel replica keeps between uses:
/// 1, or 1/d where ZeRO shards them (shard_weights, shard_gradients).
struct ResidentShares
{
    double weights = 1;
    double gradients = 1;

    bool operator==(const ResidentShares&) const = default;
};
ResidentShares residentShares(const ScheduleOptions& options, int dataParallel);
/// Bytes one parameter costs in training with `dataParallel` replicas of its stage: weights P + gradients G +
/// fp32 master weights (4, mixed precision only) + 4 per fp32 moment (SGD 0, momentum 1, Adam 2); the master
/// weights and moments divided by dataParallel with distributed_optimizer, the gradients too with shard_gradients
/// and the weights with shard_weights. Adam: fp32 16, bf16 weights and gradients 16, bf16 with fp32 gradients 18
/// (Megatron's default), distributed 6 + 12/d (Megatron-LM's docs/distrib_optimizer.md; ZeRO's 2 + 2 + 12), ZeRO-2
/// 2 + 16/d, ZeRO-3 18/d. Throws InputError for an unknown optimizer or precision.
double trainingBytesPerParameter(const ScheduleOptions& options, const ModelProfile& model, int dataParallel = 1);
/// The memory models count weights (weight_bytes, in the weights' precision, times ResidentShares::weights) and one
/// weight-sized gradient (times ResidentShares::gradients); this is the rest per weight byte, the default of a
/// layer's optimizer_state_bytes: the gradients' extra width (G - P, sharded with them) and the optimizer state.
/// fp32 Adam 2; bf16 Adam 6, 7 with fp32 gradients; distributed 1 + 6/d; ZeRO-2 with fp32 gradients 7/d.
double optimizerStateFactor(const ScheduleOptions& options, const ModelProfile& model, int dataParallel = 1);
/// Bytes of gradient per byte of weight (G / P): what a data-parallel all-reduce moves per weight byte. 2 for
/// bf16 weights with fp32 gradients (Megatron's default), else 1.
double gradientBytesPerWeightByte(const ScheduleOptions& options, const ModelProfile& model);

/// @brief Metrics predicted for the plan (filled by the simulator).
struct PredictedMetrics
{
    double iteration_time_s = 0;
    double throughput_samples_per_s = 0;
    double bubble_fraction = 0;
    std::vector<double> stage_peak_memory_bytes;

    bool operator==(const PredictedMetrics&) const = default;
};

struct Plan
{
    /// The model and cluster the plan was made for, shared with every copy of the plan (and with the project,
    /// the undo steps, scenarios and result rows): copying a plan copies no profile. Change through edit().
    Shared<ModelProfile> model;
    Shared<Cluster> cluster;
    std::vector<PlanStage> stages;
    std::vector<int> layer_order; ///< permutation of layer indices; empty = the profile's order
    std::string algorithm;
    nlohmann::json algorithm_options = nlohmann::json::object();
    double objective_s = 0; ///< the partitioner's own objective (PipeDream: bottleneck time per minibatch)
    ScheduleOptions schedule;
    /// Tensor-parallel degree t (Megatron §4.2.3): a stage's devices are d*t entries, and each run of t
    /// consecutive entries is one tensor-parallel group (one data-parallel replica). 1 = none.
    int tensor_parallel = 1;
    /// Context-parallel degree c (Megatron's --context-parallel-size, ring attention): each data-parallel replica of
    /// a stage is c tensor-parallel groups, consecutive in its devices (d c t entries: replica, then context rank, then
    /// tensor rank, Megatron's order), each holding 1/c of every sequence and all of the replica's weights; K and V
    /// go round the c ranks inside every attention. 1 = none.
    int context_parallel = 1;
    std::optional<PredictedMetrics> predicted;

    int stageCount() const { return static_cast<int>(stages.size()); }
    /// Independent pipelines (1 + the last stage's pipeline index; 1 for an empty plan).
    int pipelineCount() const { return stages.empty() ? 1 : stages.back().pipeline + 1; }
    /// Microbatches one training step takes over the whole plan: every pipeline runs schedule.microbatches.
    int microbatchesPerStep() const { return schedule.microbatches * pipelineCount(); }
    /// First stage of the pipeline holding `stage`, and one past its last.
    int pipelineBegin(int stage) const;
    int pipelineEnd(int stage) const;
    bool firstInPipeline(int stage) const { return stage == 0 || stages[stage - 1].pipeline != stages[stage].pipeline; }
    bool lastInPipeline(int stage) const
    {
        return stage + 1 >= stageCount() || stages[stage + 1].pipeline != stages[stage].pipeline;
    }
    /// N_m of the "wsp" schedule: schedule.concurrent_minibatches, or when 0 the deepest pipeline's stage count.
    int effectiveConcurrentMinibatches() const;
    /// Physical pipeline depth p: stages / chunks (all pipelines' stages together when there are several).
    int pipelineDepth() const;
    /// Every device some stage runs on, ascending: the run's devices (a plan may leave some of its cluster's idle).
    std::vector<int> devicesUsed() const;
    /// The groups of devices of `pipeline` that sum the gradient of the weights its first and last layers share
    /// (ModelProfile::tiedWeightBytes() > 0: GPT-2's token embedding and head), each ascending, before their optimizer
    /// steps. When both stages have r replicas, r pairs: replica j of the embedding's stage with replica j of the
    /// head's (after the replicas' own all-reduce each replica holds its stage's whole gradient; Megatron's
    /// embedding group); otherwise one group of every device of both stages, each contributing its share. None
    /// when the model ties nothing, one stage holds both layers, or the two are on the same devices (ZBV's V: each
    /// device sums its own two copies). Every pipeline keeps its own copies.
    std::vector<std::vector<int>> tiedWeightGroups(int pipeline) const;
    /// Whether the tied weights' holders in `pipeline` step different numbers of times, so that no all-reduce can
    /// sum their gradients step by step: a kind that steps after every backward (PipeDream) with the embedding's
    /// and the head's stages on different replica counts. tiedWeightGroups() is then empty; the engine refuses
    /// such a plan.
    bool tiedWeightsStepApart(int pipeline) const;
    /// Devices that run every microbatch of a stage's replica together: t c (the tensor- and context-parallel ranks).
    int modelParallel() const { return std::max(1, tensor_parallel) * std::max(1, context_parallel); }
    /// Data-parallel replicas of a stage (each a different microbatch): its devices / (t c).
    int dataReplicas(int stage) const { return stages[stage].replicas() / modelParallel(); }
    /// Devices of a stage that hold the same weights and sum their gradients: the data-parallel replicas times the
    /// context ranks, d c (Megatron's data-parallel group with context parallelism); ZeRO shards over them.
    int gradientReplicas(int stage) const { return stages[stage].replicas() / std::max(1, tensor_parallel); }
    /// Layer index at position `pos` of the plan's order.
    int layerAt(int pos) const { return layer_order.empty() ? pos : layer_order[pos]; }
    /// The configuration string of the PipeDream papers: data-parallel replicas per stage joined by '-', e.g.
    /// "15-1"; several pipelines are joined by '|' ("1-1-1-1|1-1-1-1"); tensor parallelism is appended
    /// ("1-1 t=8": two stages, each one tensor-parallel group of 8 devices).
    std::string configString() const;
    /// What `device` does in the plan, for people: its stages, and where the plan replicates or splits them its data-
    /// parallel replica and tensor rank ("stage 1", "stage 0, replica 1", "stage 2, tensor rank 1/4", "stages 0+3");
    /// empty when it runs no stage.
    std::string deviceRole(int device) const;

    /// Throws InputError when stages are not contiguous, leave layers out, use unknown devices, or the
    /// schedule options are inconsistent with the stages. Each pipeline is checked on its own; pipelines
    /// share no device and do not interleave (chunks 1).
    void validate() const;

    bool operator==(const Plan&) const = default;

private:
    // The parts of validate(), in the order it runs them.
    void validateLayerOrder() const;
    void validateStages() const;
    void validateSchedule() const;
    void validateParallelism() const;
};

nlohmann::json toJson(const Plan& plan);
nlohmann::json toJson(const ScheduleOptions& options);
/// Parses the "schedule" object of a plan (or of another file, at JSON path `path`); range checks are
/// Plan::validate()'s.
ScheduleOptions scheduleOptionsFromJson(const nlohmann::json& j, const std::string& path);
Plan planFromJson(const nlohmann::json& j);

/// Short hex digest of a JSON value's canonical dump (provenance of model and cluster).
std::string digestOf(const nlohmann::json& j);

} // namespace pw::planner
