// SPDX-License-Identifier: MIT
// The classifier: softmax, cross-entropy and the logits' gradient in one kernel, one block per row, in place. The
// first pass keeps a running maximum and a sum rescaled to it (each row is read once), the second reads the row
// again and overwrites it with (softmax - onehot(target)) x dscale, zero in the padded columns. Nothing but the row
// is ever written, so no fp32 logits of the batch exist. The vocabulary-parallel pair (classifierStats, then
// classifierFinish from every rank's stats) splits the same two passes at the group's all-gather.
#include <cmath>

#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr int kThreads = 512;

/// (m, s) then stands for s e^m: the running maximum and the sum of e^(x - m).
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2)
{
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) {
        m = mx;
        s = 0.0f;
        return;
    }
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

/// Every thread's (m, s) combined over the block (kThreads threads): each thread ends with the block's, in the same
/// order in every thread.
__device__ __forceinline__ void blockCombine(float& m, float& s)
{
    __shared__ float sharedMax[kThreads / 32], sharedSum[kThreads / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, m2, s2);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        sharedMax[warp] = m;
        sharedSum[warp] = s;
    }
    __syncthreads();
    m = lane < kThreads / 32 ? sharedMax[lane] : -INFINITY;
    s = lane < kThreads / 32 ? sharedSum[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, m2, s2);
    }
}

template <class T, int N>
__global__ void __launch_bounds__(kThreads)
    classifierKernel(float* losses, T* logits, const std::int32_t* targets, int V, int stride, float dscale)
{
    const std::size_t row = blockIdx.x;
    T* x = logits + row * static_cast<std::size_t>(stride);
    const int target = targets[row];
    // Read before the second pass overwrites the row (the block reduction below synchronises in between).
    const float targetLogit = threadIdx.x == 0 ? toFloat(x[target]) : 0.0f;

    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x * N; c < V; c += kThreads * N) {
        float v[N];
        load<N>(x + c, v); // a vector may run past V, never past stride (a multiple of N)
        float vmax = -INFINITY;
#pragma unroll
        for (int k = 0; k < N; ++k)
            if (c + k < V)
                vmax = fmaxf(vmax, v[k]);
        if (vmax > m) {
            s *= expf(m - vmax);
            m = vmax;
        }
#pragma unroll
        for (int k = 0; k < N; ++k)
            if (c + k < V)
                s += expf(v[k] - m);
    }
    blockCombine(m, s);
    // Every warp reduced the same values in the same order: m and s are the row's in every thread.
    const float inv = 1.0f / s;
    for (int c = threadIdx.x * N; c < stride; c += kThreads * N) {
        float v[N];
        load<N>(x + c, v);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const int j = c + k;
            float g = 0.0f;
            if (j < V) {
                g = expf(v[k] - m) * inv * dscale;
                if (j == target)
                    g -= dscale;
            }
            v[k] = g;
        }
        store<N>(x + c, v);
    }
    if (threadIdx.x == 0)
        losses[row] = logf(s) + m - targetLogit;
}

/// One block per row: (max, sum of e^(x - max), the target's logit when it is here) of this rank's V columns.
template <class T>
__global__ void __launch_bounds__(kThreads)
    statsKernel(float* stats, const T* logits, const std::int32_t* targets, int V, int stride)
{
    const std::size_t row = blockIdx.x;
    const T* x = logits + row * static_cast<std::size_t>(stride);
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < V; c += kThreads)
        combine(m, s, toFloat(x[c]), 1.0f);
    blockCombine(m, s);
    if (threadIdx.x == 0) {
        const int target = targets[row];
        stats[3 * row] = m;
        stats[3 * row + 1] = s;
        stats[3 * row + 2] = target >= 0 && target < V ? toFloat(x[target]) : 0.0f;
    }
}

/// One block per row: every rank's stats combined (in rank order), the loss, and the row's gradient in place.
template <class T>
__global__ void __launch_bounds__(kThreads) finishKernel(float* losses, T* logits, const float* stats, int ranks,
    const std::int32_t* targets, int BT, int V, int stride, float dscale)
{
    const std::size_t row = blockIdx.x;
    float m = -INFINITY, s = 0.0f, targetLogit = 0.0f;
    for (int r = 0; r < ranks; ++r) {
        const float* st = stats + (static_cast<std::size_t>(r) * BT + row) * 3;
        combine(m, s, st[0], st[1]);
        targetLogit += st[2];
    }
    T* x = logits + row * static_cast<std::size_t>(stride);
    const int target = targets[row];
    const float inv = 1.0f / s;
    for (int j = threadIdx.x; j < stride; j += kThreads) {
        float g = 0.0f;
        if (j < V) {
            g = expf(toFloat(x[j]) - m) * inv * dscale;
            if (j == target)
                g -= dscale;
        }
        float v[1] = {g};
        store<1>(x + j, v);
    }
    if (threadIdx.x == 0)
        losses[row] = logf(s) + m - targetLogit;
}

} // namespace

void classifierStats(
    const Launch& l, float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride)
{
    if (BT <= 0)
        return;
    if (l.act == DType::BF16)
        statsKernel<bf16><<<BT, kThreads, 0, l.stream>>>(stats, static_cast<const bf16*>(logits), targets, V, stride);
    else
        statsKernel<float><<<BT, kThreads, 0, l.stream>>>(stats, static_cast<const float*>(logits), targets, V, stride);
    PW_CUDA_LAUNCHED();
}

void classifierFinish(const Launch& l, float* losses, void* logits, const float* stats, int ranks,
    const std::int32_t* targets, int BT, int V, int stride, float dscale)
{
    if (BT <= 0)
        return;
    if (l.act == DType::BF16)
        finishKernel<bf16><<<BT, kThreads, 0, l.stream>>>(
            losses, static_cast<bf16*>(logits), stats, ranks, targets, BT, V, stride, dscale);
    else
        finishKernel<float><<<BT, kThreads, 0, l.stream>>>(
            losses, static_cast<float*>(logits), stats, ranks, targets, BT, V, stride, dscale);
    PW_CUDA_LAUNCHED();
}

void classifier(
    const Launch& l, float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale)
{
    if (BT <= 0)
        return;
    auto run = [&](auto type) {
        using E = decltype(type);
        auto* x = static_cast<E*>(logits);
        if (stride % 8 == 0 && aligned16(x))
            classifierKernel<E, 8><<<BT, kThreads, 0, l.stream>>>(losses, x, targets, V, stride, dscale);
        else
            classifierKernel<E, 1><<<BT, kThreads, 0, l.stream>>>(losses, x, targets, V, stride, dscale);
        PW_CUDA_LAUNCHED();
    };
    if (l.act == DType::BF16)
        run(bf16 {});
    else
        run(float {});
}

} // namespace pw::engine::cuda
