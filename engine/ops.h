// SPDX-License-Identifier: MIT
// The CPU kernels of GPT-2 training, fp32, forward and backward (llm.c's train_gpt2.c is the model; matrix
// products go through BLAS). Backward kernels accumulate (+=) into the parameters' gradients, so that gradients of
// several microbatches add up in place, and into the layer norm's input gradient (the residual's sum); the input
// gradients of the products, GELU and attention are written (=). Shapes: B sequences of T positions, C channels, NH
// heads.
#pragma once

#include <cstdint>
#include <string>

namespace pw::engine::ops {

/// Threads BLAS may use (OpenBLAS's own pool); 0 keeps the library's default.
void setThreads(int threads);
int threads();
/// The BLAS the engine uses, for capabilities ("OpenBLAS 0.3.21 ..."); "none (why)" where OpenBLAS cannot be
/// loaded (then the CPU engine cannot train, and the agent does not offer the cpu backend).
std::string blasName();

/// out[b,t,:] = wte[token[b,t],:] + wpe[t,:]
void encoderForward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C);
void encoderBackward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T, int C);

/// Layer norm over C with eps 1e-5; keeps mean and 1/std per position for the backward.
void layernormForward(
    float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int BT, int C);
/// dweight and dbias both null: dinp alone; dinp null: dweight and dbias alone (the split backward's I and W).
void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
    const float* weight, const float* mean, const float* rstd, int BT, int C);

/// out (BT x OC) = inp (BT x C) . weight^T (weight is OC x C, PyTorch's Linear) + bias (may be null).
void matmulForward(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC);
/// Each of dinp, dweight and dbias may be null: its part is then skipped. dinp is written, dweight and dbias
/// accumulated.
void matmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
    int BT, int C, int OC);

/// Causal multi-head self-attention. qkv is (B, T, 3C): all of q, then k, then v, heads consecutive blocks of
/// C/NH. att (B, NH, T, T) keeps the softmax for the backward; out is (B, T, C). Scores scaled by 1/sqrt(C/NH).
void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
/// scratch: T x T floats.
void attentionBackward(
    float* dqkv, const float* dout, const float* qkv, const float* att, float* scratch, int B, int T, int C, int NH);

/// GELU, tanh approximation.
void geluForward(float* out, const float* inp, int n);
/// dinp = GELU'(inp) * dout, written; dinp may be dout itself.
void geluBackward(float* dinp, const float* inp, const float* dout, int n);

/// out = a + b
void residualForward(float* out, const float* a, const float* b, int n);

/// Cross-entropy of logits (BT x V) against targets: writes each position's loss to losses and the softmax to
/// probs (BT x V; may alias logits). The padded vocabulary rows of llm.c's checkpoints never reach here: the head
/// multiplies by the first V rows of the embedding only.
void crossEntropyForward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int BT, int V);
/// Turns the softmax (BT x V) into the logits' gradient in place: (probs - onehot(target)) * scale, where scale
/// is d(loss)/d(each position's loss).
void crossEntropyBackward(float* probs, const std::int32_t* targets, float scale, int BT, int V);

} // namespace pw::engine::ops
