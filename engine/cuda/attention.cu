// SPDX-License-Identifier: MIT
// Causal self-attention, fused (flash attention's scheme): the forward streams key/value tiles past each query
// row with an online softmax and keeps only the output and each row's log-sum-exp (B NH T floats, never T x T);
// the backward recomputes the probabilities from the log-sum-exp. qkv is (B, T, 3C): q, then k, then v, heads
// consecutive blocks of hs = C / NH; scores are scaled by 1/sqrt(hs).
//
// Two implementations:
// - bf16 with hs 64 or 128 (GPT-2's and most models'): tensor cores through mma.sync m16n8k16 (bf16 in, fp32
//   accumulators), tiles of 64 queries x 64 keys in shared memory loaded with ldmatrix, four warps of 16 query (or
//   key) rows per block. The backward is two kernels, both deterministic (no atomics): one per key tile for dK and
//   dV (it walks the query tiles at or after it), one per query tile for dQ (it walks the key tiles up to it);
//   each recomputes the probabilities, which costs two more products than an atomic dQ but keeps every sum in a
//   fixed order and needs no fp32 dQ buffer.
// - everything else (fp32, the backend's testing mode, and any other head size): one warp per row on CUDA cores,
//   fp32 throughout, the same online softmax and the same split of the backward.
// Both write the log-sum-exp in natural-log units of the scaled scores, so either backward reads either forward's.
// Grouped-query attention (fewer key and value heads than query heads) runs the multi-head kernels on a copy of qkv
// whose key and value heads are repeated per query head (expandGroups), and sums the copy's key and value gradients
// back over each group in head order (reduceGroups, llama.cu): deterministic, at the cost of the copy.
#include <cmath>

#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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

// ---- The tensor-core path: bf16, hs 64 or 128 ------------------------------------------------------------------
//
// mma.sync.m16n8k16 (bf16, fp32 accumulate), per lane with g = lane / 4 and q = lane % 4:
//   A (16 x 16, row-major) a[0..3]: (g, 2q..2q+1), (g+8, 2q..), (g, 2q+8..), (g+8, 2q+8..)
//   B (16 x 8, k x n)      b[0..1]: (k 2q..2q+1, n g), (k 2q+8..2q+9, n g)
//   C (16 x 8)             c[0..3]: (g, 2q), (g, 2q+1), (g+8, 2q), (g+8, 2q+1)
// ldmatrix .x4 loads four 8 x 8 tiles of 16-bit elements whose rows lanes 8i..8i+7 address; register i holds
// tile i's (row g, columns 2q..2q+1) or, with .trans, its (rows 2q..2q+1, column g).

constexpr int kMmaWarps = 4;
constexpr int kTile = 64; // queries or keys per block tile: 16 rows per warp

__device__ __forceinline__ std::uint32_t sharedAddress(const void* p)
{
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix(std::uint32_t (&r)[4], const bf16* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sharedAddress(p))
                 : "memory");
}

__device__ __forceinline__ void ldmatrixTrans(std::uint32_t (&r)[4], const bf16* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sharedAddress(p))
                 : "memory");
}

__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats as a bf16 pair in one register, the first in the low half (the lower column of a fragment).
__device__ __forceinline__ std::uint32_t pack(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
}

/// The A fragment of a 16 x 16 tile at (row, col) of a row-major shared tile with leading dimension LD.
template <int LD> __device__ __forceinline__ void loadA(std::uint32_t (&a)[4], const bf16* tile, int row, int col)
{
    const int lane = threadIdx.x % 32;
    ldmatrix(a, tile + (row + lane % 8 + ((lane / 8) % 2) * 8) * LD + col + (lane / 16) * 8);
}

/// B fragments of two n-tiles from a tile stored n-major (row = n, column = k), e.g. K for S = Q K^T: r[0..1] are
/// n-tile rows n0..n0+7 and r[2..3] rows n0+8..n0+15, both over k = col..col+15.
template <int LD> __device__ __forceinline__ void loadBnk(std::uint32_t (&r)[4], const bf16* tile, int n0, int col)
{
    const int lane = threadIdx.x % 32;
    ldmatrix(r, tile + (n0 + lane % 8 + (lane / 16) * 8) * LD + col + ((lane / 8) % 2) * 8);
}

/// B fragments of two n-tiles from a tile stored k-major (row = k, column = n), e.g. V for O = P V: r[0..1] are
/// columns n0..n0+7 and r[2..3] columns n0+8..n0+15, both over k = k0..k0+15.
template <int LD> __device__ __forceinline__ void loadBkn(std::uint32_t (&r)[4], const bf16* tile, int k0, int n0)
{
    const int lane = threadIdx.x % 32;
    ldmatrixTrans(r, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * LD + n0 + (lane / 16) * 8);
}

/// The A fragment of 16 rows x 16 k from accumulators (C layout) of n-tiles 2kk and 2kk + 1: P as the left operand.
__device__ __forceinline__ void accumulatorsAsA(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4])
{
    a[0] = pack(lo[0], lo[1]);
    a[1] = pack(lo[2], lo[3]);
    a[2] = pack(hi[0], hi[1]);
    a[3] = pack(hi[2], hi[3]);
}

/// Rows [r0, r0 + R) of a (rows x rowStride) bf16 matrix, D columns from src, into a shared tile (LD = D + 8, the
/// padding that keeps ldmatrix's eight rows in distinct banks); rows at or past `rows` become zeros.
template <int R, int D>
__device__ __forceinline__ void loadTile(bf16* tile, const bf16* src, std::size_t rowStride, int r0, int rows)
{
    constexpr int kChunks = D / 8, LD = D + 8;
    for (int i = threadIdx.x; i < R * kChunks; i += blockDim.x) {
        const int r = i / kChunks, c = (i % kChunks) * 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (r0 + r < rows)
            v = *reinterpret_cast<const int4*>(src + static_cast<std::size_t>(r0 + r) * rowStride + c);
        *reinterpret_cast<int4*>(tile + r * LD + c) = v;
    }
}

/// Forward: block (bh, query tile), the longest tiles (the last) first. Each warp owns 16 query rows.
template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32)
    attentionForwardMma(bf16* out, float* lse, const bf16* qkv, int T_, int C, int NH, float scaleLog2)
{
    constexpr int LD = D + 8, KS = D / 16, DT = D / 8, NT = kTile / 8;
    extern __shared__ __align__(16) unsigned char sharedBytes[];
    bf16* Qs = reinterpret_cast<bf16*>(sharedBytes);
    bf16* Ks = Qs + kTile * LD;
    bf16* Vs = Ks + kTile * LD;
    const int tiles = (T_ + kTile - 1) / kTile;
    const int qt = tiles - 1 - static_cast<int>(blockIdx.y);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const std::size_t C3 = 3 * static_cast<std::size_t>(C);
    const bf16* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * D;
    const int q0 = qt * kTile;

    loadTile<kTile, D>(Qs, base, C3, q0, T_);
    __syncthreads();
    std::uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
        loadA<LD>(qf[ks], Qs, warp * 16, ks * 16);

    float o[DT][4] = {};
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    for (int kt = 0; kt <= qt; ++kt) {
        const int k0 = kt * kTile;
        __syncthreads(); // every warp is done with the previous K and V tiles
        loadTile<kTile, D>(Ks, base + C, C3, k0, T_);
        loadTile<kTile, D>(Vs, base + 2 * C, C3, k0, T_);
        __syncthreads();

        float s[NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                std::uint32_t kf[4];
                loadBnk<LD>(kf, Ks, np * 16, ks * 16);
                mma(s[2 * np], qf[ks], kf[0], kf[1]);
                mma(s[2 * np + 1], qf[ks], kf[2], kf[3]);
            }
        // Scores in log2 units; keys after the query (the diagonal tile) or past T are -inf.
        const bool edge = kt == qt || k0 + kTile > T_;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = q0 + warp * 16 + g + (e / 2) * 8;
                const int key = k0 + nt * 8 + 2 * q + (e % 2);
                s[nt][e] = edge && (key > row || key >= T_) ? -INFINITY : s[nt][e] * scaleLog2;
            }
            // Online softmax for the lane's two rows; the four lanes of a row (same g) share its max via shuffles.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                mx = fmaxf(mx, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mNew = fmaxf(mrow[i], mx);
            const float ref = mNew == -INFINITY ? 0.0f : mNew; // a row with no key yet stays at zero
            const float alpha = exp2f(mrow[i] - ref);
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[nt][2 * i] = exp2f(s[nt][2 * i] - ref);
                s[nt][2 * i + 1] = exp2f(s[nt][2 * i + 1] - ref);
                sum += s[nt][2 * i] + s[nt][2 * i + 1];
            }
            lrow[i] = lrow[i] * alpha + sum; // this lane's part of the row sum; the four are added at the end
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                o[dt][2 * i] *= alpha;
                o[dt][2 * i + 1] *= alpha;
            }
            mrow[i] = mNew;
        }
        // O += P V
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
            std::uint32_t a[4];
            accumulatorsAsA(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                std::uint32_t vf[4];
                loadBkn<LD>(vf, Vs, kk * 16, dp * 16);
                mma(o[2 * dp], a, vf[0], vf[1]);
                mma(o[2 * dp + 1], a, vf[2], vf[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float l = lrow[i];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = q0 + warp * 16 + g + i * 8;
        if (row >= T_)
            continue;
        const float inv = 1.0f / l;
        bf16* orow = out + (static_cast<std::size_t>(b) * T_ + row) * C + static_cast<std::size_t>(h) * D;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
            *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * q)
                = __floats2bfloat162_rn(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
        if (q == 0)
            lse[static_cast<std::size_t>(bh) * T_ + row] = (mrow[i] + log2f(l)) * kLn2;
    }
}

/// dQ: block (bh, query tile), the longest first; each warp owns 16 query rows and walks the key tiles up to its
/// own: S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K; then dq = scale dQ (written).
template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32) attentionBackwardQueryMma(bf16* dqkv, const bf16* dout,
    const bf16* qkv, const float* lse, const float* delta, int T_, int C, int NH, float scale)
{
    constexpr int LD = D + 8, KS = D / 16, DT = D / 8, NT = kTile / 8;
    extern __shared__ __align__(16) unsigned char sharedBytes[];
    bf16* Qs = reinterpret_cast<bf16*>(sharedBytes);
    bf16* dOs = Qs + kTile * LD;
    bf16* Ks = dOs + kTile * LD;
    bf16* Vs = Ks + kTile * LD;
    const int tiles = (T_ + kTile - 1) / kTile;
    const int qt = tiles - 1 - static_cast<int>(blockIdx.y);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const std::size_t C3 = 3 * static_cast<std::size_t>(C);
    const bf16* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * D;
    const bf16* dyBase = dout + static_cast<std::size_t>(b) * T_ * C + static_cast<std::size_t>(h) * D;
    const int q0 = qt * kTile;
    const float scaleLog2 = scale * kLog2e;

    loadTile<kTile, D>(Qs, base, C3, q0, T_);
    loadTile<kTile, D>(dOs, dyBase, C, q0, T_);
    float lrow[2], drow[2]; // the rows' log-sum-exp (log2 units) and delta
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = q0 + warp * 16 + g + i * 8;
        const std::size_t at = static_cast<std::size_t>(bh) * T_ + row;
        lrow[i] = row < T_ ? lse[at] * kLog2e : 0.0f;
        drow[i] = row < T_ ? delta[at] : 0.0f;
    }
    float dq[DT][4] = {};
    for (int kt = 0; kt <= qt; ++kt) {
        const int k0 = kt * kTile;
        __syncthreads();
        loadTile<kTile, D>(Ks, base + C, C3, k0, T_);
        loadTile<kTile, D>(Vs, base + 2 * C, C3, k0, T_);
        __syncthreads();

        float s[NT][4] = {}, dp[NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            std::uint32_t qa[4], da[4];
            loadA<LD>(qa, Qs, warp * 16, ks * 16);
            loadA<LD>(da, dOs, warp * 16, ks * 16);
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                std::uint32_t kf[4], vf[4];
                loadBnk<LD>(kf, Ks, np * 16, ks * 16);
                mma(s[2 * np], qa, kf[0], kf[1]);
                mma(s[2 * np + 1], qa, kf[2], kf[3]);
                loadBnk<LD>(vf, Vs, np * 16, ks * 16);
                mma(dp[2 * np], da, vf[0], vf[1]);
                mma(dp[2 * np + 1], da, vf[2], vf[3]);
            }
        }
        const bool edge = kt == qt || k0 + kTile > T_;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = q0 + warp * 16 + g + (e / 2) * 8;
                const int key = k0 + nt * 8 + 2 * q + (e % 2);
                const bool masked = edge && (key > row || key >= T_);
                const float p = masked ? 0.0f : exp2f(s[nt][e] * scaleLog2 - lrow[e / 2]);
                s[nt][e] = p * (dp[nt][e] - drow[e / 2]); // dS
            }
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
            std::uint32_t a[4];
            accumulatorsAsA(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int dn = 0; dn < DT / 2; ++dn) {
                std::uint32_t kf[4];
                loadBkn<LD>(kf, Ks, kk * 16, dn * 16);
                mma(dq[2 * dn], a, kf[0], kf[1]);
                mma(dq[2 * dn + 1], a, kf[2], kf[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = q0 + warp * 16 + g + i * 8;
        if (row >= T_)
            continue;
        bf16* dst = dqkv + (static_cast<std::size_t>(b) * T_ + row) * C3 + static_cast<std::size_t>(h) * D;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            auto* pair = reinterpret_cast<__nv_bfloat162*>(dst + dt * 8 + 2 * q);
            *pair = __floats2bfloat162_rn(scale * dq[dt][2 * i], scale * dq[dt][2 * i + 1]);
        }
    }
}

/// dK and dV: block (bh, key tile), the first tiles (the longest walks) first; each warp owns 16 key rows and walks
/// the query tiles of BQ rows from its own on: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - delta),
/// dV += P^T dO, dK += dS^T Q; then dk = scale dK, dv = dV (written).
template <int D, int BQ>
__global__ void __launch_bounds__(kMmaWarps * 32) attentionBackwardKeyMma(bf16* dqkv, const bf16* dout, const bf16* qkv,
    const float* lse, const float* delta, int T_, int C, int NH, float scale)
{
    constexpr int LD = D + 8, KS = D / 16, DT = D / 8, NT = BQ / 8;
    extern __shared__ __align__(16) unsigned char sharedBytes[];
    bf16* Ks = reinterpret_cast<bf16*>(sharedBytes);
    bf16* Vs = Ks + kTile * LD;
    bf16* Qs = Vs + kTile * LD;
    bf16* dOs = Qs + BQ * LD;
    float* lseS = reinterpret_cast<float*>(dOs + BQ * LD);
    float* deltaS = lseS + BQ;
    const int kt = blockIdx.y;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const std::size_t C3 = 3 * static_cast<std::size_t>(C);
    const bf16* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * D;
    const bf16* dyBase = dout + static_cast<std::size_t>(b) * T_ * C + static_cast<std::size_t>(h) * D;
    const float* L = lse + static_cast<std::size_t>(bh) * T_;
    const float* Dl = delta + static_cast<std::size_t>(bh) * T_;
    const int k0 = kt * kTile;
    const float scaleLog2 = scale * kLog2e;

    loadTile<kTile, D>(Ks, base + C, C3, k0, T_);
    loadTile<kTile, D>(Vs, base + 2 * C, C3, k0, T_);
    float dk[DT][4] = {}, dv[DT][4] = {};
    for (int q0 = (k0 / BQ) * BQ; q0 < T_; q0 += BQ) {
        __syncthreads(); // every warp is done with the previous Q, dO, lse and delta tiles
        loadTile<BQ, D>(Qs, base, C3, q0, T_);
        loadTile<BQ, D>(dOs, dyBase, C, q0, T_);
        for (int r = threadIdx.x; r < BQ; r += blockDim.x) {
            lseS[r] = q0 + r < T_ ? L[q0 + r] * kLog2e : 0.0f;
            deltaS[r] = q0 + r < T_ ? Dl[q0 + r] : 0.0f;
        }
        __syncthreads();

        float st[NT][4] = {}, dpt[NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            std::uint32_t ka[4], va[4];
            loadA<LD>(ka, Ks, warp * 16, ks * 16);
            loadA<LD>(va, Vs, warp * 16, ks * 16);
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                std::uint32_t qf[4], of[4];
                loadBnk<LD>(qf, Qs, np * 16, ks * 16);
                mma(st[2 * np], ka, qf[0], qf[1]);
                mma(st[2 * np + 1], ka, qf[2], qf[3]);
                loadBnk<LD>(of, dOs, np * 16, ks * 16);
                mma(dpt[2 * np], va, of[0], of[1]);
                mma(dpt[2 * np + 1], va, of[2], of[3]);
            }
        }
        // Element (nt, e): key row k0 + warp*16 + g + (e/2)*8, query column q0 + nt*8 + 2q + e%2.
        const bool edge = q0 < k0 + kTile || q0 + BQ > T_;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + warp * 16 + g + (e / 2) * 8;
                const int col = nt * 8 + 2 * q + (e % 2);
                const int query = q0 + col;
                const bool masked = edge && (query < key || query >= T_);
                const float p = masked ? 0.0f : exp2f(st[nt][e] * scaleLog2 - lseS[col]);
                st[nt][e] = p;
                dpt[nt][e] = p * (dpt[nt][e] - deltaS[col]);
            }
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
            std::uint32_t pa[4], sa[4];
            accumulatorsAsA(pa, st[2 * kk], st[2 * kk + 1]);
            accumulatorsAsA(sa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
            for (int dn = 0; dn < DT / 2; ++dn) {
                std::uint32_t of[4], qf[4];
                loadBkn<LD>(of, dOs, kk * 16, dn * 16);
                mma(dv[2 * dn], pa, of[0], of[1]);
                mma(dv[2 * dn + 1], pa, of[2], of[3]);
                loadBkn<LD>(qf, Qs, kk * 16, dn * 16);
                mma(dk[2 * dn], sa, qf[0], qf[1]);
                mma(dk[2 * dn + 1], sa, qf[2], qf[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int key = k0 + warp * 16 + g + i * 8;
        if (key >= T_)
            continue;
        bf16* dkRow = dqkv + (static_cast<std::size_t>(b) * T_ + key) * C3 + C + static_cast<std::size_t>(h) * D;
        bf16* dvRow = dkRow + C;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            auto* kp = reinterpret_cast<__nv_bfloat162*>(dkRow + dt * 8 + 2 * q);
            auto* vp = reinterpret_cast<__nv_bfloat162*>(dvRow + dt * 8 + 2 * q);
            *kp = __floats2bfloat162_rn(scale * dk[dt][2 * i], scale * dk[dt][2 * i + 1]);
            *vp = __floats2bfloat162_rn(dv[dt][2 * i], dv[dt][2 * i + 1]);
        }
    }
}

template <class Kernel> void allowShared(Kernel kernel, std::size_t bytes)
{
    if (bytes > (48u << 10))
        PW_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

constexpr std::size_t tileBytes(int rows, int D)
{
    return static_cast<std::size_t>(rows) * (D + 8) * sizeof(bf16);
}

/// Whether the tensor-core kernels take this call: bf16, a head of 64 or 128, every row 16-byte aligned.
bool useMma(const Launch& l, int hs, const void* a, const void* b, const void* c = nullptr, const void* d = nullptr)
{
    return l.act == DType::BF16 && (hs == 64 || hs == 128) && aligned16(a, b, c, d);
}

template <int D> void forwardMma(const Launch& l, bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH)
{
    const std::size_t bytes = 3 * tileBytes(kTile, D);
    allowShared(attentionForwardMma<D>, bytes);
    const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>(ceilDiv(T, kTile)));
    const float scaleLog2 = 1.0f / sqrtf(static_cast<float>(D)) * kLog2e;
    attentionForwardMma<D><<<grid, kMmaWarps * 32, bytes, l.stream>>>(out, lse, qkv, T, C, NH, scaleLog2);
    PW_CUDA_LAUNCHED();
}

template <int D, int BQ>
void backwardMma(const Launch& l, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
    int B, int T, int C, int NH)
{
    const float scale = 1.0f / sqrtf(static_cast<float>(D));
    const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>(ceilDiv(T, kTile)));
    const std::size_t keyBytes = 2 * tileBytes(kTile, D) + 2 * tileBytes(BQ, D) + 2 * BQ * sizeof(float);
    allowShared(attentionBackwardKeyMma<D, BQ>, keyBytes);
    attentionBackwardKeyMma<D, BQ>
        <<<grid, kMmaWarps * 32, keyBytes, l.stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH, scale);
    PW_CUDA_LAUNCHED();
    const std::size_t queryBytes = 4 * tileBytes(kTile, D);
    allowShared(attentionBackwardQueryMma<D>, queryBytes);
    attentionBackwardQueryMma<D>
        <<<grid, kMmaWarps * 32, queryBytes, l.stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH, scale);
    PW_CUDA_LAUNCHED();
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
        if (hs == 64)
            forwardMma<64>(l, o, lse, x, B, T, C, NH);
        else
            forwardMma<128>(l, o, lse, x, B, T, C, NH);
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
                if (hs == 64)
                    backwardMma<64, 64>(l, g, dy, x, lse, delta, B, T, C, NH);
                else
                    backwardMma<128, 32>(l, g, dy, x, lse, delta, B, T, C, NH);
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
