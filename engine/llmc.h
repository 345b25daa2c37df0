// SPDX-License-Identifier: MIT
// llm.c's file formats (karpathy/llm.c: train_gpt2.c, dev/data/data_common.py), which many users already have:
// the GPT-2 checkpoint (magic 20240326, version 3 = fp32) and the token files: GPT-2's (magic 20240520, version 1,
// uint16 ids) and Llama 3's (magic 20240801, version 7, uint32 ids, for vocabularies past 65,536), both after a
// header of 256 int32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "model.h"

namespace pw::engine {

inline constexpr std::int32_t kCheckpointMagic = 20240326;
inline constexpr std::int32_t kCheckpointVersionFp32 = 3;
inline constexpr std::int32_t kTokensMagic = 20240520;
inline constexpr std::int32_t kTokensVersion = 1;
inline constexpr std::int32_t kTokens32Magic = 20240801;
inline constexpr std::int32_t kTokens32Version = 7;

/// The width of a token file's ids: llm.c's "gpt-2" (16-bit) or "llama-3" (32-bit) format.
enum class TokenWidth { Bits16, Bits32 };

/// @brief A whole model's parameters in llm.c's order (checkpointOffset).
struct Checkpoint
{
    ModelConfig config;
    std::vector<float> params;

    bool operator==(const Checkpoint&) const = default;
};

/// The model shape in a checkpoint's header, checked against the file (magic, version, a directory, sizes, the
/// parameter count the file's size holds) without reading its parameters. Throws InputError naming the file and
/// the header field.
ModelConfig readCheckpointConfig(const std::filesystem::path& path);
/// Throws InputError naming the file and the first field in which a checkpoint of `checkpoint`'s shape cannot
/// start a run of `plan`'s model over sequences of `seq` tokens: layers, channels, heads and vocab must be equal,
/// and maxT at least `seq` (its padded vocabulary and extra positions are taken as they are).
void checkCheckpointFits(
    const std::filesystem::path& path, const ModelConfig& checkpoint, const ModelConfig& plan, int seq);
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
/// Throws InputError naming `path` when a checkpoint cannot be written there, so that a run is refused before it
/// trains instead of failing after: a directory of that name, a folder that is missing, not a folder or not
/// writable, an existing file that cannot be replaced.
void checkCheckpointDestination(const std::filesystem::path& path);

/// Reads a token file of either width (told apart by its magic); throws InputError naming the file and the header field
/// (magic, version, count against the file's size; a directory) or a 32-bit id past 2^31 - 1 with its position.
std::vector<std::int32_t> readTokens(const std::filesystem::path& path);
/// Writes `tokens` in the format of `width`; throws InputError for a negative id, or one past 65,535 in the 16-bit
/// format, naming the file and the position.
void writeTokens(
    const std::filesystem::path& path, const std::vector<std::int32_t>& tokens, TokenWidth width = TokenWidth::Bits16);

} // namespace pw::engine
