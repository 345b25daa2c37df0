// SPDX-License-Identifier: MIT
// AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW and llm.c apply it: decoupled weight decay on the
// parameters its mask marks (matrices and embeddings), bias-corrected moments.
#pragma once

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

/// @brief The moments of one stage's parameters (fp32, on the stage's device) and the step that updates them.
class AdamW
{
public:
    /// Zeroed moments for `model`'s parameters, on its backend.
    explicit AdamW(const StageModel& model);

    /// Update t (1-based; bias correction) with learning rate lr, of `model`'s parameters from its gradients: one
    /// backend call over all its tensors, decayed or not (TensorSlot::decayed). In mixed precision it updates the
    /// fp32 master weights and rounds them into the bf16 parameters.
    void step(StageModel& model, const AdamWOptions& options, double lr, int t);

private:
    Buffer m_m;
    Buffer m_v;
    std::vector<AdamWTensor> m_tensors; ///< the model's slots as the backend's adamwTensors takes them
};

} // namespace pw::engine
