// SPDX-License-Identifier: MIT
// llm.c's file formats (karpathy/llm.c: train_gpt2.c, dev/data/data_common.py), which many users already have:
// the GPT-2 checkpoint (magic 20240326, version 3 = fp32) and the token file (magic 20240520, version 1, uint16).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "gpt2.h"

namespace pw::engine {

inline constexpr std::int32_t kCheckpointMagic = 20240326;
inline constexpr std::int32_t kCheckpointVersionFp32 = 3;
inline constexpr std::int32_t kTokensMagic = 20240520;
inline constexpr std::int32_t kTokensVersion = 1;

/// @brief A whole model's parameters in llm.c's order (checkpointOffset).
struct Checkpoint
{
    Gpt2Config config;
    std::vector<float> params;

    bool operator==(const Checkpoint&) const = default;
};

/// Throws InputError naming the file and what is wrong (magic, version, sizes, truncation).
Checkpoint readCheckpoint(const std::filesystem::path& path);
/// Writes version 3 (fp32); the header's maxT is config.max_seq.
void writeCheckpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);

class StageModel;
/// Writes one stage's tensors into the llm.c checkpoint `path` at their places (the stage holding the embedding
/// also writes the header). The file is created when missing and never truncated, so the stages of one model,
/// written by different processes in any order, make one checkpoint; whoever starts the run removes an old file
/// first. Throws std::system_error naming the file.
void writeCheckpointPart(const std::filesystem::path& path, const StageModel& stage);

/// Reads a token file; throws InputError naming the file (magic, version, count against the file's size).
std::vector<std::uint16_t> readTokens(const std::filesystem::path& path);
void writeTokens(const std::filesystem::path& path, const std::vector<std::uint16_t>& tokens);

} // namespace pw::engine
