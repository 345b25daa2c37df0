// SPDX-License-Identifier: MIT
// A run's checkpoints in either format, told apart by the file: Hugging Face's safetensors (any family, the Llama
// family's tensor names) or llm.c's GPT-2 file (magic 20240326). `run --init FILE` reads either; `--save FILE` writes
// safetensors when the name ends in .safetensors, else llm.c's (GPT-2's block only).
#pragma once

#include <filesystem>
#include <vector>

#include "model.h"

namespace pw::engine {

/// @brief A checkpoint read for a run: the model it holds (llm.c's header may pad the vocabulary and hold more
/// positions than the plan's) and its parameters in the family's flat order (checkpointTensors).
struct ModelCheckpoint
{
    ModelConfig config;
    std::vector<float> params;
};

/// Whether `path` names a safetensors destination (by its extension).
bool savesSafetensors(const std::filesystem::path& path);
/// Reads `path` (either format) for a run of `plan` over sequences of `seq` tokens; throws InputError naming the
/// file and the field (the header's, or the tensor's) when it is not a checkpoint of that model.
ModelCheckpoint readModelCheckpoint(const std::filesystem::path& path, const ModelConfig& plan, int seq);
/// The same checks from the header alone (pre-flight).
void checkModelCheckpoint(const std::filesystem::path& path, const ModelConfig& plan, int seq);
/// checkCheckpointDestination, and that the format the name picks holds `model` (llm.c's: GPT-2's block only).
void checkSaveDestination(const std::filesystem::path& path, const ModelConfig& model);
/// Writes one stage's tensors into the checkpoint at `path`, in the format its name picks (writeCheckpointPart,
/// writeSafetensorsPart).
void writeModelCheckpointPart(const std::filesystem::path& path, const StageModel& stage);

} // namespace pw::engine
