// SPDX-License-Identifier: MIT
#include "ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <cblas.h>
#include <omp.h>

// OpenBLAS's own controls (declared in its cblas.h; kept explicit here so another CBLAS fails to link loudly).
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
}

namespace pw::engine::ops {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)
} // namespace

void setThreads(int threads)
{
    if (threads <= 0)
        return;
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
}

int threads()
{
    return openblas_get_num_threads();
}

const char* blasName()
{
    return openblas_get_config();
}

void encoderForward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C)
{
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            float* o = out + (static_cast<long>(b) * T + t) * C;
            const float* e = wte + static_cast<long>(tokens[b * T + t]) * C;
            const float* p = wpe + static_cast<long>(t) * C;
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
            float* e = dwte + static_cast<long>(tokens[b * T + t]) * C;
            float* p = dwpe + static_cast<long>(t) * C;
            for (int c = 0; c < C; ++c) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
}

void layernormForward(
    float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int BT, int C)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* x = inp + static_cast<long>(i) * C;
        float m = 0;
        for (int c = 0; c < C; ++c)
            m += x[c];
        m /= static_cast<float>(C);
        float v = 0;
        for (int c = 0; c < C; ++c)
            v += (x[c] - m) * (x[c] - m);
        v /= static_cast<float>(C);
        const float s = 1.0f / std::sqrt(v + kLayerNormEps);
        float* o = out + static_cast<long>(i) * C;
        for (int c = 0; c < C; ++c)
            o[c] = (s * (x[c] - m)) * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
    const float* weight, const float* mean, const float* rstd, int BT, int C)
{
    // dinp rows are independent; dweight and dbias sum over rows, so each thread keeps its own partial sums.
#pragma omp parallel
    {
        std::vector<float> dw(C, 0.0f), db(C, 0.0f);
#pragma omp for
        for (int i = 0; i < BT; ++i) {
            const float* d = dout + static_cast<long>(i) * C;
            const float* x = inp + static_cast<long>(i) * C;
            float* dx = dinp + static_cast<long>(i) * C;
            const float m = mean[i], s = rstd[i];
            float dnormMean = 0, dnormNormMean = 0;
            for (int c = 0; c < C; ++c) {
                const float norm = (x[c] - m) * s;
                const float dnorm = weight[c] * d[c];
                dnormMean += dnorm;
                dnormNormMean += dnorm * norm;
            }
            dnormMean /= static_cast<float>(C);
            dnormNormMean /= static_cast<float>(C);
            for (int c = 0; c < C; ++c) {
                const float norm = (x[c] - m) * s;
                const float dnorm = weight[c] * d[c];
                db[c] += d[c];
                dw[c] += norm * d[c];
                dx[c] += (dnorm - dnormMean - norm * dnormNormMean) * s;
            }
        }
#pragma omp critical
        for (int c = 0; c < C; ++c) {
            dweight[c] += dw[c];
            dbias[c] += db[c];
        }
    }
}

void matmulForward(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (!bias)
        return;
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        float* o = out + static_cast<long>(i) * OC;
        for (int j = 0; j < OC; ++j)
            o[j] += bias[j];
    }
}

void matmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
    int BT, int C, int OC)
{
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (!dbias)
        return;
#pragma omp parallel for
    for (int j = 0; j < OC; ++j) {
        float sum = 0;
        for (int i = 0; i < BT; ++i)
            sum += dout[static_cast<long>(i) * OC + j];
        dbias[j] += sum;
    }
}

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const int C3 = 3 * C;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const float* q = qkv + static_cast<long>(b) * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* a = att + (static_cast<long>(b) * NH + h) * T * T;
            // Scores for every pair; the causal mask and the softmax then keep j <= i only.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
#pragma omp parallel for
            for (int i = 0; i < T; ++i) {
                float* row = a + static_cast<long>(i) * T;
                float maxv = row[0];
                for (int j = 1; j <= i; ++j)
                    maxv = std::max(maxv, row[j]);
                float sum = 0;
                for (int j = 0; j <= i; ++j) {
                    row[j] = std::exp(row[j] - maxv);
                    sum += row[j];
                }
                const float inv = 1.0f / sum;
                for (int j = 0; j <= i; ++j)
                    row[j] *= inv;
                for (int j = i + 1; j < T; ++j)
                    row[j] = 0.0f;
            }
            float* o = out + static_cast<long>(b) * T * C + h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
        }
}

void attentionBackward(
    float* dqkv, const float* dout, const float* qkv, const float* att, float* scratch, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const int C3 = 3 * C;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const long base = static_cast<long>(b) * T * C3 + h * hs;
            const float* q = qkv + base;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* dq = dqkv + base;
            float* dk = dq + C;
            float* dv = dq + 2 * C;
            const float* a = att + (static_cast<long>(b) * NH + h) * T * T;
            const float* dy = dout + static_cast<long>(b) * T * C + h * hs;
            float* da = scratch;
            // y = a . v  =>  da = dy . v^T,  dv += a^T . dy
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, da, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 1.0f, dv, C3);
            // Softmax backward in place: ds[i,j] = a[i,j] (da[i,j] - sum_k a[i,k] da[i,k]); masked entries are 0.
#pragma omp parallel for
            for (int i = 0; i < T; ++i) {
                const float* ar = a + static_cast<long>(i) * T;
                float* dr = da + static_cast<long>(i) * T;
                float dot = 0;
                for (int j = 0; j <= i; ++j)
                    dot += ar[j] * dr[j];
                for (int j = 0; j <= i; ++j)
                    dr[j] = ar[j] * (dr[j] - dot);
                for (int j = i + 1; j < T; ++j)
                    dr[j] = 0.0f;
            }
            // s = scale q . k^T  =>  dq += scale ds . k,  dk += scale ds^T . q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, da, T, k, C3, 1.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, da, T, q, C3, 1.0f, dk, C3);
        }
}

void geluForward(float* out, const float* inp, int n)
{
#pragma omp parallel for
    for (int i = 0; i < n; ++i) {
        const float x = inp[i];
        const float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube)));
    }
}

void geluBackward(float* dinp, const float* inp, const float* dout, int n)
{
#pragma omp parallel for
    for (int i = 0; i < n; ++i) {
        const float x = inp[i];
        const float cube = 0.044715f * x * x * x;
        const float arg = kGeluScale * (x + cube);
        const float th = std::tanh(arg);
        const float sech2 = 1.0f - th * th;
        const float grad = 0.5f * (1.0f + th) + x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

void residualForward(float* out, const float* a, const float* b, int n)
{
#pragma omp parallel for
    for (int i = 0; i < n; ++i)
        out[i] = a[i] + b[i];
}

void crossEntropyForward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int BT, int V)
{
#pragma omp parallel for
    for (int i = 0; i < BT; ++i) {
        const float* l = logits + static_cast<long>(i) * V;
        float* p = probs + static_cast<long>(i) * V;
        const float target = l[targets[i]]; // read before probs (which may alias logits) overwrite it
        float maxv = l[0];
        for (int j = 1; j < V; ++j)
            maxv = std::max(maxv, l[j]);
        double sum = 0;
        for (int j = 0; j < V; ++j) {
            p[j] = std::exp(l[j] - maxv);
            sum += p[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int j = 0; j < V; ++j)
            p[j] *= inv;
        losses[i] = static_cast<float>(std::log(sum) + maxv - target);
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
