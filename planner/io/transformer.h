// SPDX-License-Identifier: MIT
// Analytic per-layer profile of a GPT-style transformer (Megatron digest §3: FLOPs and parameters).
#pragma once

#include "../cluster.h"
#include "../model_profile.h"

namespace pw::planner {

/// @brief How fast a device runs dense math in practice.
struct TransformerProfileOptions
{
    double efficiency = 0.5; ///< sustained share of peak_tflops reached by the layer's GEMMs
    double backward_factor = 2.0; ///< backward FLOPs per forward FLOP
};

/// Layers: embedding, `layers` transformer layers, final layer norm + logits. Forward FLOPs per layer
/// 24Bsh^2 + 4Bs^2h; logits 2BshV; parameters 12h^2 + 13h per layer and (V + s)h for the embeddings.
/// The result records `config` as its architecture and `device.name` as the profiled device.
ModelProfile transformerProfile(
    const TransformerConfig& config, const DeviceType& device, const TransformerProfileOptions& options = {});

/// Total parameters by Eq. 4.3: 12lh^2 (1 + 13/(12h) + (V + s)/(12lh)).
double transformerParameterCount(const TransformerConfig& config);

} // namespace pw::planner
