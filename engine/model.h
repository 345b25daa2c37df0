// SPDX-License-Identifier: MIT
// The model seam. A decoder-only transformer is cut into the planner's layers: layer 0 the embedding, layers 1..L
// the blocks, layer L+1 the head (final norm, logits, mean cross-entropy). A model family (GPT-2, Llama, ...) makes
// each layer as a Layer: its named tensors with their optimizer traits, and its math written once as three passes,
// forward, input gradient (I) and weight gradient (W), on the backend's op table. StageModel holds a contiguous
// range of layers with one flat parameter buffer and runs them; the fused backward is each layer's I followed by
// its W, so the zero-bubble schedules' split backward and the fused one are the same arithmetic. The executor, the
// optimizer and the profiler see tensors by name and traits only; adding a layer kind touches the op table and
// its family's file, nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "planner/model_profile.h"
#include "planner/plan.h"
#include "tensor_parallel.h"

namespace pw::engine {

/// @brief The shape of the model: llm.c's checkpoint header (the first six fields, GPT-2's), then the family's
/// block (defaults: GPT-2's).
struct ModelConfig
{
    int max_seq = 0; ///< maxT: positions the model takes (rows of a learned position table)
    int vocab = 0; ///< V
    int padded_vocab = 0; ///< Vp >= V: rows of the token embedding and the head (llm.c pads to a multiple of 128)
    int layers = 0; ///< L
    int heads = 0; ///< NH
    int channels = 0; ///< C
    int kv_heads = 0; ///< key and value heads (grouped-query attention); 0 = heads
    int ffn_hidden = 0; ///< the MLP's inner size; 0 = 4 C
    planner::MlpKind mlp = planner::MlpKind::Gelu;
    planner::NormKind norm = planner::NormKind::LayerNorm;
    planner::PositionKind positions = planner::PositionKind::Learned;
    planner::BiasKind bias = planner::BiasKind::All;
    bool tied_embeddings = true; ///< the head's output matrix is the token embedding
    planner::RotaryConfig rotary;
    double norm_eps = 1e-5;

    int kvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
    int ffnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * channels; }
    int headSize() const { return channels / heads; }
    /// Throws InputError naming the field when a size is not positive, channels is not a multiple of heads, heads
    /// not of kv_heads, or no family builds the block.
    void validate() const;
    /// The planner's transformer shape: maxT = the sequence (or the learned table's rows), Vp = V rounded up to 128.
    static ModelConfig fromTransformer(const planner::TransformerConfig& shape);
    int layerCount() const { return layers + 2; } ///< the planner's layers: embedding, blocks, head

    bool operator==(const ModelConfig&) const = default;
};

/// @brief Sizes of one microbatch: B sequences of T tokens.
struct BatchShape
{
    int batch = 1; ///< B (the plan's microbatch size)
    int seq = 0; ///< T <= max_seq

    bool operator==(const BatchShape&) const = default;
};

/// @brief How a tensor starts when there is no checkpoint.
struct TensorInit
{
    enum class Kind : std::uint8_t { Zeros, Ones, Normal };
    Kind kind = Kind::Zeros;
    double stddev = 0; ///< Normal
    /// The stream of its values, with the run's seed: equal keys give equal values, so every copy of a tensor (the
    /// head's of the tied embedding) starts the same on every stage of every process, whatever the plan. Also the
    /// tensor's place in the family's flat checkpoint (checkpointTensors: ascending keys).
    std::uint64_t key = 0;

    bool operator==(const TensorInit&) const = default;
};

/// @brief A parameter tensor of the model and where a stage keeps it.
struct TensorSlot
{
    std::string name; ///< unique in the model: its name in the family's checkpoints ("wte", "h.3.qkvw", ...)
    std::vector<std::size_t> shape; ///< PyTorch's (rows, columns) of a matrix, (n) of a vector
    int layer = 0; ///< the planner layer whose range of the stage's buffer holds it
    int owner = 0; ///< the layer it belongs to in the whole model (the head's copy of a tied embedding: 0)
    std::size_t offset = 0; ///< elements from the start of the stage's (or the flat checkpoint's) buffer
    std::size_t size = 0; ///< elements
    bool decayed = false; ///< AdamW's weight decay applies (matrices and embeddings)
    bool tied = false; ///< the embedding matrix the head shares: copies on two stages sum their gradients
    TensorInit init;
    /// Its rows are the padded vocabulary (Vp): checkpoint files hold the first V, the padding rows stay zero.
    bool padded_rows = false;
    /// How a tensor-parallel group divides it: `shape` stays the whole tensor's, `size` (and `offset`) are what a
    /// stage of one rank holds (shardRanges).
    TensorShare share;
    /// A whole tensor whose gradient each rank computes from its own positions under sequence parallelism (the
    /// norms' weights): the group sums it before the step.
    bool sequence_partial = false;

    bool operator==(const TensorSlot&) const = default;
};

/// @brief A contiguous piece of a tensor a stage holds: `count` elements from element `whole` of the whole tensor, at
/// element `held` of the stage's buffer.
struct TensorPiece
{
    std::size_t whole = 0;
    std::size_t held = 0;
    std::size_t count = 0;

    bool operator==(const TensorPiece&) const = default;
};

/// @brief What a layer's forward keeps for its backward (one microbatch), on the stage's device, and what its I
/// keeps for its W. Activations are in the backend's act() dtype, statistics and losses fp32. The forward's buffers
/// are reused across microbatches; the gradients go back to the arena after the W.
struct LayerStash
{
    Buffer out; ///< the layer's output (B, T, C); the head leaves it empty
    std::vector<Buffer> saved; ///< the forward's, indexed by the layer kind
    Buffer g_out; ///< the gradient of out: written by the next layer's I (or the stage's dout), read by this W
    std::vector<Buffer> grads; ///< the I's intermediate gradients its W reads, indexed by the layer kind
};

/// @brief The stashed activations of one microbatch through a stage.
struct StageStash
{
    Buffer input; ///< received activation (B, T, C) when the stage does not start with the embedding
    std::vector<LayerStash> layers;
    bool input_done = false; ///< the I has run and its W has not yet
};

/// @brief What a layer's pass works on: the backend, the microbatch's shape and the stage's parameter and gradient
/// buffers, with the byte offsets of the layer's tensors in them (in the order of ModelFamily::tensors()).
struct LayerPass
{
    Backend& be;
    BatchShape shape;
    const std::byte* params = nullptr;
    std::byte* grads = nullptr; ///< null in the forward
    std::span<const std::size_t> at;
    TensorParallel tp; ///< the stage's rank of its tensor-parallel group
    TensorGroup* group = nullptr; ///< its collectives (null at t = 1)

    const void* w(std::size_t i) const { return params + at[i]; }
    void* g(std::size_t i) const { return grads + at[i]; }
    int rows() const { return shape.batch * shape.seq; } ///< BT: the rows of the products
    /// The rows of the residual stream on this rank (a block's input and output, the norms): BT, or its 1/t with
    /// sequence parallelism.
    int localRows() const { return tp.sequence ? rows() / tp.ranks : rows(); }
};

/// @brief The microbatch's inputs of the first and the last layer.
struct LayerFeed
{
    std::span<const std::int32_t> tokens; ///< the embedding's (host)
    std::span<const std::int32_t> targets; ///< the head's (host)
    float loss_scale = 1; ///< d(step loss)/d(this microbatch's mean loss)
    float* loss = nullptr; ///< the head writes the microbatch's mean loss here (fp32, on the device)
};

/// @brief One layer of the model: its three passes (its tensors are its family's to name). The backward passes may
/// keep workspaces in the layer.
class Layer
{
public:
    virtual ~Layer() = default;
    virtual std::string kind() const = 0; ///< the profile's layer kind: "embedding", "transformer_layer", "head"
    virtual std::string name() const = 0; ///< the profile's layer name: "embedding", "transformer_3", "head"
    virtual double forwardFlops(BatchShape shape) const = 0;
    /// x: the layer's input (B T C; null for the embedding). Writes s.out, except the head, which writes the
    /// loss and, fused with it, the logits' gradient (kept in its stash).
    virtual void forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed& feed) const = 0;
    /// The input gradient: reads s.g_out (the head: its stashed logits' gradient) and writes dx (B T C), keeping in
    /// s.grads what the W needs. The embedding has none and does nothing.
    virtual void backwardInput(const LayerPass& p, LayerStash& s, const void* x, void* dx) = 0;
    /// The weight gradients, accumulated (+=) into p.grads from s.g_out and what the I kept.
    virtual void backwardWeight(const LayerPass& p, LayerStash& s, const void* x) = 0;
    /// Recomputation (the plan's schedule.recompute): returns to the arena what `recompute` rebuilds (full: all the
    /// forward kept but its output, the next layer's input; selective: the attention core), after the forward and
    /// after the W. Layers that recompute nothing (the embedding, the head) keep everything.
    virtual void release(LayerStash& s, planner::Recompute recompute) const
    {
        (void)s;
        (void)recompute;
    }
    /// Rebuilds before the I what release() returned, from the layer's input and the same parameters.
    virtual void rebuild(const LayerPass& p, LayerStash& s, const void* x, planner::Recompute recompute) const
    {
        (void)p;
        (void)s;
        (void)x;
        (void)recompute;
    }
};

/// @brief A family of models: which blocks it builds and its layers.
class ModelFamily
{
public:
    virtual ~ModelFamily() = default;
    virtual const char* name() const = 0;
    /// Empty when the family builds `config`'s block; else the first field in which it cannot.
    virtual std::string cannotBuild(const ModelConfig& config) const = 0;
    /// Layer `layer`'s whole tensors in its buffer order: name, shape, size, traits, split, init and owner (layer and
    /// offset are the stage's to set, and a tensor-parallel rank's size).
    virtual std::vector<TensorSlot> tensors(const ModelConfig& config, int layer) const = 0;
    /// Layer `layer` of the whole model, on `backend` (constant tables it needs live there), as rank `tp` of its
    /// tensor-parallel group.
    virtual std::unique_ptr<Layer> makeLayer(
        const ModelConfig& config, int layer, Backend& backend, const TensorParallel& tp) const = 0;
};

/// The family that builds `config` (GPT-2's block, else Llama's); throws InputError naming the field none builds.
const ModelFamily& familyOf(const ModelConfig& config);

/// The whole model's tensors in the family's flat checkpoint order (llm.c's for GPT-2), with their offsets there.
std::vector<TensorSlot> checkpointTensors(const ModelConfig& config);
std::size_t parameterCount(const ModelConfig& config);
/// The tensors of a stage holding layers first..last, in the order and at the offsets of its flat buffer: each
/// layer's in turn, a name met twice (the head's tied embedding on the embedding's stage) kept once; as rank `tp`
/// of a tensor-parallel group, each tensor's share (TensorSlot::split).
std::vector<TensorSlot> stageSlots(
    const ModelConfig& config, int first_layer, int last_layer, const TensorParallel& tp = {});
/// Why `config` cannot be split over `tp.ranks` tensor-parallel ranks (heads, key/value heads, MLP, vocabulary, and
/// with sequence parallelism the microbatch's positions, each not a multiple of t), or empty; the first field.
std::string cannotSplit(const ModelConfig& config, BatchShape shape, const TensorParallel& tp);

/// @brief A contiguous range of the planner's layers with one flat parameter buffer (and its gradient), on one
/// backend's device.
///
/// A tied head uses the token embedding. When the stage holds the embedding too they share one tensor; otherwise
/// the head keeps its own copy, and the copies stay equal because their gradients are summed before every step
/// (tiedGradient) and the optimizer then applies the same update to both.
/// In mixed precision the parameters and gradients are bf16 and master() holds the fp32 weights AdamW updates.
class StageModel
{
public:
    /// `tp`: the stage's rank of its tensor-parallel group (its collectives set by setTensorGroup before the first
    /// forward).
    StageModel(const ModelConfig& config, BatchShape shape, int first_layer, int last_layer,
        Backend& backend = cpuBackend(), const TensorParallel& tp = {});
    ~StageModel();
    StageModel(const StageModel&) = delete;
    StageModel& operator=(const StageModel&) = delete;

    const ModelConfig& config() const { return m_config; }
    BatchShape shape() const { return m_shape; }
    int firstLayer() const { return m_first; }
    int lastLayer() const { return m_last; }
    bool hasEmbedding() const { return m_first == 0; }
    bool hasHead() const { return m_last == m_config.layerCount() - 1; }
    std::size_t parameterCount() const { return m_params.count(); }
    const std::vector<TensorSlot>& slots() const { return m_slots; }
    Backend& backend() const { return *m_backend; }
    const Layer& layer(int layer) const { return *m_layers[static_cast<std::size_t>(layer - m_first)]; }
    const TensorParallel& tensorParallel() const { return m_tp; }
    /// The tensor-parallel group's collectives (kept by the caller; needed when tensorParallel().on()), and those of
    /// this rank's holders (sharedHolders() ranks in a row of the group holding the same key/value heads), when more
    /// than one.
    void setTensorGroups(TensorGroup* group, TensorGroup* holders = nullptr)
    {
        m_group = group;
        m_holders = holders;
    }
    /// How many ranks of the group hold the same part of a split tensor (TensorShare::holders: Llama's key/value
    /// heads when there are fewer than t), 1 when none is shared.
    int sharedHolders() const;
    /// Sums, once before each step, the gradients of tensors several ranks hold and each computes a share of: with
    /// sequence parallelism the norms' (each rank's positions; TensorSlot::sequence_partial) over the group, and shared
    /// key/value heads' (each rank's query heads) over their holders. Nothing without tensor parallelism.
    void sumSharedGradients();

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
    /// The tied embedding's slot when the stage holds one (the embedding's, or the tied head's copy), else nullptr.
    const TensorSlot* tiedSlot() const;

    /// Each tensor drawn from its TensorInit with `seed`: a function of (seed, tensor) only.
    void initialise(std::uint64_t seed);
    /// Copies this stage's tensors from / to the family's flat checkpoint of the whole model (checkpointTensors): with
    /// tensor parallelism its rank's share of each, split on load and put in place on store.
    void loadFrom(std::span<const float> checkpoint);
    void storeTo(std::span<float> checkpoint) const;
    /// The pieces of `slot` (one of slots()) this stage holds, in its buffer's order.
    std::vector<TensorPiece> pieces(const TensorSlot& slot) const;
    /// Whether this stage writes `slot` into a checkpoint file its group's ranks write together: not the head's copy
    /// of the tied embedding (the embedding's stage writes it), and a whole (unsplit) tensor from rank 0 only.
    bool writes(const TensorSlot& slot) const;

    /// One microbatch forward with parameters `params` (this stage's layout, on the device). tokens (B T, host)
    /// feed the embedding; *input (B T C, on the device) feeds any other first layer and is taken into the stash
    /// (the caller gets the stash's old buffer back in it); targets (B T, host) feed the head, which writes the
    /// microbatch's mean loss to *loss (fp32, on the device) and, fused with it, the logits' gradient for a seed of
    /// loss_scale = d(step loss)/d(this microbatch's mean loss). Returns the stage's output (B T C, in the stash),
    /// or null for the head.
    const Buffer* forward(StageStash& stash, const void* params, std::span<const std::int32_t> tokens, Buffer* input,
        std::span<const std::int32_t> targets, float loss_scale, float* loss) const;
    /// Called once the gradients of `layer` are final for this backward: elements [first, first + count) of grads
    /// (the layer's tensors, contiguous), enqueued on the backend's stream. Layers come last to first, so the ranges
    /// come at decreasing offsets, each ending where the next one's begins.
    using LayerDone = std::function<void(int layer, std::size_t first, std::size_t count)>;
    /// The backward of the microbatch forward() stashed, with the same parameters; accumulates into grads: each
    /// layer's I then its W. dout: gradient of the stage's output (null for the head). Returns the gradient of the
    /// stage's input (null when it starts with the embedding); valid until the next backward. `done`, when set,
    /// hears each layer's finished gradients (the executor all-reduces them in buckets while the backward goes on).
    const Buffer* backward(
        StageStash& stash, const void* params, void* grads, const Buffer* dout, const LayerDone& done = {});
    /// The backward split in two (zero-bubble schedules' I and W): backwardInput runs every layer's I, keeping in
    /// the stash what their Ws need, and returns the stage's input gradient as backward() does; backwardWeight,
    /// later and with the same stash, runs their Ws (calling `done` per layer) and releases what the I kept. The
    /// forward's activations stay in the stash until the W, which reads them.
    const Buffer* backwardInput(StageStash& stash, const void* params, const Buffer* dout);
    void backwardWeight(StageStash& stash, void* grads, const LayerDone& done = {});
    /// What the layers recompute before their backward instead of keeping it from the forward (none by default).
    /// Full keeps each layer's input (the previous layer's output) and rebuilds one layer at a time before its I
    /// (with the split backward the rebuilt activations live until its W); selective rebuilds the attention core.
    void setRecompute(planner::Recompute recompute) { m_recompute = recompute; }
    planner::Recompute recompute() const { return m_recompute; }
    /// Elements [first, first + count) of the parameters (and gradients) that hold `layer`'s tensors.
    std::pair<std::size_t, std::size_t> layerRange(int layer) const;

    /// Elements of a stage boundary's activation: B T C, or with tensor parallelism this rank's 1/t of its rows
    /// (Megatron's scatter/gather between stages; with sequence parallelism what the rank holds anyway).
    std::size_t activationCount() const;

private:
    LayerPass pass(int layer, const void* params, void* grads) const;
    /// The input of layer `layer` in the stash: the received activation, or the previous layer's output.
    const void* layerInput(const StageStash& stash, int layer) const;
    /// The I of one layer: where its output gradient comes from and where its input gradient goes.
    void layerBackwardInput(StageStash& stash, const void* params, int layer);
    void layerBackwardWeight(StageStash& stash, void* grads, int layer, const LayerDone& done);
    void beginBackward(StageStash& stash, const Buffer* dout);
    /// Elements of the residual stream on this rank: B T C, or its 1/t with sequence parallelism.
    std::size_t residualCount() const;
    /// Tensor parallelism without the sequence split: a boundary carries this rank's rows of a tensor every rank
    /// holds whole, all-gathered on arrival.
    bool gathersBoundary() const;
    /// This rank's rows of `whole` (residualCount() elements), copied into `slice`.
    const Buffer& rowsOf(const Buffer& whole, Buffer& slice) const;
    /// The stage's input gradient as the boundary carries it (null with the embedding).
    const Buffer* inputGradient();

    ModelConfig m_config;
    BatchShape m_shape;
    int m_first = 0;
    int m_last = 0;
    Backend* m_backend;
    DType m_act;
    std::vector<std::unique_ptr<Layer>> m_layers;
    std::vector<TensorSlot> m_slots;
    std::vector<std::vector<std::size_t>> m_at; ///< per layer: byte offsets of its tensors
    Buffer m_params;
    Buffer m_grads;
    Buffer m_master;
    Buffer m_dInput; ///< the stage's input gradient
    planner::Recompute m_recompute = planner::Recompute::None;
    TensorParallel m_tp;
    TensorGroup* m_group = nullptr;
    TensorGroup* m_holders = nullptr;
    /// Sums over `group` the gradients of the slots `which` picks (gathered into m_partials: one collective).
    void sumGradients(TensorGroup* group, const std::function<bool(const TensorSlot&)>& which);
    /// Tensor parallelism without the sequence split: the rank's rows of the stage's output and input gradient
    /// (what goes to the next rank), and the sequence-partial gradients gathered for their sum.
    mutable Buffer m_outSlice;
    Buffer m_dInputSlice;
    Buffer m_partials;
};

} // namespace pw::engine
