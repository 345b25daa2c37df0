// SPDX-License-Identifier: MIT
// Analytic per-layer profile of a GPT-style transformer (Megatron digest §3: FLOPs and parameters).
#pragma once

#include <memory>
#include <optional>

#include "../cluster.h"
#include "../gemm_table.h"
#include "../model_profile.h"

namespace pw::planner {

/// @brief How a transformer profile turns work into time.
enum class TransformerTimeModel {
    /// Shapes when a GEMM table is given or the device has a documented default curve (H100, H200) and the
    /// elements are 16-bit; FlatEfficiency otherwise (CPUs, other GPUs, fp32).
    Auto,
    FlatEfficiency, ///< every layer's FLOPs at peak_tflops x efficiency; backward = forward x backward_factor
    Shapes, ///< every product, attention and memory-bound op by its shape (gpu_cost_model.h, docs/planner.md)
};

/// @brief How fast a device runs dense math in practice.
struct TransformerProfileOptions
{
    TransformerTimeModel time_model = TransformerTimeModel::Auto;
    /// Sustained share of peak_tflops reached by the layer's GEMMs (the flat model). Giving it under Auto chooses
    /// the flat model; absent there, 0.5.
    std::optional<double> efficiency;
    double backward_factor = 2.0; ///< backward FLOPs per forward FLOP (the flat model)
    /// Measured products of the device (`pipewright-agent --profile-gemm`): the shape model times the products by
    /// it instead of the default curve. Its dtype must match bytes_per_element (bf16: 2, fp32: 4).
    std::shared_ptr<const GemmTable> gemm_table;
};

/// The model `options` choose for `config` on `device` (Auto resolved).
TransformerTimeModel resolvedTimeModel(
    const TransformerConfig& config, const DeviceType& device, const TransformerProfileOptions& options);

/// Layers: embedding, `layers` transformer layers, final norm + logits. FLOPs, parameters and stashed activations per
/// layer from transformer_shape.h (GPT: forward 24Bsh^2 + 4Bs^2h per block, logits 2BshV; 12h^2 + 13h parameters
/// per block and (V + s)h for the embeddings).
/// The result records `config` as its architecture and `device.name` as the profiled device. Times: by the flat
/// efficiency or by shapes (TransformerTimeModel); the FLOPs, bytes and parameters are the same either way.
ModelProfile transformerProfile(
    const TransformerConfig& config, const DeviceType& device, const TransformerProfileOptions& options = {});

/// The model's exact parameter count (transformerParameters(config).total(): GPT-2 small 124,439,808; Llama 3 8B
/// 8,030,261,248). Megatron's Eq. 4.3 leaves out the final layer norm: megatronParameterCount.
double transformerParameterCount(const TransformerConfig& config);

} // namespace pw::planner
