// SPDX-License-Identifier: MIT
// Megatron-LM PTD-P configuration search: the closed forms of the digest (megatron-gavel.md §1-2) and the
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
// analytical estimate of one (p, t, d, b, v, recompute) configuration (docs/algorithms/megatron.md).
#pragma once

#include <string>

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

/// @brief One point of the search space. p t d = devices; m = B / (b d) microbatches per pipeline.
struct Config
{
    int p = 1; ///< pipeline stages
    int t = 1; ///< tensor-parallel size
    int d = 1; ///< data-parallel size
    int b = 1; ///< microbatch size (samples)
    int v = 1; ///< model chunks per device (interleaving); 1 = 1F1B
    bool recompute = false;
    int m = 1; ///< microbatches per pipeline and batch

    std::string text() const; ///< "p=4 t=2 d=1 b=1 v=2 m=8 recompute"
};

/// @brief The analytical model's verdict on a configuration's plan.
struct Estimate
{
    double stage_time_s = 0; ///< slowest device's F + B (+ recomputed F) per microbatch, TP all-reduces included
    double pipeline_s = 0; ///< (m + (p-1)/v) stage_time + 2 (v p - 1) p2p
    double p2p_s = 0; ///< one boundary crossing: latency + b s h bytes / t / bandwidth (slowest boundary)
    double data_parallel_s = 0; ///< ring all-reduce 2 (d-1)/d x the rank's weight bytes (slowest device)
    double optimizer_s = 0;
    double batch_time_s = 0; ///< pipeline + data parallel + optimizer
    double throughput_samples_per_s = 0;
    double peak_memory_bytes = 0; ///< the device closest to (or furthest over) its capacity
    double memory_capacity_bytes = 0;
    bool fits = true;
};

/// Devices in Megatron's rank order (tensor fastest, then data, then pipeline): stage r holds devices
/// [r d t, (r+1) d t) of the first p t d. Layer boundaries split the profile into p v virtual stages, balanced
/// by time per tensor-parallel rank (tensor all-reduces included); schedule 1f1b (v = 1) or interleaved.
Plan configPlan(const PartitionRequest& request, const Config& config);

/// The closed-form estimate of a plan made by configPlan (costs from CostModel::fromPlan).
Estimate estimate(const Plan& plan, const Config& config);

} // namespace pw::planner::megatron
