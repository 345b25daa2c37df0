// SPDX-License-Identifier: MIT
// Internal to engine/: the CUDA backend's kernel launchers (the .cu files), callable from host C++. Each takes the
// activation dtype in `Launch::act` (fp32, or bf16 in mixed precision) and untyped device pointers, as the Backend
// does, and enqueues its kernels on `Launch::stream` without waiting. Temporary device memory (reduction partials,
// the token sort, the attention's row dots) comes from `Launch::scratch`, which keeps its buffers between calls:
// after the first step nothing is allocated.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "../backend.h"

namespace pw::engine::cuda {

/// Device memory a launcher may use until its kernels have run (the stream orders every later use after them).
class Scratch
{
public:
    enum Slot : int { Partials, Reduce, Sort, AttentionDelta, GroupedQkv, GroupedGrad, CudnnWorkspace, SlotCount };
    virtual ~Scratch() = default;
    /// At least `bytes` of device memory (256-byte aligned) for `slot`; valid until the next get() of that slot.
    virtual void* get(Slot slot, std::size_t bytes) = 0;
};

/// Where and how a launcher runs.
struct Launch
{
    cudaStream_t stream = nullptr;
    int sms = 1; ///< the device's multiprocessors: grid-stride kernels size their grids by it
    int sharedOptin = 48 << 10; ///< the most dynamic shared memory a block may opt into, in bytes
    DType act = DType::F32;
    Scratch* scratch = nullptr;
};

void encoderForward(
    const Launch& l, void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C);
void encoderBackward(
    const Launch& l, void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C);

void layernormForward(const Launch& l, void* out, float* mean, float* rstd, const void* inp, const void* weight,
    const void* bias, int BT, int C);
/// dinp null: the weight and bias gradients alone; dweight and dbias null: dinp alone (the split backward).
void layernormBackward(const Launch& l, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
    const void* weight, const float* mean, const float* rstd, int BT, int C);
void rmsnormForward(
    const Launch& l, void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps);
/// dweight null: dinp alone; dinp null: dweight alone (both accumulated).
void rmsnormBackward(const Launch& l, void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
    const float* rstd, int BT, int C);
/// Backend::residualNormForward and Backend::normBackwardResidual (mean null: RMSNorm).
void residualNormForward(const Launch& l, void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
    const void* weight, const void* bias, int BT, int C, float eps);
void normBackwardResidual(const Launch& l, void* dinp, const void* dresidual, const void* dout, const void* inp,
    const void* weight, const float* mean, const float* rstd, int BT, int C);
/// Rotary embedding in place (ops::rotary).
void rotary(const Launch& l, void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse);
void swigluForward(const Launch& l, void* out, const void* inp, int BT, int F);
void swigluBackward(const Launch& l, void* dinp, const void* inp, const void* dout, int BT, int F);
/// Grouped-query attention through the multi-head kernels: qkv (B, T, (NH + 2 KV) hs) to (B, T, 3 NH hs), each
/// key and value head repeated for its group's query heads; and back for the gradient, a key or value head's the
/// sum of its group's in head order.
void expandGroups(const Launch& l, void* wide, const void* grouped, const AttentionShape& a);
void reduceGroups(const Launch& l, void* grouped, const void* wide, const AttentionShape& a);

/// dbias (cols) += the column sums of dout (rows x cols): the bias gradient of a matrix product.
void biasBackward(const Launch& l, void* dbias, const void* dout, int rows, int cols);

/// The fused causal attention: out (B, T, C) and the log-sum-exp of each row of scaled scores, lse (B, NH, T).
/// Grouped-query shapes (a.kv_heads < a.heads) go through expandGroups / reduceGroups around the multi-head kernels.
void attentionForward(const Launch& l, void* out, float* lse, const void* qkv, const AttentionShape& a);
void attentionBackward(const Launch& l, void* dqkv, const void* dout, const void* qkv, const void* out,
    const float* lse, const AttentionShape& a);

void geluForward(const Launch& l, void* out, const void* inp, std::size_t n);
void geluBackward(const Launch& l, void* dinp, const void* inp, const void* dout, std::size_t n);
void residualForward(const Launch& l, void* out, const void* a, const void* b, std::size_t n);
/// out = the parts summed in order in fp32 (at most 16 parts).
void sum(const Launch& l, void* out, std::span<const void* const> parts, std::size_t n);
void classifier(
    const Launch& l, float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale);
void classifierStats(
    const Launch& l, float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride);
void classifierFinish(const Launch& l, float* losses, void* logits, const float* stats, int ranks,
    const std::int32_t* targets, int BT, int V, int stride, float dscale);
void mean(const Launch& l, float* out, const float* x, std::size_t n);
void scale(const Launch& l, void* x, float factor, std::size_t n);
void sumSquares(const Launch& l, float* out, const void* x, std::size_t n);
void addDifference(const Launch& l, float* sum, const void* a, const void* b, std::size_t n);
void addUpdate(const Launch& l, void* params, float* master, const float* update, std::size_t n);
void adamw(const Launch& l, void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr,
    float beta1, float beta2, float eps, float decay_factor, float c1, float c2);
/// adamw over contiguous runs of up to 64 tensors a launch (Backend::adamwTensors).
void adamwTensors(const Launch& l, void* params, float* master, const void* grads, float* m, float* v,
    std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor, float c1,
    float c2);

} // namespace pw::engine::cuda
