// SPDX-License-Identifier: MIT
// Llama (and Mistral, Qwen2: the same block) as Hugging Face's transformers defines it: no position table; pre-norm
// blocks with RMSNorm, rotary embeddings on queries and keys (rotate_half convention, Llama 3's frequency scaling),
// grouped-query attention and a SwiGLU MLP; no biases (Qwen2: on Q, K and V); an untied head unless the config ties
// it. Tensors carry transformers' names, and the products' weights that one product reads are adjacent: q, k, v
// (one (NH + 2 KV) hs x C product) and gate, up (one 2F x C product).
#include <cmath>
#include <numbers>

#include "transformer.h"

namespace pw::engine {

namespace {

using Kind = TensorInit::Kind;

TensorSlot tensor(std::string name, std::size_t rows, std::size_t cols, Kind init, int layer, int index)
{
    TensorSlot s;
    s.name = std::move(name);
    s.shape = cols > 1 ? std::vector<std::size_t> {rows, cols} : std::vector<std::size_t> {rows};
    s.size = rows * cols;
    s.owner = layer;
    s.decayed = cols > 1;
    // transformers' _init_weights: every Linear and Embedding from N(0, initializer_range = 0.02), norms ones.
    s.init = {init, init == Kind::Normal ? 0.02 : 0.0,
        static_cast<std::uint64_t>(layer) * 0x10000ull + static_cast<std::uint64_t>(index)};
    return s;
}

/// The angle frequencies of a head of hs dimensions: theta^(-2i/hs), rescaled as Llama 3's rope_scaling says
/// (transformers' _compute_llama3_parameters).
std::vector<double> rotaryFrequencies(const planner::RotaryConfig& r, int hs)
{
    std::vector<double> f(static_cast<std::size_t>(hs / 2));
    for (std::size_t i = 0; i < f.size(); ++i) {
        const double base = std::pow(r.theta, -2.0 * static_cast<double>(i) / hs);
        f[i] = base;
        if (r.factor <= 0)
            continue;
        const double wavelength = 2.0 * std::numbers::pi / base;
        const double original = r.original_positions;
        if (wavelength > original / r.low_freq_factor) {
            f[i] = base / r.factor;
        } else if (wavelength >= original / r.high_freq_factor) {
            const double smooth
                = (original / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
            f[i] = (1.0 - smooth) * base / r.factor + smooth * base;
        }
    }
    return f;
}

enum BlockSaved : std::uint8_t {
    kLn1,
    kRstd1,
    kQkv,
    kAtt,
    kAtty,
    kRes2,
    kLn2,
    kRstd2,
    kUp,
    kAct,
    kUnused,
    kBlockSaved
};
/// What the I keeps for the W: res2's gradient (o_proj's output's), the gate and up products' outputs', the norms'
/// outputs' and qkv's.
/// With sequence parallelism also the output's and res2's gradients of every rank's rows.
enum BlockGrads : std::uint8_t { kGRes2, kGUp, kGLn2, kGQkv, kGLn1, kGOutAll, kGRes2All, kBlockGrads };

/// Where a block's tensors sit in its list (the biases, when there are, shift the ones after them).
struct BlockLayout
{
    std::size_t norm1 = 0, qkv = 1, qkvBias = 0, o = 4, norm2 = 5, gateUp = 6, down = 8;

    explicit BlockLayout(bool qkvBiases)
    {
        if (!qkvBiases)
            return;
        qkvBias = 4;
        o = 7;
        norm2 = 8;
        gateUp = 9;
        down = 11;
    }
};

/// A block as rank r of t: its heads of q, its key/value heads of k and v, its columns of gate and up (the
/// column-parallel products), o and down's matching input columns (row-parallel, summed over the group).
class LlamaBlock final : public Layer
{
public:
    LlamaBlock(const ModelConfig& c, int block, const TensorParallel& tp)
        : m_block(block)
        , m_channels(c.channels)
        , m_ffn(c.ffnHidden() / tp.ranks)
        , m_heads(c.heads / tp.ranks)
        , m_kvHeads(std::max(1, c.kvHeads() / tp.ranks)) // fewer than t: the one its query heads read
        , m_headSize(c.headSize())
        , m_biases(c.bias == planner::BiasKind::Qkv)
        , m_at(m_biases)
        , m_norm(planner::NormKind::RmsNorm, c.channels, static_cast<float>(c.norm_eps))
        , m_frequencies(rotaryFrequencies(c.rotary, c.headSize()))
    {
    }
    std::string kind() const override { return "transformer_layer"; }
    std::string name() const override { return "transformer_" + std::to_string(m_block + 1); }
    double forwardFlops(BatchShape shape) const override
    {
        const double B = shape.batch, T = shape.seq, C = m_channels, F = m_ffn;
        const AttentionShape a = attentionShape(shape);
        const double W = a.qkvColumns(), Q = a.channels(); // this rank's share
        return 2.0 * B * T * (C * W + Q * C + 3.0 * C * F) + 4.0 * B * T * T * Q;
    }

    void forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed&) const override
    {
        Backend& be = p.be;
        const AttentionShape a = attentionShape(p.shape);
        const int BT = p.rows(), C = m_channels, F = m_ffn, W = a.qkvColumns(), Q = a.channels();
        const auto rows = static_cast<std::size_t>(BT);
        const auto c = static_cast<std::size_t>(C);
        Buffer whole, sum; // sequence parallelism's workspaces, back to the arena at the end
        const std::size_t n = static_cast<std::size_t>(p.localRows()) * C; // the residual stream here
        const DType act = be.act();
        reserveSlots(s.saved, kBlockSaved);
        auto& v = s.saved;
        ensure(p, v[kLn1], n, act);
        ensure(p, v[kQkv], rows * W, act);
        ensure(p, v[kAtt], be.attentionStashCount(a), DType::F32);
        ensure(p, v[kAtty], rows * Q, act);
        ensure(p, v[kRes2], n, act);
        ensure(p, v[kLn2], n, act);
        ensure(p, v[kUp], rows * 2 * F, act);
        ensure(p, v[kAct], rows * F, act);
        ensure(p, s.out, n, act);
        const float* table = rotaryTable(p);
        m_norm.forward(p, v[kLn1].data(), v[kUnused], v[kRstd1], x, m_at.norm1);
        const void* ln1 = gatherRows(p, whole, v[kLn1].data(), c);
        be.matmulForward(v[kQkv].data(), ln1, p.w(m_at.qkv), m_biases ? p.w(m_at.qkvBias) : nullptr, BT, C, W, nullptr);
        be.rotary(v[kQkv].data(), table, a.batch, a.seq, a.heads + a.kv_heads, a.head_size, W, false);
        be.attentionForward(v[kAtty].data(), v[kAtt].as<float>(), v[kQkv].data(), a);
        void* o = partialRows(p, sum, s.out.data(), c);
        be.matmulForward(o, v[kAtty].data(), p.w(m_at.o), nullptr, BT, Q, C, nullptr);
        sumRows(p, s.out.data(), o, c);
        m_norm.residualForward(p, v[kRes2].data(), v[kLn2].data(), v[kUnused], v[kRstd2], x, s.out.data(), m_at.norm2);
        const void* ln2 = gatherRows(p, whole, v[kLn2].data(), c);
        be.matmulForward(v[kUp].data(), ln2, p.w(m_at.gateUp), nullptr, BT, C, 2 * F, nullptr);
        be.swigluForward(v[kAct].data(), v[kUp].data(), BT, F);
        void* down = partialRows(p, sum, s.out.data(), c);
        be.matmulForward(down, v[kAct].data(), p.w(m_at.down), nullptr, BT, F, C, nullptr);
        sumRows(p, s.out.data(), down, c);
        be.residualForward(s.out.data(), v[kRes2].data(), s.out.data(), n);
    }

    void backwardInput(const LayerPass& p, LayerStash& s, const void* x, void* dx) override
    {
        Backend& be = p.be;
        const AttentionShape a = attentionShape(p.shape);
        const int BT = p.rows(), C = m_channels, F = m_ffn, W = a.qkvColumns(), Q = a.channels();
        const auto rows = static_cast<std::size_t>(BT);
        const auto c = static_cast<std::size_t>(C);
        Buffer whole, sum; // sequence parallelism's workspaces, back to the arena at the end
        const std::size_t n = static_cast<std::size_t>(p.localRows()) * C;
        const DType act = be.act();
        reserveSlots(s.grads, kBlockGrads);
        auto& v = s.saved;
        auto& g = s.grads;
        ensure(p, g[kGRes2], n, act);
        ensure(p, g[kGUp], rows * 2 * F, act);
        ensure(p, g[kGLn2], n, act);
        ensure(p, g[kGQkv], rows * W, act);
        ensure(p, g[kGLn1], n, act);
        Buffer dAct, dAtty; // the SwiGLU output's and the attention output's gradients: workspaces of this pass
        ensure(p, dAct, rows * F, act);
        ensure(p, dAtty, rows * Q, act);
        const void* dout = gatherRows(p, g[kGOutAll], s.g_out.data(), c);
        // MLP: out = res2 + down(swiglu(gate_up(norm2(res2))))
        be.matmulBackward(dAct.data(), nullptr, nullptr, dout, nullptr, p.w(m_at.down), BT, F, C);
        be.swigluBackward(g[kGUp].data(), v[kUp].data(), dAct.data(), BT, F);
        void* dln2 = partialRows(p, sum, g[kGLn2].data(), c);
        be.matmulBackward(dln2, nullptr, nullptr, g[kGUp].data(), nullptr, p.w(m_at.gateUp), BT, C, 2 * F);
        sumRows(p, g[kGLn2].data(), dln2, c);
        // dres2 = dout (the residual passes it through) + the norm's input gradient, in one pass
        m_norm.backwardInputResidual(
            p, g[kGRes2].data(), s.g_out.data(), g[kGLn2].data(), v[kRes2].data(), m_at.norm2, v[kUnused], v[kRstd2]);
        // Attention: res2 = x + o(attention(rotary(qkv(norm1(x)))))
        const void* dres2 = gatherRows(p, g[kGRes2All], g[kGRes2].data(), c);
        be.matmulBackward(dAtty.data(), nullptr, nullptr, dres2, nullptr, p.w(m_at.o), BT, Q, C);
        be.attentionBackward(g[kGQkv].data(), dAtty.data(), v[kQkv].data(), v[kAtty].data(), v[kAtt].as<float>(), a);
        be.rotary(g[kGQkv].data(), rotaryTable(p), a.batch, a.seq, a.heads + a.kv_heads, a.head_size, W, true);
        void* dln1 = partialRows(p, sum, g[kGLn1].data(), c);
        be.matmulBackward(dln1, nullptr, nullptr, g[kGQkv].data(), nullptr, p.w(m_at.qkv), BT, C, W);
        sumRows(p, g[kGLn1].data(), dln1, c);
        // dx = dres2 (the residual passes it through) + the norm's input gradient, in one pass
        m_norm.backwardInputResidual(p, dx, g[kGRes2].data(), g[kGLn1].data(), x, m_at.norm1, v[kUnused], v[kRstd1]);
    }

    void backwardWeight(const LayerPass& p, LayerStash& s, const void* x) override
    {
        Backend& be = p.be;
        const AttentionShape a = attentionShape(p.shape);
        const int BT = p.rows(), C = m_channels, F = m_ffn, W = a.qkvColumns(), Q = a.channels();
        const auto c = static_cast<std::size_t>(C);
        Buffer whole, sum; // sequence parallelism's workspaces, back to the arena at the end
        auto& v = s.saved;
        auto& g = s.grads;
        if (g.size() < kBlockGrads || g[kGQkv].empty())
            throw std::logic_error("stage weight gradient before its input gradient");
        const void* dout = gatheredRows(p, g[kGOutAll], s.g_out.data());
        const void* dres2 = gatheredRows(p, g[kGRes2All], g[kGRes2].data());
        be.matmulBackward(nullptr, p.g(m_at.down), nullptr, dout, v[kAct].data(), nullptr, BT, F, C);
        const void* ln2 = gatherRows(p, whole, v[kLn2].data(), c);
        be.matmulBackward(nullptr, p.g(m_at.gateUp), nullptr, g[kGUp].data(), ln2, nullptr, BT, C, 2 * F);
        m_norm.backwardWeight(p, g[kGLn2].data(), v[kRes2].data(), m_at.norm2, v[kUnused], v[kRstd2]);
        be.matmulBackward(nullptr, p.g(m_at.o), nullptr, dres2, v[kAtty].data(), nullptr, BT, Q, C);
        const void* ln1 = gatherRows(p, whole, v[kLn1].data(), c);
        be.matmulBackward(
            nullptr, p.g(m_at.qkv), m_biases ? p.g(m_at.qkvBias) : nullptr, g[kGQkv].data(), ln1, nullptr, BT, C, W);
        m_norm.backwardWeight(p, g[kGLn1].data(), x, m_at.norm1, v[kUnused], v[kRstd1]);
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
            rebuildAttention(p, s, kQkv, kAtt, kAtty, attentionShape(p.shape));
    }

private:
    AttentionShape attentionShape(BatchShape shape) const
    {
        return {shape.batch, shape.seq, m_heads, m_kvHeads, m_headSize};
    }
    /// cos then sin of every (position, frequency) of the microbatch's T positions, on the device (made once).
    const float* rotaryTable(const LayerPass& p) const
    {
        const int T = p.shape.seq;
        if (m_tableSeq != T) {
            const std::size_t half = m_frequencies.size();
            std::vector<float> host(2 * static_cast<std::size_t>(T) * half);
            for (int t = 0; t < T; ++t)
                for (std::size_t i = 0; i < half; ++i) {
                    const double angle = t * m_frequencies[i];
                    host[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
                    host[(static_cast<std::size_t>(T) + t) * half + i] = static_cast<float>(std::sin(angle));
                }
            m_table.ensure(p.be, host.size(), DType::F32);
            p.be.upload(m_table.data(), DType::F32, host.data(), host.size());
            m_tableSeq = T;
        }
        return m_table.as<float>();
    }

    int m_block, m_channels;
    int m_ffn, m_heads, m_kvHeads; ///< this rank's share: F / t, NH / t, KV / t (at least 1)
    int m_headSize;
    bool m_biases;
    BlockLayout m_at;
    Norm m_norm;
    std::vector<double> m_frequencies;
    mutable Buffer m_table; ///< constant per microbatch length: made by the first forward
    mutable int m_tableSeq = 0;
};

class LlamaFamily final : public ModelFamily
{
public:
    const char* name() const override { return "llama"; }

    std::string cannotBuild(const ModelConfig& c) const override
    {
        return firstDifference({
            {c.mlp != planner::MlpKind::SwiGlu, "mlp"}, {c.norm != planner::NormKind::RmsNorm, "norm"},
            {c.positions != planner::PositionKind::Rotary, "positions"}, {c.bias == planner::BiasKind::All, "bias"},
            {c.heads > 0 && (c.channels / c.heads) % 2 != 0, "heads"}, // rotary turns pairs of a head's dimensions
        });
    }

    std::vector<TensorSlot> tensors(const ModelConfig& c, int layer) const override
    {
        const std::size_t C = c.channels, F = static_cast<std::size_t>(c.ffnHidden());
        const std::size_t q = static_cast<std::size_t>(c.heads) * c.headSize();
        const std::size_t kv = static_cast<std::size_t>(c.kvHeads()) * c.headSize();
        const auto Vp = static_cast<std::size_t>(c.padded_vocab);
        if (layer == 0) {
            TensorSlot e = tensor("model.embed_tokens.weight", Vp, C, Kind::Normal, 0, 0);
            e.tied = c.tied_embeddings;
            e.padded_rows = true;
            e.share.split = TensorSplit::Rows; // vocabulary-parallel
            return {e};
        }
        if (layer == c.layerCount() - 1) {
            std::vector<TensorSlot> head = {tensor("model.norm.weight", C, 1, Kind::Ones, layer, 0)};
            head.front().sequence_partial = true;
            TensorSlot output = tensor("lm_head.weight", Vp, C, Kind::Normal, layer, 1);
            output.padded_rows = true;
            output.share.split = TensorSplit::Rows;
            head.push_back(c.tied_embeddings ? tensors(c, 0).front() : output);
            return head;
        }
        const std::string at = "model.layers." + std::to_string(layer - 1) + ".";
        int index = 0;
        std::vector<TensorSlot> t;
        // Tensor parallelism (Megatron's): q, k, v, gate and up by rows (heads, key/value heads, MLP columns), o and
        // down by columns, the norms whole. Fewer key/value heads than ranks: each rank holds the one its query heads
        // read, as the other ranks of those heads do.
        const int kvHeads = c.kvHeads();
        const auto add
            = [&](const std::string& name, std::size_t rows, std::size_t cols, Kind init, TensorShare share) {
                  t.push_back(tensor(at + name, rows, cols, init, layer, index++));
                  t.back().share = share;
                  t.back().sequence_partial = cols == 1 && share.split == TensorSplit::Whole;
              };
        const TensorShare whole {}, rows {TensorSplit::Rows}, columns {TensorSplit::Columns},
            heads {TensorSplit::Rows, 1, kvHeads};
        add("input_layernorm.weight", C, 1, Kind::Ones, whole);
        add("self_attn.q_proj.weight", q, C, Kind::Normal, rows);
        add("self_attn.k_proj.weight", kv, C, Kind::Normal, heads);
        add("self_attn.v_proj.weight", kv, C, Kind::Normal, heads);
        if (c.bias == planner::BiasKind::Qkv) {
            add("self_attn.q_proj.bias", q, 1, Kind::Zeros, rows);
            add("self_attn.k_proj.bias", kv, 1, Kind::Zeros, heads);
            add("self_attn.v_proj.bias", kv, 1, Kind::Zeros, heads);
        }
        add("self_attn.o_proj.weight", C, q, Kind::Normal, columns);
        add("post_attention_layernorm.weight", C, 1, Kind::Ones, whole);
        add("mlp.gate_proj.weight", F, C, Kind::Normal, rows);
        add("mlp.up_proj.weight", F, C, Kind::Normal, rows);
        add("mlp.down_proj.weight", C, F, Kind::Normal, columns);
        return t;
    }

    std::unique_ptr<Layer> makeLayer(
        const ModelConfig& c, int layer, Backend& backend, const TensorParallel& tp) const override
    {
        if (layer == 0)
            return std::make_unique<EmbeddingLayer>(c, false, tp);
        if (layer == c.layerCount() - 1)
            return std::make_unique<HeadLayer>(c,
                Norm(planner::NormKind::RmsNorm, c.channels, static_cast<float>(c.norm_eps)), backend.padsLogits(), tp);
        return std::make_unique<LlamaBlock>(c, layer - 1, tp);
    }
};

} // namespace

const ModelFamily& llamaFamily()
{
    static const LlamaFamily family;
    return family;
}

} // namespace pw::engine
