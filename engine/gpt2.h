// SPDX-License-Identifier: MIT
// GPT-2 as llm.c's train_gpt2.c and PyTorch's GPT-2 define it, cut into the planner's layers: layer 0 is the
// embedding (token + position), layers 1..L the transformer blocks, layer L+1 the head (final layer norm, logits
// through the tied token embedding, mean cross-entropy). A StageModel holds a contiguous range of these layers,
// so a plan's stage boundaries cut the model exactly where the profile said.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
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

/// @brief What a layer's forward keeps for its backward (one microbatch), on the stage's device. Activations are
/// in the backend's act() dtype, statistics and losses fp32. Buffers are reused across microbatches.
struct LayerStash
{
    Buffer out; ///< the layer's output (B, T, C); the head leaves it empty
    Buffer ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
    /// head: the logits (B T rows of V, or of Vp when the backend pads them), turned by the forward into their
    /// gradient (the classifier's fused softmax, cross-entropy and backward); and the positions' losses (fp32)
    Buffer logits, losses;
    Buffer tokens; ///< embedding: inputs; head: targets (int32)
    /// Split backward only (backwardInput, then backwardWeight): the gradients the weight gradient needs, kept
    /// from the I to the W of the microbatch and released by the W. g_out: the layer's output gradient (a block's
    /// fcproj and the embedding read it); g_res2: res2's (attproj's); g_fch: fc's output (before GELU); g_ln2,
    /// g_ln1: the layer norms' outputs (the head's final layer norm uses g_ln1). The head's logits gradient is in
    /// logits already.
    Buffer g_out, g_res2, g_fch, g_ln2, g_qkv, g_ln1;
};

/// @brief The stashed activations of one microbatch through a stage.
struct StageStash
{
    Buffer input; ///< received activation (B, T, C) when the stage does not start with the embedding
    std::vector<LayerStash> layers;
};

/// @brief A contiguous range of the planner's layers with one flat parameter buffer (and its gradient), on one
/// backend's device.
///
/// The head's logits use the token embedding (tied). When the stage holds the embedding too they share one
/// tensor; otherwise the head keeps its own copy, and the copies stay equal because their gradients are summed
/// before every step (tiedGradient) and the optimizer then applies the same update to both.
/// In mixed precision the parameters and gradients are bf16 and master() holds the fp32 weights AdamW updates.
class StageModel
{
public:
    StageModel(
        const Gpt2Config& config, BatchShape shape, int first_layer, int last_layer, Backend& backend = cpuBackend());

    const Gpt2Config& config() const { return m_config; }
    BatchShape shape() const { return m_shape; }
    int firstLayer() const { return m_first; }
    int lastLayer() const { return m_last; }
    bool hasEmbedding() const { return m_first == 0; }
    bool hasHead() const { return m_last == m_config.layerCount() - 1; }
    std::size_t parameterCount() const { return m_params.count(); }
    const std::vector<TensorSlot>& slots() const { return m_slots; }
    Backend& backend() const { return *m_backend; }

    Buffer& params() { return m_params; }
    const Buffer& params() const { return m_params; }
    Buffer& grads() { return m_grads; }
    const Buffer& grads() const { return m_grads; }
    /// The fp32 master weights in mixed precision (what AdamW and wave pulls update), else null.
    float* master() { return m_master.empty() ? nullptr : m_master.as<float>(); }
    /// Copies between the device and the host, fp32 (tests, checkpoints).
    std::vector<float> hostParams() const;
    std::vector<float> hostGrads() const;
    void setHostParams(std::span<const float> params);
    void zeroGrads();
    /// The token embedding's slot when the stage holds the embedding or the head, else nullptr.
    const TensorSlot* tiedSlot() const;

    /// GPT-2's initialisation, a function of (seed, tensor, block) only: every stage of every process draws the
    /// same values for the same tensor, whatever the plan (so the head's copy of wte equals the embedding's).
    void initialise(std::uint64_t seed);
    /// Copies this stage's tensors from / to llm.c's flat parameter array of the whole model.
    void loadFrom(std::span<const float> checkpoint);
    void storeTo(std::span<float> checkpoint) const;

    /// One microbatch forward with parameters `params` (this stage's layout, on the device). tokens (B T, host)
    /// feed the embedding; *input (B T C, on the device) feeds any other first layer and is taken into the stash
    /// (the caller gets the stash's old buffer back in it); targets (B T, host) feed the head, which writes the
    /// microbatch's mean loss to *loss (fp32, on the device) and, fused with it, the logits' gradient for a seed of
    /// loss_scale = d(step loss)/d(this microbatch's mean loss). Returns the stage's output (B T C, in the stash),
    /// or null for the head.
    const Buffer* forward(StageStash& stash, const void* params, std::span<const std::int32_t> tokens, Buffer* input,
        std::span<const std::int32_t> targets, float loss_scale, float* loss) const;
    /// Called by backward() once the gradients of `layer` are final for this backward: elements [first, first +
    /// count) of grads (the layer's tensors, contiguous), enqueued on the backend's stream. Layers come last to
    /// first, so the ranges come at decreasing offsets, each ending where the next one's begins.
    using LayerDone = std::function<void(int layer, std::size_t first, std::size_t count)>;
    /// The backward of the microbatch forward() stashed, with the same parameters; accumulates into grads.
    /// dout: gradient of the stage's output (null for the head). Returns the gradient of the stage's input (null
    /// when it starts with the embedding); valid until the next backward. `done`, when set, hears each layer's
    /// finished gradients (the executor all-reduces them in buckets while the backward goes on).
    const Buffer* backward(
        StageStash& stash, const void* params, void* grads, const Buffer* dout, const LayerDone& done = {});
    /// The backward split in two (zero-bubble schedules' I and W). backwardInput computes the gradient of the
    /// stage's input only (returned as backward() returns it: null for the embedding's stage, valid until the next
    /// backward), keeping in the stash the gradients the weight gradients need; backwardWeight, later and with the
    /// same stash, accumulates the weight, bias and layer-norm gradients into grads (the head's and the embedding's
    /// share of the tied wte included), calls `done` per layer as backward() does, and releases what the I kept.
    /// The forward's activations stay in the stash until the W, which reads them. I then W gives backward()'s
    /// gradients: the same products and reductions, each on its own.
    const Buffer* backwardInput(StageStash& stash, const void* params, const Buffer* dout);
    void backwardWeight(StageStash& stash, void* grads, const LayerDone& done = {});
    /// Elements [first, first + count) of the parameters (and gradients) that hold `layer`'s tensors.
    std::pair<std::size_t, std::size_t> layerRange(int layer) const;

    std::size_t activationCount() const; ///< elements of a stage boundary's activation: B T C

private:
    const TensorSlot& slot(Tensor t, int block) const;
    void blockForward(LayerStash& s, const std::byte* P, const void* x, int block) const;
    void blockBackward(
        LayerStash& s, const std::byte* P, std::byte* G, const void* x, const void* dout, void* dx, int block);
    void headForward(LayerStash& s, const std::byte* P, const void* x, std::span<const std::int32_t> targets,
        float loss_scale, float* loss) const;
    void headBackward(LayerStash& s, const std::byte* P, std::byte* G, const void* x, void* dx);
    void blockBackwardInput(LayerStash& s, const std::byte* P, const void* x, void* dx, int block);
    void blockBackwardWeight(LayerStash& s, std::byte* G, const void* x, int block);
    void headBackwardInput(LayerStash& s, const std::byte* P, const void* x, void* dx);
    void headBackwardWeight(LayerStash& s, std::byte* G, const void* x);
    /// The input of layer `layer` in the stash: the received activation, or the previous layer's output.
    const void* layerInput(const StageStash& stash, int layer) const;
    int logitColumns() const; ///< V, or Vp when the backend pads the logits
    /// Where slot (t, block) starts in a parameter or gradient buffer of this stage.
    std::size_t at(Tensor t, int block) const { return slot(t, block).offset * byteSize(m_act); }

    Gpt2Config m_config;
    BatchShape m_shape;
    int m_first = 0;
    int m_last = 0;
    Backend* m_backend;
    DType m_act;
    std::vector<TensorSlot> m_slots;
    Buffer m_params;
    Buffer m_grads;
    Buffer m_master;
    // Backward workspaces, reused by every microbatch.
    Buffer m_dA, m_dB, m_dRes, m_dBig, m_dQkv, m_dAtty;
};

} // namespace pw::engine
