// SPDX-License-Identifier: MIT
#include "transformer.h"

#include <algorithm>
#include <stdexcept>

#include "planner/errors.h"

namespace pw::engine {

using planner::InputError;

std::string firstDifference(std::initializer_list<std::pair<bool, const char*>> differences)
{
    for (const auto& [differs, field] : differences)
        if (differs)
            return field;
    return {};
}

void checkTokens(std::span<const std::int32_t> tokens, int vocab, const char* what)
{
    for (std::int32_t t : tokens)
        if (t < 0 || t >= vocab)
            throw InputError(
                std::string(what) + " " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(vocab));
}

void releaseBlock(LayerStash& s, planner::Recompute recompute, std::size_t core, std::size_t output)
{
    if (recompute == planner::Recompute::Full) {
        for (Buffer& b : s.saved)
            b.reset();
    } else if (recompute == planner::Recompute::Selective && s.saved.size() > std::max(core, output)) {
        s.saved[core].reset();
        s.saved[output].reset();
    }
}

void rebuildAttention(
    const LayerPass& p, LayerStash& s, std::size_t qkv, std::size_t core, std::size_t output, const AttentionShape& a)
{
    ensure(p, s.saved[core], p.be.attentionStashCount(a), DType::F32);
    ensure(p, s.saved[output], a.rows() * static_cast<std::size_t>(a.channels()), p.be.act());
    p.be.attentionForward(s.saved[output].data(), s.saved[core].as<float>(), s.saved[qkv].data(), a);
}

// ---- Norm --------------------------------------------------------------------------------------------------------

Norm::Norm(planner::NormKind kind, int channels, float eps)
    : m_kind(kind)
    , m_channels(channels)
    , m_eps(eps)
{
}

std::size_t Norm::tensorCount() const
{
    return m_kind == planner::NormKind::LayerNorm ? 2 : 1;
}

void Norm::forward(const LayerPass& p, void* out, Buffer& mean, Buffer& rstd, const void* x, std::size_t w) const
{
    const int BT = p.rows();
    ensure(p, rstd, static_cast<std::size_t>(BT), DType::F32);
    if (m_kind == planner::NormKind::RmsNorm) {
        p.be.rmsnormForward(out, rstd.as<float>(), x, p.w(w), BT, m_channels, m_eps);
        return;
    }
    ensure(p, mean, static_cast<std::size_t>(BT), DType::F32);
    p.be.layernormForward(out, mean.as<float>(), rstd.as<float>(), x, p.w(w), p.w(w + 1), BT, m_channels);
}

void Norm::residualForward(const LayerPass& p, void* sum, void* out, Buffer& mean, Buffer& rstd, const void* a,
    const void* b, std::size_t w) const
{
    const int BT = p.rows();
    ensure(p, rstd, static_cast<std::size_t>(BT), DType::F32);
    const bool ln = m_kind == planner::NormKind::LayerNorm;
    if (ln)
        ensure(p, mean, static_cast<std::size_t>(BT), DType::F32);
    p.be.residualNormForward(sum, out, ln ? mean.as<float>() : nullptr, rstd.as<float>(), a, b, p.w(w),
        ln ? p.w(w + 1) : nullptr, BT, m_channels, m_eps);
}

void Norm::backwardInputResidual(const LayerPass& p, void* dx, const void* dresidual, const void* dout, const void* x,
    std::size_t w, const Buffer& mean, const Buffer& rstd) const
{
    const bool ln = m_kind == planner::NormKind::LayerNorm;
    p.be.normBackwardResidual(
        dx, dresidual, dout, x, p.w(w), ln ? mean.as<float>() : nullptr, rstd.as<float>(), p.rows(), m_channels);
}

void Norm::backwardInput(const LayerPass& p, void* dx, const void* dout, const void* x, std::size_t w,
    const Buffer& mean, const Buffer& rstd) const
{
    if (m_kind == planner::NormKind::RmsNorm)
        p.be.rmsnormBackward(dx, nullptr, dout, x, p.w(w), rstd.as<float>(), p.rows(), m_channels);
    else
        p.be.layernormBackward(
            dx, nullptr, nullptr, dout, x, p.w(w), mean.as<float>(), rstd.as<float>(), p.rows(), m_channels);
}

void Norm::backwardWeight(
    const LayerPass& p, const void* dout, const void* x, std::size_t w, const Buffer& mean, const Buffer& rstd) const
{
    if (m_kind == planner::NormKind::RmsNorm)
        p.be.rmsnormBackward(nullptr, p.g(w), dout, x, nullptr, rstd.as<float>(), p.rows(), m_channels);
    else
        p.be.layernormBackward(
            nullptr, p.g(w), p.g(w + 1), dout, x, nullptr, mean.as<float>(), rstd.as<float>(), p.rows(), m_channels);
}

// ---- The embedding -----------------------------------------------------------------------------------------------

namespace {
enum EmbeddingSaved : std::uint8_t { kTokens, kEmbeddingSaved };
} // namespace

EmbeddingLayer::EmbeddingLayer(const ModelConfig& config, bool learned_positions)
    : m_vocab(config.vocab)
    , m_channels(config.channels)
    , m_positions(learned_positions)
{
}

void EmbeddingLayer::forward(const LayerPass& p, LayerStash& s, const void*, const LayerFeed& feed) const
{
    const int B = p.shape.batch, T = p.shape.seq, C = m_channels;
    const auto BT = static_cast<std::size_t>(p.rows());
    checkTokens(feed.tokens, m_vocab, "token");
    reserveSlots(s.saved, kEmbeddingSaved);
    Buffer& tokens = s.saved[kTokens];
    ensure(p, tokens, BT, DType::I32);
    p.be.uploadTokens(tokens.as<std::int32_t>(), feed.tokens.data(), BT);
    ensure(p, s.out, BT * C, p.be.act());
    p.be.encoderForward(s.out.data(), tokens.as<std::int32_t>(), p.w(0), m_positions ? p.w(1) : nullptr, B, T, C);
}

void EmbeddingLayer::backwardWeight(const LayerPass& p, LayerStash& s, const void*)
{
    p.be.encoderBackward(p.g(0), m_positions ? p.g(1) : nullptr, s.g_out.data(), s.saved[kTokens].as<std::int32_t>(),
        p.shape.batch, p.shape.seq, m_channels);
}

// ---- The head ----------------------------------------------------------------------------------------------------

namespace {
enum HeadSaved : std::uint8_t { kNormed, kMean, kRstd, kLogits, kLosses, kTargets, kHeadSaved };
enum HeadGrads : std::uint8_t { kGNormed, kHeadGrads };
} // namespace

HeadLayer::HeadLayer(const ModelConfig& config, Norm norm, bool pads_logits)
    : m_vocab(config.vocab)
    , m_channels(config.channels)
    , m_columns(pads_logits ? config.padded_vocab : config.vocab)
    , m_norm(norm)
{
}

double HeadLayer::forwardFlops(BatchShape shape) const
{
    return 2.0 * shape.batch * shape.seq * m_channels * m_vocab;
}

void HeadLayer::forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed& feed) const
{
    Backend& be = p.be;
    const int BT = p.rows(), C = m_channels, V = m_vocab;
    const std::size_t output = m_norm.tensorCount(); // the output matrix follows the norm's tensors
    checkTokens(feed.targets, V, "target token");
    if (!feed.loss)
        throw std::logic_error("the head's forward needs somewhere to write the loss");
    reserveSlots(s.saved, kHeadSaved);
    auto& v = s.saved;
    ensure(p, v[kTargets], static_cast<std::size_t>(BT), DType::I32);
    be.uploadTokens(v[kTargets].as<std::int32_t>(), feed.targets.data(), static_cast<std::size_t>(BT));
    ensure(p, v[kNormed], static_cast<std::size_t>(BT) * C, be.act());
    ensure(p, v[kLogits], static_cast<std::size_t>(BT) * m_columns, be.act());
    ensure(p, v[kLosses], static_cast<std::size_t>(BT), DType::F32);
    s.out.reset();
    m_norm.forward(p, v[kNormed].data(), v[kMean], v[kRstd], x, 0);
    // Logits through the output matrix's first V rows (or all Vp, the padded rows' logits ignored).
    be.matmulForward(v[kLogits].data(), v[kNormed].data(), p.w(output), nullptr, BT, C, m_columns, nullptr);
    // d(step loss)/d(position loss) = loss_scale / BT: the microbatch's loss is the mean over its positions.
    be.classifier(v[kLosses].as<float>(), v[kLogits].data(), v[kTargets].as<std::int32_t>(), BT, V, m_columns,
        feed.loss_scale / static_cast<float>(BT));
    be.mean(feed.loss, v[kLosses].as<float>(), static_cast<std::size_t>(BT));
}

void HeadLayer::backwardInput(const LayerPass& p, LayerStash& s, const void* x, void* dx)
{
    Backend& be = p.be;
    const int BT = p.rows(), C = m_channels;
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    reserveSlots(s.grads, kHeadGrads);
    auto& v = s.saved;
    Buffer& gNormed = s.grads[kGNormed];
    ensure(p, gNormed, n, be.act());
    // The forward's classifier already turned the logits into their gradient (kept for the W).
    be.matmulBackward(
        gNormed.data(), nullptr, nullptr, v[kLogits].data(), nullptr, p.w(m_norm.tensorCount()), BT, C, m_columns);
    be.zero(dx, n * byteSize(be.act())); // the norm's backward accumulates
    m_norm.backwardInput(p, dx, gNormed.data(), x, 0, v[kMean], v[kRstd]);
}

void HeadLayer::backwardWeight(const LayerPass& p, LayerStash& s, const void* x)
{
    auto& v = s.saved;
    if (s.grads.size() < kHeadGrads || s.grads[kGNormed].empty())
        throw std::logic_error("stage weight gradient before its input gradient");
    // A tied output matrix's gradient is a weight gradient: the head's copy of the embedding (or the stage's one,
    // the embedding's share following in its W).
    p.be.matmulBackward(nullptr, p.g(m_norm.tensorCount()), nullptr, v[kLogits].data(), v[kNormed].data(), nullptr,
        p.rows(), m_channels, m_columns);
    m_norm.backwardWeight(p, s.grads[kGNormed].data(), x, 0, v[kMean], v[kRstd]);
}

} // namespace pw::engine
