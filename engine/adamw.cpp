// SPDX-License-Identifier: MIT
#include "adamw.h"

#include <cmath>
#include <numbers>

namespace pw::engine {

double AdamWOptions::lrAt(int step) const
{
    if (warmup_steps > 0 && step < warmup_steps)
        return lr * (step + 1) / warmup_steps;
    if (!cosine || total_steps <= warmup_steps)
        return lr;
    const double progress = static_cast<double>(step - warmup_steps) / (total_steps - warmup_steps);
    const double floor = lr * lr_min_fraction;
    return floor + 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, progress))) * (lr - floor);
}

void AdamW::step(std::span<float> params, std::span<const float> grads, std::span<const std::uint8_t> decay,
    const AdamWOptions& o, double lr, int t)
{
    const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
    const float c1 = static_cast<float>(1.0 - std::pow(o.beta1, t));
    const float c2 = static_cast<float>(1.0 - std::pow(o.beta2, t));
    const float eps = static_cast<float>(o.eps), rate = static_cast<float>(lr);
    const float decayFactor = static_cast<float>(1.0 - lr * o.weight_decay);
    const long n = static_cast<long>(params.size());
#pragma omp parallel for
    for (long i = 0; i < n; ++i) {
        const float g = grads[static_cast<std::size_t>(i)];
        float& m = m_m[static_cast<std::size_t>(i)];
        float& v = m_v[static_cast<std::size_t>(i)];
        m = b1 * m + (1.0f - b1) * g;
        v = b2 * v + (1.0f - b2) * g * g;
        float& p = params[static_cast<std::size_t>(i)];
        // PyTorch's order: decay the parameter first, then the Adam step on the decayed value.
        if (decay[static_cast<std::size_t>(i)])
            p *= decayFactor;
        p -= rate * (m / c1) / (std::sqrt(v / c2) + eps);
    }
}

} // namespace pw::engine
