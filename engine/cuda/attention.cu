// SPDX-License-Identifier: MIT
// Causal self-attention, fused (flash attention's scheme): the forward streams key/value tiles past each query
// row with an online softmax and keeps only the output and each row's log-sum-exp (B NH T floats, never T x T);
// the backward recomputes the probabilities from the log-sum-exp. qkv is (B, T, 3C): q, then k, then v, heads
// consecutive blocks of hs = C / NH; scores are scaled by 1/sqrt(hs).
//
// Two implementations:
// - bf16 with hs 64 or 128 (GPT-2's and most models'; attention_mma.cu): tensor cores through mma.sync m16n8k16 (bf16
// in, fp32
//   accumulators), tiles of 64 queries x 64 keys in shared memory loaded with ldmatrix, four warps of 16 query (or
//   key) rows per block. The backward is two kernels, both deterministic (no atomics): one per key tile for dK and
//   dV (it walks the query tiles at or after it), one per query tile for dQ (it walks the key tiles up to it);
//   each recomputes the probabilities, which costs two more products than an atomic dQ but keeps every sum in a
//   fixed order and needs no fp32 dQ buffer.
// - everything else (fp32, the backend's testing mode, and any other head size): one warp per row on CUDA cores,
//   fp32 throughout, the same online softmax and the same split of the backward.
// Both write the log-sum-exp in natural-log units of the scaled scores, so either backward reads either forward's.
// (In bf16 the backend runs cuDNN's fused attention first, cudnn_attention.cpp, which reads grouped shapes directly;
// these kernels are its fallback and oracle.)
// Grouped-query attention (fewer key and value heads than query heads) runs the multi-head kernels on a copy of qkv
// whose key and value heads are repeated per query head (expandGroups), and sums the copy's key and value gradients
// back over each group in head order (reduceGroups, llama.cu): deterministic, at the cost of the copy.
#include <cmath>

#include "attention_mma.cuh"
#include "common.cuh"

namespace pw::engine::cuda {

namespace {

// ---- The generic path: one warp per query (or key) row -------------------------------------------------------

/// The block's warps for rows of `floatsPerWarp` shared floats each: four when they fit, fewer for huge heads.
int genericWarps(std::size_t floatsPerWarp, int sharedOptin)
{
    const std::size_t perWarp = floatsPerWarp * sizeof(float);
    const int warps = static_cast<int>(std::min<std::size_t>(4, static_cast<std::size_t>(sharedOptin) / perWarp));
    if (warps < 1)
        throw std::runtime_error("attention: a head of " + std::to_string(floatsPerWarp)
            + " shared floats per row does not fit the GPU's shared memory");
    return warps;
}

/// Forward, one warp per query row t: lanes score 32 keys at a time, the warp keeps the running max m and sum l,
/// and each lane accumulates the output dimensions d = lane (mod 32) in shared memory.
template <class T>
__global__ void attentionForwardGeneric(T* out, float* lse, const T* qkv, int T_, int C, int NH, float scale)
{
    extern __shared__ float shared[];
    const int hs = C / NH;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = blockIdx.y * warps + warp;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    if (t >= T_)
        return; // whole warps only; nothing below synchronises the block
    float* qs = shared + static_cast<std::size_t>(warp) * (2 * hs + 32);
    float* os = qs + hs;
    float* ps = os + hs;
    const std::size_t C3 = 3 * static_cast<std::size_t>(C);
    const T* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * hs;
    for (int d = lane; d < hs; d += 32) {
        qs[d] = toFloat(base[static_cast<std::size_t>(t) * C3 + d]);
        os[d] = 0.0f;
    }
    __syncwarp();
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= t; j0 += 32) {
        const int nj = min(32, t - j0 + 1);
        float s = -INFINITY;
        if (lane < nj) {
            const T* k = base + static_cast<std::size_t>(j0 + lane) * C3 + C;
            float dot = 0.0f;
            for (int d = 0; d < hs; ++d)
                dot += qs[d] * toFloat(k[d]);
            s = dot * scale;
        }
        const float mNew = fmaxf(m, warpMax(s)); // finite: lane 0 always has a key
        const float p = lane < nj ? expf(s - mNew) : 0.0f;
        const float alpha = expf(m - mNew); // 0 on the first tile (m = -inf)
        l = l * alpha + warpSum(p);
        ps[lane] = p;
        __syncwarp();
        const T* v = base + static_cast<std::size_t>(j0) * C3 + 2 * C;
        for (int d = lane; d < hs; d += 32) {
            float acc = os[d] * alpha;
            for (int jj = 0; jj < nj; ++jj)
                acc += ps[jj] * toFloat(v[static_cast<std::size_t>(jj) * C3 + d]);
            os[d] = acc;
        }
        __syncwarp();
        m = mNew;
    }
    T* o = out + (static_cast<std::size_t>(b) * T_ + t) * C + static_cast<std::size_t>(h) * hs;
    const float inv = 1.0f / l;
    for (int d = lane; d < hs; d += 32)
        o[d] = fromFloat<T>(os[d] * inv);
    if (lane == 0)
        lse[static_cast<std::size_t>(bh) * T_ + t] = m + logf(l);
}

/// delta[b, h, t] = dout[b, t, h] . out[b, t, h]: the softmax backward's row term (sum_j P dP = dO . O). One warp
/// per row, its lanes over the head's dimensions (coalesced: a thread per row read hs scattered elements one by one).
template <class T>
__global__ void attentionDelta(float* delta, const T* dout, const T* out, int B, int T_, int C, int NH)
{
    const std::size_t i = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x % 32);
    if (i >= static_cast<std::size_t>(B) * T_ * NH)
        return; // the whole warp: blocks are whole warps
    const int hs = C / NH;
    const int h = static_cast<int>(i % NH);
    const std::size_t bt = i / NH;
    const int b = static_cast<int>(bt / T_), t = static_cast<int>(bt % T_);
    const std::size_t offset = bt * C + static_cast<std::size_t>(h) * hs;
    float sum = 0.0f;
    for (int d = lane; d < hs; d += 32)
        sum += toFloat(dout[offset + d]) * toFloat(out[offset + d]);
    sum = warpSum(sum);
    if (lane == 0)
        delta[(static_cast<std::size_t>(b) * NH + h) * T_ + t] = sum;
}

/// dQ, one warp per query row t: dq = scale sum_j P_tj (dP_tj - delta_t) k_j, over keys j <= t.
template <class T>
__global__ void attentionBackwardQueryGeneric(
    T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int T_, int C, int NH, float scale)
{
    extern __shared__ float shared[];
    const int hs = C / NH;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = blockIdx.y * warps + warp;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    if (t >= T_)
        return;
    float* qs = shared + static_cast<std::size_t>(warp) * (3 * hs + 32);
    float* dos = qs + hs;
    float* acc = dos + hs;
    float* ps = acc + hs;
    const std::size_t C3 = 3 * static_cast<std::size_t>(C);
    const T* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * hs;
    const T* dy = dout + (static_cast<std::size_t>(b) * T_ + t) * C + static_cast<std::size_t>(h) * hs;
    for (int d = lane; d < hs; d += 32) {
        qs[d] = toFloat(base[static_cast<std::size_t>(t) * C3 + d]);
        dos[d] = toFloat(dy[d]);
        acc[d] = 0.0f;
    }
    __syncwarp();
    const float L = lse[static_cast<std::size_t>(bh) * T_ + t];
    const float D = delta[static_cast<std::size_t>(bh) * T_ + t];
    for (int j0 = 0; j0 <= t; j0 += 32) {
        const int nj = min(32, t - j0 + 1);
        float ds = 0.0f;
        if (lane < nj) {
            const T* k = base + static_cast<std::size_t>(j0 + lane) * C3 + C;
            const T* v = k + C;
            float qk = 0.0f, dv = 0.0f;
            for (int d = 0; d < hs; ++d) {
                qk += qs[d] * toFloat(k[d]);
                dv += dos[d] * toFloat(v[d]);
            }
            ds = expf(qk * scale - L) * (dv - D);
        }
        ps[lane] = ds;
        __syncwarp();
        const T* k = base + static_cast<std::size_t>(j0) * C3 + C;
        for (int d = lane; d < hs; d += 32) {
            float a = acc[d];
            for (int jj = 0; jj < nj; ++jj)
                a += ps[jj] * toFloat(k[static_cast<std::size_t>(jj) * C3 + d]);
            acc[d] = a;
        }
        __syncwarp();
    }
    T* dq = dqkv + (static_cast<std::size_t>(b) * T_ + t) * C3 + static_cast<std::size_t>(h) * hs;
    for (int d = lane; d < hs; d += 32)
        dq[d] = fromFloat<T>(scale * acc[d]);
}

/// dK and dV, one warp per key row j, over queries t >= j: dv = sum_t P_tj dO_t, dk = scale sum_t dS_tj q_t.
template <class T>
__global__ void attentionBackwardKeyGeneric(
    T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int T_, int C, int NH, float scale)
{
    extern __shared__ float shared[];
    const int hs = C / NH;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = blockIdx.y * warps + warp;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    if (j >= T_)
        return;
    float* ks = shared + static_cast<std::size_t>(warp) * (4 * hs + 64);
    float* vs = ks + hs;
    float* dk = vs + hs;
    float* dv = dk + hs;
    float* ps = dv + hs;
    float* dss = ps + 32;
    const std::size_t C3 = 3 * static_cast<std::size_t>(C);
    const T* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * hs;
    const T* dyBase = dout + static_cast<std::size_t>(b) * T_ * C + static_cast<std::size_t>(h) * hs;
    const float* L = lse + static_cast<std::size_t>(bh) * T_;
    const float* D = delta + static_cast<std::size_t>(bh) * T_;
    for (int d = lane; d < hs; d += 32) {
        ks[d] = toFloat(base[static_cast<std::size_t>(j) * C3 + C + d]);
        vs[d] = toFloat(base[static_cast<std::size_t>(j) * C3 + 2 * C + d]);
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    __syncwarp();
    for (int t0 = j; t0 < T_; t0 += 32) {
        const int nt = min(32, T_ - t0);
        float p = 0.0f, ds = 0.0f;
        if (lane < nt) {
            const int t = t0 + lane;
            const T* q = base + static_cast<std::size_t>(t) * C3;
            const T* dy = dyBase + static_cast<std::size_t>(t) * C;
            float qk = 0.0f, dpv = 0.0f;
            for (int d = 0; d < hs; ++d) {
                qk += toFloat(q[d]) * ks[d];
                dpv += toFloat(dy[d]) * vs[d];
            }
            p = expf(qk * scale - L[t]);
            ds = p * (dpv - D[t]);
        }
        ps[lane] = p;
        dss[lane] = ds;
        __syncwarp();
        const T* q = base + static_cast<std::size_t>(t0) * C3;
        const T* dy = dyBase + static_cast<std::size_t>(t0) * C;
        for (int d = lane; d < hs; d += 32) {
            float a = dv[d], g = dk[d];
            for (int tt = 0; tt < nt; ++tt) {
                a += ps[tt] * toFloat(dy[static_cast<std::size_t>(tt) * C + d]);
                g += dss[tt] * toFloat(q[static_cast<std::size_t>(tt) * C3 + d]);
            }
            dv[d] = a;
            dk[d] = g;
        }
        __syncwarp();
    }
    T* dkRow = dqkv + (static_cast<std::size_t>(b) * T_ + j) * C3 + C + static_cast<std::size_t>(h) * hs;
    T* dvRow = dkRow + C;
    for (int d = lane; d < hs; d += 32) {
        dkRow[d] = fromFloat<T>(scale * dk[d]);
        dvRow[d] = fromFloat<T>(dv[d]);
    }
}

template <class Kernel> void allowGenericShared(Kernel kernel, std::size_t bytes, int optin)
{
    if (bytes > (48u << 10)) {
        if (bytes > static_cast<std::size_t>(optin))
            throw std::runtime_error("attention: the head is too large for the GPU's shared memory");
        PW_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    }
}

} // namespace

namespace {

void multiHeadForward(const Launch& l, void* out, float* lse, const void* qkv, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0)
        return;
    const int hs = C / NH;
    if (useMma(l, hs, out, qkv)) {
        auto* o = static_cast<bf16*>(out);
        const auto* x = static_cast<const bf16*>(qkv);
        attentionForwardMma(l, o, lse, x, B, T, C, NH);
        return;
    }
    const std::size_t perWarp = 2 * static_cast<std::size_t>(hs) + 32;
    const int warps = genericWarps(perWarp, l.sharedOptin);
    const std::size_t bytes = warps * perWarp * sizeof(float);
    const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>(ceilDiv(T, warps)));
    const float scale = 1.0f / sqrtf(static_cast<float>(hs));
    auto run = [&](auto type) {
        using E = decltype(type);
        allowGenericShared(attentionForwardGeneric<E>, bytes, l.sharedOptin);
        attentionForwardGeneric<E><<<grid, warps * 32, bytes, l.stream>>>(
            static_cast<E*>(out), lse, static_cast<const E*>(qkv), T, C, NH, scale);
        PW_CUDA_LAUNCHED();
    };
    if (l.act == DType::BF16)
        run(bf16 {});
    else
        run(float {});
}

void multiHeadBackward(const Launch& l, void* dqkv, const void* dout, const void* qkv, const void* out,
    const float* lse, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0)
        return;
    const int hs = C / NH;
    const std::size_t rows = static_cast<std::size_t>(B) * NH * T;
    auto* delta = static_cast<float*>(l.scratch->get(Scratch::AttentionDelta, rows * sizeof(float)));
    auto run = [&](auto type) {
        using E = decltype(type);
        attentionDelta<E><<<static_cast<unsigned>(ceilDiv(rows * 32, 256)), 256, 0, l.stream>>>(
            delta, static_cast<const E*>(dout), static_cast<const E*>(out), B, T, C, NH);
        PW_CUDA_LAUNCHED();
        if constexpr (sizeof(E) == 2) {
            if (useMma(l, hs, dqkv, dout, qkv)) {
                auto* g = static_cast<bf16*>(dqkv);
                const auto* dy = static_cast<const bf16*>(dout);
                const auto* x = static_cast<const bf16*>(qkv);
                attentionBackwardMma(l, g, dy, x, lse, delta, B, T, C, NH);
                return;
            }
        }
        const float scale = 1.0f / sqrtf(static_cast<float>(hs));
        const std::size_t keyFloats = 4 * static_cast<std::size_t>(hs) + 64;
        const int keyWarps = genericWarps(keyFloats, l.sharedOptin);
        const std::size_t keyBytes = keyWarps * keyFloats * sizeof(float);
        allowGenericShared(attentionBackwardKeyGeneric<E>, keyBytes, l.sharedOptin);
        attentionBackwardKeyGeneric<E>
            <<<dim3(static_cast<unsigned>(B * NH), static_cast<unsigned>(ceilDiv(T, keyWarps))), keyWarps * 32,
                keyBytes, l.stream>>>(static_cast<E*>(dqkv), static_cast<const E*>(dout), static_cast<const E*>(qkv),
                lse, delta, T, C, NH, scale);
        PW_CUDA_LAUNCHED();
        const std::size_t queryFloats = 3 * static_cast<std::size_t>(hs) + 32;
        const int queryWarps = genericWarps(queryFloats, l.sharedOptin);
        const std::size_t queryBytes = queryWarps * queryFloats * sizeof(float);
        allowGenericShared(attentionBackwardQueryGeneric<E>, queryBytes, l.sharedOptin);
        attentionBackwardQueryGeneric<E>
            <<<dim3(static_cast<unsigned>(B * NH), static_cast<unsigned>(ceilDiv(T, queryWarps))), queryWarps * 32,
                queryBytes, l.stream>>>(static_cast<E*>(dqkv), static_cast<const E*>(dout), static_cast<const E*>(qkv),
                lse, delta, T, C, NH, scale);
        PW_CUDA_LAUNCHED();
    };
    if (l.act == DType::BF16)
        run(bf16 {});
    else
        run(float {});
}

} // namespace

void attentionForward(const Launch& l, void* out, float* lse, const void* qkv, const AttentionShape& a)
{
    if (a.kv_heads == a.heads) {
        multiHeadForward(l, out, lse, qkv, a.batch, a.seq, a.channels(), a.heads);
        return;
    }
    const std::size_t wide = a.rows() * 3 * static_cast<std::size_t>(a.channels()) * byteSize(l.act);
    void* expanded = l.scratch->get(Scratch::GroupedQkv, wide);
    expandGroups(l, expanded, qkv, a);
    multiHeadForward(l, out, lse, expanded, a.batch, a.seq, a.channels(), a.heads);
}

void attentionBackward(const Launch& l, void* dqkv, const void* dout, const void* qkv, const void* out,
    const float* lse, const AttentionShape& a)
{
    if (a.kv_heads == a.heads) {
        multiHeadBackward(l, dqkv, dout, qkv, out, lse, a.batch, a.seq, a.channels(), a.heads);
        return;
    }
    const std::size_t wide = a.rows() * 3 * static_cast<std::size_t>(a.channels()) * byteSize(l.act);
    void* expanded = l.scratch->get(Scratch::GroupedQkv, wide);
    void* grad = l.scratch->get(Scratch::GroupedGrad, wide);
    expandGroups(l, expanded, qkv, a);
    multiHeadBackward(l, grad, dout, expanded, out, lse, a.batch, a.seq, a.channels(), a.heads);
    reduceGroups(l, dqkv, grad, a);
}

} // namespace pw::engine::cuda
