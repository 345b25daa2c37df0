// SPDX-License-Identifier: MIT
#include "ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "openblas.h"

namespace pw::engine::ops {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

// Element-wise kernels are compiled for AVX-512, AVX2 + FMA and the x86-64 baseline, the best chosen at load time
// (GCC's and Clang's function multi-versioning): the binary still runs on any x86-64 machine it is copied to.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(PW_FUZZ)
#define PW_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef PW_KERNEL
#define PW_KERNEL
#endif

/// e^x to about 1 ulp for x in [-87, 88] (clamped outside: e^-87 ~ 1.6e-38 stands for 0), in arithmetic only, so
/// that the loops calling it vectorise: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for the exact product
/// n ln2), e^r by its Taylor series to r^7 (remainder < 6e-9), 2^n by the exponent bits.
inline float expApprox(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    constexpr float kRound = 12582912.0f; // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer
    const float n = (x * 1.44269504088896341f + kRound) - kRound;
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    const float p = 1.0f
        + r
            * (1.0f
                + r
                    * (1.0f / 2
                        + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    return p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}

/// GELU's tanh approximation as a logistic: 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
/// The same function, written without tanh so that it vectorises and loses no accuracy where tanh(u) -> -1.
inline float geluSigmoid(float x)
{
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    return 1.0f / (1.0f + expApprox(-2.0f * u));
}

PW_KERNEL void geluForwardKernel(float* out, const float* inp, long n)
{
#pragma omp simd
    for (long i = 0; i < n; ++i)
        out[i] = inp[i] * geluSigmoid(inp[i]);
}

PW_KERNEL void geluBackwardKernel(float* dinp, const float* inp, const float* dout, long n)
{
    // d/dx [x s(x)] with s = sigmoid(2u): s + x * 2 s (1 - s) * u'(x)  (0.5 sech^2(u) = 2 s (1 - s)).
#pragma omp simd
    for (long i = 0; i < n; ++i) {
        const float x = inp[i];
        const float s = geluSigmoid(x);
        const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
        dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
    }
}

/// row[j] = e^(row[j] - shift) for j < n; returns their sum.
PW_KERNEL float expShiftSum(float* row, long n, float shift)
{
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (long j = 0; j < n; ++j) {
        row[j] = expApprox(row[j] - shift);
        sum += row[j];
    }
    return sum;
}

PW_KERNEL float rowMax(const float* row, long n)
{
    float m = row[0];
#pragma omp simd reduction(max : m)
    for (long j = 1; j < n; ++j)
        m = row[j] > m ? row[j] : m;
    return m;
}

PW_KERNEL void scaleRow(float* row, long n, float scale)
{
#pragma omp simd
    for (long j = 0; j < n; ++j)
        row[j] *= scale;
}

PW_KERNEL void addRows(float* out, const float* a, const float* b, long n)
{
#pragma omp simd
    for (long i = 0; i < n; ++i)
        out[i] = a[i] + b[i];
}

PW_KERNEL void layernormRow(float* o, float* mean, float* rstd, const float* x, const float* w, const float* b, int C)
{
    float m = 0;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; ++c)
        m += x[c];
    m /= static_cast<float>(C);
    float v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c)
        v += (x[c] - m) * (x[c] - m);
    v /= static_cast<float>(C);
    const float s = 1.0f / std::sqrt(v + kLayerNormEps);
#pragma omp simd
    for (int c = 0; c < C; ++c)
        o[c] = (s * (x[c] - m)) * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

/// The two means over a row that a layer norm's input gradient needs: of dnorm = w d, and of dnorm x norm. Inlined
/// into each kernel clone, so that the fused and the split backward do the same arithmetic.
[[gnu::always_inline]] inline std::pair<float, float> layernormRowMeans(
    const float* d, const float* x, const float* w, float m, float s, int C)
{
    float dnormMean = 0, dnormNormMean = 0;
#pragma omp simd reduction(+ : dnormMean, dnormNormMean)
    for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = w[c] * d[c];
        dnormMean += dnorm;
        dnormNormMean += dnorm * norm;
    }
    return {dnormMean / static_cast<float>(C), dnormNormMean / static_cast<float>(C)};
}

PW_KERNEL void layernormBackwardRow(
    float* dx, float* dw, float* db, const float* d, const float* x, const float* w, float m, float s, int C)
{
    const auto [dnormMean, dnormNormMean] = layernormRowMeans(d, x, w, m, s, C);
#pragma omp simd
    for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = w[c] * d[c];
        db[c] += d[c];
        dw[c] += norm * d[c];
        dx[c] += (dnorm - dnormMean - norm * dnormNormMean) * s;
    }
}

/// layernormBackwardRow's two halves, each with the same arithmetic: the input gradient, and the weight and bias
/// gradients.
PW_KERNEL void layernormBackwardInputRow(
    float* dx, const float* d, const float* x, const float* w, float m, float s, int C)
{
    const auto [dnormMean, dnormNormMean] = layernormRowMeans(d, x, w, m, s, C);
#pragma omp simd
    for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = w[c] * d[c];
        dx[c] += (dnorm - dnormMean - norm * dnormNormMean) * s;
    }
}

PW_KERNEL void layernormBackwardWeightRow(float* dw, float* db, const float* d, const float* x, float m, float s, int C)
{
#pragma omp simd
    for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        db[c] += d[c];
        dw[c] += norm * d[c];
    }
}

/// OpenBLAS's single-precision product, its library loaded on the first call (openblas.h).
void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a,
    int lda, const float* b, int ldb, float beta, float* c, int ldc)
{
    openblas::api().sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// The range of [0, n) this OpenMP thread takes (contiguous chunks, for kernels that want long runs).
std::pair<long, long> threadChunk(long n)
{
    const long threads = omp_get_num_threads(), t = omp_get_thread_num();
    const long per = (n + threads - 1) / threads;
    return {std::min(n, t * per), std::min(n, (t + 1) * per)};
}

} // namespace

void setThreads(int threads)
{
    if (threads <= 0)
        return;
    openblas::api().setNumThreads(threads);
    omp_set_num_threads(threads);
}

int threads()
{
    return openblas::api().getNumThreads();
}

std::string blasName()
{
    try {
        return openblas::api().getConfig();
    } catch (const std::exception& e) {
        return std::string("none (") + e.what() + ")";
    }
}

void encoderForward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C)
{
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            float* o = out + (static_cast<long>(b) * T + t) * C;
            const std::int32_t token = tokens[b * T + t];
            const float* p = wpe ? wpe + static_cast<long>(t) * C : nullptr;
            if (token < 0) { // another rank's row of a vocabulary-parallel table
                for (int c = 0; c < C; ++c)
                    o[c] = p ? p[c] : 0.0f;
                continue;
            }
            const float* e = wte + static_cast<long>(token) * C;
            if (!p) {
                std::copy_n(e, C, o);
                continue;
            }
            for (int c = 0; c < C; ++c)
                o[c] = e[c] + p[c];
        }
}

void encoderBackward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T, int C)
{
    // Serial: two positions may share a token, and their rows of dwte must add up without a race.
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            const float* d = dout + (static_cast<long>(b) * T + t) * C;
            if (const std::int32_t token = tokens[b * T + t]; token >= 0) {
                float* e = dwte + static_cast<long>(token) * C;
                for (int c = 0; c < C; ++c)
                    e[c] += d[c];
            }
            if (!dwpe)
                continue;
            float* p = dwpe + static_cast<long>(t) * C;
            for (int c = 0; c < C; ++c)
                p[c] += d[c];
        }
}

void layernormForward(
    float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int BT, int C)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i)
        layernormRow(
            out + static_cast<long>(i) * C, mean + i, rstd + i, inp + static_cast<long>(i) * C, weight, bias, C);
}

void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
    const float* weight, const float* mean, const float* rstd, int BT, int C)
{
    if (!dweight && !dbias) { // the input gradient alone (the split backward's I)
#pragma omp parallel for
        for (int i = 0; i < BT; ++i)
            layernormBackwardInputRow(dinp + static_cast<long>(i) * C, dout + static_cast<long>(i) * C,
                inp + static_cast<long>(i) * C, weight, mean[i], rstd[i], C);
        return;
    }
    if (!dinp) { // the weight and bias gradients alone (its W)
#pragma omp parallel
        {
            std::vector<float> dw(C, 0.0f), db(C, 0.0f);
#pragma omp for
            for (int i = 0; i < BT; ++i)
                layernormBackwardWeightRow(dw.data(), db.data(), dout + static_cast<long>(i) * C,
                    inp + static_cast<long>(i) * C, mean[i], rstd[i], C);
#pragma omp critical
            for (int c = 0; c < C; ++c) {
                dweight[c] += dw[c];
                dbias[c] += db[c];
            }
        }
        return;
    }
    // dinp rows are independent; dweight and dbias sum over rows, so each thread keeps its own partial sums.
#pragma omp parallel
    {
        std::vector<float> dw(C, 0.0f), db(C, 0.0f);
#pragma omp for
        for (int i = 0; i < BT; ++i)
            layernormBackwardRow(dinp + static_cast<long>(i) * C, dw.data(), db.data(), dout + static_cast<long>(i) * C,
                inp + static_cast<long>(i) * C, weight, mean[i], rstd[i], C);
#pragma omp critical
        for (int c = 0; c < C; ++c) {
            dweight[c] += dw[c];
            dbias[c] += db[c];
        }
    }
}

void matmulForward(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC)
{
    sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (!bias)
        return;
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        float* o = out + static_cast<long>(i) * OC;
        addRows(o, o, bias, OC);
    }
}

void matmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
    int BT, int C, int OC)
{
    if (dinp)
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    if (dweight)
        sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (!dbias)
        return;
        // Row after row (the column walk strides by OC); each thread sums its own columns.
#pragma omp parallel
    {
        const auto [begin, end] = threadChunk(OC);
        for (int i = 0; i < BT && begin < end; ++i)
            addRows(dbias + begin, dbias + begin, dout + static_cast<long>(i) * OC + begin, end - begin);
    }
}

void attentionForward(float* out, float* att, const float* qkv, const AttentionShape& a)
{
    const int B = a.batch, T = a.seq, NH = a.heads, hs = a.head_size;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const int W = a.qkvColumns(), C = a.channels();
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const float* rows = qkv + static_cast<long>(b) * T * W;
            const float* q = rows + h * hs;
            const float* k = rows + (NH + h / a.group()) * hs;
            const float* v = k + a.kv_heads * hs;
            float* p = att + (static_cast<long>(b) * NH + h) * T * T;
            // Scores for every pair; the causal mask and the softmax then keep j <= i only.
            sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, W, k, W, 0.0f, p, T);
#pragma omp parallel for
            for (int i = 0; i < T; ++i) {
                float* row = p + static_cast<long>(i) * T;
                const float sum = expShiftSum(row, i + 1, rowMax(row, i + 1));
                scaleRow(row, i + 1, 1.0f / sum);
                std::fill(row + i + 1, row + T, 0.0f);
            }
            float* o = out + static_cast<long>(b) * T * C + h * hs;
            sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, v, W, 0.0f, o, C);
        }
}

void attentionBackward(
    float* dqkv, const float* dout, const float* qkv, const float* att, float* scratch, const AttentionShape& a)
{
    const int B = a.batch, T = a.seq, NH = a.heads, hs = a.head_size;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const int W = a.qkvColumns(), C = a.channels();
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const long rows = static_cast<long>(b) * T * W;
            const long kvOffset = (NH + h / a.group()) * hs;
            const float* q = qkv + rows + h * hs;
            const float* k = qkv + rows + kvOffset;
            const float* v = k + a.kv_heads * hs;
            float* dq = dqkv + rows + h * hs;
            float* dk = dqkv + rows + kvOffset;
            float* dv = dk + a.kv_heads * hs;
            // The group's first query head writes its key and value heads' gradients, the others add to them.
            const float beta = h % a.group() == 0 ? 0.0f : 1.0f;
            const float* p = att + (static_cast<long>(b) * NH + h) * T * T;
            const float* dy = dout + static_cast<long>(b) * T * C + h * hs;
            float* dp = scratch;
            // y = p . v  =>  dp = dy . v^T,  dv = p^T . dy
            sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, W, 0.0f, dp, T);
            sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, dy, C, beta, dv, W);
            // Softmax backward in place: ds[i,j] = p[i,j] (dp[i,j] - sum_k p[i,k] dp[i,k]); masked entries are 0.
#pragma omp parallel for
            for (int i = 0; i < T; ++i) {
                const float* pr = p + static_cast<long>(i) * T;
                float* dr = dp + static_cast<long>(i) * T;
                float dot = 0;
                for (int j = 0; j <= i; ++j)
                    dot += pr[j] * dr[j];
                for (int j = 0; j <= i; ++j)
                    dr[j] = pr[j] * (dr[j] - dot);
                for (int j = i + 1; j < T; ++j)
                    dr[j] = 0.0f;
            }
            // s = scale q . k^T  =>  dq = scale ds . k,  dk = scale ds^T . q
            sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, dp, T, k, W, 0.0f, dq, W);
            sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dp, T, q, W, beta, dk, W);
        }
}

void rmsnormForward(float* out, float* rstd, const float* inp, const float* weight, int BT, int C, float eps)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* x = inp + static_cast<long>(i) * C;
        float* o = out + static_cast<long>(i) * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; ++c)
            ss += x[c] * x[c];
        const float s = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
#pragma omp simd
        for (int c = 0; c < C; ++c)
            o[c] = (x[c] * s) * weight[c];
        rstd[i] = s;
    }
}

void rmsnormBackward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
    const float* rstd, int BT, int C)
{
    // y = x s w, s = (mean(x^2) + eps)^(-1/2)  =>  dx = s (w dy) - x s^3 mean(w dy x),  dw = sum over rows x s dy
    if (dinp) {
#pragma omp parallel for
        for (int i = 0; i < BT; ++i) {
            const float* x = inp + static_cast<long>(i) * C;
            const float* d = dout + static_cast<long>(i) * C;
            float* dx = dinp + static_cast<long>(i) * C;
            const float s = rstd[i];
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; ++c)
                dot += weight[c] * d[c] * x[c];
            const float k = s * s * s * dot / static_cast<float>(C);
#pragma omp simd
            for (int c = 0; c < C; ++c)
                dx[c] += s * weight[c] * d[c] - k * x[c];
        }
    }
    if (!dweight)
        return;
    // Serial over rows, in order: the weight's gradient is the same sum whatever the threads.
    for (int i = 0; i < BT; ++i) {
        const float* x = inp + static_cast<long>(i) * C;
        const float* d = dout + static_cast<long>(i) * C;
        const float s = rstd[i];
#pragma omp simd
        for (int c = 0; c < C; ++c)
            dweight[c] += x[c] * s * d[c];
    }
}

void rotary(float* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse)
{
    const int half = hs / 2;
    const float* cosines = table;
    const float* sines = table + static_cast<long>(T) * half;
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            float* row = x + (static_cast<long>(b) * T + t) * stride;
            const float* cs = cosines + static_cast<long>(t) * half;
            const float* sn = sines + static_cast<long>(t) * half;
            for (int h = 0; h < heads; ++h) {
                float* head = row + static_cast<long>(h) * hs;
                for (int i = 0; i < half; ++i) {
                    const float a = head[i], c = head[i + half];
                    const float si = sign * sn[i];
                    head[i] = a * cs[i] - c * si;
                    head[i + half] = c * cs[i] + a * si;
                }
            }
        }
}

void swigluForward(float* out, const float* inp, int BT, int F)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* g = inp + static_cast<long>(i) * 2 * F;
        const float* u = g + F;
        float* o = out + static_cast<long>(i) * F;
        for (int j = 0; j < F; ++j)
            o[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
    }
}

void swigluBackward(float* dinp, const float* inp, const float* dout, int BT, int F)
{
    // o = silu(g) u, silu(g) = g sig(g), silu'(g) = sig(g) (1 + g (1 - sig(g)))
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* g = inp + static_cast<long>(i) * 2 * F;
        const float* u = g + F;
        const float* d = dout + static_cast<long>(i) * F;
        float* dg = dinp + static_cast<long>(i) * 2 * F;
        float* du = dg + F;
        for (int j = 0; j < F; ++j) {
            const float sig = 1.0f / (1.0f + std::exp(-g[j]));
            du[j] = d[j] * g[j] * sig;
            dg[j] = d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
        }
    }
}

void geluForward(float* out, const float* inp, int n)
{
#pragma omp parallel
    {
        const auto [begin, end] = threadChunk(n);
        geluForwardKernel(out + begin, inp + begin, end - begin);
    }
}

void geluBackward(float* dinp, const float* inp, const float* dout, int n)
{
#pragma omp parallel
    {
        const auto [begin, end] = threadChunk(n);
        geluBackwardKernel(dinp + begin, inp + begin, dout + begin, end - begin);
    }
}

void residualForward(float* out, const float* a, const float* b, int n)
{
#pragma omp parallel
    {
        const auto [begin, end] = threadChunk(n);
        addRows(out + begin, a + begin, b + begin, end - begin);
    }
}

void sumParts(float* out, std::span<const float* const> parts, std::size_t n)
{
    if (parts.empty())
        return;
#pragma omp parallel
    {
        const auto [begin, end] = threadChunk(static_cast<long>(n));
        for (long i = begin; i < end; ++i) {
            float acc = parts[0][i];
            for (std::size_t p = 1; p < parts.size(); ++p)
                acc += parts[p][i];
            out[i] = acc;
        }
    }
}

void crossEntropyForward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int BT, int V)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* l = logits + static_cast<long>(i) * V;
        float* p = probs + static_cast<long>(i) * V;
        const float target = l[targets[i]]; // read before probs (which may alias logits) overwrite it
        const float maxv = rowMax(l, V);
        if (p != l)
            std::copy(l, l + V, p);
        const float sum = expShiftSum(p, V, maxv);
        scaleRow(p, V, 1.0f / sum);
        losses[i] = std::log(sum) + maxv - target;
    }
}

void crossEntropyStats(float* stats, const float* logits, const std::int32_t* targets, int BT, int V, int stride)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* l = logits + static_cast<long>(i) * stride;
        float* s = stats + 3L * i;
        const float maxv = V > 0 ? rowMax(l, V) : -std::numeric_limits<float>::infinity();
        float sum = 0;
        for (int j = 0; j < V; ++j)
            sum += std::exp(l[j] - maxv);
        s[0] = maxv;
        s[1] = sum;
        s[2] = targets[i] >= 0 && targets[i] < V ? l[targets[i]] : 0.0f;
    }
}

void crossEntropyFinish(float* losses, float* logits, const float* stats, int ranks, const std::int32_t* targets,
    int BT, int V, int stride, float scale)
{
    const long part = 3L * BT; // one rank's stats
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        float maxv = -std::numeric_limits<float>::infinity();
        for (int r = 0; r < ranks; ++r)
            maxv = std::max(maxv, stats[r * part + 3L * i]);
        float sum = 0, target = 0;
        for (int r = 0; r < ranks; ++r) {
            const float* s = stats + r * part + 3L * i;
            if (s[1] > 0)
                sum += s[1] * std::exp(s[0] - maxv);
            target += s[2];
        }
        losses[i] = std::log(sum) + maxv - target;
        float* row = logits + static_cast<long>(i) * stride;
        const float inv = 1.0f / sum;
        for (int j = 0; j < V; ++j)
            row[j] = std::exp(row[j] - maxv) * inv * scale;
        if (targets[i] >= 0 && targets[i] < V)
            row[targets[i]] -= scale;
        std::fill(row + V, row + stride, 0.0f);
    }
}

void crossEntropyBackward(float* probs, const std::int32_t* targets, float scale, int BT, int V)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        float* row = probs + static_cast<long>(i) * V;
        for (int j = 0; j < V; ++j)
            row[j] *= scale;
        row[targets[i]] -= scale;
    }
}

} // namespace pw::engine::ops
