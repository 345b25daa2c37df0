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

void ensure(std::vector<float>& v, std::size_t n)
{
    if (v.size() != n)
        v.assign(n, 0.0f);
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

StageModel::StageModel(const Gpt2Config& config, BatchShape shape, int first_layer, int last_layer)
    : m_config(config)
    , m_shape(shape)
    , m_first(first_layer)
    , m_last(last_layer)
{
    config.validate();
    if (shape.batch <= 0 || shape.seq <= 0 || shape.seq > config.max_seq)
        throw InputError("microbatch of " + std::to_string(shape.batch) + " x " + std::to_string(shape.seq)
            + " tokens does not suit a model of " + std::to_string(config.max_seq) + " positions");
    if (first_layer < 0 || last_layer < first_layer || last_layer >= config.layerCount())
        throw InputError("stage layers " + std::to_string(first_layer) + ".." + std::to_string(last_layer)
            + " are outside the model's " + std::to_string(config.layerCount()) + " layers");
    m_slots = stageSlots(config, first_layer, last_layer);
    m_params.assign(m_slots.empty() ? 0 : m_slots.back().offset + m_slots.back().size, 0.0f);
    m_grads.assign(m_params.size(), 0.0f);
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
    std::fill(m_grads.begin(), m_grads.end(), 0.0f);
}

const TensorSlot* StageModel::tiedSlot() const
{
    for (const auto& s : m_slots)
        if (s.tensor == Tensor::Wte)
            return &s;
    return nullptr;
}

std::vector<std::uint8_t> StageModel::decayMask() const
{
    std::vector<std::uint8_t> mask(m_params.size(), 0);
    for (const auto& s : m_slots)
        std::fill_n(mask.begin() + static_cast<long>(s.offset), s.size, isDecayed(s.tensor) ? 1 : 0);
    return mask;
}

void StageModel::initialise(std::uint64_t seed)
{
    const double residualStd = 0.02 / std::sqrt(2.0 * m_config.layers);
    for (const auto& s : m_slots) {
        float* p = m_params.data() + s.offset;
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
}

void StageModel::loadFrom(std::span<const float> checkpoint)
{
    if (checkpoint.size() != engine::parameterCount(m_config))
        throw InputError("checkpoint holds " + std::to_string(checkpoint.size()) + " parameters, the model needs "
            + std::to_string(engine::parameterCount(m_config)));
    for (const auto& s : m_slots)
        std::copy_n(checkpoint.begin() + static_cast<long>(checkpointOffset(m_config, s.tensor, s.block)), s.size,
            m_params.begin() + static_cast<long>(s.offset));
}

void StageModel::storeTo(std::span<float> checkpoint) const
{
    for (const auto& s : m_slots)
        std::copy_n(m_params.begin() + static_cast<long>(s.offset), s.size,
            checkpoint.begin() + static_cast<long>(checkpointOffset(m_config, s.tensor, s.block)));
}

std::size_t StageModel::activationCount() const
{
    return static_cast<std::size_t>(m_shape.batch) * m_shape.seq * m_config.channels;
}

// ---------------------------------------------------------------------------------------------------------------
// Forward

std::span<const float> StageModel::forward(StageStash& stash, const float* P, std::span<const std::int32_t> tokens,
    std::span<const float> input, std::span<const std::int32_t> targets) const
{
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels;
    const std::size_t BT = static_cast<std::size_t>(B) * T;
    stash.layers.resize(static_cast<std::size_t>(m_last - m_first + 1));
    const float* x = nullptr;
    if (!hasEmbedding()) {
        stash.input.assign(input.begin(), input.end());
        x = stash.input.data();
    }
    for (int layer = m_first; layer <= m_last; ++layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        switch (layerKind(m_config, layer)) {
        case LayerKind::Embedding:
            for (std::int32_t t : tokens)
                if (t < 0 || t >= m_config.vocab)
                    throw InputError("token " + std::to_string(t) + " is outside the vocabulary of "
                        + std::to_string(m_config.vocab));
            s.tokens.assign(tokens.begin(), tokens.end());
            ensure(s.out, BT * C);
            ops::encoderForward(s.out.data(), s.tokens.data(), P + slot(Tensor::Wte, 0).offset,
                P + slot(Tensor::Wpe, 0).offset, B, T, C);
            break;
        case LayerKind::Block:
            blockForward(s, P, x, layer - 1);
            break;
        case LayerKind::Head:
            headForward(s, P, x, targets);
            stash.loss = 0;
            for (float l : s.losses)
                stash.loss += l;
            stash.loss /= static_cast<float>(BT);
            return {};
        }
        x = s.out.data();
    }
    return {x, BT * C};
}

void StageModel::blockForward(LayerStash& s, const float* P, const float* x, int block) const
{
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels, NH = m_config.heads;
    const int BT = B * T;
    auto at = [&](Tensor t) { return P + slot(t, block).offset; };
    ensure(s.ln1, BT * C);
    ensure(s.ln1_mean, BT);
    ensure(s.ln1_rstd, BT);
    ensure(s.qkv, static_cast<std::size_t>(BT) * 3 * C);
    ensure(s.att, static_cast<std::size_t>(B) * NH * T * T);
    ensure(s.atty, BT * C);
    ensure(s.res2, BT * C);
    ensure(s.ln2, BT * C);
    ensure(s.ln2_mean, BT);
    ensure(s.ln2_rstd, BT);
    ensure(s.fch, static_cast<std::size_t>(BT) * 4 * C);
    ensure(s.fch_gelu, static_cast<std::size_t>(BT) * 4 * C);
    ensure(s.out, BT * C);
    ops::layernormForward(
        s.ln1.data(), s.ln1_mean.data(), s.ln1_rstd.data(), x, at(Tensor::Ln1w), at(Tensor::Ln1b), BT, C);
    ops::matmulForward(s.qkv.data(), s.ln1.data(), at(Tensor::Qkvw), at(Tensor::Qkvb), BT, C, 3 * C);
    ops::attentionForward(s.atty.data(), s.att.data(), s.qkv.data(), B, T, C, NH);
    // The attention projection goes to out first, then res2 = x + it.
    ops::matmulForward(s.out.data(), s.atty.data(), at(Tensor::Attprojw), at(Tensor::Attprojb), BT, C, C);
    ops::residualForward(s.res2.data(), x, s.out.data(), BT * C);
    ops::layernormForward(
        s.ln2.data(), s.ln2_mean.data(), s.ln2_rstd.data(), s.res2.data(), at(Tensor::Ln2w), at(Tensor::Ln2b), BT, C);
    ops::matmulForward(s.fch.data(), s.ln2.data(), at(Tensor::Fcw), at(Tensor::Fcb), BT, C, 4 * C);
    ops::geluForward(s.fch_gelu.data(), s.fch.data(), BT * 4 * C);
    ops::matmulForward(s.out.data(), s.fch_gelu.data(), at(Tensor::Fcprojw), at(Tensor::Fcprojb), BT, 4 * C, C);
    ops::residualForward(s.out.data(), s.res2.data(), s.out.data(), BT * C);
}

void StageModel::headForward(LayerStash& s, const float* P, const float* x, std::span<const std::int32_t> targets) const
{
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels, V = m_config.vocab;
    for (std::int32_t t : targets)
        if (t < 0 || t >= V)
            throw InputError(
                "target token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(V));
    s.tokens.assign(targets.begin(), targets.end());
    ensure(s.ln1, static_cast<std::size_t>(BT) * C); // the final layer norm's output
    ensure(s.ln1_mean, BT);
    ensure(s.ln1_rstd, BT);
    ensure(s.probs, static_cast<std::size_t>(BT) * V);
    ensure(s.losses, BT);
    s.out.clear();
    ops::layernormForward(s.ln1.data(), s.ln1_mean.data(), s.ln1_rstd.data(), x, P + slot(Tensor::Lnfw, 0).offset,
        P + slot(Tensor::Lnfb, 0).offset, BT, C);
    // Logits through the first V rows of the tied embedding; padded rows never produce a logit.
    ops::matmulForward(s.probs.data(), s.ln1.data(), P + slot(Tensor::Wte, 0).offset, nullptr, BT, C, V);
    ops::crossEntropyForward(s.losses.data(), s.probs.data(), s.probs.data(), s.tokens.data(), BT, V);
}

// ---------------------------------------------------------------------------------------------------------------
// Backward

std::span<const float> StageModel::backward(
    StageStash& stash, const float* P, float* G, std::span<const float> dout, float loss_scale)
{
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels;
    const std::size_t n = static_cast<std::size_t>(B) * T * C;
    ensure(m_dA, n);
    ensure(m_dB, n);
    float* d = m_dA.data(); // gradient of the current layer's output
    float* dx = m_dB.data(); // gradient of its input
    if (!hasHead())
        std::copy(dout.begin(), dout.end(), d);
    for (int layer = m_last; layer >= m_first; --layer) {
        LayerStash& s = stash.layers[static_cast<std::size_t>(layer - m_first)];
        const float* x = layer == m_first ? stash.input.data()
                                          : stash.layers[static_cast<std::size_t>(layer - m_first - 1)].out.data();
        switch (layerKind(m_config, layer)) {
        case LayerKind::Embedding:
            ops::encoderBackward(
                G + slot(Tensor::Wte, 0).offset, G + slot(Tensor::Wpe, 0).offset, d, s.tokens.data(), B, T, C);
            return {};
        case LayerKind::Block:
            std::fill(dx, dx + n, 0.0f);
            blockBackward(s, P, G, x, d, dx, layer - 1);
            break;
        case LayerKind::Head:
            std::fill(dx, dx + n, 0.0f);
            headBackward(s, P, G, x, dx, loss_scale);
            break;
        }
        std::swap(d, dx);
    }
    return {d, n};
}

void StageModel::blockBackward(
    LayerStash& s, const float* P, float* G, const float* x, const float* dout, float* dx, int block)
{
    const int B = m_shape.batch, T = m_shape.seq, C = m_config.channels, NH = m_config.heads;
    const int BT = B * T;
    auto at = [&](Tensor t) { return slot(t, block).offset; };
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    m_dRes.assign(dout, dout + n); // the residual passes dout through to res2
    m_dBig.assign(static_cast<std::size_t>(BT) * 4 * C, 0.0f);
    m_dBig2.assign(static_cast<std::size_t>(BT) * 4 * C, 0.0f);
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2))))
    ops::matmulBackward(m_dBig.data(), G + at(Tensor::Fcprojw), G + at(Tensor::Fcprojb), dout, s.fch_gelu.data(),
        P + at(Tensor::Fcprojw), BT, 4 * C, C);
    ops::geluBackward(m_dBig2.data(), s.fch.data(), m_dBig.data(), BT * 4 * C);
    std::vector<float>& dln = m_dQkv; // reused: (BT, C) here, (BT, 3C) below
    dln.assign(n, 0.0f);
    ops::matmulBackward(dln.data(), G + at(Tensor::Fcw), G + at(Tensor::Fcb), m_dBig2.data(), s.ln2.data(),
        P + at(Tensor::Fcw), BT, C, 4 * C);
    ops::layernormBackward(m_dRes.data(), G + at(Tensor::Ln2w), G + at(Tensor::Ln2b), dln.data(), s.res2.data(),
        P + at(Tensor::Ln2w), s.ln2_mean.data(), s.ln2_rstd.data(), BT, C);
    // Attention: res2 = x + attproj(attention(qkv(ln1(x))))
    std::fill(dx, dx + n, 0.0f);
    std::copy(m_dRes.begin(), m_dRes.end(), dx); // the residual passes dres2 through to x
    std::vector<float>& datty = m_dAtty;
    datty.assign(n, 0.0f);
    ops::matmulBackward(datty.data(), G + at(Tensor::Attprojw), G + at(Tensor::Attprojb), m_dRes.data(), s.atty.data(),
        P + at(Tensor::Attprojw), BT, C, C);
    m_dQkv.assign(static_cast<std::size_t>(BT) * 3 * C, 0.0f);
    ensure(m_scratch, static_cast<std::size_t>(T) * T);
    ops::attentionBackward(m_dQkv.data(), datty.data(), s.qkv.data(), s.att.data(), m_scratch.data(), B, T, C, NH);
    std::vector<float>& dln1 = datty; // reused
    std::fill(dln1.begin(), dln1.end(), 0.0f);
    ops::matmulBackward(dln1.data(), G + at(Tensor::Qkvw), G + at(Tensor::Qkvb), m_dQkv.data(), s.ln1.data(),
        P + at(Tensor::Qkvw), BT, C, 3 * C);
    ops::layernormBackward(dx, G + at(Tensor::Ln1w), G + at(Tensor::Ln1b), dln1.data(), x, P + at(Tensor::Ln1w),
        s.ln1_mean.data(), s.ln1_rstd.data(), BT, C);
}

void StageModel::headBackward(LayerStash& s, const float* P, float* G, const float* x, float* dx, float loss_scale)
{
    const int BT = m_shape.batch * m_shape.seq, C = m_config.channels, V = m_config.vocab;
    // d(step loss)/d(position loss) = loss_scale / BT: the microbatch's loss is the mean over its positions.
    // The softmax is turned into dlogits in place: the probabilities are not needed afterwards.
    ops::crossEntropyBackward(s.probs.data(), s.tokens.data(), loss_scale / static_cast<float>(BT), BT, V);
    std::vector<float> dln(static_cast<std::size_t>(BT) * C, 0.0f);
    const std::size_t wte = slot(Tensor::Wte, 0).offset;
    ops::matmulBackward(dln.data(), G + wte, nullptr, s.probs.data(), s.ln1.data(), P + wte, BT, C, V);
    ops::layernormBackward(dx, G + slot(Tensor::Lnfw, 0).offset, G + slot(Tensor::Lnfb, 0).offset, dln.data(), x,
        P + slot(Tensor::Lnfw, 0).offset, s.ln1_mean.data(), s.ln1_rstd.data(), BT, C);
}

} // namespace pw::engine
