// SPDX-License-Identifier: MIT
// Internal to tests/cuda/: the inputs of the GPU-against-CPU loss comparisons, shared by the CUDA training and the
// NCCL tests.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/executor.h"
#include "engine/llmc.h"
#include "engine/safetensors.h"
#include "tests/engine/checkpoint_fixtures.h"
#include "tests/engine/engine_fixtures.h"

namespace pw::test {

/// @brief The fp32 comparison's inputs: a small GPT-2 of odd sizes (2 blocks, C = 64 in 4 heads, T = 32,
/// V = 301 padded to 384, 3 sequences per microbatch, 4 microbatches per step), a random checkpoint that went
/// through an llm.c file, and a Markov token stream.
struct Comparison
{
    planner::TransformerConfig shape;
    std::shared_ptr<const std::vector<float>> checkpoint;
    std::vector<std::int32_t> tokens;
    int microbatches = 4;
    int steps = 20;
};

inline Comparison comparison()
{
    namespace fs = std::filesystem;
    Comparison r;
    r.shape = tinyGpt2(2, 3);
    r.shape.hidden = 64;
    r.shape.heads = 4;
    r.shape.sequence = 32;
    r.shape.vocab = 301;
    const auto config = engine::ModelConfig::fromTransformer(r.shape);
    const fs::path file = fs::temp_directory_path() / ("pw-cuda-compare-" + std::to_string(::getpid()) + ".bin");
    engine::writeCheckpoint(file, randomCheckpoint(config, 2024));
    engine::Checkpoint read = engine::readCheckpoint(file);
    fs::remove(file);
    REQUIRE(read.config == config);
    r.checkpoint = std::make_shared<const std::vector<float>>(std::move(read.params));
    r.tokens = engine::MarkovSource(config.vocab, 7).generate(20000, 8);
    return r;
}

/// The Llama family's comparison: the same sizes with 4 query heads of 16 sharing 2 key/value heads, SwiGLU of
/// 96, rotary positions, an untied head; its random checkpoint through a safetensors file.
inline Comparison llamaComparison()
{
    namespace fs = std::filesystem;
    Comparison r;
    r.shape = tinyGpt2(2, 3);
    r.shape.hidden = 64;
    r.shape.heads = 4;
    r.shape.sequence = 32;
    r.shape.vocab = 301;
    r.shape = asLlama(r.shape, 2, 96);
    const auto config = engine::ModelConfig::fromTransformer(r.shape);
    const fs::path file
        = fs::temp_directory_path() / ("pw-cuda-compare-" + std::to_string(::getpid()) + ".safetensors");
    engine::saveSafetensorsModel(file, config, randomCheckpoint(config, 2024).params);
    r.checkpoint = std::make_shared<const std::vector<float>>(engine::loadSafetensorsModel(file, config));
    fs::remove(file);
    r.tokens = engine::MarkovSource(config.vocab, 7).generate(20000, 8);
    return r;
}

/// The training setup of `plan` with the comparison's checkpoint and AdamW settings.
inline engine::TrainingSetup setupOf(const Comparison& r, const planner::Plan& plan)
{
    engine::TrainingSetup setup = engine::trainingSetup(plan);
    setup.checkpoint = r.checkpoint;
    setup.adam.lr = 1e-3;
    setup.adam.weight_decay = 0.1;
    return setup;
}

} // namespace pw::test
