// SPDX-License-Identifier: MIT
#include "checkpoint.h"

#include "llmc.h"
#include "planner/errors.h"
#include "safetensors.h"

namespace pw::engine {

using planner::InputError;

bool savesSafetensors(const std::filesystem::path& path)
{
    return path.extension() == ".safetensors";
}

ModelCheckpoint readModelCheckpoint(const std::filesystem::path& path, const ModelConfig& plan, int seq)
{
    if (isSafetensors(path))
        return {plan, loadSafetensorsModel(path, plan)};
    Checkpoint c = readCheckpoint(path);
    checkCheckpointFits(path, c.config, plan, seq);
    return {c.config, std::move(c.params)};
}

void checkModelCheckpoint(const std::filesystem::path& path, const ModelConfig& plan, int seq)
{
    if (isSafetensors(path))
        checkSafetensorsModel(path, plan);
    else
        checkCheckpointFits(path, readCheckpointConfig(path), plan, seq);
}

void checkSaveDestination(const std::filesystem::path& path, const ModelConfig& model)
{
    checkCheckpointDestination(path);
    if (!savesSafetensors(path) && std::string(familyOf(model).name()) != "gpt2")
        throw InputError(path.string(), 0, "",
            "cannot save the trained model there: llm.c's checkpoint holds GPT-2's block, and this model is a "
                + std::string(familyOf(model).name()) + ": give a name ending in .safetensors");
}

void writeModelCheckpointPart(const std::filesystem::path& path, const StageModel& stage)
{
    if (savesSafetensors(path))
        writeSafetensorsPart(path, stage);
    else
        writeCheckpointPart(path, stage);
}

} // namespace pw::engine
