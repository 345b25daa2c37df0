// SPDX-License-Identifier: MIT
// The CPU kernels of GPT-2 training, fp32, forward and backward (llm.c's train_gpt2.c is the model; matrix
// products go through BLAS). Backward kernels accumulate (+=) into the parameters' gradients, so that gradients of
// several microbatches add up in place, and into the layer norm's input gradient (the residual's sum); the input
// gradients of the products, GELU and attention are written (=). Shapes: B sequences of T positions, C channels, NH
// heads.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "attention_shape.h"

namespace pw::engine::ops {

/// Threads BLAS may use (OpenBLAS's own pool); 0 keeps the library's default.
void setThreads(int threads);
int threads();
/// The BLAS the engine uses, for capabilities ("OpenBLAS 0.3.21 ..."); "none (why)" where OpenBLAS cannot be
/// loaded (then the CPU engine cannot train, and the agent does not offer the cpu backend).
std::string blasName();

/// out[b,t,:] = wte[token[b,t],:] + wpe[t,:]; wpe null (rotary positions): the token rows alone. A negative token
/// has no row here (another rank's, of a vocabulary-parallel table): its rows take wpe alone (or zeros), and the
/// backward adds nothing to dwte for it (dwpe still).
void encoderForward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C);
/// dwpe null: the token rows' gradient alone.
void encoderBackward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T, int C);

/// Layer norm over C with eps 1e-5; keeps mean and 1/std per position for the backward.
void layernormForward(
    float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int BT, int C);
/// dweight and dbias both null: dinp alone; dinp null: dweight and dbias alone (the split backward's I and W).
void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
    const float* weight, const float* mean, const float* rstd, int BT, int C);

/// RMSNorm over C: out = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps), kept per position.
void rmsnormForward(float* out, float* rstd, const float* inp, const float* weight, int BT, int C, float eps);
/// As layernormBackward: dweight null gives dinp alone (accumulated, +=), dinp null dweight alone (accumulated).
void rmsnormBackward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
    const float* rstd, int BT, int C);

/// Rotary position embedding in place (Hugging Face's Llama convention): in each of the first `heads` heads of hs
/// dimensions of every row (B T rows of `stride` elements), the pair (x_i, x_{i+hs/2}) at position t turns by the
/// angle of (t, i): x_i' = x_i cos - x_{i+hs/2} sin, x_{i+hs/2}' = x_{i+hs/2} cos + x_i sin. table: T x hs/2
/// cosines, then T x hs/2 sines. inverse turns by minus the angle: the transpose, so the backward of the forward.
void rotary(float* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse);

/// SwiGLU: out (BT x F) = SiLU(inp[:, :F]) * inp[:, F:], inp (BT x 2F): the gate's product, then the up one's.
void swigluForward(float* out, const float* inp, int BT, int F);
/// dinp (BT x 2F) written: the gate's and the up product's gradients.
void swigluBackward(float* dinp, const float* inp, const float* dout, int BT, int F);

/// out (BT x OC) = inp (BT x C) . weight^T (weight is OC x C, PyTorch's Linear) + bias (may be null).
void matmulForward(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC);
/// Each of dinp, dweight and dbias may be null: its part is then skipped. dinp is written, dweight and dbias
/// accumulated.
void matmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
    int BT, int C, int OC);

/// Causal self-attention, grouped-query when a.kv_heads < a.heads. qkv is (B, T, (NH + 2 KV) hs): all the query
/// heads, then the key heads, then the value heads, each a block of hs; query head h reads key and value head
/// h / (NH / KV). att (B, NH, T, T) keeps the softmax for the backward; out is (B, T, NH hs). Scores scaled by
/// 1/sqrt(hs).
void attentionForward(float* out, float* att, const float* qkv, const AttentionShape& a);
/// dqkv written; a key or value head's gradient sums its query heads' in head order. scratch: T x T floats.
void attentionBackward(
    float* dqkv, const float* dout, const float* qkv, const float* att, float* scratch, const AttentionShape& a);

/// GELU, tanh approximation.
void geluForward(float* out, const float* inp, int n);
/// dinp = GELU'(inp) * dout, written; dinp may be dout itself.
void geluBackward(float* dinp, const float* inp, const float* dout, int n);

/// out = a + b
void residualForward(float* out, const float* a, const float* b, int n);
/// out[i] = parts[0][i] + parts[1][i] + ... in this order (the device fabric's all-reduce); out may be a part.
void sumParts(float* out, std::span<const float* const> parts, std::size_t n);

/// Cross-entropy of logits (BT x V) against targets: writes each position's loss to losses and the softmax to
/// probs (BT x V; may alias logits). The padded vocabulary rows of llm.c's checkpoints never reach here: the head
/// multiplies by the first V rows of the embedding only.
void crossEntropyForward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int BT, int V);
/// Turns the softmax (BT x V) into the logits' gradient in place: (probs - onehot(target)) * scale, where scale
/// is d(loss)/d(each position's loss).
void crossEntropyBackward(float* probs, const std::int32_t* targets, float scale, int BT, int V);
/// A vocabulary-parallel rank's share of the cross-entropy (Megatron's): per row of `stride` logits whose first V are
/// this rank's real columns, stats[3 i ..] = (the row's max, the sum of exp(logit - max), the target's logit when
/// 0 <= targets[i] < V here, else 0). V may be 0 (a rank holding padding only: max -inf, sum 0).
void crossEntropyStats(float* stats, const float* logits, const std::int32_t* targets, int BT, int V, int stride);
/// From every rank's stats (ranks x BT x 3, in rank order): losses[i] = log(sum) + max - target logit over the
/// whole vocabulary, and this rank's row becomes, in place, (softmax - onehot) x scale (0 in its padded columns).
void crossEntropyFinish(float* losses, float* logits, const float* stats, int ranks, const std::int32_t* targets,
    int BT, int V, int stride, float scale);

} // namespace pw::engine::ops
