// SPDX-License-Identifier: MIT
#include "gpt2.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops.h"
#include "planner/errors.h"

namespace pw::engine {

using planner::InputError;

namespace {

constexpr std::array<const char*, kTensorCount> kTensorNames = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb",
    "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

constexpr std::array<Tensor, 12> kBlockTensors
    = {Tensor::Ln1w, Tensor::Ln1b, Tensor::Qkvw, Tensor::Qkvb, Tensor::Attprojw, Tensor::Attprojb, Tensor::Ln2w,
        Tensor::Ln2b, Tensor::Fcw, Tensor::Fcb, Tensor::Fcprojw, Tensor::Fcprojb};

/// splitmix64: a small, well-mixed generator whose output is the same on every platform.
struct SplitMix
{
    std::uint64_t state;
    std::uint64_t next()
    {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; } // in (0, 1)
};

void fillNormal(float* out, std::size_t n, double stddev, std::uint64_t key)
{
    SplitMix rng {key};
    for (std::size_t i = 0; i < n; i += 2) {
        // Box-Muller: two independent normals per pair of uniforms.
        const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
        const double a = 2.0 * std::numbers::pi * rng.uniform();
        out[i] = static_cast<float>(stddev * r * std::cos(a));
        if (i + 1 < n)
            out[i + 1] = static_cast<float>(stddev * r * std::sin(a));
    }
}

/// A buffer of n elements of `dtype` on `backend` (kept when it already is; its contents are then the last
/// microbatch's, which every user overwrites).
void ensure(Buffer& b, Backend& backend, std::size_t n, DType dtype)
{
    b.ensure(backend, n, dtype);
}

void checkTokens(std::span<const std::int32_t> tokens, int vocab, const char* what)
{
    for (std::int32_t t : tokens)
        if (t < 0 || t >= vocab)
            throw InputError(
                std::string(what) + " " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(vocab));
}

} // namespace

void Gpt2Config::validate() const
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
    if (padded_vocab < vocab)
        throw InputError(
            "padded_vocab: must be >= vocab (" + std::to_string(vocab) + "), got " + std::to_string(padded_vocab));
    if (channels % heads != 0)
        throw InputError(
            "channels: " + std::to_string(channels) + " is not a multiple of heads (" + std::to_string(heads) + ")");
    if (vocab > 65536)
        throw InputError("vocab: token files hold uint16 tokens, so at most 65536, got " + std::to_string(vocab));
}

Gpt2Config Gpt2Config::fromTransformer(const planner::TransformerConfig& shape)
{
    Gpt2Config c;
    c.max_seq = shape.sequence;
    c.vocab = shape.vocab;
    c.padded_vocab = (shape.vocab + 127) / 128 * 128;
    c.layers = shape.layers;
    c.heads = shape.heads;
    c.channels = shape.hidden;
    return c;
}

const char* tensorName(Tensor t)
{
    return kTensorNames[static_cast<int>(t)];
}

std::size_t tensorSize(const Gpt2Config& c, Tensor t)
{
    const std::size_t C = c.channels;
    switch (t) {
    case Tensor::Wte:
        return static_cast<std::size_t>(c.padded_vocab) * C;
    case Tensor::Wpe:
        return static_cast<std::size_t>(c.max_seq) * C;
    case Tensor::Qkvw:
        return 3 * C * C;
    case Tensor::Qkvb:
        return 3 * C;
    case Tensor::Attprojw:
        return C * C;
    case Tensor::Fcw:
    case Tensor::Fcprojw:
        return 4 * C * C;
    case Tensor::Fcb:
        return 4 * C;
    default:
        return C; // layer norms and the remaining biases
    }
}

bool isPerBlock(Tensor t)
{
    return t != Tensor::Wte && t != Tensor::Wpe && t != Tensor::Lnfw && t != Tensor::Lnfb;
}

bool isDecayed(Tensor t)
{
    return t == Tensor::Wte || t == Tensor::Wpe || t == Tensor::Qkvw || t == Tensor::Attprojw || t == Tensor::Fcw
        || t == Tensor::Fcprojw;
}

std::size_t checkpointOffset(const Gpt2Config& c, Tensor t, int block)
{
    std::size_t offset = 0;
    for (int i = 0; i < static_cast<int>(t); ++i) {
        const auto ti = static_cast<Tensor>(i);
        offset += tensorSize(c, ti) * (isPerBlock(ti) ? c.layers : 1);
    }
    return offset + (isPerBlock(t) ? static_cast<std::size_t>(block) * tensorSize(c, t) : 0);
}

std::size_t parameterCount(const Gpt2Config& c)
{
    return checkpointOffset(c, Tensor::Lnfb) + tensorSize(c, Tensor::Lnfb);
}

LayerKind layerKind(const Gpt2Config& c, int layer)
{
    if (layer == 0)
        return LayerKind::Embedding;
    return layer <= c.layers ? LayerKind::Block : LayerKind::Head;
}

// ---------------------------------------------------------------------------------------------------------------

StageModel::StageModel(const Gpt2Config& config, BatchShape shape, int first_layer, int last_layer, Backend& backend)
    : m_config(config)
    , m_shape(shape)
    , m_first(first_layer)
    , m_last(last_layer)
    , m_backend(&backend)
    , m_act(backend.act())
{
    config.validate();
    if (shape.batch <= 0 || shape.seq <= 0 || shape.seq > config.max_seq)
        throw InputError("microbatch of " + std::to_string(shape.batch) + " x " + std::to_string(shape.seq)
            + " tokens does not suit a model of " + std::to_string(config.max_seq) + " positions");
    if (first_layer < 0 || last_layer < first_layer || last_layer >= config.layerCount())
        throw InputError("stage layers " + std::to_string(first_layer) + ".." + std::to_string(last_layer)
            + " are outside the model's " + std::to_string(config.layerCount()) + " layers");
    m_slots = stageSlots(config, first_layer, last_layer);
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

std::vector<TensorSlot> stageSlots(const Gpt2Config& config, int first_layer, int last_layer)
{
    std::vector<TensorSlot> slots;
    const auto add = [&](Tensor t, int layer, int block) {
        const std::size_t offset = slots.empty() ? 0 : slots.back().offset + slots.back().size;
        slots.push_back({t, layer, block, offset, tensorSize(config, t)});
    };
    for (int layer = first_layer; layer <= last_layer; ++layer)
        switch (layerKind(config, layer)) {
        case LayerKind::Embedding:
            add(Tensor::Wte, layer, 0);
            add(Tensor::Wpe, layer, 0);
            break;
        case LayerKind::Block:
            for (Tensor t : kBlockTensors)
                add(t, layer, layer - 1);
            break;
        case LayerKind::Head:
            add(Tensor::Lnfw, layer, 0);
            add(Tensor::Lnfb, layer, 0);
            if (first_layer != 0)
                add(Tensor::Wte, layer, 0); // the tied copy
            break;
        }
    return slots;
}

int ownerLayer(const TensorSlot& slot)
{
    return slot.tensor == Tensor::Wte ? 0 : slot.layer;
}

const TensorSlot& StageModel::slot(Tensor t, int block) const
{
    for (const auto& s : m_slots)
        if (s.tensor == t && (!isPerBlock(t) || s.block == block))
            return s;
    throw std::logic_error(std::string("stage has no tensor ") + tensorName(t));
}

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
        if (s.tensor == Tensor::Wte)
            return &s;
    return nullptr;
}

void StageModel::initialise(std::uint64_t seed)
{
    const double residualStd = 0.02 / std::sqrt(2.0 * m_config.layers);
    std::vector<float> host(m_params.count());
    for (const auto& s : m_slots) {
        float* p = host.data() + s.offset;
        const std::uint64_t key = seed * 0x100000001B3ull + static_cast<std::uint64_t>(s.tensor) * 0x10000ull
            + static_cast<std::uint64_t>(s.block);
        switch (s.tensor) {
        case Tensor::Ln1w:
        case Tensor::Ln2w:
        case Tensor::Lnfw:
            std::fill_n(p, s.size, 1.0f);
            break;
        case Tensor::Attprojw:
        case Tensor::Fcprojw:
            fillNormal(p, s.size, residualStd, key);
            break;
        default:
            if (isDecayed(s.tensor))
                fillNormal(p, s.size, 0.02, key);
            else
                std::fill_n(p, s.size, 0.0f); // biases and layer-norm shifts
        }
    }
    setHostParams(host);
}

void StageModel::loadFrom(std::span<const float> checkpoint)
{
    if (checkpoint.size() != engine::parameterCount(m_config))
        throw InputError("checkpoint holds " + std::to_string(checkpoint.size()) + " parameters, the model needs "
            + std::to_string(engine::parameterCount(m_config)));
    std::vector<float> host(m_params.count());
    for (const auto& s : m_slots)
        std::copy_n(checkpoint.begin() + static_cast<long>(checkpointOffset(m_config, s.tensor, s.block)), s.size,
            host.begin() + static_cast<long>(s.offset));
    setHostParams(host);
}

void StageModel::storeTo(std::span<float> checkpoint) const
{
    const std::vector<float> host = hostParams();
    for (const auto& s : m_slots)
        std::copy_n(host.begin() + static_cast<long>(s.offset), s.size,
            checkpoint.begin() + static_cast<long>(checkpointOffset(m_config, s.tensor, s.block)));
}

std::size_t StageModel::activationCount() const
{
    return static_cast<std::size_t>(m_shape.batch) * m_shape.seq * m_config.channels;
}

// ---------------------------------------------------------------------------------------------------------------
// Forward

const Buffer* StageModel::forward(StageStash& stash, const void* params, std::span<const std::int32_t> tokens,
    Buffer* input, std::span<const std::int32_t> targets, float loss_scale, float* loss) const
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels;
    const std::size_t BT = static_cast<std::size_t>(B) * T;
    const auto* P = static_cast<const std::byte*>(params);
    stash.layers.resize(static_cast<std::size_t>(m_last - m_first + 1));
    const void* x = nullptr;
    if (!hasEmbedding()) {
        if (!input || input->count() != BT * C)
            throw std::logic_error("stage forward: the input activation is missing or of the wrong size");
        std::swap(stash.input, *input);
        x = stash.input.data();
    }
    for (int layer = m_first; layer <= m_last; ++layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        switch (layerKind(m_config, layer)) {
        case LayerKind::Embedding:
            checkTokens(tokens, m_config.vocab, "token");
            ensure(s.tokens, be, BT, DType::I32);
            be.uploadTokens(s.tokens.as<std::int32_t>(), tokens.data(), BT);
            ensure(s.out, be, BT * C, m_act);
            be.encoderForward(
                s.out.data(), s.tokens.as<std::int32_t>(), P + at(Tensor::Wte, 0), P + at(Tensor::Wpe, 0), B, T, C);
            break;
        case LayerKind::Block:
            blockForward(s, P, x, layer - 1);
            break;
        case LayerKind::Head:
            headForward(s, P, x, targets, loss_scale, loss);
            return nullptr;
        }
        x = s.out.data();
    }
    return &stash.layers.back().out;
}

void StageModel::blockForward(LayerStash& s, const std::byte* P, const void* x, int block) const
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels, NH = m_config.heads;
    const int BT = B * T;
    const auto w = [&](Tensor t) { return P + at(t, block); };
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    ensure(s.ln1, be, n, m_act);
    ensure(s.ln1_mean, be, BT, DType::F32);
    ensure(s.ln1_rstd, be, BT, DType::F32);
    ensure(s.qkv, be, 3 * n, m_act);
    ensure(s.att, be, be.attentionStashCount(B, T, NH), DType::F32);
    ensure(s.atty, be, n, m_act);
    ensure(s.res2, be, n, m_act);
    ensure(s.ln2, be, n, m_act);
    ensure(s.ln2_mean, be, BT, DType::F32);
    ensure(s.ln2_rstd, be, BT, DType::F32);
    ensure(s.fch, be, 4 * n, m_act);
    ensure(s.fch_gelu, be, 4 * n, m_act);
    ensure(s.out, be, n, m_act);
    be.layernormForward(
        s.ln1.data(), s.ln1_mean.as<float>(), s.ln1_rstd.as<float>(), x, w(Tensor::Ln1w), w(Tensor::Ln1b), BT, C);
    be.matmulForward(s.qkv.data(), s.ln1.data(), w(Tensor::Qkvw), w(Tensor::Qkvb), BT, C, 3 * C, nullptr);
    be.attentionForward(s.atty.data(), s.att.as<float>(), s.qkv.data(), B, T, C, NH);
    // The attention projection goes to out first, then res2 = x + it.
    be.matmulForward(s.out.data(), s.atty.data(), w(Tensor::Attprojw), w(Tensor::Attprojb), BT, C, C, nullptr);
    be.residualForward(s.res2.data(), x, s.out.data(), n);
    be.layernormForward(s.ln2.data(), s.ln2_mean.as<float>(), s.ln2_rstd.as<float>(), s.res2.data(), w(Tensor::Ln2w),
        w(Tensor::Ln2b), BT, C);
    // fch keeps the pre-activation for GELU's backward; the backend may fuse GELU into the product.
    be.matmulForward(s.fch.data(), s.ln2.data(), w(Tensor::Fcw), w(Tensor::Fcb), BT, C, 4 * C, s.fch_gelu.data());
    be.matmulForward(s.out.data(), s.fch_gelu.data(), w(Tensor::Fcprojw), w(Tensor::Fcprojb), BT, 4 * C, C, nullptr);
    be.residualForward(s.out.data(), s.res2.data(), s.out.data(), n);
}

int StageModel::logitColumns() const
{
    return m_backend->padsLogits() ? m_config.padded_vocab : m_config.vocab;
}

void StageModel::headForward(LayerStash& s, const std::byte* P, const void* x, std::span<const std::int32_t> targets,
    float loss_scale, float* loss) const
{
    Backend& be = *m_backend;
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels, V = m_config.vocab;
    const int columns = logitColumns();
    checkTokens(targets, V, "target token");
    if (!loss)
        throw std::logic_error("the head's forward needs somewhere to write the loss");
    ensure(s.tokens, be, BT, DType::I32);
    be.uploadTokens(s.tokens.as<std::int32_t>(), targets.data(), static_cast<std::size_t>(BT));
    ensure(s.ln1, be, static_cast<std::size_t>(BT) * C, m_act); // the final layer norm's output
    ensure(s.ln1_mean, be, BT, DType::F32);
    ensure(s.ln1_rstd, be, BT, DType::F32);
    ensure(s.logits, be, static_cast<std::size_t>(BT) * columns, m_act);
    ensure(s.losses, be, BT, DType::F32);
    s.out.reset();
    be.layernormForward(s.ln1.data(), s.ln1_mean.as<float>(), s.ln1_rstd.as<float>(), x, P + at(Tensor::Lnfw, 0),
        P + at(Tensor::Lnfb, 0), BT, C);
    // Logits through the tied embedding's first V rows (or all Vp, the padded rows' logits ignored).
    be.matmulForward(s.logits.data(), s.ln1.data(), P + at(Tensor::Wte, 0), nullptr, BT, C, columns, nullptr);
    // d(step loss)/d(position loss) = loss_scale / BT: the microbatch's loss is the mean over its positions.
    be.classifier(s.losses.as<float>(), s.logits.data(), s.tokens.as<std::int32_t>(), BT, V, columns,
        loss_scale / static_cast<float>(BT));
    be.mean(loss, s.losses.as<float>(), static_cast<std::size_t>(BT));
}

// ---------------------------------------------------------------------------------------------------------------
// Backward

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

const Buffer* StageModel::backward(
    StageStash& stash, const void* params, void* grads, const Buffer* dout, const LayerDone& done)
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels;
    const std::size_t n = static_cast<std::size_t>(B) * T * C;
    const auto* P = static_cast<const std::byte*>(params);
    auto* G = static_cast<std::byte*>(grads);
    ensure(m_dA, be, n, m_act);
    ensure(m_dB, be, n, m_act);
    Buffer* d = &m_dA; // gradient of the current layer's output
    Buffer* dx = &m_dB; // gradient of its input
    if (!hasHead()) {
        if (!dout || dout->count() != n)
            throw std::logic_error("stage backward: the output gradient is missing or of the wrong size");
        be.copy(d->data(), dout->data(), d->bytes());
    }
    for (int layer = m_last; layer >= m_first; --layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        const void* x = layer == m_first ? stash.input.data()
                                         : stash.layers[static_cast<std::size_t>(layer - m_first - 1)].out.data();
        switch (layerKind(m_config, layer)) {
        case LayerKind::Embedding:
            be.encoderBackward(
                G + at(Tensor::Wte, 0), G + at(Tensor::Wpe, 0), d->data(), s.tokens.as<std::int32_t>(), B, T, C);
            if (done) {
                const auto [first, count] = layerRange(layer);
                done(layer, first, count);
            }
            return nullptr;
        case LayerKind::Block:
            blockBackward(s, P, G, x, d->data(), dx->data(), layer - 1);
            break;
        case LayerKind::Head:
            be.zero(dx->data(), dx->bytes());
            headBackward(s, P, G, x, dx->data());
            break;
        }
        if (done) {
            const auto [first, count] = layerRange(layer);
            done(layer, first, count);
        }
        std::swap(d, dx);
    }
    return d;
}

void StageModel::blockBackward(
    LayerStash& s, const std::byte* P, std::byte* G, const void* x, const void* dout, void* dx, int block)
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels, NH = m_config.heads;
    const int BT = B * T;
    const auto w = [&](Tensor t) { return P + at(t, block); };
    const auto g = [&](Tensor t) { return G + at(t, block); };
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    const std::size_t e = byteSize(m_act);
    ensure(m_dRes, be, n, m_act);
    ensure(m_dBig, be, 4 * n, m_act);
    ensure(m_dQkv, be, 3 * n, m_act);
    ensure(m_dAtty, be, n, m_act);
    // Input gradients are written, not accumulated (backend.h): nothing is zeroed first.
    be.copy(m_dRes.data(), dout, n * e); // the residual passes dout through to res2
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))); fcproj's input gradient goes through GELU's backward in one call.
    be.matmulBackward(nullptr, g(Tensor::Fcprojw), g(Tensor::Fcprojb), dout, s.fch_gelu.data(), nullptr, BT, 4 * C, C);
    be.matmulBackwardGelu(m_dBig.data(), dout, w(Tensor::Fcprojw), s.fch.data(), BT, 4 * C, C);
    void* dln = m_dQkv.data(); // reused: (BT, C) here, (BT, 3C) below
    be.matmulBackward(dln, g(Tensor::Fcw), g(Tensor::Fcb), m_dBig.data(), s.ln2.data(), w(Tensor::Fcw), BT, C, 4 * C);
    be.layernormBackward(m_dRes.data(), g(Tensor::Ln2w), g(Tensor::Ln2b), dln, s.res2.data(), w(Tensor::Ln2w),
        s.ln2_mean.as<float>(), s.ln2_rstd.as<float>(), BT, C);
    // Attention: res2 = x + attproj(attention(qkv(ln1(x))))
    be.copy(dx, m_dRes.data(), n * e); // the residual passes dres2 through to x
    void* datty = m_dAtty.data();
    be.matmulBackward(
        datty, g(Tensor::Attprojw), g(Tensor::Attprojb), m_dRes.data(), s.atty.data(), w(Tensor::Attprojw), BT, C, C);
    be.attentionBackward(m_dQkv.data(), datty, s.qkv.data(), s.atty.data(), s.att.as<float>(), B, T, C, NH);
    void* dln1 = datty; // reused
    be.matmulBackward(
        dln1, g(Tensor::Qkvw), g(Tensor::Qkvb), m_dQkv.data(), s.ln1.data(), w(Tensor::Qkvw), BT, C, 3 * C);
    be.layernormBackward(dx, g(Tensor::Ln1w), g(Tensor::Ln1b), dln1, x, w(Tensor::Ln1w), s.ln1_mean.as<float>(),
        s.ln1_rstd.as<float>(), BT, C);
}

void StageModel::headBackward(LayerStash& s, const std::byte* P, std::byte* G, const void* x, void* dx)
{
    Backend& be = *m_backend;
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels;
    // The forward's classifier already turned the logits into their gradient.
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    ensure(m_dRes, be, n, m_act);
    void* dln = m_dRes.data();
    be.matmulBackward(dln, G + at(Tensor::Wte, 0), nullptr, s.logits.data(), s.ln1.data(), P + at(Tensor::Wte, 0), BT,
        C, logitColumns());
    be.layernormBackward(dx, G + at(Tensor::Lnfw, 0), G + at(Tensor::Lnfb, 0), dln, x, P + at(Tensor::Lnfw, 0),
        s.ln1_mean.as<float>(), s.ln1_rstd.as<float>(), BT, C);
}

// ---------------------------------------------------------------------------------------------------------------
// Backward, split (zero-bubble schedules): I computes what backward() computes for the stage's input gradient, in
// the same order and with the same kernels, writing the intermediate gradients the weight gradients read into the
// microbatch's stash instead of the shared workspaces; W makes backward()'s weight, bias and layer-norm products
// from them. Layer norms and biases go with W: they are weight gradients, and the paper's W holds every parameter
// gradient (the I then does only what the previous stage waits for).

const void* StageModel::layerInput(const StageStash& stash, int layer) const
{
    return layer == m_first ? stash.input.data()
                            : stash.layers[static_cast<std::size_t>(layer - m_first - 1)].out.data();
}

const Buffer* StageModel::backwardInput(StageStash& stash, const void* params, const Buffer* dout)
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels;
    const std::size_t n = static_cast<std::size_t>(B) * T * C;
    const auto* P = static_cast<const std::byte*>(params);
    if (stash.layers.size() != static_cast<std::size_t>(m_last - m_first + 1))
        throw std::logic_error("stage backward: no forward stashed for this microbatch");
    // Each layer's output gradient goes straight into its stash (g_out), where its W reads it; the stage's input
    // gradient goes to a workspace, as backward()'s does.
    const auto outGradient = [&](int layer) -> Buffer& {
        Buffer& g = stash.layers[static_cast<std::size_t>(layer - m_first)].g_out;
        ensure(g, be, n, m_act);
        return g;
    };
    if (!hasHead()) {
        if (!dout || dout->count() != n)
            throw std::logic_error("stage backward: the output gradient is missing or of the wrong size");
        Buffer& top = outGradient(m_last);
        be.copy(top.data(), dout->data(), top.bytes());
    }
    ensure(m_dA, be, n, m_act);
    for (int layer = m_last; layer >= m_first; --layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        const void* x = layerInput(stash, layer);
        void* dx = layer == m_first ? m_dA.data() : outGradient(layer - 1).data();
        switch (layerKind(m_config, layer)) {
        case LayerKind::Embedding:
            return nullptr; // its gradients are all weight gradients (W)
        case LayerKind::Block:
            blockBackwardInput(s, P, x, dx, layer - 1);
            break;
        case LayerKind::Head:
            be.zero(dx, n * byteSize(m_act));
            headBackwardInput(s, P, x, dx);
            break;
        }
    }
    return &m_dA;
}

void StageModel::backwardWeight(StageStash& stash, void* grads, const LayerDone& done)
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels;
    auto* G = static_cast<std::byte*>(grads);
    for (int layer = m_last; layer >= m_first; --layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        if (s.g_out.empty() && layerKind(m_config, layer) != LayerKind::Head)
            throw std::logic_error("stage weight gradient before its input gradient");
        const void* x = layerInput(stash, layer);
        switch (layerKind(m_config, layer)) {
        case LayerKind::Embedding:
            be.encoderBackward(
                G + at(Tensor::Wte, 0), G + at(Tensor::Wpe, 0), s.g_out.data(), s.tokens.as<std::int32_t>(), B, T, C);
            break;
        case LayerKind::Block:
            blockBackwardWeight(s, G, x, layer - 1);
            break;
        case LayerKind::Head:
            headBackwardWeight(s, G, x);
            break;
        }
        if (done) {
            const auto [first, count] = layerRange(layer);
            done(layer, first, count);
        }
    }
    // The gradients the I kept go back to the backend's arena (the next microbatch's I takes them from there).
    for (LayerStash& s : stash.layers)
        for (Buffer* b : {&s.g_out, &s.g_res2, &s.g_fch, &s.g_ln2, &s.g_qkv, &s.g_ln1})
            b->reset();
}

void StageModel::blockBackwardInput(LayerStash& s, const std::byte* P, const void* x, void* dx, int block)
{
    Backend& be = *m_backend;
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels, NH = m_config.heads;
    const int BT = B * T;
    const auto w = [&](Tensor t) { return P + at(t, block); };
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    const std::size_t e = byteSize(m_act);
    ensure(s.g_res2, be, n, m_act);
    ensure(s.g_fch, be, 4 * n, m_act);
    ensure(s.g_ln2, be, n, m_act);
    ensure(s.g_qkv, be, 3 * n, m_act);
    ensure(s.g_ln1, be, n, m_act);
    ensure(m_dAtty, be, n, m_act);
    const void* dout = s.g_out.data();
    be.copy(s.g_res2.data(), dout, n * e); // the residual passes dout through to res2
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))); input gradients written (nothing zeroed first)
    be.matmulBackwardGelu(s.g_fch.data(), dout, w(Tensor::Fcprojw), s.fch.data(), BT, 4 * C, C);
    be.matmulBackward(s.g_ln2.data(), nullptr, nullptr, s.g_fch.data(), nullptr, w(Tensor::Fcw), BT, C, 4 * C);
    be.layernormBackward(s.g_res2.data(), nullptr, nullptr, s.g_ln2.data(), s.res2.data(), w(Tensor::Ln2w),
        s.ln2_mean.as<float>(), s.ln2_rstd.as<float>(), BT, C);
    // Attention: res2 = x + attproj(attention(qkv(ln1(x))))
    be.copy(dx, s.g_res2.data(), n * e); // the residual passes dres2 through to x
    void* datty = m_dAtty.data();
    be.matmulBackward(datty, nullptr, nullptr, s.g_res2.data(), nullptr, w(Tensor::Attprojw), BT, C, C);
    be.attentionBackward(s.g_qkv.data(), datty, s.qkv.data(), s.atty.data(), s.att.as<float>(), B, T, C, NH);
    be.matmulBackward(s.g_ln1.data(), nullptr, nullptr, s.g_qkv.data(), nullptr, w(Tensor::Qkvw), BT, C, 3 * C);
    be.layernormBackward(dx, nullptr, nullptr, s.g_ln1.data(), x, w(Tensor::Ln1w), s.ln1_mean.as<float>(),
        s.ln1_rstd.as<float>(), BT, C);
}

void StageModel::blockBackwardWeight(LayerStash& s, std::byte* G, const void* x, int block)
{
    Backend& be = *m_backend;
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels;
    const auto g = [&](Tensor t) { return G + at(t, block); };
    be.matmulBackward(
        nullptr, g(Tensor::Fcprojw), g(Tensor::Fcprojb), s.g_out.data(), s.fch_gelu.data(), nullptr, BT, 4 * C, C);
    be.matmulBackward(nullptr, g(Tensor::Fcw), g(Tensor::Fcb), s.g_fch.data(), s.ln2.data(), nullptr, BT, C, 4 * C);
    be.layernormBackward(nullptr, g(Tensor::Ln2w), g(Tensor::Ln2b), s.g_ln2.data(), s.res2.data(), nullptr,
        s.ln2_mean.as<float>(), s.ln2_rstd.as<float>(), BT, C);
    be.matmulBackward(
        nullptr, g(Tensor::Attprojw), g(Tensor::Attprojb), s.g_res2.data(), s.atty.data(), nullptr, BT, C, C);
    be.matmulBackward(nullptr, g(Tensor::Qkvw), g(Tensor::Qkvb), s.g_qkv.data(), s.ln1.data(), nullptr, BT, C, 3 * C);
    be.layernormBackward(nullptr, g(Tensor::Ln1w), g(Tensor::Ln1b), s.g_ln1.data(), x, nullptr, s.ln1_mean.as<float>(),
        s.ln1_rstd.as<float>(), BT, C);
}

void StageModel::headBackwardInput(LayerStash& s, const std::byte* P, const void* x, void* dx)
{
    Backend& be = *m_backend;
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels;
    // The forward's classifier already turned the logits into their gradient (kept for the W).
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    ensure(s.g_ln1, be, n, m_act);
    be.matmulBackward(
        s.g_ln1.data(), nullptr, nullptr, s.logits.data(), nullptr, P + at(Tensor::Wte, 0), BT, C, logitColumns());
    be.layernormBackward(dx, nullptr, nullptr, s.g_ln1.data(), x, P + at(Tensor::Lnfw, 0), s.ln1_mean.as<float>(),
        s.ln1_rstd.as<float>(), BT, C);
}

void StageModel::headBackwardWeight(LayerStash& s, std::byte* G, const void* x)
{
    Backend& be = *m_backend;
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels;
    if (s.g_ln1.empty())
        throw std::logic_error("stage weight gradient before its input gradient");
    // The tied embedding's gradient from the logits is a weight gradient: the head's copy of wte (or the stage's
    // one wte when it holds the embedding too, the encoder's share following in the embedding's W).
    be.matmulBackward(
        nullptr, G + at(Tensor::Wte, 0), nullptr, s.logits.data(), s.ln1.data(), nullptr, BT, C, logitColumns());
    be.layernormBackward(nullptr, G + at(Tensor::Lnfw, 0), G + at(Tensor::Lnfb, 0), s.g_ln1.data(), x, nullptr,
        s.ln1_mean.as<float>(), s.ln1_rstd.as<float>(), BT, C);
}

} // namespace pw::engine
