// SPDX-License-Identifier: MIT
// A random llm.c checkpoint for the engine's oracle tests (the CPU against PyTorch, CUDA against the CPU). Apart from
// engine_fixtures.h, which Qt tests include too (Qt's `slots` macro breaks engine/gpt2.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "engine/gpt2.h"
#include "engine/llmc.h"

namespace pw::test {

/// Random parameters well away from GPT-2's small initialisation, so attention, biases and layer-norm scales all
/// matter from the first step: matrices and embeddings N(0, 0.15), biases and shifts N(0, 0.05), layer-norm
/// scales 1 + N(0, 0.1). The draws are libstdc++'s (std::normal_distribution's algorithm is the library's own):
/// the PyTorch oracle's golden losses record a checksum of them.
inline engine::Checkpoint randomCheckpoint(const engine::Gpt2Config& config, std::uint64_t seed)
{
    engine::Checkpoint c;
    c.config = config;
    c.params.resize(engine::parameterCount(config));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int t = 0; t < engine::kTensorCount; ++t) {
        const auto tensor = static_cast<engine::Tensor>(t);
        const bool scale
            = tensor == engine::Tensor::Ln1w || tensor == engine::Tensor::Ln2w || tensor == engine::Tensor::Lnfw;
        const float mean = scale ? 1.0f : 0.0f;
        const float stddev = scale ? 0.1f : engine::isDecayed(tensor) ? 0.15f : 0.05f;
        const int copies = engine::isPerBlock(tensor) ? config.layers : 1;
        const std::size_t begin = engine::checkpointOffset(config, tensor, 0);
        for (std::size_t i = 0; i < engine::tensorSize(config, tensor) * static_cast<std::size_t>(copies); ++i)
            c.params[begin + i] = mean + stddev * normal(rng);
    }
    return c;
}

} // namespace pw::test
