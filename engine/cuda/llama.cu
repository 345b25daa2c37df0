// SPDX-License-Identifier: MIT
// The Llama family's element-wise kernels: rotary embeddings (in place on the query and key heads of qkv), SwiGLU
// forward and backward, and the copies that run grouped-query attention through the multi-head kernels. Each is the
// CUDA twin of its CPU op (ops.cpp), fp32 arithmetic in the same order; one thread per output element or pair.
#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr int kThreads = 256;

template <class F> void dispatch(DType act, F&& f)
{
    if (act == DType::BF16)
        f(bf16 {});
    else
        f(float {});
}

/// One thread per (row, head, i < hs/2): the pair (i, i + hs/2) turned by the angle of (t, i), or back.
template <class T>
__global__ void rotaryKernel(
    T* x, const float* table, std::size_t pairs, int T_, int heads, int half, int stride, float sign)
{
    for (std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
         p += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(p % half);
        const std::size_t rh = p / half;
        const int h = static_cast<int>(rh % heads);
        const std::size_t row = rh / heads;
        const int t = static_cast<int>(row % T_);
        T* head = x + row * stride + static_cast<std::size_t>(h) * 2 * half;
        const float c = table[static_cast<std::size_t>(t) * half + i];
        const float s = sign * table[(static_cast<std::size_t>(T_) + t) * half + i];
        const float a = toFloat(head[i]), b = toFloat(head[i + half]);
        head[i] = fromFloat<T>(a * c - b * s);
        head[i + half] = fromFloat<T>(b * c + a * s);
    }
}

template <class T> __global__ void swigluForwardKernel(T* out, const T* inp, std::size_t n, int F)
{
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const std::size_t row = i / F, j = i % F;
        const float g = toFloat(inp[row * 2 * F + j]), u = toFloat(inp[row * 2 * F + F + j]);
        out[i] = fromFloat<T>(g / (1.0f + expf(-g)) * u);
    }
}

template <class T> __global__ void swigluBackwardKernel(T* dinp, const T* inp, const T* dout, std::size_t n, int F)
{
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const std::size_t row = i / F, j = i % F;
        const float g = toFloat(inp[row * 2 * F + j]), u = toFloat(inp[row * 2 * F + F + j]);
        const float d = toFloat(dout[i]);
        const float sig = 1.0f / (1.0f + expf(-g));
        dinp[row * 2 * F + F + j] = fromFloat<T>(d * g * sig);
        dinp[row * 2 * F + j] = fromFloat<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
    }
}

/// One thread per element of the wide (B, T, 3 NH hs) qkv: its query, key or value head h reads the grouped row's
/// query head h, or key / value head h / group.
template <class T> __global__ void expandKernel(T* wide, const T* grouped, std::size_t n, int NH, int KV, int hs)
{
    const int C = NH * hs, W = (NH + 2 * KV) * hs, group = NH / KV;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const std::size_t row = i / (3 * C);
        const int col = static_cast<int>(i % (3 * C));
        const int part = col / C, h = (col % C) / hs, d = col % hs;
        const int from = part == 0 ? h * hs + d : (NH + (part - 1) * KV + h / group) * hs + d;
        wide[i] = grouped[row * W + from];
    }
}

/// One thread per element of the grouped gradient: a query head's copied, a key or value head's summed over its
/// group's wide heads in order.
template <class T> __global__ void reduceKernel(T* grouped, const T* wide, std::size_t n, int NH, int KV, int hs)
{
    const int C = NH * hs, W = (NH + 2 * KV) * hs, group = NH / KV;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const std::size_t row = i / W;
        const int col = static_cast<int>(i % W);
        const T* in = wide + row * 3 * C;
        if (col < C) {
            grouped[i] = in[col];
            continue;
        }
        const int part = (col - C) / (KV * hs); // 0: keys, 1: values
        const int g = ((col - C) % (KV * hs)) / hs, d = col % hs;
        float sum = 0.0f;
        for (int k = 0; k < group; ++k)
            sum += toFloat(in[(1 + part) * C + (g * group + k) * hs + d]);
        grouped[i] = fromFloat<T>(sum);
    }
}

unsigned blocksFor(const Launch& l, std::size_t n)
{
    return gridFor(n, kThreads, l.sms);
}

} // namespace

void rotary(const Launch& l, void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse)
{
    const std::size_t pairs = static_cast<std::size_t>(B) * T * heads * (hs / 2);
    if (pairs == 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        rotaryKernel<E><<<blocksFor(l, pairs), kThreads, 0, l.stream>>>(
            static_cast<E*>(x), table, pairs, T, heads, hs / 2, stride, inverse ? -1.0f : 1.0f);
        PW_CUDA_LAUNCHED();
    });
}

void swigluForward(const Launch& l, void* out, const void* inp, int BT, int F)
{
    const std::size_t n = static_cast<std::size_t>(BT) * F;
    if (n == 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        swigluForwardKernel<E>
            <<<blocksFor(l, n), kThreads, 0, l.stream>>>(static_cast<E*>(out), static_cast<const E*>(inp), n, F);
        PW_CUDA_LAUNCHED();
    });
}

void swigluBackward(const Launch& l, void* dinp, const void* inp, const void* dout, int BT, int F)
{
    const std::size_t n = static_cast<std::size_t>(BT) * F;
    if (n == 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        swigluBackwardKernel<E><<<blocksFor(l, n), kThreads, 0, l.stream>>>(
            static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout), n, F);
        PW_CUDA_LAUNCHED();
    });
}

void expandGroups(const Launch& l, void* wide, const void* grouped, const AttentionShape& a)
{
    const std::size_t n = a.rows() * 3 * static_cast<std::size_t>(a.channels());
    if (n == 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        expandKernel<E><<<blocksFor(l, n), kThreads, 0, l.stream>>>(
            static_cast<E*>(wide), static_cast<const E*>(grouped), n, a.heads, a.kv_heads, a.head_size);
        PW_CUDA_LAUNCHED();
    });
}

void reduceGroups(const Launch& l, void* grouped, const void* wide, const AttentionShape& a)
{
    const std::size_t n = a.rows() * static_cast<std::size_t>(a.qkvColumns());
    if (n == 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        reduceKernel<E><<<blocksFor(l, n), kThreads, 0, l.stream>>>(
            static_cast<E*>(grouped), static_cast<const E*>(wide), n, a.heads, a.kv_heads, a.head_size);
        PW_CUDA_LAUNCHED();
    });
}

} // namespace pw::engine::cuda
