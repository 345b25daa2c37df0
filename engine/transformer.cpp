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

const void* gatherRows(const LayerPass& p, Buffer& whole, const void* x, std::size_t columns)
{
    if (!p.tp.sequence || !p.tp.on())
        return x;
    const std::size_t n = static_cast<std::size_t>(p.localRows()) * columns;
    whole.ensure(p.be, n * static_cast<std::size_t>(p.tp.ranks), p.be.act());
    p.group->allGather(whole.data(), x, p.be.act(), n);
    return whole.data();
}

const void* gatheredRows(const LayerPass& p, const Buffer& whole, const void* x)
{
    return p.tp.sequence && p.tp.on() ? whole.data() : x;
}

void* partialRows(const LayerPass& p, Buffer& partial, void* out, std::size_t columns)
{
    if (!p.tp.sequence || !p.tp.on())
        return out;
    partial.ensure(p.be, static_cast<std::size_t>(p.rows()) * columns, p.be.act());
    return partial.data();
}

void sumRows(const LayerPass& p, void* out, void* partial, std::size_t columns)
{
    if (!p.tp.on())
        return;
    if (p.tp.sequence)
        p.group->reduceScatter(out, partial, p.be.act(), static_cast<std::size_t>(p.localRows()) * columns);
    else
        p.group->allReduce(out, p.be.act(), static_cast<std::size_t>(p.rows()) * columns);
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
    const int BT = p.localRows();
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
    const int BT = p.localRows();
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
        dx, dresidual, dout, x, p.w(w), ln ? mean.as<float>() : nullptr, rstd.as<float>(), p.localRows(), m_channels);
}

void Norm::backwardInput(const LayerPass& p, void* dx, const void* dout, const void* x, std::size_t w,
    const Buffer& mean, const Buffer& rstd) const
{
    if (m_kind == planner::NormKind::RmsNorm)
        p.be.rmsnormBackward(dx, nullptr, dout, x, p.w(w), rstd.as<float>(), p.localRows(), m_channels);
    else
        p.be.layernormBackward(
            dx, nullptr, nullptr, dout, x, p.w(w), mean.as<float>(), rstd.as<float>(), p.localRows(), m_channels);
}

void Norm::backwardWeight(
    const LayerPass& p, const void* dout, const void* x, std::size_t w, const Buffer& mean, const Buffer& rstd) const
{
    if (m_kind == planner::NormKind::RmsNorm)
        p.be.rmsnormBackward(nullptr, p.g(w), dout, x, nullptr, rstd.as<float>(), p.localRows(), m_channels);
    else
        p.be.layernormBackward(nullptr, p.g(w), p.g(w + 1), dout, x, nullptr, mean.as<float>(), rstd.as<float>(),
            p.localRows(), m_channels);
}

// ---- The embedding -----------------------------------------------------------------------------------------------

namespace {
enum EmbeddingSaved : std::uint8_t { kTokens, kEmbeddingSaved };
} // namespace

EmbeddingLayer::EmbeddingLayer(const ModelConfig& config, bool learned_positions, const TensorParallel& tp)
    : m_vocab(config.vocab)
    , m_channels(config.channels)
    , m_positions(learned_positions)
    , m_first(config.padded_vocab / tp.ranks * tp.rank)
    , m_rows(config.padded_vocab / tp.ranks)
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
    const std::int32_t* host = feed.tokens.data();
    if (p.tp.on()) { // vocabulary-parallel: this rank's rows, the others' tokens -1
        m_local.resize(BT);
        for (std::size_t i = 0; i < BT; ++i)
            m_local[i] = host[i] >= m_first && host[i] < m_first + m_rows ? host[i] - m_first : -1;
        host = m_local.data();
    }
    p.be.uploadTokens(tokens.as<std::int32_t>(), host, BT);
    ensure(p, s.out, static_cast<std::size_t>(p.localRows()) * C, p.be.act());
    // Each rank looks up its rows (rank 0 adds the positions), and the group's sum makes the whole embedding.
    Buffer workspace; // back to the arena at the end
    void* partial = partialRows(p, workspace, s.out.data(), static_cast<std::size_t>(C));
    p.be.encoderForward(
        partial, tokens.as<std::int32_t>(), p.w(0), m_positions ? rowParallelBias(p, p.w(1)) : nullptr, B, T, C);
    sumRows(p, s.out.data(), partial, static_cast<std::size_t>(C));
}

void EmbeddingLayer::backwardWeight(const LayerPass& p, LayerStash& s, const void*)
{
    // Every rank's position table sees every position's gradient (so its copies stay equal); its rows of the token
    // table see their tokens'.
    Buffer workspace;
    const void* dout = gatherRows(p, workspace, s.g_out.data(), static_cast<std::size_t>(m_channels));
    p.be.encoderBackward(p.g(0), m_positions ? p.g(1) : nullptr, dout, s.saved[kTokens].as<std::int32_t>(),
        p.shape.batch, p.shape.seq, m_channels);
}

// ---- The head ----------------------------------------------------------------------------------------------------

namespace {
enum HeadSaved : std::uint8_t { kNormed, kMean, kRstd, kLogits, kLosses, kTargets, kHeadSaved };
enum HeadGrads : std::uint8_t { kGNormed, kHeadGrads };
} // namespace

HeadLayer::HeadLayer(const ModelConfig& config, Norm norm, bool pads_logits, const TensorParallel& tp)
    : m_vocab(config.vocab)
    , m_channels(config.channels)
    , m_columns(pads_logits ? config.padded_vocab : config.vocab)
    , m_norm(norm)
{
    if (tp.on()) { // this rank's rows of the padded vocabulary, logits padded likewise
        m_columns = config.padded_vocab / tp.ranks;
        m_first = m_columns * tp.rank;
        m_real = std::clamp(config.vocab - m_first, 0, m_columns);
    }
}

double HeadLayer::forwardFlops(BatchShape shape) const
{
    return 2.0 * shape.batch * shape.seq * m_channels * m_vocab;
}

void HeadLayer::forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed& feed) const
{
    Backend& be = p.be;
    const int BT = p.rows(), C = m_channels, V = m_vocab;
    const auto rows = static_cast<std::size_t>(BT);
    const std::size_t output = m_norm.tensorCount(); // the output matrix follows the norm's tensors
    checkTokens(feed.targets, V, "target token");
    if (!feed.loss)
        throw std::logic_error("the head's forward needs somewhere to write the loss");
    reserveSlots(s.saved, kHeadSaved);
    auto& v = s.saved;
    const std::int32_t* targets = feed.targets.data();
    if (p.tp.on()) { // the targets as this rank's columns
        m_local.resize(rows);
        for (std::size_t i = 0; i < rows; ++i)
            m_local[i] = targets[i] >= m_first && targets[i] < m_first + m_real ? targets[i] - m_first : -1;
        targets = m_local.data();
    }
    ensure(p, v[kTargets], rows, DType::I32);
    be.uploadTokens(v[kTargets].as<std::int32_t>(), targets, rows);
    ensure(p, v[kNormed], static_cast<std::size_t>(p.localRows()) * C, be.act());
    ensure(p, v[kLogits], rows * m_columns, be.act());
    ensure(p, v[kLosses], rows, DType::F32);
    s.out.reset();
    m_norm.forward(p, v[kNormed].data(), v[kMean], v[kRstd], x, 0);
    Buffer workspace, stats, allStats; // back to the arena at the end
    const void* normed = gatherRows(p, workspace, v[kNormed].data(), static_cast<std::size_t>(C));
    // Logits through the output matrix's first V rows (or all Vp, the padded rows' logits ignored); with tensor
    // parallelism through this rank's rows.
    be.matmulForward(v[kLogits].data(), normed, p.w(output), nullptr, BT, C, m_columns, nullptr);
    // d(step loss)/d(position loss) = loss_scale / BT: the microbatch's loss is the mean over its positions.
    const float dscale = feed.loss_scale / static_cast<float>(BT);
    const auto* targetsHere = v[kTargets].as<std::int32_t>();
    if (!p.tp.on()) {
        be.classifier(v[kLosses].as<float>(), v[kLogits].data(), targetsHere, BT, V, m_columns, dscale);
    } else {
        stats.ensure(be, 3 * rows, DType::F32);
        allStats.ensure(be, 3 * rows * static_cast<std::size_t>(p.tp.ranks), DType::F32);
        be.classifierStats(stats.as<float>(), v[kLogits].data(), targetsHere, BT, m_real, m_columns);
        p.group->allGather(allStats.data(), stats.data(), DType::F32, 3 * rows);
        be.classifierFinish(v[kLosses].as<float>(), v[kLogits].data(), allStats.as<float>(), p.tp.ranks, targetsHere,
            BT, m_real, m_columns, dscale);
    }
    be.mean(feed.loss, v[kLosses].as<float>(), rows);
}

void HeadLayer::backwardInput(const LayerPass& p, LayerStash& s, const void* x, void* dx)
{
    Backend& be = p.be;
    const int BT = p.rows(), C = m_channels;
    const std::size_t n = static_cast<std::size_t>(p.localRows()) * C;
    reserveSlots(s.grads, kHeadGrads);
    auto& v = s.saved;
    Buffer& gNormed = s.grads[kGNormed];
    ensure(p, gNormed, n, be.act());
    // The forward's classifier already turned the logits into their gradient (kept for the W); each rank's rows of
    // the vocabulary give a share of the normed rows' gradient, summed over the group.
    Buffer workspace;
    void* partial = partialRows(p, workspace, gNormed.data(), static_cast<std::size_t>(C));
    be.matmulBackward(
        partial, nullptr, nullptr, v[kLogits].data(), nullptr, p.w(m_norm.tensorCount()), BT, C, m_columns);
    sumRows(p, gNormed.data(), partial, static_cast<std::size_t>(C));
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
    Buffer workspace;
    const void* normed = gatherRows(p, workspace, v[kNormed].data(), static_cast<std::size_t>(m_channels));
    p.be.matmulBackward(nullptr, p.g(m_norm.tensorCount()), nullptr, v[kLogits].data(), normed, nullptr, p.rows(),
        m_channels, m_columns);
    m_norm.backwardWeight(p, s.grads[kGNormed].data(), x, 0, v[kMean], v[kRstd]);
}

} // namespace pw::engine
