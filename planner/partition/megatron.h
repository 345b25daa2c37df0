// SPDX-License-Identifier: MIT
// Megatron-LM PTD-P configuration search: the closed forms of the digest (megatron-gavel.md §1-2) and the
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
// analytical estimate of one (p, t, d, b, v, recompute) configuration (docs/algorithms/megatron.md).
#pragma once

#include <string>
#include <string_view>

#include "../sim/simulator.h"
#include "partitioner.h"

namespace pw::planner::megatron {

/// Pipeline bubble of a flushed schedule, idle over ideal time (§1.4, L1460-1462): (p-1) / (v m).
double bubbleFraction(int p, int v, int m);

/// Eq. 4.1 generalised to interleaving (§2.5): (m + (p-1)/v) (t_f + t_b), the batch's compute time of a
/// pipeline with per-microbatch stage times t_f and t_b.
double batchTime(int p, int v, int m, double forward_s, double backward_s);

/// Tensor-parallel traffic per layer, device and microbatch in elements (§2.3): 8 b s h (t-1) / t.
double tensorParallelVolume(double b, double s, double h, int t);

/// Chunk activations device `rank` stashes at its peak in Megatron's order (§1.3-1.4): p - rank with
/// one chunk (at most m), else m v when m == p, else min(2 (p - rank - 1) + (v - 1) p + 1, m v).
int peakStashes(int p, int v, int m, int rank);

/// Idle time per batch of a device whose per-microbatch forward, input gradient and weight gradient take
/// `forward_s`, `input_s` and `weight_s` (the fused backward is input + weight), by the schedule kind's closed
/// form (docs/algorithms/zero-bubble.md): 1f1b (p-1)(F+B+W); interleaved that over v; zb-h1 (p-1)(F+B-min(W,F));
/// zb-h2 and zbv (p-1) max(0, F+B-2W) (their domain m >= 2p - 1; zbv's from the paper's Table 8, where its
/// bubble is ZB-H2's within a few per cent).
/// dualpipev, per chunk (half the device's times): (p-1)(2F + I - min(W, F)) + max(0, p-2) max(0, I - F), which is
/// DeepSeek's (p-1)(F&B + B - 3W) with F&B = F + B (its pairs run one after the other), B = I + W, when F = I
/// (tests/planner/test_dualpipev.cpp checks both exactly in the simulator for W <= F).
/// A kind whose generator replays its own order (ScheduleGenerator::uniformBubble: v-half and v-min, whose bubble
/// depends on m when F, I and W differ) answers for itself over its m microbatches.
double pipelineBubble(std::string_view kind, int p, int v, int m, double forward_s, double input_s, double weight_s);
/// The kind places its two chunks per device in a V (ChunkRule::V: zbv, dualpipev, v-half, v-min).
bool vShaped(std::string_view kind);

/// Chunk activations device `rank` stashes at its peak under `kind` (zero-bubble traits: every stage holds the
/// first stage's count): zb-h1 min(p, m), zb-h2 min(2p - 1, m), zbv 2p chunk stashes (two chunks in a V, about 1F1B's
/// p stages' worth); else peakStashes.
/// dualpipev: 2p + 1 (an F&B pair's forward runs before its backward frees one). v-half and v-min: their generators'
/// orders counted (ScheduleGenerator::uniformPeakActivationBytes): 2 floor((p + 2) / 2) and 2 floor((p + 4) / 3)
/// once m is large enough (at most 2m), the authors' (p + 2) // 2 and (p + 4) // 3 microbatches of 1F1B's p.
int kindPeakStashes(std::string_view kind, int p, int v, int m, int rank);

/// Activation bytes device `rank` holds at its peak under `kind`: kindPeakStashes x `stash` (the largest chunk stash
/// on the device), plus, for the kinds that split the backward, `kept` (the largest weight-gradient bytes, what an I
/// keeps for its W) x the microbatches waiting for their W at that peak. zb-h1 and zb-h2 (zeroBubbleOrder's warm-up
/// f (p - rank - 1) and deferral f rank, f = 1 or 2): min(f rank + 1, m - min(warm, m) + 1, m), at least 1 (ZB-H1's
/// last stage: p). zbv: one in the steady state (2p chunk stashes); with m >= 2p - 1 also the cool-down's
/// (p + rank) chunk stashes with 2 rank + 1 waiting, whichever is larger.
double kindPeakActivationBytes(std::string_view kind, int p, int v, int m, int rank, double stash, double kept);

/// @brief One point of the search space. p t c d = devices; m = B / (b d) microbatches per pipeline.
struct Config
{
    int p = 1; ///< pipeline stages
    int t = 1; ///< tensor-parallel size
    int d = 1; ///< data-parallel size
    int b = 1; ///< microbatch size (samples)
    int v = 1; ///< model chunks per device (interleaving); 1 = 1F1B
    Recompute recompute = Recompute::None;
    int m = 1; ///< microbatches per pipeline and batch
    /// Schedule kind: empty for Megatron's own (1f1b with v = 1, interleaved with v > 1), or zb-h1, zb-h2
    /// (v = 1) or zbv (v = 2, the chunks in a V).
    std::string kind;

    std::string scheduleKind() const; ///< kind, or 1f1b / interleaved by v
    bool sequence_parallel = false; ///< Megatron's sequence parallelism (t > 1 only)
    /// Megatron's distributed optimizer (optimizer state sharded over the d replicas); the request's
    /// --distributed-optimizer sets it for every configuration.
    bool distributed_optimizer = false;
    /// ZeRO stages 2 and 3 on top of it (with replicas): the gradients, and also the weights, sharded over them.
    bool shard_gradients = false;
    bool shard_weights = false;
    /// Context-parallel size (ring attention over c ranks per tensor rank); p t c d = devices.
    int c = 1;

    /// "p=4 t=2 d=1 b=1 v=2 m=8 sp dist-opt recompute=selective", " c=2" with context parallelism, then the kind when
    /// it is a zero-bubble one
    std::string text() const;
};

/// @brief The analytical model's verdict on a configuration's plan.
struct Estimate
{
    double stage_time_s = 0; ///< slowest device's F + B (+ what it recomputes) per microbatch, TP all-reduces included
    double pipeline_s = 0; ///< m stage_time + the kind's bubble + 2 (v p - 1) p2p
    double bubble_s = 0; ///< the kind's idle time per batch (pipelineBubble on the slowest device)
    double p2p_s = 0; ///< one boundary crossing: latency + b s h bytes / t / bandwidth (slowest boundary)
    double data_parallel_s = 0; ///< ring all-reduce 2 (d-1)/d x the rank's weight bytes (slowest device)
    double optimizer_s = 0;
    double batch_time_s = 0; ///< pipeline + data parallel + optimizer
    double throughput_samples_per_s = 0;
    double peak_memory_bytes = 0; ///< the device closest to (or furthest over) its capacity
    double memory_capacity_bytes = 0;
    /// That device's peak by part: weights, their gradients (one weight-sized copy), optimizer state (fp32 master
    /// weights, moments, wider gradients; sharded with the distributed optimizer), stashed activations (and what
    /// split backwards keep for their W), recomputation's working set.
    struct MemoryParts
    {
        double weights = 0, gradients = 0, optimizer = 0, activations = 0, working = 0;
    } memory_parts;
    bool fits = true;

    /// "weights 16.1 GiB, gradients 16.1 GiB, optimizer state 48.3 GiB, activations 9.4 GiB, recomputation 1.2 GiB"
    std::string memoryPartsText() const;
};

/// Devices in Megatron's rank order (tensor fastest, then context, then data, then pipeline): stage r holds devices
/// [r d c t, (r+1) d c t) of the first p t c d. Layer boundaries split the profile into p v virtual stages, balanced
/// by time per tensor-parallel rank (tensor all-reduces included); schedule config.scheduleKind(). zbv puts virtual
/// stage s on rank s for s < p and on rank 2p - 1 - s after (the V).
Plan configPlan(const PartitionRequest& request, const Config& config);
/// The time per microbatch of every layer on one model-parallel rank that configPlan balances the stages by (its
/// share of the compute, recomputation and tensor-parallel all-reduces): it depends on t, c, b, recompute and sequence
/// parallelism only, so a search over many p, d and v computes it once for them all.
std::vector<double> balanceWeights(const PartitionRequest& request, const Config& config);
/// configPlan with `weights` from balanceWeights(request, config).
Plan configPlan(const PartitionRequest& request, const Config& config, const std::vector<double>& weights);

/// configPlan with the layer boundaries `bounds` (detail::balancedBoundaries of the weights over p v stages).
Plan configPlanCut(const PartitionRequest& request, const Config& config, const std::vector<int>& bounds);

/// What estimate() reads of a configuration's plan: one data-parallel pipeline's costs with the whole group's shares
/// where the pipelines cost alike (reducedCostModel), else the plan's, for each model-parallel group's first device
/// (CostModel::groupLeaderCosts). Configurations that differ only in the schedule kind (1f1b, zb-h1, zb-h2) or in
/// interleaving's order have the same.
CostModel estimateCosts(const Plan& plan);
/// The closed-form estimate of a plan made by configPlan (costs from estimateCosts); bubble and stashes follow the
/// plan's schedule kind.
Estimate estimate(const Plan& plan, const Config& config);
/// The same with its estimateCosts (shared by configurations that cost alike).
Estimate estimate(const Plan& plan, const Config& config, const CostModel& costs);

} // namespace pw::planner::megatron
