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

/// @brief A layer's stashed activations in the parts that tensor and sequence parallelism and each recomputation
/// granularity treat differently (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
/// Models", section 4), bytes per microbatch at the profile's microbatch on one device (t = 1).
struct ActivationParts
{
    /// Whole on every tensor-parallel rank unless sequence parallelism splits it: a block's norm inputs, the inputs
    /// of its column-parallel products, its dropout masks (GPT: 10 s b h of 34 s b h).
    double replicated = 0;
    /// Split over tensor-parallel ranks: Q, K, V, the attention output and the MLP's inner activations (GPT: 24 s b h).
    double sharded = 0;
    /// The attention core, split over ranks, which selective recomputation recomputes instead of keeping: the
    /// softmax output, its dropout mask and output (GPT: 5 a s^2 b), or with a flash-style kernel its log-sum-exp
    /// only (4 bytes per head and token).
    double attention_core = 0;
    /// The layer's input: all that full recomputation keeps of it (split by sequence parallelism).
    double input = 0;

    double total() const { return replicated + sharded + attention_core; }

    bool operator==(const ActivationParts&) const = default;
};

/// @brief One tensor-parallel rank's times for a layer split over `size` devices as Megatron splits it, each product
/// timed by the rank's own shape (n / t or k / t), at the profile's microbatch on the profiled device. A rank's
/// products are thinner than the whole layer's, so they run below its rate: dividing the layer's time by t would be
/// optimistic.
struct TensorParallelTimes
{
    int size = 0; ///< the group size t (>= 2)
    double forward_ms = 0; ///< the rank's share with sequence parallelism (every part split over the group)
    double backward_ms = 0;
    double backward_weight_ms = 0; ///< the weight-gradient part of backward_ms
    /// What every rank runs whole without sequence parallelism, added then: the norms and residual adds on the whole
    /// [tokens, h] activation, the biases of the row-parallel products, and their gradients.
    double replicated_forward_ms = 0;
    double replicated_backward_ms = 0;

    bool operator==(const TensorParallelTimes&) const = default;
};

/// @brief One context-parallel rank's times for a layer whose sequence is split over `size` ranks (ring attention), at
/// the profile's microbatch on the profiled device with no tensor parallelism: its 1/size of the tokens through every
/// product (thinner products, which run below the whole layer's rate) and its queries' attention against every key.
/// Dividing the layer's time by the size would be optimistic where the products get small.
struct ContextParallelTimes
{
    int size = 0; ///< c (>= 2)
    double forward_ms = 0;
    double backward_ms = 0;
    double backward_weight_ms = 0; ///< the weight-gradient part of backward_ms

    bool operator==(const ContextParallelTimes&) const = default;
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
    /// Bytes of the layer's keys and values per microbatch (the whole sequence, one device): what context
    /// parallelism's ring attention passes round its ranks (`profile transformer`: 2 b s kv_heads head_dim x bytes
    /// per element). 0: the layer has no attention, and context parallelism splits it with no communication.
    double key_value_bytes = 0;
    /// Bytes the layer keeps through a step for FP8 products besides its weights (`profile transformer --precision
    /// fp8`): its products' weights cast to FP8 and transposed (Transformer Engine caches both from a step's first
    /// microbatch to its last: 2 bytes per weight) and their scaling state (amax histories, scales). Split over a
    /// tensor-parallel group like the weights; 0 for a layer without FP8 products.
    double fp8_weight_bytes = 0;
    /// The stash in its parts (a transformer block's, written by `profile transformer`); stashed_bytes is then their
    /// total. Absent: the stash is one part, kept whole per tensor-parallel rank up to the layer's output and split
    /// beyond it, and full recomputation keeps the stage's input only (tensorParallelStash, costs.h).
    std::optional<ActivationParts> activation_parts;
    /// Forward time of what selective recomputation runs again before the backward (the attention core), at the
    /// profile's times; 0: the layer has nothing selective recomputation recomputes.
    double selective_recompute_ms = 0;
    /// One rank's times at each tensor-parallel size the profile was made for (`profile transformer`: the sizes that
    /// divide the heads); a size not listed is charged the layer's times / t.
    std::vector<TensorParallelTimes> tensor_parallel_times;
    /// One rank's times at each context-parallel size the profile was made for (`profile transformer`: powers of two
    /// that split the sequence into 2c chunks); a size not listed is charged the layer's times / c.
    std::vector<ContextParallelTimes> context_parallel_times;
    std::vector<int> inputs; ///< producer layers (indices < own index); used when the profile is a graph
    std::map<std::string, LayerTimes> device_times; ///< measured times per device type name

    bool operator==(const Layer&) const = default;
};

/// The weight gradient's share of `layer`'s backward: backward_weight_ms / (backward_input_ms + backward_weight_ms)
/// when the profile splits it (0 when both are 0), else 1/2 for a layer with weights (an even split: a matrix
/// product's input and weight gradients each cost its forward FLOPs) and 0 for a layer without (no weight gradient).
double backwardWeightShare(const Layer& layer);

/// The feed-forward block of a transformer layer: GPT's two products around a GELU (up h -> f, down f -> h), or
/// Llama's SwiGLU, three products (gate and up h -> f, down f -> h) around SiLU(gate) * up.
enum class MlpKind { Gelu, SwiGlu };
/// The layer norms of a block and before the head: LayerNorm (scale and shift per feature), or RMSNorm (scale only).
enum class NormKind { LayerNorm, RmsNorm };
/// How positions enter: GPT-2's learned table (max_positions x h parameters, added to the token rows), or rotary
/// embeddings applied to queries and keys (no parameters).
enum class PositionKind { Learned, Rotary };
/// Which products have biases: every product and layer norm (GPT-2), the query, key and value products only
/// (Qwen2), or none (Llama, Mistral).
enum class BiasKind { All, Qkv, None };

/// Names in profiles, on the command line and in messages: "gelu" | "swiglu", "layernorm" | "rmsnorm",
/// "learned" | "rotary", "all" | "qkv" | "none".
const char* name(MlpKind kind);
const char* name(NormKind kind);
const char* name(PositionKind kind);
const char* name(BiasKind kind);
/// The kind called `text`; throws InputError at `field` listing the names when there is none.
MlpKind mlpKindNamed(const std::string& text, const std::string& field);
NormKind normKindNamed(const std::string& text, const std::string& field);
PositionKind positionKindNamed(const std::string& text, const std::string& field);
BiasKind biasKindNamed(const std::string& text, const std::string& field);

/// @brief How rotary embeddings turn a position into angles: frequency i of a head of d dimensions is
/// theta^(-2i/d), rescaled by Llama 3's scheme when factor > 0 (frequencies whose wavelength exceeds
/// original_positions / low_freq_factor divided by factor, those below original_positions / high_freq_factor kept,
/// those between interpolated), Hugging Face's rope_theta and rope_scaling {"rope_type": "llama3", ...}.
struct RotaryConfig
{
    double theta = 10000.0;
    double factor = 0.0; ///< 0: no scaling
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int original_positions = 8192;

    bool operator==(const RotaryConfig&) const = default;
};

/// @brief The shape of a decoder-only transformer (GPT-2, Llama, Mistral, Qwen2 and their relatives), kept so that
/// a plan made from it can later be trained. Its defaults are GPT-2's block (4h GELU MLP, multi-head attention,
/// LayerNorm, biases, learned positions, tied head, dropout).
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
    /// --untie-embeddings-and-output-weights, as the zero-bubble paper's runs and Llama use), the same size, shared
    /// with none.
    bool tied_embeddings = true;
    int ffn_hidden = 0; ///< the MLP's inner size f; 0 = 4 x hidden (GPT)
    int kv_heads = 0; ///< key and value heads (grouped-query attention when < heads, multi-query when 1); 0 = heads
    MlpKind mlp = MlpKind::Gelu;
    NormKind norm = NormKind::LayerNorm;
    PositionKind positions = PositionKind::Learned;
    BiasKind bias = BiasKind::All;
    int max_positions = 0; ///< rows of a learned position table; 0 = sequence
    /// Dropout after attention and after the MLP (GPT-2, Megatron's GPT runs): each keeps a 1-byte mask per value for
    /// its backward. Llama-family models train without.
    bool dropout = true;
    /// The attention kernel is flash-style (FlashAttention, cuDNN's SDPA): it keeps no s x s scores for its backward,
    /// only a log-sum-exp per head and token, and recomputes the scores there. false: the scores are materialized and
    /// kept (softmax output, dropout mask and output: Korthikanti et al.'s 5 a s^2 b bytes per layer).
    bool flash_attention = true;
    /// The loss's softmax runs on the logits cast to fp32 (Megatron's default without --fp16-lm-cross-entropy, and
    /// torchtitan's): several passes over [tokens, vocab] 4-byte values. false: in the logits' own precision, one
    /// fused pass.
    bool fp32_cross_entropy = true;
    /// The block's four products (QKV, attention projection, MLP up and down) run in FP8 as Transformer Engine runs
    /// them (Megatron's --fp8-format hybrid, delayed scaling): inputs and weights cast to E4M3, output gradients to
    /// E5M2, with a transposed copy of each for the backward's products; the weights stay 16-bit (bytes_per_element
    /// 2), the attention core, the norms and the head stay 16-bit. Needs a device with FP8 tensor cores.
    bool fp8 = false;
    std::string family = "gpt"; ///< what the model is called ("gpt", "llama", ...): its name, not its math
    RotaryConfig rotary; ///< the rotary embedding's frequencies (positions "rotary")
    double norm_eps = 1e-5; ///< the layer norms' epsilon (Hugging Face's rms_norm_eps, layer_norm_epsilon)

    int ffnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
    int kvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
    int headDim() const { return heads > 0 ? hidden / heads : 0; }
    int positionRows() const { return max_positions > 0 ? max_positions : sequence; }
    /// The first family field in which the block differs from GPT-2's ("mlp", "ffn_hidden", "kv_heads", "norm",
    /// "positions", "bias", "tied_embeddings"); empty for GPT-2's block, the one the engine trains today.
    std::string gpt2BlockDifference() const;
    bool isGpt2Block() const { return gpt2BlockDifference().empty(); }

    /// Every size > 0, hidden a multiple of heads and heads of kv_heads; throws InputError naming `path`/field
    /// (just the field name when `path` is empty, as the CLI's options are named).
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
/// A profile's "architecture" as toJson writes it: GPT-2's block in the first format's fields alone ("type": "gpt"),
/// any other family with every field of its own. `everyField`: every field, defaults included, whatever the family
/// ("type": "transformer"), so that two architectures compare field by field (history compare).
nlohmann::json architectureJson(const TransformerConfig& config, bool everyField = false);
/// Parses and validates; errors carry the JSON path of the bad field.
ModelProfile modelFromJson(const nlohmann::json& j);

} // namespace pw::planner
