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

AdamW::AdamW(const StageModel& model)
    : m_m(model.backend(), model.parameterCount(), DType::F32)
    , m_v(model.backend(), model.parameterCount(), DType::F32)
{
    model.backend().zero(m_m.data(), m_m.bytes());
    model.backend().zero(m_v.data(), m_v.bytes());
    for (const auto& s : model.slots())
        m_tensors.push_back({s.offset, s.size, s.decayed});
}

void AdamW::step(StageModel& model, const AdamWOptions& o, double lr, int t)
{
    Backend& be = model.backend();
    const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
    const float c1 = static_cast<float>(1.0 - std::pow(o.beta1, t));
    const float c2 = static_cast<float>(1.0 - std::pow(o.beta2, t));
    const float eps = static_cast<float>(o.eps), rate = static_cast<float>(lr);
    const float decayFactor = static_cast<float>(1.0 - lr * o.weight_decay);
    be.adamwTensors(model.params().data(), model.master(), model.grads().data(), m_m.as<float>(), m_v.as<float>(),
        m_tensors, rate, b1, b2, eps, decayFactor, c1, c2);
}

} // namespace pw::engine
