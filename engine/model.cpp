// SPDX-License-Identifier: MIT
#include "model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include "planner/errors.h"
#include "splitmix.h"
#include "transformer.h"

namespace pw::engine {

using planner::InputError;

namespace {

void fillNormal(float* out, std::size_t n, double stddev, std::uint64_t key)
{
    SplitMix rng {key};
    for (std::size_t i = 0; i < n; i += 2) {
        // Box-Muller: two independent normals per pair of uniforms.
        const double r = std::sqrt(-2.0 * std::log(rng.uniformOpen()));
        const double a = 2.0 * std::numbers::pi * rng.uniformOpen();
        out[i] = static_cast<float>(stddev * r * std::cos(a));
        if (i + 1 < n)
            out[i + 1] = static_cast<float>(stddev * r * std::sin(a));
    }
}

/// The elements of a whole tensor of `shape`.
std::size_t wholeSize(const TensorSlot& t)
{
    std::size_t n = 1;
    for (std::size_t d : t.shape)
        n *= d;
    return n;
}

/// Layers first..last's tensors, each name once, with their layer set and their offsets in that order; each tensor's
/// share of rank `tp`.
std::vector<TensorSlot> collectTensors(const ModelConfig& config, int first, int last, const TensorParallel& tp = {})
{
    const ModelFamily& family = familyOf(config);
    std::vector<TensorSlot> slots;
    for (int layer = first; layer <= last; ++layer)
        for (TensorSlot& t : family.tensors(config, layer)) {
            if (std::any_of(slots.begin(), slots.end(), [&](const TensorSlot& s) { return s.name == t.name; }))
                continue; // the tied head's embedding on the embedding's stage: one tensor
            if (tp.on()) {
                t.size = 0;
                for (const auto& [b, e] : shardRanges(t.shape, t.share, tp))
                    t.size += e - b;
            }
            t.layer = layer;
            t.offset = slots.empty() ? 0 : slots.back().offset + slots.back().size;
            slots.push_back(std::move(t));
        }
    return slots;
}

} // namespace

void ModelConfig::validate() const
{
    auto positive = [](int v, const char* field) {
        if (v <= 0)
            throw InputError(std::string(field) + ": must be positive, got " + std::to_string(v));
    };
    positive(max_seq, "max_seq");
    positive(vocab, "vocab");
    positive(layers, "layers");
    positive(heads, "heads");
    positive(channels, "channels");
    if (kv_heads < 0 || ffn_hidden < 0)
        throw InputError("kv_heads, ffn_hidden: must be >= 0 (0 for the default)");
    if (padded_vocab < vocab)
        throw InputError(
            "padded_vocab: must be >= vocab (" + std::to_string(vocab) + "), got " + std::to_string(padded_vocab));
    if (channels % heads != 0)
        throw InputError(
            "channels: " + std::to_string(channels) + " is not a multiple of heads (" + std::to_string(heads) + ")");
    if (heads % kvHeads() != 0)
        throw InputError(
            "kv_heads: " + std::to_string(kvHeads()) + " does not divide heads (" + std::to_string(heads) + ")");
    familyOf(*this);
}

ModelConfig ModelConfig::fromTransformer(const planner::TransformerConfig& shape)
{
    ModelConfig c;
    c.max_seq = shape.sequence;
    c.vocab = shape.vocab;
    c.padded_vocab = (shape.vocab + 127) / 128 * 128;
    c.layers = shape.layers;
    c.heads = shape.heads;
    c.channels = shape.hidden;
    c.kv_heads = shape.kv_heads;
    c.ffn_hidden = shape.ffn_hidden;
    c.mlp = shape.mlp;
    c.norm = shape.norm;
    c.positions = shape.positions;
    c.bias = shape.bias;
    c.tied_embeddings = shape.tied_embeddings;
    c.rotary = shape.rotary;
    c.norm_eps = shape.norm_eps;
    return c;
}

const ModelFamily& familyOf(const ModelConfig& config)
{
    const std::string gpt2 = gpt2Family().cannotBuild(config);
    if (gpt2.empty())
        return gpt2Family();
    const std::string llama = llamaFamily().cannotBuild(config);
    if (llama.empty())
        return llamaFamily();
    // The field of the family the model is nearer: GPT-2's when its positions are learned, else Llama's.
    throw InputError({}, 0, config.positions == planner::PositionKind::Learned ? gpt2 : llama,
        "the engine trains GPT-2's block and Llama's (RMSNorm, SwiGLU, rotary positions, biases none or on Q, K "
        "and V); this model's differs from GPT-2's in "
            + gpt2 + " and from Llama's in " + llama);
}

std::vector<TensorSlot> checkpointTensors(const ModelConfig& config)
{
    std::vector<TensorSlot> all = collectTensors(config, 0, config.layerCount() - 1);
    std::stable_sort(
        all.begin(), all.end(), [](const TensorSlot& a, const TensorSlot& b) { return a.init.key < b.init.key; });
    std::size_t offset = 0;
    for (auto& t : all) {
        t.offset = offset;
        offset += t.size;
    }
    return all;
}

std::size_t parameterCount(const ModelConfig& config)
{
    std::size_t n = 0;
    for (const auto& t : collectTensors(config, 0, config.layerCount() - 1))
        n += t.size;
    return n;
}

std::vector<TensorSlot> stageSlots(const ModelConfig& config, int first_layer, int last_layer, const TensorParallel& tp)
{
    return collectTensors(config, first_layer, last_layer, tp);
}

std::string cannotSplit(const ModelConfig& c, BatchShape shape, const TensorParallel& tp)
{
    if (!tp.on())
        return {};
    const int t = tp.ranks;
    const auto multiple = [t](int n) { return n % t == 0; };
    return firstDifference({
        {!multiple(c.heads), "heads"},
        {!multiple(c.kvHeads()) && t % c.kvHeads() != 0, "kv_heads"}, // fewer than t: shared by t / KV ranks
        {!multiple(c.ffnHidden()), "ffn_hidden"},
        {!multiple(c.padded_vocab), "vocab"},
        {!multiple(shape.batch * shape.seq), "sequence"},
    });
}

// ---------------------------------------------------------------------------------------------------------------

StageModel::StageModel(const ModelConfig& config, BatchShape shape, int first_layer, int last_layer, Backend& backend,
    const TensorParallel& tp)
    : m_config(config)
    , m_shape(shape)
    , m_first(first_layer)
    , m_last(last_layer)
    , m_backend(&backend)
    , m_act(backend.act())
    , m_tp(tp)
{
    config.validate();
    if (shape.batch <= 0 || shape.seq <= 0 || shape.seq > config.max_seq)
        throw InputError("microbatch of " + std::to_string(shape.batch) + " x " + std::to_string(shape.seq)
            + " tokens does not suit a model of " + std::to_string(config.max_seq) + " positions");
    if (first_layer < 0 || last_layer < first_layer || last_layer >= config.layerCount())
        throw InputError("stage layers " + std::to_string(first_layer) + ".." + std::to_string(last_layer)
            + " are outside the model's " + std::to_string(config.layerCount()) + " layers");
    if (tp.rank < 0 || tp.rank >= std::max(1, tp.ranks))
        throw InputError("tensor-parallel rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.ranks));
    if (const std::string field = cannotSplit(config, shape, tp); !field.empty())
        throw InputError({}, 0, field,
            "the model's " + field + " is not a multiple of the tensor-parallel size " + std::to_string(tp.ranks));
    const ModelFamily& family = familyOf(config);
    m_slots = stageSlots(config, first_layer, last_layer, tp);
    const std::size_t e = byteSize(m_act);
    for (int layer = first_layer; layer <= last_layer; ++layer) {
        m_layers.push_back(family.makeLayer(config, layer, backend, tp));
        std::vector<std::size_t> at;
        for (const auto& t : family.tensors(config, layer))
            for (const auto& s : m_slots)
                if (s.name == t.name)
                    at.push_back(s.offset * e);
        m_at.push_back(std::move(at));
    }
    const std::size_t n = m_slots.empty() ? 0 : m_slots.back().offset + m_slots.back().size;
    m_params = Buffer(backend, n, m_act);
    m_grads = Buffer(backend, n, m_act);
    if (backend.precision() == Precision::Bf16Mixed)
        m_master = Buffer(backend, n, DType::F32);
    backend.zero(m_params.data(), m_params.bytes());
    if (!m_master.empty())
        backend.zero(m_master.data(), m_master.bytes());
    zeroGrads();
}

StageModel::~StageModel() = default;

void StageModel::zeroGrads()
{
    m_backend->zero(m_grads.data(), m_grads.bytes());
}

std::vector<float> StageModel::hostParams() const
{
    std::vector<float> host(m_params.count());
    if (!m_master.empty())
        m_backend->download(host.data(), m_master.data(), DType::F32, host.size());
    else
        m_backend->download(host.data(), m_params.data(), m_act, host.size());
    return host;
}

std::vector<float> StageModel::hostGrads() const
{
    std::vector<float> host(m_grads.count());
    m_backend->download(host.data(), m_grads.data(), m_act, host.size());
    return host;
}

void StageModel::setHostParams(std::span<const float> params)
{
    if (params.size() != m_params.count())
        throw std::logic_error("setHostParams: " + std::to_string(params.size()) + " values for "
            + std::to_string(m_params.count()) + " parameters");
    m_backend->upload(m_params.data(), m_act, params.data(), params.size());
    if (!m_master.empty())
        m_backend->upload(m_master.data(), DType::F32, params.data(), params.size());
}

const TensorSlot* StageModel::tiedSlot() const
{
    for (const auto& s : m_slots)
        if (s.tied)
            return &s;
    return nullptr;
}

namespace {
/// Copies rank `tp`'s share of the whole tensor `whole` (slot's shape) to `held` (slot.size elements), or back.
void takeShard(const TensorSlot& slot, const TensorParallel& tp, const float* whole, float* held)
{
    for (const auto& [b, e] : shardRanges(slot.shape, slot.share, tp))
        held = std::copy(whole + b, whole + e, held);
}
void putShard(const TensorSlot& slot, const TensorParallel& tp, const float* held, float* whole)
{
    for (const auto& [b, e] : shardRanges(slot.shape, slot.share, tp)) {
        std::copy_n(held, e - b, whole + b);
        held += e - b;
    }
}
} // namespace

void StageModel::initialise(std::uint64_t seed)
{
    // Each whole tensor is drawn, then this rank's share taken: a function of (seed, tensor) for every split.
    std::vector<float> host(m_params.count());
    std::vector<float> whole;
    for (const auto& s : m_slots) {
        whole.resize(wholeSize(s));
        switch (s.init.kind) {
        case TensorInit::Kind::Ones:
            std::fill(whole.begin(), whole.end(), 1.0f);
            break;
        case TensorInit::Kind::Normal:
            fillNormal(whole.data(), whole.size(), s.init.stddev, seed * 0x100000001B3ull + s.init.key);
            break;
        case TensorInit::Kind::Zeros:
            std::fill(whole.begin(), whole.end(), 0.0f);
            break;
        }
        takeShard(s, m_tp, whole.data(), host.data() + s.offset);
    }
    setHostParams(host);
}

void StageModel::loadFrom(std::span<const float> checkpoint)
{
    const std::vector<TensorSlot> all = checkpointTensors(m_config);
    const std::size_t count = all.empty() ? 0 : all.back().offset + all.back().size;
    if (checkpoint.size() != count)
        throw InputError("checkpoint holds " + std::to_string(checkpoint.size()) + " parameters, the model needs "
            + std::to_string(count));
    std::map<std::string, std::size_t> offsets;
    for (const auto& t : all)
        offsets.emplace(t.name, t.offset);
    std::vector<float> host(m_params.count());
    for (const auto& s : m_slots)
        takeShard(s, m_tp, checkpoint.data() + offsets.at(s.name), host.data() + s.offset);
    setHostParams(host);
}

void StageModel::storeTo(std::span<float> checkpoint) const
{
    const std::vector<float> host = hostParams();
    for (const auto& t : checkpointTensors(m_config))
        for (const auto& s : m_slots)
            if (s.name == t.name)
                putShard(s, m_tp, host.data() + s.offset, checkpoint.data() + t.offset);
}

std::vector<TensorPiece> StageModel::pieces(const TensorSlot& slot) const
{
    std::vector<TensorPiece> out;
    std::size_t held = slot.offset;
    for (const auto& [b, e] : shardRanges(slot.shape, slot.share, m_tp)) {
        out.push_back({b, held, e - b});
        held += e - b;
    }
    return out;
}

bool StageModel::writes(const TensorSlot& slot) const
{
    if (slot.tied && slot.layer != slot.owner)
        return false;
    // The first of the ranks holding the same part (all of them for a whole tensor).
    return m_tp.rank % slot.share.holders(std::max(1, m_tp.ranks)) == 0;
}

int StageModel::sharedHolders() const
{
    const int t = std::max(1, m_tp.ranks);
    int holders = 1;
    for (const auto& s : m_slots)
        if (s.share.split != TensorSplit::Whole)
            holders = std::max(holders, s.share.holders(t));
    return holders;
}

void StageModel::sumSharedGradients()
{
    if (!m_tp.on())
        return;
    const int t = m_tp.ranks;
    if (m_tp.sequence)
        sumGradients(m_group, [](const TensorSlot& s) { return s.sequence_partial; });
    if (sharedHolders() > 1)
        sumGradients(m_holders,
            [t](const TensorSlot& s) { return s.share.split != TensorSplit::Whole && s.share.holders(t) > 1; });
}

void StageModel::sumGradients(TensorGroup* group, const std::function<bool(const TensorSlot&)>& which)
{
    std::size_t n = 0;
    for (const auto& s : m_slots)
        n += which(s) ? s.size : 0;
    if (n == 0)
        return;
    if (!group)
        throw std::logic_error("a tensor-parallel stage without the collectives of its group or holders");
    // Gathered into one buffer, summed in one collective, and put back.
    const std::size_t e = byteSize(m_act);
    m_partials.ensure(*m_backend, n, m_act);
    for (int pass = 0; pass < 2; ++pass) {
        std::size_t at = 0;
        for (const auto& s : m_slots) {
            if (!which(s))
                continue;
            std::byte* grad = m_grads.as<std::byte>() + s.offset * e;
            std::byte* part = m_partials.as<std::byte>() + at * e;
            if (pass == 0)
                m_backend->copy(part, grad, s.size * e);
            else
                m_backend->copy(grad, part, s.size * e);
            at += s.size;
        }
        if (pass == 0)
            group->allReduce(m_partials.data(), m_act, n);
    }
}

std::size_t StageModel::activationCount() const
{
    return residualCount() / static_cast<std::size_t>(m_tp.on() && !m_tp.sequence ? m_tp.ranks : 1);
}

std::size_t StageModel::residualCount() const
{
    const std::size_t rows = static_cast<std::size_t>(m_shape.batch) * m_shape.seq;
    return rows / static_cast<std::size_t>(m_tp.sequence ? m_tp.ranks : 1) * m_config.channels;
}

std::pair<std::size_t, std::size_t> StageModel::layerRange(int layer) const
{
    std::size_t first = 0, end = 0;
    bool found = false;
    for (const auto& slot : m_slots)
        if (slot.layer == layer) {
            first = found ? first : slot.offset;
            end = slot.offset + slot.size;
            found = true;
        }
    return {first, end - first};
}

LayerPass StageModel::pass(int layer, const void* params, void* grads) const
{
    return {*m_backend, m_shape, static_cast<const std::byte*>(params), static_cast<std::byte*>(grads),
        m_at[static_cast<std::size_t>(layer - m_first)], m_tp, m_group};
}

const void* StageModel::layerInput(const StageStash& stash, int layer) const
{
    return layer == m_first ? stash.input.data()
                            : stash.layers[static_cast<std::size_t>(layer - m_first - 1)].out.data();
}

// ---------------------------------------------------------------------------------------------------------------
// Forward and backward: the layers in turn.

const Buffer* StageModel::forward(StageStash& stash, const void* params, std::span<const std::int32_t> tokens,
    Buffer* input, std::span<const std::int32_t> targets, float loss_scale, float* loss) const
{
    const std::size_t n = activationCount();
    if (m_tp.on() && !m_group)
        throw std::logic_error("a tensor-parallel stage without its group's collectives");
    stash.layers.resize(static_cast<std::size_t>(m_last - m_first + 1));
    if (!hasEmbedding()) {
        if (!input || input->count() != n)
            throw std::logic_error("stage forward: the input activation is missing or of the wrong size");
        if (gathersBoundary()) { // this rank's rows came: every rank's make the layers' input
            stash.input.ensure(*m_backend, residualCount(), m_act);
            m_group->allGather(stash.input.data(), input->data(), m_act, n);
        } else {
            std::swap(stash.input, *input);
        }
    }
    const LayerFeed feed {tokens, targets, loss_scale, loss};
    for (int layer = m_first; layer <= m_last; ++layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        const Layer& l = *m_layers[static_cast<std::size_t>(layer - m_first)];
        l.forward(pass(layer, params, nullptr), s, layerInput(stash, layer), feed);
        l.release(s, m_recompute);
    }
    if (hasHead())
        return nullptr;
    return gathersBoundary() ? &rowsOf(stash.layers.back().out, m_outSlice) : &stash.layers.back().out;
}

bool StageModel::gathersBoundary() const
{
    return m_tp.on() && !m_tp.sequence;
}

const Buffer& StageModel::rowsOf(const Buffer& whole, Buffer& slice) const
{
    const std::size_t n = activationCount();
    slice.ensure(*m_backend, n, m_act);
    m_backend->copy(slice.data(),
        static_cast<const std::byte*>(whole.data()) + static_cast<std::size_t>(m_tp.rank) * n * byteSize(m_act),
        n * byteSize(m_act));
    return slice;
}

void StageModel::beginBackward(StageStash& stash, const Buffer* dout)
{
    if (stash.layers.size() != static_cast<std::size_t>(m_last - m_first + 1))
        throw std::logic_error("stage backward: no forward stashed for this microbatch");
    if (hasHead())
        return;
    const std::size_t n = activationCount();
    if (!dout || dout->count() != n)
        throw std::logic_error("stage backward: the output gradient is missing or of the wrong size");
    Buffer& top = stash.layers.back().g_out;
    top.ensure(*m_backend, residualCount(), m_act);
    if (gathersBoundary())
        m_group->allGather(top.data(), dout->data(), m_act, n);
    else
        m_backend->copy(top.data(), dout->data(), top.bytes());
}

void StageModel::layerBackwardInput(StageStash& stash, const void* params, int layer)
{
    const auto i = static_cast<std::size_t>(layer - m_first);
    void* dx = nullptr;
    if (layer > 0) { // the embedding has no input gradient
        Buffer& d = layer == m_first ? m_dInput : stash.layers[i - 1].g_out;
        d.ensure(*m_backend, residualCount(), m_act);
        dx = d.data();
    }
    const LayerPass p = pass(layer, params, nullptr);
    m_layers[i]->rebuild(p, stash.layers[i], layerInput(stash, layer), m_recompute);
    m_layers[i]->backwardInput(p, stash.layers[i], layerInput(stash, layer), dx);
}

void StageModel::layerBackwardWeight(StageStash& stash, void* grads, int layer, const LayerDone& done)
{
    const auto i = static_cast<std::size_t>(layer - m_first);
    m_layers[i]->backwardWeight(pass(layer, nullptr, grads), stash.layers[i], layerInput(stash, layer));
    m_layers[i]->release(stash.layers[i], m_recompute); // what was rebuilt for this backward
    if (done) {
        const auto [first, count] = layerRange(layer);
        done(layer, first, count);
    }
}

namespace {
/// What a layer's I kept for its W, back to the backend's arena (the next microbatch's I takes it from there).
void releaseGradients(LayerStash& s)
{
    s.g_out.reset();
    for (Buffer& b : s.grads)
        b.reset();
}
} // namespace

const Buffer* StageModel::backward(
    StageStash& stash, const void* params, void* grads, const Buffer* dout, const LayerDone& done)
{
    beginBackward(stash, dout);
    for (int layer = m_last; layer >= m_first; --layer) {
        layerBackwardInput(stash, params, layer);
        layerBackwardWeight(stash, grads, layer, done);
        releaseGradients(stash.layers[static_cast<std::size_t>(layer - m_first)]);
    }
    return inputGradient();
}

const Buffer* StageModel::inputGradient()
{
    if (hasEmbedding())
        return nullptr;
    return gathersBoundary() ? &rowsOf(m_dInput, m_dInputSlice) : &m_dInput;
}

const Buffer* StageModel::backwardInput(StageStash& stash, const void* params, const Buffer* dout)
{
    beginBackward(stash, dout);
    for (int layer = m_last; layer >= m_first; --layer)
        layerBackwardInput(stash, params, layer);
    stash.input_done = true;
    return inputGradient();
}

void StageModel::backwardWeight(StageStash& stash, void* grads, const LayerDone& done)
{
    if (!stash.input_done)
        throw std::logic_error("stage weight gradient before its input gradient");
    for (int layer = m_last; layer >= m_first; --layer)
        layerBackwardWeight(stash, grads, layer, done);
    for (LayerStash& s : stash.layers)
        releaseGradients(s);
    stash.input_done = false;
}

} // namespace pw::engine
