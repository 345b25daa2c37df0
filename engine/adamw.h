// SPDX-License-Identifier: MIT
// AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW and llm.c apply it: decoupled weight decay on the
// parameters its mask marks (matrices and embeddings), bias-corrected moments.
#pragma once

#include <utility>
#include <vector>

#include "backend.h"
#include "model.h"

namespace pw::engine {

/// @brief The optimizer's settings and learning-rate schedule.
struct AdamWOptions
{
    double lr = 3e-4;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    int warmup_steps = 0; ///< linear warm-up from lr/warmup to lr over these steps
    bool cosine = false; ///< after the warm-up, cosine decay to lr_min_fraction x lr at total_steps
    double lr_min_fraction = 0.0;
    int total_steps = 0;

    /// The learning rate of step `step` (0-based).
    double lrAt(int step) const;

    bool operator==(const AdamWOptions&) const = default;
};

/// @brief Which of a stage's parameters one replica's optimizer updates: all of them, or with Megatron's distributed
/// optimizer (ZeRO stage 1) shard `index` of `count` contiguous parts of the flat parameter vector (equal multiples of
/// 64 elements; the last takes the remainder), whose moments alone it keeps.
struct OptimizerShard
{
    int index = 0;
    int count = 1;

    /// Elements [first, end) of n parameters.
    std::pair<std::size_t, std::size_t> range(std::size_t n) const;
    bool operator==(const OptimizerShard&) const = default;
};

/// @brief The moments of one stage's parameters, or of its replica's shard of them (fp32, on the stage's device),
/// and the step that updates them.
class AdamW
{
public:
    /// Zeroed moments for the shard of `model`'s parameters, on its backend.
    explicit AdamW(const StageModel& model, OptimizerShard shard = {});

    /// Update t (1-based; bias correction) with learning rate lr, of the shard of `model`'s parameters from its
    /// gradients: one backend call over its tensors (or their parts in the shard), decayed or not
    /// (TensorSlot::decayed). In mixed precision it updates the fp32 master weights and rounds them into the bf16
    /// parameters. With a shard the other parameters are left as they were: the replicas all-gather them.
    void step(StageModel& model, const AdamWOptions& options, double lr, int t);
    /// The elements of the parameter vector it updates.
    std::pair<std::size_t, std::size_t> range() const { return m_range; }

private:
    std::pair<std::size_t, std::size_t> m_range;
    Buffer m_m;
    Buffer m_v;
    std::vector<AdamWTensor> m_tensors; ///< the shard's tensors as adamwTensors takes them (offsets from its start)
};

} // namespace pw::engine
