// SPDX-License-Identifier: MIT
// Internal to planner/export/: what the exporters share, the checks every runtime needs and the plan's shape in
// the terms those runtimes use (pipeline, tensor and data-parallel degrees, microbatches).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "../plan.h"
#include "../schedule.h"

namespace pw::planner::exports {

/// @brief The plan in the terms of the runtimes: p x t x c x d GPUs, microbatches of one step.
struct PipelineShape
{
    int depth = 1; ///< p: physical pipeline stages (devices per replica of the pipeline)
    int chunks = 1; ///< virtual stages per device
    int tensor = 1; ///< t
    int context = 1; ///< c: context-parallel ranks of every replica
    int data = 1; ///< d: data-parallel replicas of every stage
    int microbatches = 1; ///< per step and data-parallel replica (the plan's per step / data)
    int microbatch_size = 1; ///< samples per microbatch
    std::string precision; ///< "fp32" | "bf16" | "fp16" (the weights')
    std::string device_type; ///< every device's type
    int gpus() const { return depth * tensor * context * data; }
    /// Samples one step trains over every replica: what the plan's schedule runs (microbatch size x its microbatches).
    long long globalBatch() const { return static_cast<long long>(microbatch_size) * microbatches * data; }
    int virtualStages() const { return depth * chunks; }

    bool operator==(const PipelineShape&) const = default;
};

/// Checks what no exporter can express and returns the plan's shape; throws InputError (field: the plan's path)
/// naming `runtime`: several pipelines (HetPipe), a permuted layer order, devices of several types, an
/// asynchronous schedule (PipeDream, 2BW: weight stashing or delayed updates), stages replicated unequally.
PipelineShape checkExportable(const Plan& plan, std::string_view runtime);

/// @brief Where a transformer profile's layer sits in the model.
enum class LayerRole : std::uint8_t { Embedding, Block, Head };

/// The role of every layer of a GPT-style transformer profile (embedding, transformer_layer..., head), as
/// `profile transformer` makes; throws InputError naming `runtime` and the first layer that does not fit.
std::vector<LayerRole> transformerRoles(const ModelProfile& model, std::string_view runtime);

/// The plan's schedule of one step (iterations 1).
Schedule oneStep(const Plan& plan);

/// A comment line for the head of every exported file: the plan in one line ("# " + text by `prefix`).
std::string planSummary(const Plan& plan, const PipelineShape& shape, std::string_view prefix);

/// A number as text with no exponent or trailing zeros.
std::string number(double value);

} // namespace pw::planner::exports
