// SPDX-License-Identifier: MIT
// Internal to engine/: device helpers every CUDA kernel file shares: the two element types and their conversions
// (arithmetic is fp32 always; bf16 is storage only, rounded to nearest even), 16-byte vector access, warp and block
// reductions, and grid sizes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_util.h"
#include "kernels.h"

namespace pw::engine::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float toFloat(float x)
{
    return x;
}
__device__ __forceinline__ float toFloat(bf16 x)
{
    return __bfloat162float(x);
}
template <class T> __device__ __forceinline__ T fromFloat(float x);
template <> __device__ __forceinline__ float fromFloat<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ bf16 fromFloat<bf16>(float x)
{
    return __float2bfloat16_rn(x);
}

/// N consecutive elements read or written as one aligned unit (one or two 128-bit accesses).
template <class T, int N> struct alignas(16) Chunk
{
    T e[N];
};

/// Reads p[0..N) as floats. N > 1 needs p 16-byte aligned and N * sizeof(T) a multiple of 16.
template <int N, class T> __device__ __forceinline__ void load(const T* p, float (&v)[N])
{
    if constexpr (N == 1) {
        v[0] = toFloat(*p);
    } else {
        static_assert(N * sizeof(T) % 16 == 0, "a vector access is whole 16-byte units");
        const Chunk<T, N> c = *reinterpret_cast<const Chunk<T, N>*>(p);
#pragma unroll
        for (int i = 0; i < N; ++i)
            v[i] = toFloat(c.e[i]);
    }
}

/// Writes v as p[0..N), rounded to T; the same alignment as load().
template <int N, class T> __device__ __forceinline__ void store(T* p, const float (&v)[N])
{
    if constexpr (N == 1) {
        *p = fromFloat<T>(v[0]);
    } else {
        static_assert(N * sizeof(T) % 16 == 0, "a vector access is whole 16-byte units");
        Chunk<T, N> c;
#pragma unroll
        for (int i = 0; i < N; ++i)
            c.e[i] = fromFloat<T>(v[i]);
        *reinterpret_cast<Chunk<T, N>*>(p) = c;
    }
}

__device__ __forceinline__ float warpSum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warpMax(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/// The sum over the block, returned to every thread; every thread of the block must call it (it synchronises).
/// The order of the additions depends only on the block's size, so the result is the same every run.
__device__ __forceinline__ float blockSum(float v)
{
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    v = warpSum(v);
    __syncthreads(); // an earlier blockSum of this kernel may still be reading `partial`
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    return warpSum(lane < warps ? partial[lane] : 0.0f);
}

/// Whether every non-null pointer is 16-byte aligned (vector accesses are allowed on all of them).
template <class... P> inline bool aligned16(const P*... p)
{
    return ((reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ...);
}

/// Blocks for a grid-stride loop over `work` items: enough to fill the device a few times over, never more than
/// the work needs.
inline unsigned gridFor(std::size_t work, int threads, int sms, int blocksPerSm = 8)
{
    const std::size_t needed = (work + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
    const std::size_t cap = static_cast<std::size_t>(std::max(sms, 1)) * static_cast<std::size_t>(blocksPerSm);
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min(needed, cap)));
}

/// The position half of the encoder's backward, dwpe += the batch's sum (elementwise.cu; encoder.cu does the rest).
void positionBackward(const Launch& l, void* dwpe, const void* dout, int B, int T, int C);

inline std::size_t ceilDiv(std::size_t a, std::size_t b)
{
    return (a + b - 1) / b;
}

} // namespace pw::engine::cuda
