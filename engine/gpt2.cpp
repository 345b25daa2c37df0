// SPDX-License-Identifier: MIT
// GPT-2 as llm.c's train_gpt2.c and PyTorch's GPT-2 define it: learned positions, pre-norm blocks with LayerNorm,
// multi-head attention and a 4C GELU MLP, biases everywhere, the head tied to the token embedding. Its tensors
// carry llm.c's names and its checkpoint order (init keys: the tensor's place in llm.c's file, then the block).
#include <cmath>

#include "transformer.h"

namespace pw::engine {

namespace {

using Kind = TensorInit::Kind;

/// llm.c's tensors in its file's order; the per-block ones are 2..13.
enum Gpt2Tensor : std::uint8_t {
    kWte,
    kWpe,
    kLn1w,
    kLn1b,
    kQkvw,
    kQkvb,
    kAttprojw,
    kAttprojb,
    kLn2w,
    kLn2b,
    kFcw,
    kFcb,
    kFcprojw,
    kFcprojb,
    kLnfw,
    kLnfb
};
constexpr const char* kNames[] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
    "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

/// A tensor of llm.c's: matrices (rows x cols) decayed and drawn from N(0, stddev), vectors ones or zeros.
TensorSlot tensor(Gpt2Tensor t, int block, std::size_t rows, std::size_t cols, Kind init, double stddev, int owner)
{
    TensorSlot s;
    s.name = block < 0 ? std::string(kNames[t]) : "h." + std::to_string(block) + "." + kNames[t];
    s.shape = cols > 1 ? std::vector<std::size_t> {rows, cols} : std::vector<std::size_t> {rows};
    s.size = rows * cols;
    s.owner = owner;
    s.decayed = cols > 1; // PyTorch GPT-2's configure_optimizers: parameters of 2+ dimensions
    s.tied = t == kWte;
    s.padded_rows = t == kWte;
    s.init
        = {init, stddev, static_cast<std::uint64_t>(t) * 0x10000ull + static_cast<std::uint64_t>(std::max(block, 0))};
    // Tensor parallelism (Megatron's): the vocabulary and the column-parallel products by rows (q, k and v each),
    // the row-parallel products by columns; norms, positions and the row-parallel biases whole.
    switch (t) {
    case kWte:
    case kFcw:
    case kFcb:
        s.share.split = TensorSplit::Rows;
        break;
    case kQkvw:
    case kQkvb:
        s.share = {TensorSplit::Rows, 3};
        break;
    case kAttprojw:
    case kFcprojw:
        s.share.split = TensorSplit::Columns;
        break;
    case kLn1w:
    case kLn1b:
    case kLn2w:
    case kLn2b:
    case kLnfw:
    case kLnfb:
        s.sequence_partial = true;
        break;
    default:
        break;
    }
    return s;
}

enum BlockSaved : std::uint8_t {
    kLn1,
    kLn1Mean,
    kLn1Rstd,
    kQkv,
    kAtt,
    kAtty,
    kRes2,
    kLn2,
    kLn2Mean,
    kLn2Rstd,
    kFch,
    kFchGelu,
    kBlockSaved
};
/// What the I keeps for the W: res2's gradient (attproj's output's), fc's output's (before GELU), the layer norms'
/// outputs' and qkv's; with sequence parallelism also the output's and res2's gradients of every rank's rows.
enum BlockGrads : std::uint8_t { kGRes2, kGFch, kGLn2, kGQkv, kGLn1, kGOutAll, kGRes2All, kBlockGrads };

/// A block's tensors, in llm.c's per-block order (the indices below).
enum BlockTensor : std::uint8_t {
    bLn1w,
    bLn1b,
    bQkvw,
    bQkvb,
    bProjw,
    bProjb,
    bLn2w,
    bLn2b,
    bFcw,
    bFcb,
    bFcprojw,
    bFcprojb
};

/// A block as rank r of t: its heads' third of q, k and v and its columns of the MLP (the column-parallel products),
/// the projections' matching input columns (row-parallel, summed over the group). At t = 1 the whole block.
class Gpt2Block final : public Layer
{
public:
    Gpt2Block(const ModelConfig& config, int block, const TensorParallel& tp)
        : m_block(block)
        , m_channels(config.channels)
        , m_heads(config.heads / tp.ranks)
        , m_local(config.channels / tp.ranks)
        , m_norm(planner::NormKind::LayerNorm, config.channels, static_cast<float>(config.norm_eps))
    {
    }
    std::string kind() const override { return "transformer_layer"; }
    std::string name() const override { return "transformer_" + std::to_string(m_block + 1); }
    /// Megatron's count: 24 B T C^2 for the products, 4 B T^2 C for the attention's two (a rank's share: C' = C/t
    /// of the products' outer dimension).
    double forwardFlops(BatchShape shape) const override
    {
        const double B = shape.batch, T = shape.seq, C = m_channels, Cl = m_local;
        return 24.0 * B * T * C * Cl + 4.0 * B * T * T * Cl;
    }

    void forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed&) const override
    {
        Backend& be = p.be;
        const int BT = p.rows(), C = m_channels, Cl = m_local;
        const auto rows = static_cast<std::size_t>(BT);
        const std::size_t n = static_cast<std::size_t>(p.localRows()) * C; // the residual stream here
        const DType act = be.act();
        reserveSlots(s.saved, kBlockSaved);
        auto& v = s.saved;
        ensure(p, v[kLn1], n, act);
        ensure(p, v[kQkv], 3 * rows * Cl, act);
        ensure(p, v[kAtt], be.attentionStashCount(attention(p)), DType::F32);
        ensure(p, v[kAtty], rows * Cl, act);
        ensure(p, v[kRes2], n, act);
        ensure(p, v[kLn2], n, act);
        ensure(p, v[kFch], 4 * rows * Cl, act);
        ensure(p, v[kFchGelu], 4 * rows * Cl, act);
        ensure(p, s.out, n, act);
        const auto c = static_cast<std::size_t>(C);
        Buffer whole, sum; // sequence parallelism's workspaces, back to the arena at the end
        m_norm.forward(p, v[kLn1].data(), v[kLn1Mean], v[kLn1Rstd], x, bLn1w);
        const void* ln1 = gatherRows(p, whole, v[kLn1].data(), c);
        be.matmulForward(v[kQkv].data(), ln1, p.w(bQkvw), p.w(bQkvb), BT, C, 3 * Cl, nullptr);
        be.attentionForward(v[kAtty].data(), v[kAtt].as<float>(), v[kQkv].data(), attention(p));
        // The attention projection goes to out first (the group's sum of it), then res2 = x + it.
        void* proj = partialRows(p, sum, s.out.data(), c);
        be.matmulForward(proj, v[kAtty].data(), p.w(bProjw), rowParallelBias(p, p.w(bProjb)), BT, Cl, C, nullptr);
        sumRows(p, s.out.data(), proj, c);
        m_norm.residualForward(p, v[kRes2].data(), v[kLn2].data(), v[kLn2Mean], v[kLn2Rstd], x, s.out.data(), bLn2w);
        // fch keeps the pre-activation for GELU's backward; the backend may fuse GELU into the product.
        const void* ln2 = gatherRows(p, whole, v[kLn2].data(), c);
        be.matmulForward(v[kFch].data(), ln2, p.w(bFcw), p.w(bFcb), BT, C, 4 * Cl, v[kFchGelu].data());
        void* mlp = partialRows(p, sum, s.out.data(), c);
        be.matmulForward(
            mlp, v[kFchGelu].data(), p.w(bFcprojw), rowParallelBias(p, p.w(bFcprojb)), BT, 4 * Cl, C, nullptr);
        sumRows(p, s.out.data(), mlp, c);
        be.residualForward(s.out.data(), v[kRes2].data(), s.out.data(), n);
    }

    void backwardInput(const LayerPass& p, LayerStash& s, const void* x, void* dx) override
    {
        Backend& be = p.be;
        const int BT = p.rows(), C = m_channels, Cl = m_local;
        const auto rows = static_cast<std::size_t>(BT);
        const std::size_t n = static_cast<std::size_t>(p.localRows()) * C;
        const auto c = static_cast<std::size_t>(C);
        Buffer whole, sum; // sequence parallelism's workspaces, back to the arena at the end
        const DType act = be.act();
        reserveSlots(s.grads, kBlockGrads);
        auto& v = s.saved;
        auto& g = s.grads;
        ensure(p, g[kGRes2], n, act);
        ensure(p, g[kGFch], 4 * rows * Cl, act);
        ensure(p, g[kGLn2], n, act);
        ensure(p, g[kGQkv], 3 * rows * Cl, act);
        ensure(p, g[kGLn1], n, act);
        Buffer dAtty; // the attention output's gradient: a workspace, back to the arena at the end
        ensure(p, dAtty, rows * Cl, act);
        const void* dout = gatherRows(p, g[kGOutAll], s.g_out.data(), c);
        // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))); input gradients written (nothing zeroed first)
        be.matmulBackwardGelu(g[kGFch].data(), dout, p.w(bFcprojw), v[kFch].data(), BT, 4 * Cl, C);
        void* dln2 = partialRows(p, sum, g[kGLn2].data(), c);
        be.matmulBackward(dln2, nullptr, nullptr, g[kGFch].data(), nullptr, p.w(bFcw), BT, C, 4 * Cl);
        sumRows(p, g[kGLn2].data(), dln2, c);
        // dres2 = dout (the residual passes it through) + the norm's input gradient, in one pass
        m_norm.backwardInputResidual(
            p, g[kGRes2].data(), s.g_out.data(), g[kGLn2].data(), v[kRes2].data(), bLn2w, v[kLn2Mean], v[kLn2Rstd]);
        // Attention: res2 = x + attproj(attention(qkv(ln1(x))))
        const void* dres2 = gatherRows(p, g[kGRes2All], g[kGRes2].data(), c);
        be.matmulBackward(dAtty.data(), nullptr, nullptr, dres2, nullptr, p.w(bProjw), BT, Cl, C);
        be.attentionBackward(
            g[kGQkv].data(), dAtty.data(), v[kQkv].data(), v[kAtty].data(), v[kAtt].as<float>(), attention(p));
        void* dln1 = partialRows(p, sum, g[kGLn1].data(), c);
        be.matmulBackward(dln1, nullptr, nullptr, g[kGQkv].data(), nullptr, p.w(bQkvw), BT, C, 3 * Cl);
        sumRows(p, g[kGLn1].data(), dln1, c);
        // dx = dres2 (the residual passes it through) + the norm's input gradient, in one pass
        m_norm.backwardInputResidual(p, dx, g[kGRes2].data(), g[kGLn1].data(), x, bLn1w, v[kLn1Mean], v[kLn1Rstd]);
    }

    void backwardWeight(const LayerPass& p, LayerStash& s, const void* x) override
    {
        Backend& be = p.be;
        const int BT = p.rows(), C = m_channels, Cl = m_local;
        const auto c = static_cast<std::size_t>(C);
        Buffer whole, sum; // sequence parallelism's workspaces, back to the arena at the end
        auto& v = s.saved;
        auto& g = s.grads;
        if (g.size() < kBlockGrads || g[kGQkv].empty())
            throw std::logic_error("stage weight gradient before its input gradient");
        const void* dout = gatheredRows(p, g[kGOutAll], s.g_out.data());
        const void* dres2 = gatheredRows(p, g[kGRes2All], g[kGRes2].data());
        be.matmulBackward(nullptr, p.g(bFcprojw), p.g(bFcprojb), dout, v[kFchGelu].data(), nullptr, BT, 4 * Cl, C);
        const void* ln2 = gatherRows(p, whole, v[kLn2].data(), c);
        be.matmulBackward(nullptr, p.g(bFcw), p.g(bFcb), g[kGFch].data(), ln2, nullptr, BT, C, 4 * Cl);
        m_norm.backwardWeight(p, g[kGLn2].data(), v[kRes2].data(), bLn2w, v[kLn2Mean], v[kLn2Rstd]);
        be.matmulBackward(nullptr, p.g(bProjw), p.g(bProjb), dres2, v[kAtty].data(), nullptr, BT, Cl, C);
        const void* ln1 = gatherRows(p, whole, v[kLn1].data(), c);
        be.matmulBackward(nullptr, p.g(bQkvw), p.g(bQkvb), g[kGQkv].data(), ln1, nullptr, BT, C, 3 * Cl);
        m_norm.backwardWeight(p, g[kGLn1].data(), x, bLn1w, v[kLn1Mean], v[kLn1Rstd]);
    }

    void release(LayerStash& s, planner::Recompute recompute) const override
    {
        releaseBlock(s, recompute, kAtt, kAtty);
    }
    void rebuild(const LayerPass& p, LayerStash& s, const void* x, planner::Recompute recompute) const override
    {
        if (recompute == planner::Recompute::Full)
            forward(p, s, x, {});
        else if (recompute == planner::Recompute::Selective)
            rebuildAttention(p, s, kQkv, kAtt, kAtty, attention(p));
    }

private:
    AttentionShape attention(const LayerPass& p) const
    {
        return {p.shape.batch, p.shape.seq, m_heads, m_heads, m_channels / (m_heads * p.tp.ranks)};
    }

    int m_block, m_channels;
    int m_heads; ///< this rank's heads: NH / t
    int m_local; ///< C / t: this rank's channels of the attention's output
    Norm m_norm;
};

class Gpt2Family final : public ModelFamily
{
public:
    const char* name() const override { return "gpt2"; }

    std::string cannotBuild(const ModelConfig& c) const override
    {
        return firstDifference({
            {c.mlp != planner::MlpKind::Gelu, "mlp"},
            {c.ffnHidden() != 4 * c.channels, "ffn_hidden"},
            {c.kvHeads() != c.heads, "kv_heads"},
            {c.norm != planner::NormKind::LayerNorm, "norm"},
            {c.positions != planner::PositionKind::Learned, "positions"},
            {c.bias != planner::BiasKind::All, "bias"},
            {!c.tied_embeddings, "tied_embeddings"},
            {std::abs(c.norm_eps - 1e-5) > 1e-12, "norm_eps"},
        });
    }

    std::vector<TensorSlot> tensors(const ModelConfig& c, int layer) const override
    {
        const std::size_t C = c.channels;
        if (layer == 0)
            return {tensor(kWte, -1, static_cast<std::size_t>(c.padded_vocab), C, Kind::Normal, 0.02, 0),
                tensor(kWpe, -1, static_cast<std::size_t>(c.max_seq), C, Kind::Normal, 0.02, 0)};
        if (layer == c.layerCount() - 1)
            return {tensor(kLnfw, -1, C, 1, Kind::Ones, 0, layer), tensor(kLnfb, -1, C, 1, Kind::Zeros, 0, layer),
                tensor(kWte, -1, static_cast<std::size_t>(c.padded_vocab), C, Kind::Normal, 0.02, 0)};
        const int b = layer - 1;
        const double residual = 0.02 / std::sqrt(2.0 * c.layers); // GPT-2's scaled init of the residual products
        return {tensor(kLn1w, b, C, 1, Kind::Ones, 0, layer), tensor(kLn1b, b, C, 1, Kind::Zeros, 0, layer),
            tensor(kQkvw, b, 3 * C, C, Kind::Normal, 0.02, layer), tensor(kQkvb, b, 3 * C, 1, Kind::Zeros, 0, layer),
            tensor(kAttprojw, b, C, C, Kind::Normal, residual, layer),
            tensor(kAttprojb, b, C, 1, Kind::Zeros, 0, layer), tensor(kLn2w, b, C, 1, Kind::Ones, 0, layer),
            tensor(kLn2b, b, C, 1, Kind::Zeros, 0, layer), tensor(kFcw, b, 4 * C, C, Kind::Normal, 0.02, layer),
            tensor(kFcb, b, 4 * C, 1, Kind::Zeros, 0, layer),
            tensor(kFcprojw, b, C, 4 * C, Kind::Normal, residual, layer),
            tensor(kFcprojb, b, C, 1, Kind::Zeros, 0, layer)};
    }

    std::unique_ptr<Layer> makeLayer(
        const ModelConfig& c, int layer, Backend& backend, const TensorParallel& tp) const override
    {
        if (layer == 0)
            return std::make_unique<EmbeddingLayer>(c, true, tp);
        if (layer == c.layerCount() - 1)
            return std::make_unique<HeadLayer>(c,
                Norm(planner::NormKind::LayerNorm, c.channels, static_cast<float>(c.norm_eps)), backend.padsLogits(),
                tp);
        return std::make_unique<Gpt2Block>(c, layer - 1, tp);
    }
};

} // namespace

const ModelFamily& gpt2Family()
{
    static const Gpt2Family family;
    return family;
}

} // namespace pw::engine
