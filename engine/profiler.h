// SPDX-License-Identifier: MIT
// The measured profile: each planner layer of a GPT-2 (embedding, blocks, head) timed on this machine with the
// engine's own kernels, forward and backward, and its bytes counted from the engine's tensors. What
// `pipewright-agent --profile` writes, so that plans are made from what the agents will actually run.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "planner/model_profile.h"

namespace pw::engine {

/// @brief What to measure and how.
struct ProfileOptions
{
    planner::TransformerConfig shape; ///< the model; shape.microbatch is the batch B of each timed microbatch
    int threads = 1; ///< BLAS / OpenMP threads (what each agent of the run will get)
    int repeats = 10; ///< timed passes; each layer's time is the median over them
    int warmup = 1; ///< untimed passes first (buffers allocated, caches and thread pools warm)
    std::uint64_t seed = 1234; ///< weights and tokens
    DeviceChoice device; ///< the CPU (fp32), or a CUDA device in fp32 or bf16 mixed precision

    /// Throws InputError naming the option (--layers, --threads, ...) when a value is out of range.
    void validate() const;

    bool operator==(const ProfileOptions&) const = default;
};

/// @brief The raw measurements of one layer, every pass (seconds), before the medians.
struct LayerSamples
{
    std::vector<double> forward_s;
    std::vector<double> backward_s;
    /// The backward again, split as zero-bubble schedules run it: its input gradient (I), then its weight gradient (W).
    std::vector<double> backward_input_s;
    std::vector<double> backward_weight_s;

    bool operator==(const LayerSamples&) const = default;
};

/// Runs warm-up + timed passes over the model's layers, each layer a one-layer StageModel fed by the previous
/// layer's output (forward) and gradient (backward), and returns the planner's profile: forward_ms and
/// backward_ms the medians, backward_input_ms and backward_weight_ms the medians of the same backward run split
/// (StageModel::backwardInput, then backwardWeight, timed apart after the fused one on the same stash),
/// activation_bytes the layer's output (the head's: its logits), weight_bytes 4 x the layer's parameters (the head
/// holds its tied copy of the token embedding, as a last stage does), stashed_bytes what the layer's forward keeps for
/// its backward, weight_gradient_bytes what its backwardInput keeps for its backwardWeight; profiled on device "cpu" in
/// fp32, with the architecture, so plans made from it can be trained. `samples`, when given, receives every pass's
/// times.
planner::ModelProfile measureProfile(const ProfileOptions& options, std::vector<LayerSamples>* samples = nullptr);

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

} // namespace pw::engine
