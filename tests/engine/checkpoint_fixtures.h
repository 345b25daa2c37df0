// SPDX-License-Identifier: MIT
// A random llm.c checkpoint for the engine's oracle tests (the CPU against PyTorch, CUDA against the CPU). Apart from
// engine_fixtures.h, which Qt tests include too (Qt's `slots` macro breaks engine/gpt2.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "engine/llmc.h"
#include "engine/model.h"

namespace pw::test {

/// Random parameters well away from GPT-2's small initialisation, so attention, biases and layer-norm scales all
/// matter from the first step: matrices and embeddings N(0, 0.15), biases and shifts N(0, 0.05), layer-norm
/// scales 1 + N(0, 0.1). The draws are libstdc++'s (std::normal_distribution's algorithm is the library's own):
/// the PyTorch oracle's golden losses record a checksum of them.
inline engine::Checkpoint randomCheckpoint(const engine::ModelConfig& config, std::uint64_t seed)
{
    engine::Checkpoint c;
    c.config = config;
    c.params.resize(engine::parameterCount(config));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // The flat checkpoint's order (llm.c's for GPT-2): each tensor's elements, every block's copy in turn.
    for (const auto& t : engine::checkpointTensors(config)) {
        const bool scale = t.init.kind == engine::TensorInit::Kind::Ones; // the norms' weights
        const float mean = scale ? 1.0f : 0.0f;
        const float stddev = scale ? 0.1f : t.decayed ? 0.15f : 0.05f;
        for (std::size_t i = 0; i < t.size; ++i)
            c.params[t.offset + i] = mean + stddev * normal(rng);
    }
    return c;
}

} // namespace pw::test
