// SPDX-License-Identifier: MIT
// The element-wise kernels of the CUDA backend (the encoder's forward, GELU, residual adds, scaling, the wave and
// optimizer updates) and its two small reductions (the loss's mean, the gradient norm's square). Each element-wise
// operation is a functor applied by one grid-stride kernel, eight elements at a time with 128-bit accesses when
// every pointer is 16-byte aligned, one at a time otherwise (a parameter tensor at an odd offset in its buffer) and
// for the tail. Arithmetic is fp32 and written in the CPU ops' order (ops.cpp, cpu_backend.cpp).
#include "common.cuh"

namespace pw::engine::cuda {

namespace {

constexpr int kVec = 8; // elements per vector access: 16 bytes of bf16, 32 bytes of fp32
constexpr int kThreads = 256;

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

/// GELU's tanh approximation written as a logistic, as ops.cpp does: 0.5 x (1 + tanh(u)) = x sigmoid(2u).
__device__ __forceinline__ float geluSigmoid(float x)
{
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

template <class Op> __global__ void __launch_bounds__(kThreads) mapKernel(std::size_t n, std::size_t packs, Op op)
{
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (std::size_t p = first; p < packs; p += stride)
        op.template apply<kVec>(p * kVec);
    for (std::size_t i = packs * kVec + first; i < n; i += stride)
        op.template apply<1>(i);
}

/// Applies `op` to elements [0, n): vectors of kVec where `vector`, then single elements.
template <class Op> void runMap(const Launch& l, std::size_t n, bool vector, const Op& op)
{
    if (n == 0)
        return;
    const std::size_t packs = vector ? n / kVec : 0;
    const std::size_t work = std::max(packs, n - packs * kVec);
    mapKernel<<<gridFor(work, kThreads, l.sms), kThreads, 0, l.stream>>>(n, packs, op);
    PW_CUDA_LAUNCHED();
}

template <class T> struct EncoderForwardOp
{
    T* out;
    const std::int32_t* tokens;
    const T* wte;
    const T* wpe;
    int T_;
    int C;

    // A vector never crosses a row: vectors are used only when C is a multiple of kVec.
    template <int N> __device__ void apply(std::size_t i) const
    {
        const std::size_t bt = i / static_cast<std::size_t>(C);
        const std::size_t c = i - bt * static_cast<std::size_t>(C);
        const std::size_t t = bt % static_cast<std::size_t>(T_);
        float e[N] = {}, p[N];
        if (const std::int32_t token = tokens[bt]; token >= 0) // negative: another rank's row (vocabulary-parallel)
            load<N>(wte + static_cast<std::size_t>(token) * C + c, e);
        if (wpe) { // null: rotary positions, the token rows alone
            load<N>(wpe + t * C + c, p);
#pragma unroll
            for (int k = 0; k < N; ++k)
                e[k] += p[k];
        }
        store<N>(out + i, e);
    }
};

/// dwpe[t, c] += the sum over the batch of dout[b, t, c]: each position's column is one thread's, so no race.
template <class T> struct PositionBackwardOp
{
    T* dwpe;
    const T* dout;
    int B;
    std::size_t TC;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float acc[N] = {};
        for (int b = 0; b < B; ++b) {
            float d[N];
            load<N>(dout + static_cast<std::size_t>(b) * TC + i, d);
#pragma unroll
            for (int k = 0; k < N; ++k)
                acc[k] += d[k];
        }
        float w[N];
        load<N>(dwpe + i, w);
#pragma unroll
        for (int k = 0; k < N; ++k)
            w[k] += acc[k];
        store<N>(dwpe + i, w);
    }
};

template <class T> struct GeluForwardOp
{
    T* out;
    const T* inp;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float x[N];
        load<N>(inp + i, x);
#pragma unroll
        for (int k = 0; k < N; ++k)
            x[k] = x[k] * geluSigmoid(x[k]);
        store<N>(out + i, x);
    }
};

template <class T> struct GeluBackwardOp
{
    T* dinp;
    const T* inp;
    const T* dout;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float x[N], d[N], g[N];
        load<N>(inp + i, x);
        load<N>(dout + i, d);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            // d/dx [x s(x)] with s = sigmoid(2u): s + x 2 s (1 - s) u'(x); written, not accumulated
            const float s = geluSigmoid(x[k]);
            const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x[k] * x[k]);
            g[k] = (s + 2.0f * x[k] * s * (1.0f - s) * du) * d[k];
        }
        store<N>(dinp + i, g);
    }
};

template <class T> struct ResidualOp
{
    T* out;
    const T* a;
    const T* b;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float x[N], y[N];
        load<N>(a + i, x);
        load<N>(b + i, y);
#pragma unroll
        for (int k = 0; k < N; ++k)
            x[k] += y[k];
        store<N>(out + i, x);
    }
};

/// out = parts[0] + ... + parts[count - 1], in this order, in fp32 (the device fabric's all-reduce).
constexpr int kSumParts = 16;
template <class T> struct SumOp
{
    T* out;
    const T* parts[kSumParts];
    int count;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float acc[N], x[N];
        load<N>(parts[0] + i, acc);
        for (int p = 1; p < count; ++p) {
            load<N>(parts[p] + i, x);
#pragma unroll
            for (int k = 0; k < N; ++k)
                acc[k] += x[k];
        }
        store<N>(out + i, acc);
    }
};

template <class T> struct ScaleOp
{
    T* x;
    float factor;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float v[N];
        load<N>(x + i, v);
#pragma unroll
        for (int k = 0; k < N; ++k)
            v[k] *= factor;
        store<N>(x + i, v);
    }
};

template <class T> struct AddDifferenceOp
{
    float* sum;
    const T* a;
    const T* b;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float s[N], x[N], y[N];
        load<N>(sum + i, s);
        load<N>(a + i, x);
        load<N>(b + i, y);
#pragma unroll
        for (int k = 0; k < N; ++k)
            s[k] += x[k] - y[k];
        store<N>(sum + i, s);
    }
};

/// params += update (and master += update). In bf16 the parameters are the master's rounding, as after AdamW; in
/// fp32 both add the update on their own, as the CPU does.
template <class T> struct AddUpdateOp
{
    T* params;
    float* master;
    const float* update;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float p[N], u[N];
        load<N>(update + i, u);
        if constexpr (sizeof(T) == 2) {
            if (master)
                load<N>(master + i, p);
            else
                load<N>(params + i, p);
#pragma unroll
            for (int k = 0; k < N; ++k)
                p[k] += u[k];
            if (master)
                store<N>(master + i, p);
            store<N>(params + i, p);
        } else {
            load<N>(params + i, p);
#pragma unroll
            for (int k = 0; k < N; ++k)
                p[k] += u[k];
            store<N>(params + i, p);
            if (master && master != static_cast<const void*>(params)) {
                load<N>(master + i, p);
#pragma unroll
                for (int k = 0; k < N; ++k)
                    p[k] += u[k];
                store<N>(master + i, p);
            }
        }
    }
};

/// AdamW in PyTorch's order (cpu_backend.cpp): moments, decay of the parameter, then the step; the parameter is
/// the fp32 master when there is one, and params becomes its rounding.
template <class T> struct AdamWOp
{
    T* params;
    float* master;
    const T* grads;
    float* m;
    float* v;
    float lr, beta1, beta2, eps, decay, c1, c2;

    template <int N> __device__ void apply(std::size_t i) const
    {
        float d[N];
#pragma unroll
        for (int k = 0; k < N; ++k)
            d[k] = decay;
        update<N>(i, d);
    }

    /// Element i + k with decay factor d[k] (1: none).
    template <int N> __device__ void update(std::size_t i, const float (&d)[N]) const
    {
        float g[N], mm[N], vv[N], p[N];
        load<N>(grads + i, g);
        load<N>(m + i, mm);
        load<N>(v + i, vv);
        if (master)
            load<N>(master + i, p);
        else
            load<N>(params + i, p);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            mm[k] = beta1 * mm[k] + (1.0f - beta1) * g[k];
            vv[k] = beta2 * vv[k] + (1.0f - beta2) * g[k] * g[k];
            if (d[k] != 1.0f)
                p[k] *= d[k];
            p[k] -= lr * (mm[k] / c1) / (sqrtf(vv[k] / c2) + eps);
        }
        store<N>(m + i, mm);
        store<N>(v + i, vv);
        if (master)
            store<N>(master + i, p);
        store<N>(params + i, p);
    }
};

/// AdamW over up to kAdamWTensors contiguous tensors in one launch: op's pointers at the first tensor's element 0,
/// ends[j] the end of tensor j from there, bit j of `decayed` whether it takes op.decay.
constexpr int kAdamWTensors = 64;
template <class T> struct AdamWTensorsOp
{
    AdamWOp<T> op;
    std::uint64_t ends[kAdamWTensors];
    std::uint64_t decayed;
    int count;

    template <int N> __device__ void apply(std::size_t i) const
    {
        int lo = 0, hi = count - 1; // the first tensor that ends after i
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (ends[mid] > i)
                hi = mid;
            else
                lo = mid + 1;
        }
        float d[N];
#pragma unroll
        for (int k = 0; k < N; ++k) {
            while (lo < count - 1 && i + k >= ends[lo])
                ++lo;
            d[k] = (decayed >> lo) & 1u ? op.decay : 1.0f;
        }
        op.template update<N>(i, d);
    }
};

/// Partial sums of squares: block b writes partials[b]. The grid's size depends on n only, so the sum is the same
/// every run.
template <class T, int N>
__global__ void __launch_bounds__(kThreads) sumSquaresPartials(float* partials, const T* x, std::size_t n)
{
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t packs = n / N;
    float sum = 0.0f;
    for (std::size_t p = first; p < packs; p += stride) {
        float v[N];
        load<N>(x + p * N, v);
#pragma unroll
        for (int k = 0; k < N; ++k)
            sum += v[k] * v[k];
    }
    for (std::size_t i = packs * N + first; i < n; i += stride) {
        const float v = toFloat(x[i]);
        sum += v * v;
    }
    sum = blockSum(sum);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = sum;
}

/// *out = (sum of x[0..n)) * factor, by one block in a fixed order.
__global__ void __launch_bounds__(1024) sumKernel(float* out, const float* x, std::size_t n, float factor)
{
    float sum = 0.0f;
    for (std::size_t i = threadIdx.x; i < n; i += blockDim.x)
        sum += x[i];
    sum = blockSum(sum);
    if (threadIdx.x == 0)
        *out = sum * factor;
}

constexpr unsigned kMaxReduceBlocks = 1024;

template <class F> void dispatch(DType act, F&& f)
{
    if (act == DType::BF16)
        f(bf16 {});
    else
        f(float {});
}

} // namespace

void encoderForward(
    const Launch& l, void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        const bool vector = C % kVec == 0 && aligned16(out, wte, wpe);
        runMap(l, static_cast<std::size_t>(B) * T * C, vector,
            EncoderForwardOp<E> {
                static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe), T, C});
    });
}

void positionBackward(const Launch& l, void* dwpe, const void* dout, int B, int T, int C)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        const bool vector = C % kVec == 0 && aligned16(dwpe, dout);
        const std::size_t TC = static_cast<std::size_t>(T) * C;
        runMap(l, TC, vector, PositionBackwardOp<E> {static_cast<E*>(dwpe), static_cast<const E*>(dout), B, TC});
    });
}

void geluForward(const Launch& l, void* out, const void* inp, std::size_t n)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(l, n, aligned16(out, inp), GeluForwardOp<E> {static_cast<E*>(out), static_cast<const E*>(inp)});
    });
}

void geluBackward(const Launch& l, void* dinp, const void* inp, const void* dout, std::size_t n)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(l, n, aligned16(dinp, inp, dout),
            GeluBackwardOp<E> {static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout)});
    });
}

void residualForward(const Launch& l, void* out, const void* a, const void* b, std::size_t n)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(l, n, aligned16(out, a, b),
            ResidualOp<E> {static_cast<E*>(out), static_cast<const E*>(a), static_cast<const E*>(b)});
    });
}

void sum(const Launch& l, void* out, std::span<const void* const> parts, std::size_t n)
{
    if (parts.empty())
        return;
    if (parts.size() > static_cast<std::size_t>(kSumParts))
        throw std::invalid_argument("cuda::sum: " + std::to_string(parts.size()) + " parts; at most "
            + std::to_string(kSumParts) + " devices share one GPU's fabric");
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        SumOp<E> op {static_cast<E*>(out), {}, static_cast<int>(parts.size())};
        bool vector = aligned16(out);
        for (std::size_t p = 0; p < parts.size(); ++p) {
            op.parts[p] = static_cast<const E*>(parts[p]);
            vector = vector && aligned16(parts[p]);
        }
        runMap(l, n, vector, op);
    });
}

void scale(const Launch& l, void* x, float factor, std::size_t n)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(l, n, aligned16(x), ScaleOp<E> {static_cast<E*>(x), factor});
    });
}

void addDifference(const Launch& l, float* sum, const void* a, const void* b, std::size_t n)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(
            l, n, aligned16(sum, a, b), AddDifferenceOp<E> {sum, static_cast<const E*>(a), static_cast<const E*>(b)});
    });
}

void addUpdate(const Launch& l, void* params, float* master, const float* update, std::size_t n)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(l, n, aligned16(params, master, update), AddUpdateOp<E> {static_cast<E*>(params), master, update});
    });
}

void adamw(const Launch& l, void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr,
    float beta1, float beta2, float eps, float decay_factor, float c1, float c2)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        runMap(l, n, aligned16(params, master, grads, m, v),
            AdamWOp<E> {static_cast<E*>(params), master, static_cast<const E*>(grads), m, v, lr, beta1, beta2, eps,
                decay_factor, c1, c2});
    });
}

void adamwTensors(const Launch& l, void* params, float* master, const void* grads, float* m, float* v,
    std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor, float c1,
    float c2)
{
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        for (std::size_t first = 0; first < tensors.size();) {
            // One launch: up to kAdamWTensors tensors that follow one another in the vector.
            const std::size_t base = tensors[first].offset;
            AdamWTensorsOp<E> op {};
            std::size_t next = first;
            while (next < tensors.size() && op.count < kAdamWTensors
                && (next == first || tensors[next].offset == tensors[next - 1].offset + tensors[next - 1].size)) {
                op.ends[op.count] = tensors[next].offset + tensors[next].size - base;
                if (tensors[next].decayed)
                    op.decayed |= std::uint64_t {1} << op.count;
                ++op.count;
                ++next;
            }
            E* p = static_cast<E*>(params) + base;
            float* mp = master ? master + base : nullptr;
            const E* g = static_cast<const E*>(grads) + base;
            op.op = AdamWOp<E> {p, mp, g, m + base, v + base, lr, beta1, beta2, eps, decay_factor, c1, c2};
            runMap(l, op.ends[op.count - 1], aligned16(p, mp, g, m + base, v + base), op);
            first = next;
        }
    });
}

void mean(const Launch& l, float* out, const float* x, std::size_t n)
{
    sumKernel<<<1, 1024, 0, l.stream>>>(out, x, n, n > 0 ? 1.0f / static_cast<float>(n) : 0.0f);
    PW_CUDA_LAUNCHED();
}

void sumSquares(const Launch& l, float* out, const void* x, std::size_t n)
{
    // Two levels, both in a fixed order: a grid whose size depends on n only, then one block over its partials.
    const unsigned blocks = static_cast<unsigned>(
        std::clamp<std::size_t>(ceilDiv(n, static_cast<std::size_t>(kThreads) * kVec * 4), 1, kMaxReduceBlocks));
    auto* partials = static_cast<float*>(l.scratch->get(Scratch::Reduce, blocks * sizeof(float)));
    dispatch(l.act, [&](auto type) {
        using E = decltype(type);
        const auto* p = static_cast<const E*>(x);
        if (aligned16(p))
            sumSquaresPartials<E, kVec><<<blocks, kThreads, 0, l.stream>>>(partials, p, n);
        else
            sumSquaresPartials<E, 1><<<blocks, kThreads, 0, l.stream>>>(partials, p, n);
        PW_CUDA_LAUNCHED();
    });
    sumKernel<<<1, 1024, 0, l.stream>>>(out, partials, blocks, 1.0f);
    PW_CUDA_LAUNCHED();
}

} // namespace pw::engine::cuda
