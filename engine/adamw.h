// SPDX-License-Identifier: MIT
// AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW and llm.c apply it: decoupled weight decay on the
// parameters its mask marks (matrices and embeddings), bias-corrected moments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

/// @brief Moments for one parameter buffer.
class AdamW
{
public:
    explicit AdamW(std::size_t parameters)
        : m_m(parameters, 0.0f)
        , m_v(parameters, 0.0f)
    {
    }

    /// Update t (1-based; bias correction) with learning rate lr.
    void step(std::span<float> params, std::span<const float> grads, std::span<const std::uint8_t> decay,
        const AdamWOptions& options, double lr, int t);

private:
    std::vector<float> m_m;
    std::vector<float> m_v;
};

} // namespace pw::engine
