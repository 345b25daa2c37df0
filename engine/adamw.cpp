// SPDX-License-Identifier: MIT
#include "adamw.h"

#include <algorithm>
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

std::pair<std::size_t, std::size_t> OptimizerShard::range(std::size_t n) const
{
    const auto d = static_cast<std::size_t>(std::max(1, count));
    const auto i = static_cast<std::size_t>(std::clamp(index, 0, std::max(1, count) - 1));
    const std::size_t part = n / d / 64 * 64; // shards start 256-byte aligned (the kernels' vector loads)
    return {i * part, i + 1 == d ? n : (i + 1) * part};
}

AdamW::AdamW(const StageModel& model, OptimizerShard shard)
    : m_range(shard.range(model.parameterCount()))
    , m_m(model.backend(), m_range.second - m_range.first, DType::F32)
    , m_v(model.backend(), m_range.second - m_range.first, DType::F32)
{
    model.backend().zero(m_m.data(), m_m.bytes());
    model.backend().zero(m_v.data(), m_v.bytes());
    const auto [first, end] = m_range;
    for (const auto& s : model.slots()) {
        const std::size_t b = std::max(first, s.offset), e = std::min(end, s.offset + s.size);
        if (b < e)
            m_tensors.push_back({b - first, e - b, s.decayed});
    }
}

void AdamW::step(StageModel& model, const AdamWOptions& o, double lr, int t)
{
    Backend& be = model.backend();
    const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
    const float c1 = static_cast<float>(1.0 - std::pow(o.beta1, t));
    const float c2 = static_cast<float>(1.0 - std::pow(o.beta2, t));
    const float eps = static_cast<float>(o.eps), rate = static_cast<float>(lr);
    const float decayFactor = static_cast<float>(1.0 - lr * o.weight_decay);
    if (m_tensors.empty())
        return;
    const std::size_t first = m_range.first, e = byteSize(be.act());
    float* master = model.master();
    be.adamwTensors(model.params().as<std::byte>() + first * e, master ? master + first : nullptr,
        model.grads().as<std::byte>() + first * e, m_m.as<float>(), m_v.as<float>(), m_tensors, rate, b1, b2, eps,
        decayFactor, c1, c2);
}

} // namespace pw::engine
