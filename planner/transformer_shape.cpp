// SPDX-License-Identifier: MIT
#include "transformer_shape.h"

namespace pw::planner {

std::vector<BlockProduct> blockProducts(const TransformerConfig& c)
{
    const double h = c.hidden, f = c.ffnHidden();
    const double kv = static_cast<double>(c.kvHeads()) * c.headDim();
    const bool all = c.bias == BiasKind::All;
    const double up = c.mlp == MlpKind::SwiGlu ? 2 * f : f; // SwiGLU's gate and up products side by side
    return {
        {"qkv", h + 2 * kv, h, true, c.bias != BiasKind::None},
        {"attention_projection", h, h, false, all},
        {"mlp_up", up, h, true, all},
        {"mlp_down", h, f, false, all},
    };
}

double normParameters(const TransformerConfig& c)
{
    const double h = c.hidden;
    return c.norm == NormKind::LayerNorm && c.bias != BiasKind::None ? 2 * h : h;
}

TransformerParameters transformerParameters(const TransformerConfig& c)
{
    c.validate();
    const double h = c.hidden, V = c.vocab;
    TransformerParameters p;
    p.embedding = V * h;
    p.positions = c.positions == PositionKind::Learned ? static_cast<double>(c.positionRows()) * h : 0.0;
    for (const auto& product : blockProducts(c))
        p.per_layer += product.n * product.k + (product.bias ? product.n : 0.0);
    p.per_layer += 2 * normParameters(c);
    p.final_norm = normParameters(c);
    p.head = c.tied_embeddings ? 0.0 : V * h;
    p.layers = c.layers;
    return p;
}

double attentionCoreFlops(const TransformerConfig& c, double microbatch)
{
    const double s = c.sequence;
    // Scores Q K^T and their product with V, 2 s^2 per head dimension of every query head each.
    return 4.0 * microbatch * s * s * static_cast<double>(c.heads) * c.headDim();
}

double blockForwardFlops(const TransformerConfig& c, double microbatch)
{
    const double tokens = microbatch * c.sequence;
    double flops = 0;
    for (const auto& p : blockProducts(c))
        flops += 2.0 * tokens * p.n * p.k;
    return flops + attentionCoreFlops(c, microbatch);
}

double headForwardFlops(const TransformerConfig& c, double microbatch)
{
    return 2.0 * microbatch * c.sequence * static_cast<double>(c.hidden) * c.vocab;
}

ActivationParts blockActivations(const TransformerConfig& c)
{
    const double tokens = static_cast<double>(c.microbatch) * c.sequence;
    const double e = c.bytes_per_element, h = c.hidden, f = c.ffnHidden(), a = c.heads, s = c.sequence;
    const double kv = static_cast<double>(c.kvHeads()) * c.headDim();
    const double mask = c.dropout ? 1.0 : 0.0; // one byte per value
    // A product's input kept for its weight gradient: e bytes per value, or with FP8 products the 1-byte transposed
    // copy Transformer Engine made for that product (its Linear saves the FP8 input, not the 16-bit one).
    const double q = c.fp8 ? 1.0 : e;
    ActivationParts parts;
    // The two norms' inputs, QKV's input (the first norm's output), the MLP up product's input (the second's) and
    // the dropout masks after the attention projection and after the MLP: Korthikanti's 2+2 + 2 + 2 + 1+1 = 10 s b h.
    parts.replicated = tokens * ((2 * e + 2 * q) * h + 2 * mask * h);
    // Q and K for the scores (h + kv), V (kv), the attention output that its projection reads (h); the MLP's inner
    // values: GELU's input and output (2f), SwiGLU's gate and up outputs and their product (3f), the last of them the
    // down product's input. GPT: 4+2+2+16 = 24.
    const double inner = c.mlp == MlpKind::SwiGlu ? 3 * f : 2 * f;
    parts.sharded = tokens * (e * (h + kv + kv) + q * h + e * (inner - f) + q * f);
    // The core: a flash-style kernel keeps a 4-byte log-sum-exp per head and token (its dropout mask is regenerated
    // from the seed); materialized, the softmax output (e per score), with dropout its mask (1) and output (e).
    parts.attention_core = c.flash_attention ? tokens * 4 * a : tokens * a * s * (c.dropout ? 2 * e + 1 : e);
    parts.input = tokens * e * h;
    return parts;
}

double blockFp8WeightBytes(const TransformerConfig& c)
{
    if (!c.fp8)
        return 0.0;
    // Transformer Engine's delayed scaling keeps, per product, an amax history and a scale and its inverse for each of
    // its FP8 tensors: input, weight and output in the forward, output and input gradients in the backward (5), in
    // fp32, with DelayedScaling's default history of 1,024 steps.
    constexpr double kScalingStateBytes = 5 * (1024 + 2) * 4.0;
    double bytes = 0;
    for (const auto& p : blockProducts(c))
        bytes += 2 * p.n * p.k + kScalingStateBytes; // the FP8 weight and its transpose, 1 byte each
    return bytes;
}

double megatronParameterCount(const TransformerConfig& c)
{
    c.validate();
    const double l = c.layers, h = c.hidden, V = c.vocab, s = c.sequence;
    return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

} // namespace pw::planner
