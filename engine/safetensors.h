// SPDX-License-Identifier: MIT
// Hugging Face's safetensors format (github.com/huggingface/safetensors): an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and byte range, then the raw data. transformers' Llama checkpoints
// are in it, with the tensor names the Llama family uses (model.layers.N.self_attn.q_proj.weight, ...), so a model
// trained here loads there and back. Values are read from F32, BF16 and F16 and written F32 or BF16.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model.h"

namespace pw::engine {

/// @brief One tensor's entry in a safetensors header.
struct SafetensorsEntry
{
    std::string dtype; ///< "F32", "BF16", "F16", ...
    std::vector<std::size_t> shape;
    std::size_t begin = 0; ///< byte range in the data section
    std::size_t end = 0;

    bool operator==(const SafetensorsEntry&) const = default;
};

/// Whether the file starts as a safetensors file does (a header length that fits the file, then '{').
bool isSafetensors(const std::filesystem::path& path);
/// The header's tensors by name ("__metadata__" left out), checked against the file: a length that fits, valid JSON,
/// known dtypes, each shape's byte count equal to its range, ranges inside the data. Throws InputError naming the
/// file and the field ("header", "<tensor>/dtype", ...).
std::map<std::string, SafetensorsEntry> readSafetensorsHeader(const std::filesystem::path& path);

/// The model's flat parameters (checkpointTensors order) from a safetensors file: every tensor by name and shape
/// (the vocabulary matrices stored with V rows, their padding rows zero), converted to fp32. Throws InputError
/// naming the file and the tensor that is missing, of another shape or of a dtype not read.
std::vector<float> loadSafetensorsModel(const std::filesystem::path& path, const ModelConfig& config);
/// Throws InputError naming the file and the first tensor that does not match `config` (pre-flight, header only).
void checkSafetensorsModel(const std::filesystem::path& path, const ModelConfig& config);

/// The header and byte offsets a model's safetensors file has (F32 or BF16 values; tensors in checkpoint order).
struct SafetensorsLayout
{
    std::string header; ///< the JSON, padded with spaces to a multiple of 8 bytes
    std::map<std::string, SafetensorsEntry> tensors;
    std::size_t dataStart() const { return 8 + header.size(); }
};
SafetensorsLayout safetensorsLayout(const ModelConfig& config, bool bf16 = false);
/// Writes the whole model (flat, checkpoint order) beside `path` and renames it into place.
void saveSafetensorsModel(
    const std::filesystem::path& path, const ModelConfig& config, std::span<const float> flat, bool bf16 = false);
/// Writes one stage's tensors into `path` at their places in the model's layout (the embedding's stage also writes
/// the header): the stages of one model, written by different processes in any order, make one file, as
/// writeCheckpointPart does for llm.c's. Throws std::system_error naming the file.
void writeSafetensorsPart(const std::filesystem::path& path, const StageModel& stage);

} // namespace pw::engine
