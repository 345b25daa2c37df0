// SPDX-License-Identifier: MIT
// GPT-2 as llm.c's train_gpt2.c and PyTorch's GPT-2 define it, cut into the planner's layers: layer 0 is the
// embedding (token + position), layers 1..L the transformer blocks, layer L+1 the head (final layer norm, logits
// through the tied token embedding, mean cross-entropy). A StageModel holds a contiguous range of these layers,
// so a plan's stage boundaries cut the model exactly where the profile said.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "planner/model_profile.h"

namespace pw::engine {

/// @brief The shape of the model (llm.c's checkpoint header).
struct Gpt2Config
{
    int max_seq = 0; ///< maxT: positions the position embedding has
    int vocab = 0; ///< V
    int padded_vocab = 0; ///< Vp >= V: rows of the token embedding (llm.c pads to a multiple of 128)
    int layers = 0; ///< L
    int heads = 0; ///< NH
    int channels = 0; ///< C

    /// Throws InputError naming the field when a size is not positive or channels is not a multiple of heads.
    void validate() const;
    /// The planner's transformer shape: maxT = sequence, Vp = V rounded up to 128.
    static Gpt2Config fromTransformer(const planner::TransformerConfig& shape);
    int layerCount() const { return layers + 2; } ///< the planner's layers: embedding, blocks, head

    bool operator==(const Gpt2Config&) const = default;
};

/// The tensors of llm.c's checkpoint, in its order.
enum class Tensor : std::uint8_t {
    Wte,
    Wpe,
    Ln1w,
    Ln1b,
    Qkvw,
    Qkvb,
    Attprojw,
    Attprojb,
    Ln2w,
    Ln2b,
    Fcw,
    Fcb,
    Fcprojw,
    Fcprojb,
    Lnfw,
    Lnfb
};
inline constexpr int kTensorCount = 16;
const char* tensorName(Tensor t);
/// Elements of one copy of the tensor (one layer's, for per-block tensors).
std::size_t tensorSize(const Gpt2Config& config, Tensor t);
bool isPerBlock(Tensor t);
/// AdamW decays matrices and embeddings only (PyTorch GPT-2's configure_optimizers: parameters of 2+ dimensions).
bool isDecayed(Tensor t);
/// Offset of layer `block`'s copy (0 for whole-model tensors) in llm.c's flat parameter array.
std::size_t checkpointOffset(const Gpt2Config& config, Tensor t, int block = 0);
std::size_t parameterCount(const Gpt2Config& config);

enum class LayerKind : std::uint8_t { Embedding, Block, Head };
LayerKind layerKind(const Gpt2Config& config, int layer);

/// @brief Sizes of one microbatch: B sequences of T tokens.
struct BatchShape
{
    int batch = 1; ///< B (the plan's microbatch size)
    int seq = 0; ///< T <= max_seq

    bool operator==(const BatchShape&) const = default;
};

/// @brief Where a tensor of the stage lives in its flat parameter buffer.
struct TensorSlot
{
    Tensor tensor = Tensor::Wte;
    int layer = 0; ///< the planner's layer the slot belongs to (the head's tied copy of wte: the head)
    int block = 0; ///< the block index for per-block tensors
    std::size_t offset = 0;
    std::size_t size = 0;

    bool operator==(const TensorSlot&) const = default;
};

/// The tensors of a stage holding layers first..last, in the order and at the offsets of its flat buffer.
std::vector<TensorSlot> stageSlots(const Gpt2Config& config, int first_layer, int last_layer);
/// The layer a tensor belongs to in the whole model: the token embedding's (0) for the head's tied copy of wte.
int ownerLayer(const TensorSlot& slot);

/// @brief What a layer's forward keeps for its backward (one microbatch). Buffers are reused across microbatches.
struct LayerStash
{
    std::vector<float> out; ///< the layer's output (B, T, C); the head leaves it empty
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
    std::vector<float> probs, losses; ///< head: softmax (B T, V) and per-position losses
    std::vector<std::int32_t> tokens; ///< embedding: inputs; head: targets
};

/// @brief The stashed activations of one microbatch through a stage.
struct StageStash
{
    std::vector<float> input; ///< received activation (B, T, C) when the stage does not start with the embedding
    std::vector<LayerStash> layers;
    float loss = 0; ///< head: mean loss of the microbatch
};

/// @brief A contiguous range of the planner's layers with one flat parameter buffer (and its gradient).
///
/// The head's logits use the token embedding (tied). When the stage holds the embedding too they share one
/// tensor; otherwise the head keeps its own copy, and the copies stay equal because their gradients are summed
/// before every step (tiedGradient) and the optimizer then applies the same update to both.
class StageModel
{
public:
    StageModel(const Gpt2Config& config, BatchShape shape, int first_layer, int last_layer);

    const Gpt2Config& config() const { return m_config; }
    BatchShape shape() const { return m_shape; }
    int firstLayer() const { return m_first; }
    int lastLayer() const { return m_last; }
    bool hasEmbedding() const { return m_first == 0; }
    bool hasHead() const { return m_last == m_config.layerCount() - 1; }
    std::size_t parameterCount() const { return m_params.size(); }
    const std::vector<TensorSlot>& slots() const { return m_slots; }

    std::vector<float>& params() { return m_params; }
    const std::vector<float>& params() const { return m_params; }
    std::vector<float>& grads() { return m_grads; }
    void zeroGrads();
    /// The token embedding's slot when the stage holds the embedding or the head, else nullptr.
    const TensorSlot* tiedSlot() const;
    /// Per parameter: AdamW decays it (1) or not (0).
    std::vector<std::uint8_t> decayMask() const;

    /// GPT-2's initialisation, a function of (seed, tensor, block) only: every stage of every process draws the
    /// same values for the same tensor, whatever the plan (so the head's copy of wte equals the embedding's).
    void initialise(std::uint64_t seed);
    /// Copies this stage's tensors from / to llm.c's flat parameter array of the whole model.
    void loadFrom(std::span<const float> checkpoint);
    void storeTo(std::span<float> checkpoint) const;

    /// One microbatch forward with parameters `params` (this stage's layout). tokens (B T) feed the embedding;
    /// input (B T C) feeds any other first layer; targets (B T) feed the head. Returns the stage's output
    /// (B T C), or an empty span for the head (whose mean loss is in stash.loss).
    std::span<const float> forward(StageStash& stash, const float* params, std::span<const std::int32_t> tokens,
        std::span<const float> input, std::span<const std::int32_t> targets) const;
    /// The backward of the microbatch forward() stashed, with the same parameters; accumulates into grads.
    /// dout: gradient of the stage's output (not for the head, whose seed is loss_scale: d(step loss)/d(this
    /// microbatch's mean loss)). Returns the gradient of the stage's input (empty when it starts with the
    /// embedding); valid until the next backward.
    std::span<const float> backward(
        StageStash& stash, const float* params, float* grads, std::span<const float> dout, float loss_scale);

    std::size_t activationCount() const; ///< floats of a stage boundary's activation: B T C

private:
    const TensorSlot& slot(Tensor t, int block) const;
    void blockForward(LayerStash& s, const float* P, const float* x, int block) const;
    void blockBackward(
        LayerStash& s, const float* P, float* G, const float* x, const float* dout, float* dx, int block);
    void headForward(LayerStash& s, const float* P, const float* x, std::span<const std::int32_t> targets) const;
    void headBackward(LayerStash& s, const float* P, float* G, const float* x, float* dx, float loss_scale);

    Gpt2Config m_config;
    BatchShape m_shape;
    int m_first = 0;
    int m_last = 0;
    std::vector<TensorSlot> m_slots;
    std::vector<float> m_params;
    std::vector<float> m_grads;
    // Backward workspaces, reused by every microbatch.
    std::vector<float> m_dA, m_dB, m_dRes, m_dBig, m_dBig2, m_dQkv, m_dAtty, m_scratch;
};

} // namespace pw::engine
