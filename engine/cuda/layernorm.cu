// SPDX-License-Identifier: MIT
// Layer norm and RMSNorm forward and backward, and the column sums that the backward's dweight and dbias and a
// matrix product's dbias are. Rows are one warp each (fp32 mean and variance in two passes, as ops.cpp computes them).
// Column sums are deterministic in two kernels: blocks of 32 x 8 threads sum a tile of columns over a chunk of
// rows into per-chunk partials, then one thread per column adds its chunks in order into the gradient (+=).
#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowWarps = 8; // rows per block of the row kernels

/// The sum of a row's elements. With a residual (resA not null): the row is resA + resB, stored to sumOut rounded to
/// T (residualForward's values), and summed as stored; the row is the warp's own, so its later passes read back
/// what it wrote (sumOut is then the norm's input).
template <class T, int N> __device__ float rowSum(const T* x, T* sumOut, const T* resA, const T* resB, int lane, int C)
{
    float sum = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N];
        if (resA) {
            float b[N];
            load<N>(resA + c, v);
            load<N>(resB + c, b);
#pragma unroll
            for (int k = 0; k < N; ++k)
                v[k] += b[k];
            store<N>(sumOut + c, v);
            load<N>(sumOut + c, v); // the stored (rounded) values, as the unfused norm reads them
        } else {
            load<N>(x + c, v);
        }
#pragma unroll
        for (int k = 0; k < N; ++k)
            sum += v[k];
    }
    return sum;
}

template <class T, int N>
__global__ void __launch_bounds__(kRowWarps * 32) layernormForwardKernel(T* out, float* mean, float* rstd, const T* inp,
    const T* weight, const T* bias, int BT, int C, const T* resA, const T* resB, T* sumOut)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * kRowWarps + threadIdx.x / 32;
    if (row >= BT)
        return;
    const std::size_t offset = static_cast<std::size_t>(row) * C;
    const T* x = inp + offset;
    const float sum = resA ? rowSum<T, N>(x, sumOut + offset, resA + offset, resB + offset, lane, C)
                           : rowSum<T, N>(x, nullptr, nullptr, nullptr, lane, C);
    const float m = warpSum(sum) / static_cast<float>(C);
    float sq = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N];
        load<N>(x + c, v);
#pragma unroll
        for (int k = 0; k < N; ++k)
            sq += (v[k] - m) * (v[k] - m);
    }
    const float s = 1.0f / sqrtf(warpSum(sq) / static_cast<float>(C) + kLayerNormEps);
    T* o = out + static_cast<std::size_t>(row) * C;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N], w[N], b[N];
        load<N>(x + c, v);
        load<N>(weight + c, w);
        load<N>(bias + c, b);
#pragma unroll
        for (int k = 0; k < N; ++k)
            v[k] = (s * (v[k] - m)) * w[k] + b[k];
        store<N>(o + c, v);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/// dinp = dres + the layer norm's input gradient, one warp per row (dres = dinp: accumulated).
template <class T, int N>
__global__ void __launch_bounds__(kRowWarps * 32) layernormBackwardInput(T* dinp, const T* dres, const T* dout,
    const T* inp, const T* weight, const float* mean, const float* rstd, int BT, int C)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * kRowWarps + threadIdx.x / 32;
    if (row >= BT)
        return;
    const std::size_t offset = static_cast<std::size_t>(row) * C;
    const float m = mean[row], s = rstd[row];
    float dnormMean = 0.0f, dnormNormMean = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float d[N], x[N], w[N];
        load<N>(dout + offset + c, d);
        load<N>(inp + offset + c, x);
        load<N>(weight + c, w);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float dnorm = w[k] * d[k];
            dnormMean += dnorm;
            dnormNormMean += dnorm * ((x[k] - m) * s);
        }
    }
    dnormMean = warpSum(dnormMean) / static_cast<float>(C);
    dnormNormMean = warpSum(dnormNormMean) / static_cast<float>(C);
    for (int c = lane * N; c < C; c += 32 * N) {
        float d[N], x[N], w[N], g[N];
        load<N>(dout + offset + c, d);
        load<N>(inp + offset + c, x);
        load<N>(weight + c, w);
        load<N>(dres + offset + c, g);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float norm = (x[k] - m) * s;
            g[k] += (w[k] * d[k] - dnormMean - norm * dnormNormMean) * s;
        }
        store<N>(dinp + offset + c, g);
    }
}

/// RMSNorm forward, one warp per row: out = x s w with s = 1 / sqrt(mean(x^2) + eps).
template <class T, int N>
__global__ void __launch_bounds__(kRowWarps * 32) rmsnormForwardKernel(T* out, float* rstd, const T* inp,
    const T* weight, int BT, int C, float eps, const T* resA, const T* resB, T* sumOut)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * kRowWarps + threadIdx.x / 32;
    if (row >= BT)
        return;
    const std::size_t offset = static_cast<std::size_t>(row) * C;
    const T* x = inp + offset;
    if (resA) // the sum first, as the unfused residualForward stores it
        rowSum<T, N>(x, sumOut + offset, resA + offset, resB + offset, lane, C);
    float sq = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N];
        load<N>(x + c, v);
#pragma unroll
        for (int k = 0; k < N; ++k)
            sq += v[k] * v[k];
    }
    const float s = 1.0f / sqrtf(warpSum(sq) / static_cast<float>(C) + eps);
    T* o = out + static_cast<std::size_t>(row) * C;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N], w[N];
        load<N>(x + c, v);
        load<N>(weight + c, w);
#pragma unroll
        for (int k = 0; k < N; ++k)
            v[k] = (v[k] * s) * w[k];
        store<N>(o + c, v);
    }
    if (lane == 0)
        rstd[row] = s;
}

/// dinp += RMSNorm's input gradient, one warp per row: s w d - x s^3 mean(w d x).
template <class T, int N>
__global__ void __launch_bounds__(kRowWarps * 32) rmsnormBackwardInput(
    T* dinp, const T* dres, const T* dout, const T* inp, const T* weight, const float* rstd, int BT, int C)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * kRowWarps + threadIdx.x / 32;
    if (row >= BT)
        return;
    const std::size_t offset = static_cast<std::size_t>(row) * C;
    const float s = rstd[row];
    float dot = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float d[N], x[N], w[N];
        load<N>(dout + offset + c, d);
        load<N>(inp + offset + c, x);
        load<N>(weight + c, w);
#pragma unroll
        for (int k = 0; k < N; ++k)
            dot += w[k] * d[k] * x[k];
    }
    const float k3 = s * s * s * warpSum(dot) / static_cast<float>(C);
    for (int c = lane * N; c < C; c += 32 * N) {
        float d[N], x[N], w[N], g[N];
        load<N>(dout + offset + c, d);
        load<N>(inp + offset + c, x);
        load<N>(weight + c, w);
        load<N>(dres + offset + c, g);
#pragma unroll
        for (int k = 0; k < N; ++k)
            g[k] += s * w[k] * d[k] - k3 * x[k];
        store<N>(dinp + offset + c, g);
    }
}

/// Column sums over one chunk of rows, into partials[chunk][output][cols]. Output 0 is the sum of dout; with the
/// norm's statistics (LN), output 1 is the sum of dout x the normalised input (dweight's; mean null: RMSNorm's).
template <class T, int N, bool LN>
__global__ void __launch_bounds__(256) columnPartials(float* partials, const T* dout, const T* inp, const float* mean,
    const float* rstd, int rows, int cols, int rowsPerChunk)
{
    constexpr int kOutputs = LN ? 2 : 1;
    __shared__ float tile[kOutputs][8][32 * N];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int c0 = (blockIdx.x * 32 + tx) * N;
    const int r0 = blockIdx.y * rowsPerChunk;
    const int r1 = min(rows, r0 + rowsPerChunk);
    float sd[N] = {}, sn[N] = {};
    if (c0 < cols) { // with N > 1, cols is a multiple of N: the whole vector is in range
        for (int r = r0 + ty; r < r1; r += 8) {
            const std::size_t offset = static_cast<std::size_t>(r) * cols + c0;
            float d[N];
            load<N>(dout + offset, d);
#pragma unroll
            for (int k = 0; k < N; ++k)
                sd[k] += d[k];
            if constexpr (LN) {
                float x[N];
                load<N>(inp + offset, x);
                const float m = mean ? mean[r] : 0.0f, s = rstd[r]; // RMSNorm: no mean
#pragma unroll
                for (int k = 0; k < N; ++k)
                    sn[k] += ((x[k] - m) * s) * d[k];
            }
        }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) {
        tile[0][ty][tx * N + k] = sd[k];
        if constexpr (LN)
            tile[1][ty][tx * N + k] = sn[k];
    }
    __syncthreads();
    for (int j = threadIdx.x; j < 32 * N; j += blockDim.x) {
        const int col = blockIdx.x * 32 * N + j;
        if (col >= cols)
            continue;
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) {
            float sum = 0.0f;
#pragma unroll
            for (int y = 0; y < 8; ++y)
                sum += tile[o][y][j];
            partials[(static_cast<std::size_t>(blockIdx.y) * kOutputs + o) * cols + col] = sum;
        }
    }
}

/// out[col] += the sum over chunks of partials[chunk][output][col], chunks in order.
template <class T>
__global__ void accumulateColumns(T* out, const float* partials, int chunks, int outputs, int output, int cols)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols)
        return;
    float sum = 0.0f;
    for (int k = 0; k < chunks; ++k)
        sum += partials[(static_cast<std::size_t>(k) * outputs + output) * cols + col];
    out[col] = fromFloat<T>(toFloat(out[col]) + sum);
}

struct ColumnGrid
{
    int colBlocks = 1, chunks = 1, rowsPerChunk = 1;
};

/// Enough chunks of rows that the partial kernel fills the device about four times, each chunk at least 8 rows.
ColumnGrid columnGrid(int rows, int cols, int n, int sms)
{
    ColumnGrid g;
    g.colBlocks = static_cast<int>(ceilDiv(static_cast<std::size_t>(cols), 32 * static_cast<std::size_t>(n)));
    const int wanted = std::max(1, 4 * sms / g.colBlocks);
    g.chunks = std::clamp(wanted, 1, std::max(1, static_cast<int>(ceilDiv(rows, 8))));
    g.rowsPerChunk = static_cast<int>(ceilDiv(rows, g.chunks));
    g.chunks = static_cast<int>(ceilDiv(rows, g.rowsPerChunk));
    return g;
}

/// The column sums of dout (and, with mean/rstd, of dout x the normalised input) added into dsum (and dnorm).
template <class T>
void columnSums(const Launch& l, T* dsum, T* dnorm, const T* dout, const T* inp, const float* mean, const float* rstd,
    int rows, int cols)
{
    if (rows <= 0 || cols <= 0)
        return;
    const bool ln = dnorm != nullptr; // with mean null: RMSNorm's x s
    const int outputs = ln ? 2 : 1;
    const bool vector = cols % 8 == 0 && aligned16(dout, inp);
    const int n = vector ? 8 : 1;
    const ColumnGrid g = columnGrid(rows, cols, n, l.sms);
    auto* partials = static_cast<float*>(
        l.scratch->get(Scratch::Partials, static_cast<std::size_t>(g.chunks) * outputs * cols * sizeof(float)));
    const dim3 grid(static_cast<unsigned>(g.colBlocks), static_cast<unsigned>(g.chunks));
    if (vector && ln)
        columnPartials<T, 8, true>
            <<<grid, 256, 0, l.stream>>>(partials, dout, inp, mean, rstd, rows, cols, g.rowsPerChunk);
    else if (vector)
        columnPartials<T, 8, false>
            <<<grid, 256, 0, l.stream>>>(partials, dout, inp, mean, rstd, rows, cols, g.rowsPerChunk);
    else if (ln)
        columnPartials<T, 1, true>
            <<<grid, 256, 0, l.stream>>>(partials, dout, inp, mean, rstd, rows, cols, g.rowsPerChunk);
    else
        columnPartials<T, 1, false>
            <<<grid, 256, 0, l.stream>>>(partials, dout, inp, mean, rstd, rows, cols, g.rowsPerChunk);
    PW_CUDA_LAUNCHED();
    const unsigned blocks = static_cast<unsigned>(ceilDiv(cols, 256));
    if (dsum) {
        accumulateColumns<T><<<blocks, 256, 0, l.stream>>>(dsum, partials, g.chunks, outputs, 0, cols);
        PW_CUDA_LAUNCHED();
    }
    if (ln) {
        accumulateColumns<T><<<blocks, 256, 0, l.stream>>>(dnorm, partials, g.chunks, outputs, 1, cols);
        PW_CUDA_LAUNCHED();
    }
}

template <class F> void dispatch(DType act, F&& f)
{
    if (act == DType::BF16)
        f(bf16 {});
    else
        f(float {});
}

} // namespace

namespace {

/// The norm's forward, with a residual sum first when resA is not null (then inp is `sum`, which it writes).
template <class E>
void normForward(const Launch& l, E* o, float* mean, float* rstd, E* sum, const E* x, const E* w, const E* b,
    const E* resA, const E* resB, int BT, int C, float eps)
{
    const unsigned blocks = static_cast<unsigned>(ceilDiv(BT, kRowWarps));
    const bool vector = C % 8 == 0 && aligned16(o, x, w, b, sum, resA, resB);
    if (mean) {
        if (vector)
            layernormForwardKernel<E, 8>
                <<<blocks, kRowWarps * 32, 0, l.stream>>>(o, mean, rstd, x, w, b, BT, C, resA, resB, sum);
        else
            layernormForwardKernel<E, 1>
                <<<blocks, kRowWarps * 32, 0, l.stream>>>(o, mean, rstd, x, w, b, BT, C, resA, resB, sum);
    } else if (vector) {
        rmsnormForwardKernel<E, 8><<<blocks, kRowWarps * 32, 0, l.stream>>>(o, rstd, x, w, BT, C, eps, resA, resB, sum);
    } else {
        rmsnormForwardKernel<E, 1><<<blocks, kRowWarps * 32, 0, l.stream>>>(o, rstd, x, w, BT, C, eps, resA, resB, sum);
    }
    PW_CUDA_LAUNCHED();
}

/// g = dres + the norm's input gradient (LayerNorm's with mean, RMSNorm's without).
template <class E>
void normBackwardInput(const Launch& l, E* g, const E* dres, const E* d, const E* x, const E* w, const float* mean,
    const float* rstd, int BT, int C)
{
    const unsigned blocks = static_cast<unsigned>(ceilDiv(BT, kRowWarps));
    const bool vector = C % 8 == 0 && aligned16(g, dres, d, x, w);
    if (mean) {
        if (vector)
            layernormBackwardInput<E, 8><<<blocks, kRowWarps * 32, 0, l.stream>>>(g, dres, d, x, w, mean, rstd, BT, C);
        else
            layernormBackwardInput<E, 1><<<blocks, kRowWarps * 32, 0, l.stream>>>(g, dres, d, x, w, mean, rstd, BT, C);
    } else if (vector) {
        rmsnormBackwardInput<E, 8><<<blocks, kRowWarps * 32, 0, l.stream>>>(g, dres, d, x, w, rstd, BT, C);
    } else {
        rmsnormBackwardInput<E, 1><<<blocks, kRowWarps * 32, 0, l.stream>>>(g, dres, d, x, w, rstd, BT, C);
    }
    PW_CUDA_LAUNCHED();
}

} // namespace

void layernormForward(const Launch& l, void* out, float* mean, float* rstd, const void* inp, const void* weight,
    const void* bias, int BT, int C)
{
    if (BT <= 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        normForward<E>(l, static_cast<E*>(out), mean, rstd, nullptr, static_cast<const E*>(inp),
            static_cast<const E*>(weight), static_cast<const E*>(bias), nullptr, nullptr, BT, C, kLayerNormEps);
    });
}

void layernormBackward(const Launch& l, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
    const void* weight, const float* mean, const float* rstd, int BT, int C)
{
    if (BT <= 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        auto* g = static_cast<E*>(dinp);
        const auto* d = static_cast<const E*>(dout);
        const auto* x = static_cast<const E*>(inp);
        // The split backward asks for one part per call: dinp alone (I), or dweight and dbias alone (W).
        if (g)
            normBackwardInput<E>(l, g, g, d, x, static_cast<const E*>(weight), mean, rstd, BT, C);
        if (dweight || dbias)
            columnSums<E>(l, static_cast<E*>(dbias), static_cast<E*>(dweight), d, x, mean, rstd, BT, C);
    });
}

void rmsnormForward(
    const Launch& l, void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps)
{
    if (BT <= 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        normForward<E>(l, static_cast<E*>(out), nullptr, rstd, nullptr, static_cast<const E*>(inp),
            static_cast<const E*>(weight), nullptr, nullptr, nullptr, BT, C, eps);
    });
}

void rmsnormBackward(const Launch& l, void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
    const float* rstd, int BT, int C)
{
    if (BT <= 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        auto* g = static_cast<E*>(dinp);
        const auto* d = static_cast<const E*>(dout);
        const auto* x = static_cast<const E*>(inp);
        if (g)
            normBackwardInput<E>(l, g, g, d, x, static_cast<const E*>(weight), nullptr, rstd, BT, C);
        if (dweight)
            columnSums<E>(l, nullptr, static_cast<E*>(dweight), d, x, nullptr, rstd, BT, C);
    });
}

void residualNormForward(const Launch& l, void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
    const void* weight, const void* bias, int BT, int C, float eps)
{
    if (BT <= 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        auto* s = static_cast<E*>(sum);
        normForward<E>(l, static_cast<E*>(out), mean, rstd, s, s, static_cast<const E*>(weight),
            static_cast<const E*>(bias), static_cast<const E*>(a), static_cast<const E*>(b), BT, C,
            mean ? kLayerNormEps : eps);
    });
}

void normBackwardResidual(const Launch& l, void* dinp, const void* dresidual, const void* dout, const void* inp,
    const void* weight, const float* mean, const float* rstd, int BT, int C)
{
    if (BT <= 0)
        return;
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        normBackwardInput<E>(l, static_cast<E*>(dinp), static_cast<const E*>(dresidual), static_cast<const E*>(dout),
            static_cast<const E*>(inp), static_cast<const E*>(weight), mean, rstd, BT, C);
    });
}

void biasBackward(const Launch& l, void* dbias, const void* dout, int rows, int cols)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        columnSums<E>(
            l, static_cast<E*>(dbias), nullptr, static_cast<const E*>(dout), nullptr, nullptr, nullptr, rows, cols);
    });
}

} // namespace pw::engine::cuda
