// SPDX-License-Identifier: MIT
// Internal to engine/cuda/: the fused attention's tensor-core path (attention_mma.cu), called by attention.cu.
#pragma once

#include "common.cuh"

namespace pw::engine::cuda {

/// Whether the tensor-core kernels take this call: bf16, a head of 64 or 128, every row 16-byte aligned.
bool useMma(const Launch& l, int hs, const void* a, const void* b, const void* c = nullptr, const void* d = nullptr);
/// The forward (head of 64 or 128: C / NH) and the backward's two kernels, as attention.cu's generic ones.
void attentionForwardMma(const Launch& l, bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH);
void attentionBackwardMma(const Launch& l, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
    const float* delta, int B, int T, int C, int NH);

} // namespace pw::engine::cuda
