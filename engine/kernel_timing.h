// SPDX-License-Identifier: MIT
// Where a layer's time goes, kernel by kernel (issue 33 item 3). TimingBackend is a Backend that passes every call
// to another one and marks each call that works on the stream with the inner backend's action timer (CUDA events on
// a GPU, the host clock on the CPU); it records what each call does as work the planner can price (its matrix
// products, its attention, the bytes it streams), so that a measured kernel stands beside what the planner's shape
// model (planner/gpu_cost_model.h) charges for the same work. measureLayerKernels runs one planner layer's forward
// and backward through it, as the profiler times layers, and reports each call's median device time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "profiler.h"

namespace pw::planner {
class GpuCostModel;
}

namespace pw::engine {

/// @brief The work of one kernel call in the terms of the planner's GPU cost model.
struct KernelWork
{
    /// @brief A causal attention over `batch` x `heads` sequences (the cost model's attentionSeconds).
    struct Attention
    {
        double batch = 0, heads = 0, sequence = 0, head_dim = 0;
        bool backward = false;

        bool operator==(const Attention&) const = default;
    };
    std::vector<std::array<double, 3>> products; ///< D (m x n) = A (m x k) B (k x n), as (m, n, k)
    std::optional<Attention> attention;
    double bytes = 0; ///< device memory read and written outside the products and the attention
    bool host = false; ///< a transfer from host memory (the model does not price it)

    bool operator==(const KernelWork&) const = default;
};

/// @brief One call of a backend's kernel table: which, with what shape, its work and its device time.
struct KernelCall
{
    std::string kernel; ///< "matmul forward", "attention backward", "zero", ...
    std::string shape; ///< "16384 x 768 -> 2304, bias", "12582912 B", ...
    KernelWork work;
    double seconds = 0; ///< device time (after resolve; the median over passes from measureLayerKernels)
    bool backward = false; ///< made by the layer's backward (measureLayerKernels), not its forward

    bool operator==(const KernelCall&) const = default;
};

/// What the planner's cost model charges for a call's work: its products by gemmSeconds (backwardGemmSeconds for a
/// call of the layer's backward), its attention by attentionSeconds, its bytes by bytesSeconds; 0 for a host
/// transfer.
double modelSeconds(const KernelCall& call, const planner::GpuCostModel& model);

/// @brief A Backend that forwards to `inner` and times every call on the stream (not download and synchronize,
/// which wait for it, nor allocation). Results are the inner backend's exactly: the calls are the same calls.
class TimingBackend final : public Backend
{
public:
    explicit TimingBackend(Backend& inner);
    ~TimingBackend() override;

    /// The calls since the last take(), in call order, with their device times (waits for the device).
    std::vector<KernelCall> take();

    std::string name() const override { return m_inner.name(); }
    Precision precision() const override { return m_inner.precision(); }
    bool hostAddressable() const override { return m_inner.hostAddressable(); }
    bool padsLogits() const override { return m_inner.padsLogits(); }
    void* allocate(std::size_t bytes) override { return m_inner.allocate(bytes); }
    void release(void* p, std::size_t bytes) override { m_inner.release(p, bytes); }
    MemoryStats memory() const override { return m_inner.memory(); }
    void resetPeak() override { m_inner.resetPeak(); }
    void zero(void* dst, std::size_t bytes) override;
    void copy(void* dst, const void* src, std::size_t bytes) override;
    void upload(void* dst, DType dtype, const float* host, std::size_t count) override;
    void uploadTokens(std::int32_t* dst, const std::int32_t* host, std::size_t count) override;
    void uploadBytes(void* dst, const void* host, std::size_t bytes) override { m_inner.uploadBytes(dst, host, bytes); }
    void downloadBytes(void* host, const void* src, std::size_t bytes) override
    {
        m_inner.downloadBytes(host, src, bytes);
    }
    void download(float* host, const void* src, DType dtype, std::size_t count) override
    {
        m_inner.download(host, src, dtype, count);
    }
    void synchronize() override { m_inner.synchronize(); }
    std::unique_ptr<HostCopy> readBack(const float* src, std::size_t count) override
    {
        return m_inner.readBack(src, count);
    }
    std::unique_ptr<ActionTimer> makeTimer() override { return m_inner.makeTimer(); }
    bool sharesMemoryWith(const Backend& other) const override { return m_inner.sharesMemoryWith(other); }
    std::shared_ptr<const DeviceEvent> record() override { return m_inner.record(); }
    void waitFor(const DeviceEvent& event) override { m_inner.waitFor(event); }
    void hostWait(const DeviceEvent& event) override { m_inner.hostWait(event); }
    void sum(void* out, std::span<const void* const> parts, std::size_t n) override;

    void encoderForward(
        void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C) override;
    void encoderBackward(
        void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C) override;
    void layernormForward(void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias,
        int BT, int C) override;
    void layernormBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
        const void* weight, const float* mean, const float* rstd, int BT, int C) override;
    void matmulForward(void* out, const void* inp, const void* weight, const void* bias, int BT, int C, int OC,
        void* gelu_out) override;
    void matmulBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp, const void* weight,
        int BT, int C, int OC) override;
    void matmulBackwardGelu(
        void* dinp, const void* dout, const void* weight, const void* pre_gelu, int BT, int C, int OC) override;
    std::size_t attentionStashCount(const AttentionShape& a) const override { return m_inner.attentionStashCount(a); }
    void attentionForward(void* out, float* stash, const void* qkv, const AttentionShape& a) override;
    void attentionBackward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stash,
        const AttentionShape& a) override;
    void rmsnormForward(void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps) override;
    void rmsnormBackward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
        const float* rstd, int BT, int C) override;
    void residualNormForward(void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
        const void* weight, const void* bias, int BT, int C, float eps) override;
    void normBackwardResidual(void* dinp, const void* dresidual, const void* dout, const void* inp, const void* weight,
        const float* mean, const float* rstd, int BT, int C) override;
    void rotary(void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse) override;
    void swigluForward(void* out, const void* inp, int BT, int F) override;
    void swigluBackward(void* dinp, const void* inp, const void* dout, int BT, int F) override;
    void geluForward(void* out, const void* inp, std::size_t n) override;
    void geluBackward(void* dinp, const void* inp, const void* dout, std::size_t n) override;
    void residualForward(void* out, const void* a, const void* b, std::size_t n) override;
    void classifier(
        float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale) override;
    void classifierStats(
        float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride) override;
    void classifierFinish(float* losses, void* logits, const float* stats, int ranks, const std::int32_t* targets,
        int BT, int V, int stride, float dscale) override;
    void mean(float* out, const float* x, std::size_t n) override;
    void scale(void* x, float factor, std::size_t n) override;
    void sumSquares(float* out, const void* x, std::size_t n) override;
    void addDifference(float* sum, const void* a, const void* b, std::size_t n) override;
    void addUpdate(void* params, float* master, const float* update, std::size_t n) override;
    void adamw(void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr, float beta1,
        float beta2, float eps, float decay_factor, float c1, float c2) override;
    void adamwTensors(void* params, float* master, const void* grads, float* m, float* v,
        std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor,
        float c1, float c2) override;

private:
    /// Times `call` on the stream as one KernelCall described by kernel, shape and work.
    template <class F> void timed(const char* kernel, std::string shape, KernelWork work, F&& call);
    double element() const { return static_cast<double>(byteSize(act())); }

    Backend& m_inner;
    std::unique_ptr<ActionTimer> m_timer;
    std::vector<std::pair<std::uint64_t, KernelCall>> m_calls;
};

/// Times one planner layer (0 the embedding, 1..L the blocks, L+1 the head) of options.shape alone on
/// options.device: warm-up passes, then options.repeats passes of its forward and its backward (the fused one, as
/// 1F1B runs it), every call of the backend's kernel table timed. Returns the calls of one pass in order, forward
/// then backward, each with the median of its times over the timed passes.
std::vector<KernelCall> measureLayerKernels(const ProfileOptions& options, int layer);

} // namespace pw::engine
