// SPDX-License-Identifier: MIT
// The CPU backend: the host's memory, no stream (every call completes before it returns), the host clock as the
// action timer, and ops.h as the kernel table, fp32 only. It is the oracle of every other backend, so it adds no
// arithmetic of its own beyond what the model did before the seam (the loss's mean, AdamW, the wave updates), in the
// same order.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <vector>

#include "backend.h"
#include "bf16.h"
#include "executor.h"
#include "ops.h"

namespace pw::engine {

namespace {

/// The host clock: a span is the time the call took, which on the CPU is the time the work took.
class HostTimer final : public ActionTimer
{
public:
    std::uint64_t begin() override
    {
        m_open.push_back({m_next, monotonicSeconds(), -1.0});
        return m_next++;
    }
    void end(std::uint64_t ticket) override
    {
        for (auto& o : m_open)
            if (o.ticket == ticket)
                o.t1 = monotonicSeconds();
    }
    void resolve(const std::function<void(std::uint64_t, double, double)>& done, bool) override
    {
        std::size_t i = 0;
        for (; i < m_open.size() && m_open[i].t1 >= 0; ++i)
            done(m_open[i].ticket, m_open[i].t0, m_open[i].t1);
        m_open.erase(m_open.begin(), m_open.begin() + static_cast<std::ptrdiff_t>(i));
    }

private:
    struct Open
    {
        std::uint64_t ticket;
        double t0, t1;
    };
    std::vector<Open> m_open;
    std::uint64_t m_next = 0;
};

class CpuBackend final : public Backend
{
public:
    ~CpuBackend() override
    {
        for (auto& [bytes, p] : m_free)
            ::operator delete (p, std::align_val_t {kAlign});
    }

    std::string name() const override
    {
        std::ostringstream s;
        s << "cpu (" << ops::blasName() << ", " << ops::threads() << " threads)";
        return s.str();
    }
    Precision precision() const override { return Precision::Fp32; }
    bool hostAddressable() const override { return true; }
    bool padsLogits() const override { return false; }

    // A buffer freed is kept for the next one of its size: the activations of a microbatch reuse those of an earlier
    // one instead of faulting in fresh pages (what the executor's spare stashes did before the seam).
    void* allocate(std::size_t bytes) override
    {
        std::lock_guard lock(m_mutex);
        void* p = nullptr;
        if (auto it = m_free.find(bytes); it != m_free.end()) {
            p = it->second;
            m_free.erase(it);
        } else {
            p = ::operator new (bytes, std::align_val_t {kAlign});
            m_stats.reserved += bytes;
        }
        m_stats.allocated += bytes;
        m_stats.peak = std::max(m_stats.peak, m_stats.allocated);
        return p;
    }
    void release(void* p, std::size_t bytes) override
    {
        std::lock_guard lock(m_mutex);
        m_stats.allocated -= bytes;
        m_free.emplace(bytes, p);
    }
    MemoryStats memory() const override
    {
        std::lock_guard lock(m_mutex);
        return m_stats;
    }
    void resetPeak() override
    {
        std::lock_guard lock(m_mutex);
        m_stats.peak = m_stats.allocated;
    }
    void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
    void copy(void* dst, const void* src, std::size_t bytes) override
    {
        if (dst != src && bytes > 0)
            std::memcpy(dst, src, bytes);
    }
    void upload(void* dst, DType dtype, const float* host, std::size_t count) override
    {
        if (dtype == DType::BF16)
            std::transform(host, host + count, static_cast<std::uint16_t*>(dst), toBf16);
        else
            copy(dst, host, count * sizeof(float));
    }
    void uploadBytes(void* dst, const void* host, std::size_t bytes) override { copy(dst, host, bytes); }
    void downloadBytes(void* host, const void* src, std::size_t bytes) override { copy(host, src, bytes); }
    void uploadTokens(std::int32_t* dst, const std::int32_t* host, std::size_t count) override
    {
        copy(dst, host, count * sizeof(std::int32_t));
    }
    void download(float* host, const void* src, DType dtype, std::size_t count) override
    {
        if (dtype == DType::BF16) {
            const auto* s = static_cast<const std::uint16_t*>(src);
            std::transform(s, s + count, host, fromBf16);
        } else {
            copy(host, src, count * sizeof(float));
        }
    }
    void synchronize() override { }
    std::unique_ptr<HostCopy> readBack(const float* src, std::size_t count) override
    {
        class Copied final : public HostCopy
        {
        public:
            explicit Copied(std::vector<float> values)
                : m_values(std::move(values))
            {
            }
            std::vector<float> take() override { return std::move(m_values); }

        private:
            std::vector<float> m_values;
        };
        return std::make_unique<Copied>(std::vector<float>(src, src + count));
    }
    std::unique_ptr<ActionTimer> makeTimer() override { return std::make_unique<HostTimer>(); }

    // The CPU's "stream" is the calling thread: whatever was called before record() has happened when it returns.
    bool sharesMemoryWith(const Backend& other) const override { return other.hostAddressable(); }
    std::shared_ptr<const DeviceEvent> record() override
    {
        static const auto done = std::make_shared<const DeviceEvent>();
        return done;
    }
    void waitFor(const DeviceEvent&) override { }
    void hostWait(const DeviceEvent&) override { }
    void residualNormForward(void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
        const void* weight, const void* bias, int BT, int C, float eps) override
    {
        const std::size_t n = static_cast<std::size_t>(BT) * static_cast<std::size_t>(C);
        residualForward(sum, a, b, n);
        if (mean)
            layernormForward(out, mean, rstd, sum, weight, bias, BT, C);
        else
            rmsnormForward(out, rstd, sum, weight, BT, C, eps);
    }
    void normBackwardResidual(void* dinp, const void* dresidual, const void* dout, const void* inp, const void* weight,
        const float* mean, const float* rstd, int BT, int C) override
    {
        copy(dinp, dresidual, static_cast<std::size_t>(BT) * static_cast<std::size_t>(C) * sizeof(float));
        if (mean)
            layernormBackward(dinp, nullptr, nullptr, dout, inp, weight, mean, rstd, BT, C);
        else
            rmsnormBackward(dinp, nullptr, dout, inp, weight, rstd, BT, C);
    }
    void sum(void* out, std::span<const void* const> parts, std::size_t n) override
    {
        std::vector<const float*> p;
        p.reserve(parts.size());
        for (const void* part : parts)
            p.push_back(f(part));
        ops::sumParts(f(out), p, n);
    }

    void encoderForward(
        void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C) override
    {
        ops::encoderForward(f(out), tokens, f(wte), f(wpe), B, T, C);
    }
    void encoderBackward(
        void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C) override
    {
        ops::encoderBackward(f(dwte), f(dwpe), f(dout), tokens, B, T, C);
    }
    void layernormForward(void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias,
        int BT, int C) override
    {
        ops::layernormForward(f(out), mean, rstd, f(inp), f(weight), f(bias), BT, C);
    }
    void layernormBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
        const void* weight, const float* mean, const float* rstd, int BT, int C) override
    {
        ops::layernormBackward(f(dinp), f(dweight), f(dbias), f(dout), f(inp), f(weight), mean, rstd, BT, C);
    }
    void matmulForward(void* out, const void* inp, const void* weight, const void* bias, int BT, int C, int OC,
        void* gelu_out) override
    {
        ops::matmulForward(f(out), f(inp), f(weight), f(bias), BT, C, OC);
        if (gelu_out)
            ops::geluForward(f(gelu_out), f(out), BT * OC);
    }
    void matmulBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp, const void* weight,
        int BT, int C, int OC) override
    {
        ops::matmulBackward(f(dinp), f(dweight), f(dbias), f(dout), f(inp), f(weight), BT, C, OC);
    }
    void matmulBackwardGelu(
        void* dinp, const void* dout, const void* weight, const void* pre_gelu, int BT, int C, int OC) override
    {
        ops::matmulBackward(f(dinp), nullptr, nullptr, f(dout), nullptr, f(weight), BT, C, OC);
        ops::geluBackward(f(dinp), f(pre_gelu), f(dinp), BT * C); // in place
    }
    std::size_t attentionStashCount(const AttentionShape& a) const override
    {
        return static_cast<std::size_t>(a.batch) * a.heads * a.seq * a.seq; // the softmax itself
    }
    void attentionForward(void* out, float* stash, const void* qkv, const AttentionShape& a) override
    {
        ops::attentionForward(f(out), stash, f(qkv), a);
    }
    void attentionBackward(void* dqkv, const void* dout, const void* qkv, const void*, const float* stash,
        const AttentionShape& a) override
    {
        m_scratch.resize(static_cast<std::size_t>(a.seq) * a.seq);
        ops::attentionBackward(f(dqkv), f(dout), f(qkv), stash, m_scratch.data(), a);
    }
    void rmsnormForward(void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps) override
    {
        ops::rmsnormForward(f(out), rstd, f(inp), f(weight), BT, C, eps);
    }
    void rmsnormBackward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
        const float* rstd, int BT, int C) override
    {
        ops::rmsnormBackward(f(dinp), f(dweight), f(dout), f(inp), f(weight), rstd, BT, C);
    }
    void rotary(void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse) override
    {
        ops::rotary(f(x), table, B, T, heads, hs, stride, inverse);
    }
    void swigluForward(void* out, const void* inp, int BT, int F) override
    {
        ops::swigluForward(f(out), f(inp), BT, F);
    }
    void swigluBackward(void* dinp, const void* inp, const void* dout, int BT, int F) override
    {
        ops::swigluBackward(f(dinp), f(inp), f(dout), BT, F);
    }
    void geluForward(void* out, const void* inp, std::size_t n) override
    {
        ops::geluForward(f(out), f(inp), static_cast<int>(n));
    }
    void geluBackward(void* dinp, const void* inp, const void* dout, std::size_t n) override
    {
        ops::geluBackward(f(dinp), f(inp), f(dout), static_cast<int>(n));
    }
    void residualForward(void* out, const void* a, const void* b, std::size_t n) override
    {
        ops::residualForward(f(out), f(a), f(b), static_cast<int>(n));
    }
    void classifier(
        float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale) override
    {
        float* l = f(logits);
        if (stride == V) {
            ops::crossEntropyForward(losses, l, l, targets, BT, V);
            ops::crossEntropyBackward(l, targets, dscale, BT, V);
            return;
        }
        for (int i = 0; i < BT; ++i) { // padded rows: one row at a time, the padding's gradient 0
            float* row = l + static_cast<std::ptrdiff_t>(i) * stride;
            ops::crossEntropyForward(losses + i, row, row, targets + i, 1, V);
            ops::crossEntropyBackward(row, targets + i, dscale, 1, V);
            std::fill(row + V, row + stride, 0.0f);
        }
    }
    void classifierStats(
        float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride) override
    {
        ops::crossEntropyStats(stats, f(logits), targets, BT, V, stride);
    }
    void classifierFinish(float* losses, void* logits, const float* stats, int ranks, const std::int32_t* targets,
        int BT, int V, int stride, float dscale) override
    {
        ops::crossEntropyFinish(losses, f(logits), stats, ranks, targets, BT, V, stride, dscale);
    }
    void mean(float* out, const float* x, std::size_t n) override
    {
        float sum = 0; // in order, as the model summed its positions' losses before the seam
        for (std::size_t i = 0; i < n; ++i)
            sum += x[i];
        *out = sum / static_cast<float>(n);
    }
    void scale(void* x, float factor, std::size_t n) override
    {
        float* p = f(x);
        for (std::size_t i = 0; i < n; ++i)
            p[i] *= factor;
    }
    void sumSquares(float* out, const void* x, std::size_t n) override
    {
        const float* p = f(x);
        double sum = 0;
        for (std::size_t i = 0; i < n; ++i)
            sum += static_cast<double>(p[i]) * p[i];
        *out = static_cast<float>(sum);
    }
    void addDifference(float* sum, const void* a, const void* b, std::size_t n) override
    {
        const float* x = f(a);
        const float* y = f(b);
        for (std::size_t i = 0; i < n; ++i)
            sum[i] += x[i] - y[i];
    }
    void addUpdate(void* params, float* master, const float* update, std::size_t n) override
    {
        float* p = f(params);
        for (std::size_t i = 0; i < n; ++i)
            p[i] += update[i];
        if (master && master != p)
            for (std::size_t i = 0; i < n; ++i)
                master[i] += update[i];
    }
    void adamw(void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr, float beta1,
        float beta2, float eps, float decay_factor, float c1, float c2) override
    {
        float* p = master ? master : f(params);
        const float* g = f(grads);
        const long count = static_cast<long>(n);
#pragma omp parallel for
        for (long i = 0; i < count; ++i) {
            m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
            v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
            // PyTorch's order: decay the parameter first, then the Adam step on the decayed value.
            if (decay_factor != 1.0f)
                p[i] *= decay_factor;
            p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
        }
        if (master && master != params)
            std::copy(master, master + n, f(params));
    }
    void adamwTensors(void* params, float* master, const void* grads, float* m, float* v,
        std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor,
        float c1, float c2) override
    {
        for (const AdamWTensor& t : tensors) // no launches to save on the CPU: the oracle, a tensor at a time
            adamw(f(params) + t.offset, master ? master + t.offset : nullptr, f(grads) + t.offset, m + t.offset,
                v + t.offset, t.size, lr, beta1, beta2, eps, t.decayed ? decay_factor : 1.0f, c1, c2);
    }

private:
    static float* f(void* p)
    {
        return static_cast<float*>(p);
    }
    static const float* f(const void* p)
    {
        return static_cast<const float*>(p);
    }
    static constexpr std::size_t kAlign = 64;

    mutable std::mutex m_mutex;
    MemoryStats m_stats;
    std::multimap<std::size_t, void*> m_free;
    std::vector<float> m_scratch;
};

} // namespace

std::unique_ptr<Backend> makeCpuBackend()
{
    return std::make_unique<CpuBackend>();
}

Backend& cpuBackend()
{
    static CpuBackend backend;
    return backend;
}

} // namespace pw::engine
