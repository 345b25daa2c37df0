// SPDX-License-Identifier: MIT
// What the families' layers share (internal to the engine): the norm seam (LayerNorm or RMSNorm), the token
// embedding and the head, written once for every family, and the families themselves. A family's file (gpt2.cpp,
// llama.cpp) names its tensors and writes its block.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "model.h"

namespace pw::engine {

const ModelFamily& gpt2Family();
const ModelFamily& llamaFamily();

/// A buffer of n elements of `dtype` on the pass's backend (kept when it already is; its contents are then the
/// last microbatch's, which every user overwrites).
inline void ensure(const LayerPass& p, Buffer& b, std::size_t n, DType dtype)
{
    b.ensure(p.be, n, dtype);
}
/// s.saved (or s.grads) sized for a layer kind's `count` buffers.
inline void reserveSlots(std::vector<Buffer>& v, std::size_t count)
{
    if (v.size() < count)
        v.resize(count);
}
/// A block's recomputation: full returns every buffer the forward saved (its output stays: the next layer's input),
/// selective the attention core's, saved[core] and saved[output] (the softmax's stash and the attention's output).
void releaseBlock(LayerStash& s, planner::Recompute recompute, std::size_t core, std::size_t output);
/// Selective recomputation's rebuild: the attention core again from the stashed qkv.
void rebuildAttention(
    const LayerPass& p, LayerStash& s, std::size_t qkv, std::size_t core, std::size_t output, const AttentionShape& a);
// Tensor parallelism inside a layer (tensor_parallel.h). At t = 1 each of these is nothing (or its argument), so a
// layer's math is written once for every t.
/// The rows a product needs (all BT) from the residual stream's (localRows x columns at x): x itself, or with
/// sequence parallelism every rank's rows all-gathered into `whole`.
const void* gatherRows(const LayerPass& p, Buffer& whole, const void* x, std::size_t columns);
/// What gatherRows gave, for a later pass that kept it: `whole` with sequence parallelism, else x.
const void* gatheredRows(const LayerPass& p, const Buffer& whole, const void* x);
/// Where a row-parallel product (or a vocabulary-parallel lookup) writes its partial sum of BT x columns before
/// sumRows: `out` itself, or with sequence parallelism the workspace `partial`.
void* partialRows(const LayerPass& p, Buffer& partial, void* out, std::size_t columns);
/// The group's sum of every rank's partial (BT x columns) into out (localRows x columns): in place over the group,
/// or reduce-scattered with sequence parallelism; nothing at t = 1.
void sumRows(const LayerPass& p, void* out, void* partial, std::size_t columns);
/// A row-parallel product's bias: added by rank 0 only, so that the group's sum holds it once.
inline const void* rowParallelBias(const LayerPass& p, const void* bias)
{
    return p.tp.rank == 0 ? bias : nullptr;
}

/// A family's cannotBuild: the first field whose difference is true, empty when none is.
std::string firstDifference(std::initializer_list<std::pair<bool, const char*>> differences);
/// Throws InputError naming the first id outside [0, vocab).
void checkTokens(std::span<const std::int32_t> tokens, int vocab, const char* what);

/// @brief The normalization of a block's sublayers and of the head: LayerNorm (a weight and a bias; keeps each
/// position's mean and 1/std; eps 1e-5) or RMSNorm (a weight; keeps 1/rms).
class Norm
{
public:
    Norm(planner::NormKind kind, int channels, float eps);
    std::size_t tensorCount() const; ///< 2 (weight, bias) or 1 (weight)
    /// w points at the weight, the bias (LayerNorm) right after it in the same buffer: tensors w and w + 1.
    void forward(const LayerPass& p, void* out, Buffer& mean, Buffer& rstd, const void* x, std::size_t w) const;
    /// sum = a + b, then out = the norm of sum: a residual branch joined with the norm after it, in one pass.
    void residualForward(const LayerPass& p, void* sum, void* out, Buffer& mean, Buffer& rstd, const void* a,
        const void* b, std::size_t w) const;
    /// The input gradient (accumulated into dx) through the weight at tensor w.
    void backwardInput(const LayerPass& p, void* dx, const void* dout, const void* x, std::size_t w, const Buffer& mean,
        const Buffer& rstd) const;
    /// dx = dresidual + the input gradient through the weight at tensor w, written: the gradient of a residual's sum
    /// that also feeds this norm, in one pass.
    void backwardInputResidual(const LayerPass& p, void* dx, const void* dresidual, const void* dout, const void* x,
        std::size_t w, const Buffer& mean, const Buffer& rstd) const;
    /// The weight's (and bias's) gradients, accumulated into tensors w (and w + 1).
    void backwardWeight(const LayerPass& p, const void* dout, const void* x, std::size_t w, const Buffer& mean,
        const Buffer& rstd) const;

private:
    planner::NormKind m_kind;
    int m_channels;
    float m_eps;
};

/// @brief Layer 0: token rows (tensor 0: Vp x C), plus learned position rows (tensor 1: maxT x C) when the family
/// has them.
class EmbeddingLayer final : public Layer
{
public:
    EmbeddingLayer(const ModelConfig& config, bool learned_positions, const TensorParallel& tp);
    std::string kind() const override { return "embedding"; }
    std::string name() const override { return "embedding"; }
    double forwardFlops(BatchShape) const override { return 0; }
    void forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed& feed) const override;
    void backwardInput(LayerPass const&, LayerStash&, const void*, void*) override { }
    void backwardWeight(const LayerPass& p, LayerStash& s, const void* x) override;

private:
    int m_vocab, m_channels;
    bool m_positions;
    int m_first = 0, m_rows = 0; ///< this rank's rows of the (padded) vocabulary
    mutable std::vector<std::int32_t> m_local; ///< the microbatch's tokens as this rank's rows (-1: another's)
};

/// @brief The last layer: the final norm (tensors 0.. of Norm), logits through the output matrix (the last
/// tensor: Vp x C, the token embedding's copy when tied), the mean cross-entropy fused with its gradient. With tensor
/// parallelism each rank's logits are its rows of the vocabulary, and the cross-entropy combines the ranks' shares.
class HeadLayer final : public Layer
{
public:
    HeadLayer(const ModelConfig& config, Norm norm, bool pads_logits, const TensorParallel& tp);
    std::string kind() const override { return "head"; }
    std::string name() const override { return "head"; }
    double forwardFlops(BatchShape shape) const override;
    void forward(const LayerPass& p, LayerStash& s, const void* x, const LayerFeed& feed) const override;
    void backwardInput(const LayerPass& p, LayerStash& s, const void* x, void* dx) override;
    void backwardWeight(const LayerPass& p, LayerStash& s, const void* x) override;

private:
    int m_vocab, m_channels, m_columns;
    Norm m_norm;
    int m_first = 0; ///< this rank's first vocabulary row
    int m_real = 0; ///< its real (unpadded) columns of the logits
    mutable std::vector<std::int32_t> m_local; ///< the targets as this rank's columns (-1: another's)
};

} // namespace pw::engine
