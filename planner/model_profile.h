// SPDX-License-Identifier: MIT
// ModelProfile: the per-layer costs of a model at one microbatch size, the planner's main input.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pw::planner {

inline constexpr int kModelFormatVersion = 1;

/// @brief Forward and backward time of one layer on one device type, per microbatch.
struct LayerTimes
{
    double forward_ms = 0;
    double backward_ms = 0;

    bool operator==(const LayerTimes&) const = default;
};

/// @brief One layer (or graph node) of the profile. Bytes are per microbatch of the profile's size.
struct Layer
{
    std::string name;
    std::string kind; ///< operator kind, e.g. "Conv2d", "transformer_layer", "embedding"
    double forward_ms = 0;
    double backward_ms = 0;
    double activation_bytes = 0; ///< size of the layer's output (and of the gradient flowing back into it)
    double weight_bytes = 0;
    /// Activation memory the layer keeps for its backward pass (all its intermediate tensors); when absent
    /// its output (activation_bytes) is taken, which suits per-operator graphs such as PipeDream's.
    std::optional<double> stashed_bytes;
    std::optional<double> optimizer_state_bytes; ///< when absent the plan's optimizer decides
    std::optional<double> forward_flops;
    /// The backward split into its input gradient (what the previous layer waits for) and its weight gradient
    /// (zero-bubble schedules run them apart). Given together or not at all; only their ratio is used: it splits
    /// backward_ms (and every device_times backward) the same way. Absent: backwardWeightShare's estimate.
    std::optional<double> backward_input_ms;
    std::optional<double> backward_weight_ms;
    /// Bytes the layer's input-gradient pass (I) keeps for its weight-gradient pass (W), per microbatch, on top
    /// of stashed_bytes: the output gradients of its matrix products and layer norms, which only W reads. Held
    /// from a microbatch's I to its W by the kinds that split the backward (a fused B frees them at once).
    /// 0 when absent (a profile that does not say keeps nothing extra).
    double weight_gradient_bytes = 0;
    std::vector<int> inputs; ///< producer layers (indices < own index); used when the profile is a graph
    std::map<std::string, LayerTimes> device_times; ///< measured times per device type name

    bool operator==(const Layer&) const = default;
};

/// The weight gradient's share of `layer`'s backward: backward_weight_ms / (backward_input_ms + backward_weight_ms)
/// when the profile splits it (0 when both are 0), else 1/2 for a layer with weights (an even split: a matrix
/// product's input and weight gradients each cost its forward FLOPs) and 0 for a layer without (no weight gradient).
double backwardWeightShare(const Layer& layer);

/// @brief The shape of a GPT-style transformer, kept so that a plan made from it can later be trained.
struct TransformerConfig
{
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int sequence = 0;
    int vocab = 0;
    int microbatch = 1;
    int bytes_per_element = 2;
    /// The head's output projection is the token embedding (GPT-2's weight tying), so the stages holding the two
    /// sum its gradient before their steps; false: the head has its own (Megatron's
    /// --untie-embeddings-and-output-weights, as the zero-bubble paper's runs use), the same size, shared with none.
    bool tied_embeddings = true;

    /// Every size > 0 and hidden a multiple of heads; throws InputError naming `path`/field (just the field
    /// name when `path` is empty, as the CLI's options are named).
    void validate(const std::string& path = "") const;
    /// Bytes of the weights the first and the last layer share: GPT-2 ties its token embedding (layer 0) to its
    /// head's output projection (the last layer), vocab x hidden x bytes_per_element, whose gradient the stages
    /// holding them sum before their optimizer steps; 0 when untied.
    double tiedWeightBytes() const
    {
        return tied_embeddings ? static_cast<double>(vocab) * hidden * bytes_per_element : 0.0;
    }

    bool operator==(const TransformerConfig&) const = default;
};

/// @brief The per-layer profile of a model. Layers are in a topological order.
///
/// A profile is a chain unless `is_graph` is set, in which case every layer lists its producers in
/// `inputs` (imported PipeDream graphs). Stage boundaries always cut this order into contiguous ranges.
struct ModelProfile
{
    std::string name;
    std::string profiled_device; ///< device type name the default times were measured on (may be empty)
    int microbatch_size = 1;
    bool is_graph = false;
    std::vector<Layer> layers;
    std::optional<TransformerConfig> architecture;

    int layerCount() const { return static_cast<int>(layers.size()); }
    double totalWeightBytes() const;
    double totalComputeMs() const;
    /// Bytes of weights the first and the last layer share (TransformerConfig::tiedWeightBytes); 0 for a profile
    /// without an architecture, whose layers share nothing.
    double tiedWeightBytes() const { return architecture ? architecture->tiedWeightBytes() : 0.0; }

    /// Bytes crossing a cut placed after layer `cut` in the given order (identity when empty): the outputs
    /// of layers at or before the cut that a later layer reads. For a chain this is activation_bytes[cut].
    std::vector<double> cutBytes(const std::vector<int>& order = {}) const;

    double stashedBytes(int layer) const
    {
        return layers[layer].stashed_bytes.value_or(layers[layer].activation_bytes);
    }

    /// Throws InputError naming the offending layer and field.
    void validate() const;

    bool operator==(const ModelProfile&) const = default;
};

/// PipeDream's data-loading nodes ("Input*" descriptions): their forward time is input loading, not
/// compute, and planners count them as free.
bool isDataSource(const Layer& layer);

nlohmann::json toJson(const ModelProfile& model);
/// Parses and validates; errors carry the JSON path of the bad field.
ModelProfile modelFromJson(const nlohmann::json& j);

} // namespace pw::planner
