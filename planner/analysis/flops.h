// SPDX-License-Identifier: MIT
// Model FLOPs per sample and iteration, achieved FLOP/s per GPU and model FLOPs utilisation of a plan.
#pragma once

#include <optional>

#include "../model_profile.h"
#include "../plan.h"

namespace pw::planner {

/// FLOPs of `batch` samples of a transformer: 3 x (4 x with recomputation) its blocks' forward FLOPs plus 3 x its
/// logits' (transformer_shape.h). For a GPT this is Megatron's Eq. 4.2 (digest megatron-gavel.md §3.1): with
/// recomputation 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (four passes of 24 B s h^2 + 4 B s^2 h per layer and the logit
/// layer's 6 B s h V, not recomputed); without it 72 B s l h^2 (1 + s/(6h)) + 6 B s h V. Every floating-point
/// operation counts once, whatever its precision.
double transformerFlops(const TransformerConfig& config, double batch, Recompute recompute);

/// FLOPs one sample of `model` costs per training step: Eq. 4.2 when the profile has an architecture, else
/// 3 (4 with recomputation) x the layers' forward_flops per profiled microbatch / its size; nullopt when the
/// profile has neither.
std::optional<double> modelFlopsPerSample(const ModelProfile& model, Recompute recompute);

/// @brief What a plan's predicted throughput means in FLOP/s, counted two ways. Model FLOPs are the useful ones
/// (PaLM's and Megatron's convention for MFU, digest megatron-gavel.md §3.1): forward and backward, 3 x the forward,
/// whether or not the plan recomputes. Hardware FLOPs are what the devices execute: with recomputation the forward
/// runs twice (4 x the forward, Eq. 4.2 as printed, the paper's "% of peak"). Without recomputation both agree.
struct FlopsReport
{
    double model_flops_per_sample = 0; ///< useful FLOPs of one sample (no recomputation)
    double hardware_flops_per_sample = 0; ///< executed FLOPs of one sample (with the recomputed forward, if any)
    double model_flops_per_iteration = 0; ///< one batch: microbatches x microbatch size samples
    /// Achieved model FLOP/s of one GPU (the plan's GPUs on average: devices that share one count as one; a CPU
    /// device counts as its own).
    double model_flops_per_s_per_gpu = 0;
    double hardware_flops_per_s_per_gpu = 0; ///< achieved hardware FLOP/s of one GPU
    double peak_flops_per_s_per_gpu = 0; ///< the GPUs' mean peak_tflops x 1e12; 0 when none is known
    int gpus = 0; ///< the plan's GPUs (physical: planner::physicalGpu), or devices where they have none
    int devices = 0; ///< the plan's devices
    double mfu = 0; ///< model FLOPs utilisation: model FLOP/s / peak; 0 when the peak is unknown
    double hfu = 0; ///< hardware FLOPs utilisation: hardware FLOP/s / peak (= mfu without recomputation)

    bool operator==(const FlopsReport&) const = default;
};

/// The report for `plan` at `throughput_samples_per_s`; nullopt when modelFlopsPerSample has no answer.
std::optional<FlopsReport> flopsReport(const Plan& plan, double throughput_samples_per_s);

} // namespace pw::planner
