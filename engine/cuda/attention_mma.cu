// SPDX-License-Identifier: MIT
// The fused attention's tensor-core path (attention.cu explains the scheme): bf16 with a head of 64 or 128, tiles of
// 64 queries x 64 keys in shared memory loaded with ldmatrix, mma.sync m16n8k16 with fp32 accumulators, four warps
// of 16 rows per block; the backward's two deterministic kernels (dK and dV per key tile, dQ per query tile).
#include <cmath>

#include "attention_mma.cuh"
#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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
} // namespace

bool useMma(const Launch& l, int hs, const void* a, const void* b, const void* c, const void* d)
{
    return l.act == DType::BF16 && (hs == 64 || hs == 128) && aligned16(a, b, c, d);
}

namespace {

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

} // namespace

void attentionForwardMma(const Launch& l, bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH)
{
    if (C / NH == 64)
        forwardMma<64>(l, out, lse, qkv, B, T, C, NH);
    else
        forwardMma<128>(l, out, lse, qkv, B, T, C, NH);
}

void attentionBackwardMma(const Launch& l, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
    const float* delta, int B, int T, int C, int NH)
{
    if (C / NH == 64)
        backwardMma<64, 64>(l, dqkv, dout, qkv, lse, delta, B, T, C, NH);
    else
        backwardMma<128, 32>(l, dqkv, dout, qkv, lse, delta, B, T, C, NH);
}

} // namespace pw::engine::cuda
