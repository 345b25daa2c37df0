// SPDX-License-Identifier: MIT
// The arithmetic of a decoder-only transformer, written once for every family (TransformerConfig): its matrix
// products, exact parameter counts, FLOPs and the activations its backward keeps. The profile generator
// (io/transformer.h), the GPU cost model (gpu_cost_model.h) and the FLOP counts (analysis/flops.h) read it.
#pragma once

#include <string_view>
#include <vector>

#include "model_profile.h"

namespace pw::planner {

/// @brief One weight product of a block: X (tokens x k) W (k x n), split over a tensor-parallel group by its columns
/// (QKV, MLP up: each rank computes n / t outputs) or by its rows (attention projection, MLP down: each rank sums k / t
/// inputs, the group all-reduces the output).
struct BlockProduct
{
    std::string_view name;
    double n = 0; ///< outputs per token
    double k = 0; ///< inputs per token
    bool column_parallel = false;
    bool bias = false; ///< the product adds a bias of n values

    bool operator==(const BlockProduct&) const = default;
};

/// A block's products in forward order: QKV (n = h + 2 kv_heads x head_dim: grouped-query attention shrinks K and
/// V), the attention projection (h x h), the MLP's up (f, or 2f for SwiGLU's gate and up, one product as Megatron
/// fuses them) and down (f -> h) products.
std::vector<BlockProduct> blockProducts(const TransformerConfig& config);

/// @brief Parameters of a model by part, exact (every weight, bias and norm scale the real model has).
struct TransformerParameters
{
    double embedding = 0; ///< the token embedding, vocab x hidden
    double positions = 0; ///< a learned position table (positionRows() x hidden); 0 with rotary positions
    double per_layer = 0; ///< one block: its products, their biases and its two norms
    double final_norm = 0; ///< the norm before the head
    double head = 0; ///< the head's own output projection (vocab x hidden) when untied; 0 when tied
    int layers = 0;

    double total() const { return embedding + positions + layers * per_layer + final_norm + head; }

    bool operator==(const TransformerParameters&) const = default;
};

TransformerParameters transformerParameters(const TransformerConfig& config);
/// Parameters of one norm: LayerNorm's scale and shift (2h; h without biases), RMSNorm's scale (h).
double normParameters(const TransformerConfig& config);

/// Forward FLOPs of one block for `microbatch` x sequence tokens: 2 per multiply-add of every product (2 T n k) and
/// the attention's score and value products over the whole sequence, 4 B s^2 (heads x head_dim), causal or not
/// (Megatron's and PaLM's convention; GPT: 24 B s h^2 + 4 B s^2 h).
double blockForwardFlops(const TransformerConfig& config, double microbatch);
/// The attention's score and value products alone (4 B s^2 heads x head_dim): what selective recomputation runs again.
double attentionCoreFlops(const TransformerConfig& config, double microbatch);
/// Forward FLOPs of the logits, 2 B s h V.
double headForwardFlops(const TransformerConfig& config, double microbatch);

/// The activations one block keeps for its backward per microbatch (at config.microbatch), in the parts that tensor
/// and sequence parallelism and each recomputation granularity treat differently (ActivationParts): Korthikanti et
/// al. (2022, section 4) generalised to grouped-query attention, SwiGLU, flash attention and models without dropout.
/// With 2-byte elements, dropout and materialized scores they add up to the paper's s b h (34 + 5 a s / h). With
/// FP8 products their four inputs are kept as 1-byte copies (GPT: s b h (27 + 5 a s / h) with materialized scores).
ActivationParts blockActivations(const TransformerConfig& config);

/// What one block keeps through a step for its FP8 products besides its weights (Layer::fp8_weight_bytes): each
/// product's weight cast to FP8 and its transpose (2 bytes per weight) and its delayed-scaling state; 0 without fp8.
double blockFp8WeightBytes(const TransformerConfig& config);

/// Megatron's Eq. 4.3, 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)): a GPT's parameters without its final norm.
/// The exact count of any family is transformerParameters(config).total().
double megatronParameterCount(const TransformerConfig& config);

} // namespace pw::planner
