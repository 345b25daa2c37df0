// SPDX-License-Identifier: MIT
// The CUDA backend: a device's arena, stream, pinned staging, event timer, cuBLASLt products and the kernel table
// (kernels.h). cuda_backend.h describes the design.
#include "cuda_backend.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_memory.h"
#include "cuda_timer.h"
#include "cuda_util.h"
#include "cudnn_runner.h"
#include "kernels.h"
#include "matmul.h"

namespace pw::engine {

namespace {

using cuda::Arena;
using cuda::convert;
using cuda::Event;
using cuda::kMaxStages;
using cuda::kStageBytes;
using cuda::ScratchSpace;
using cuda::Staging;
using cuda::Stream;

constexpr std::size_t kWorkspaceBytes = 32u << 20; // cuBLASLt's workspace (Hopper's kernels want up to 32 MiB)
class CudaBackend final : public Backend
{
public:
    CudaBackend(int device, Precision precision, CudaAttention attention)
        : m_device(device)
        , m_precision(precision)
        , m_stream(device)
        , m_arena(device, m_stream.get())
        , m_scratch(m_arena)
        , m_staging(device)
        , m_cudnn(device, m_stream.get(), attention == CudaAttention::Cudnn)
    {
        cudaDeviceProp prop {};
        PW_CUDA(cudaGetDeviceProperties(&prop, device));
        if (prop.major < 8)
            throw std::runtime_error("cuda:" + std::to_string(device) + " (" + prop.name + ") has compute capability "
                + std::to_string(prop.major) + "." + std::to_string(prop.minor)
                + "; the engine's kernels need 8.0 or newer (bf16 tensor cores)");
        m_name = "cuda:" + std::to_string(device) + " " + prop.name + " (" + toString(precision) + ")";
        m_launch.stream = m_stream.get();
        m_launch.sms = prop.multiProcessorCount;
        m_launch.sharedOptin = static_cast<int>(prop.sharedMemPerBlockOptin);
        m_launch.act = act();
        m_launch.scratch = &m_scratch;
        m_workspace = m_arena.allocate(kWorkspaceBytes);
        m_matmul = std::make_unique<cuda::Matmul>(m_stream.get(), m_workspace, kWorkspaceBytes,
            bf16() ? cuda::Matmul::Operands::Bf16 : cuda::Matmul::Operands::Fp32);
    }

    ~CudaBackend() override
    {
        // Nothing of ours may be freed under a kernel still running; errors here have nowhere to go.
        if (cudaSetDevice(m_device) == cudaSuccess)
            cudaStreamSynchronize(m_stream.get());
        m_matmul.reset();
        m_arena.release(m_workspace);
    }

    std::string name() const override { return m_name; }
    Precision precision() const override { return m_precision; }
    bool hostAddressable() const override { return false; }
    CudaPlace place() const { return {m_device, m_stream.get()}; }
    bool padsLogits() const override { return true; }

    void* allocate(std::size_t bytes) override { return m_arena.allocate(bytes); }
    void release(void* p, std::size_t) override { m_arena.release(p); }
    MemoryStats memory() const override { return m_arena.stats(); }
    void resetPeak() override { m_arena.resetPeak(); }

    void zero(void* dst, std::size_t bytes) override
    {
        if (bytes == 0)
            return;
        activate();
        PW_CUDA(cudaMemsetAsync(dst, 0, bytes, m_stream.get()));
    }

    void copy(void* dst, const void* src, std::size_t bytes) override
    {
        if (bytes == 0 || dst == src)
            return;
        activate();
        PW_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m_stream.get()));
    }

    void upload(void* dst, DType dtype, const float* host, std::size_t count) override
    {
        if (dtype == DType::I32)
            throw std::invalid_argument("CudaBackend::upload: fp32 values cannot become int32 elements");
        activate();
        const std::size_t size = byteSize(dtype), per = kStageBytes / size;
        for (std::size_t first = 0; first < count; first += per) {
            const std::size_t n = std::min(per, count - first);
            Staging::Chunk& c = m_staging.acquire();
            if (dtype == DType::BF16)
                convert(host + first, static_cast<std::uint16_t*>(c.host), n, toBf16);
            else
                std::memcpy(c.host, host + first, n * sizeof(float));
            PW_CUDA(cudaMemcpyAsync(
                static_cast<char*>(dst) + first * size, c.host, n * size, cudaMemcpyHostToDevice, m_stream.get()));
            PW_CUDA(cudaEventRecord(c.copied, m_stream.get()));
        }
    }

    void uploadTokens(std::int32_t* dst, const std::int32_t* host, std::size_t count) override
    {
        uploadBytes(dst, host, count * sizeof(std::int32_t));
    }

    void uploadBytes(void* dst, const void* host, std::size_t bytes) override
    {
        activate();
        for (std::size_t first = 0; first < bytes; first += kStageBytes) {
            const std::size_t n = std::min(kStageBytes, bytes - first);
            Staging::Chunk& c = m_staging.acquire();
            std::memcpy(c.host, static_cast<const std::byte*>(host) + first, n);
            PW_CUDA(cudaMemcpyAsync(
                static_cast<std::byte*>(dst) + first, c.host, n, cudaMemcpyHostToDevice, m_stream.get()));
            PW_CUDA(cudaEventRecord(c.copied, m_stream.get()));
        }
    }

    void downloadBytes(void* host, const void* src, std::size_t bytes) override
    {
        activate();
        downloadStaged(src, 1, bytes, [&](const void* chunk, std::size_t first, std::size_t n) {
            std::memcpy(static_cast<std::byte*>(host) + first, chunk, n);
        });
    }

    void download(float* host, const void* src, DType dtype, std::size_t count) override
    {
        activate();
        downloadStaged(src, byteSize(dtype), count, [&](const void* chunk, std::size_t first, std::size_t n) {
            float* out = host + first;
            if (dtype == DType::BF16)
                convert(static_cast<const std::uint16_t*>(chunk), out, n, fromBf16);
            else if (dtype == DType::I32) {
                const auto* h = static_cast<const std::int32_t*>(chunk);
                std::transform(h, h + n, out, [](std::int32_t v) { return static_cast<float>(v); });
            } else
                std::memcpy(out, chunk, n * sizeof(float));
        });
        if (count == 0)
            synchronize();
    }

    void synchronize() override
    {
        activate();
        PW_CUDA(cudaStreamSynchronize(m_stream.get()));
    }

    std::unique_ptr<HostCopy> readBack(const float* src, std::size_t count) override
    {
        /// A staging chunk held until the host takes its values.
        class Landing final : public HostCopy
        {
        public:
            Landing(Staging::Chunk& chunk, std::size_t count)
                : m_chunk(chunk)
                , m_count(count)
            {
            }
            ~Landing() override { m_chunk.held = false; } // acquire() waits for its copy before reusing it
            std::vector<float> take() override
            {
                PW_CUDA(cudaEventSynchronize(m_chunk.copied));
                const auto* h = static_cast<const float*>(m_chunk.host);
                return {h, h + m_count};
            }

        private:
            Staging::Chunk& m_chunk;
            std::size_t m_count;
        };
        if (count * sizeof(float) > kStageBytes)
            throw std::invalid_argument("CudaBackend::readBack: " + std::to_string(count)
                + " values; a read-back holds at most one staging chunk (" + std::to_string(kStageBytes / sizeof(float))
                + ")");
        activate();
        Staging::Chunk& c = m_staging.acquire();
        PW_CUDA(cudaMemcpyAsync(c.host, src, count * sizeof(float), cudaMemcpyDeviceToHost, m_stream.get()));
        PW_CUDA(cudaEventRecord(c.copied, m_stream.get()));
        c.held = true;
        return std::make_unique<Landing>(c, count);
    }

    std::unique_ptr<ActionTimer> makeTimer() override { return cuda::makeTimer(m_device, m_stream.get()); }

    bool sharesMemoryWith(const Backend& other) const override
    {
        const auto* cuda = dynamic_cast<const CudaBackend*>(&other);
        return cuda && cuda->m_device == m_device;
    }
    std::shared_ptr<const DeviceEvent> record() override
    {
        activate();
        auto event = std::make_shared<Event>();
        PW_CUDA(cudaEventRecord(event->get(), m_stream.get()));
        return event;
    }
    void waitFor(const DeviceEvent& event) override
    {
        activate();
        PW_CUDA(cudaStreamWaitEvent(m_stream.get(), static_cast<const Event&>(event).get(), 0));
    }
    void hostWait(const DeviceEvent& event) override
    {
        PW_CUDA(cudaEventSynchronize(static_cast<const Event&>(event).get()));
    }
    void residualNormForward(void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
        const void* weight, const void* bias, int BT, int C, float eps) override
    {
        activate();
        cuda::residualNormForward(m_launch, sum, out, mean, rstd, a, b, weight, bias, BT, C, eps);
    }
    void normBackwardResidual(void* dinp, const void* dresidual, const void* dout, const void* inp, const void* weight,
        const float* mean, const float* rstd, int BT, int C) override
    {
        activate();
        cuda::normBackwardResidual(m_launch, dinp, dresidual, dout, inp, weight, mean, rstd, BT, C);
    }
    void sum(void* out, std::span<const void* const> parts, std::size_t n) override
    {
        activate();
        cuda::sum(m_launch, out, parts, n);
    }

    void encoderForward(
        void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C) override
    {
        activate();
        cuda::encoderForward(m_launch, out, tokens, wte, wpe, B, T, C);
    }
    void encoderBackward(
        void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C) override
    {
        activate();
        cuda::encoderBackward(m_launch, dwte, dwpe, dout, tokens, B, T, C);
    }
    void layernormForward(void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias,
        int BT, int C) override
    {
        activate();
        cuda::layernormForward(m_launch, out, mean, rstd, inp, weight, bias, BT, C);
    }
    void layernormBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
        const void* weight, const float* mean, const float* rstd, int BT, int C) override
    {
        activate();
        cuda::layernormBackward(m_launch, dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C);
    }

    void matmulForward(void* out, const void* inp, const void* weight, const void* bias, int BT, int C, int OC,
        void* gelu_out) override
    {
        if (BT <= 0 || OC <= 0)
            return;
        activate();
        // Row-major out (BT x OC) = inp . weight^T is column-major out^T (OC x BT) = weight^T . inp^T, where
        // column-major weight is C x OC (so transposed) and inp is C x BT.
        cuda::Matmul::Product p;
        p.transA = true;
        p.m = OC;
        p.n = BT;
        p.k = C;
        p.A = weight;
        p.lda = C;
        p.B = inp;
        p.ldb = C;
        p.D = out;
        p.ldd = OC;
        p.bias = bias;
        // cuBLASLt's GELU epilogue in bf16 only: the fp32 mode keeps the CPU's exact formula (its GELU kernel).
        if (gelu_out && bf16() && OC % 8 == 0) {
            cuda::Matmul::Product fused = p;
            fused.D = gelu_out;
            fused.geluInput = out;
            if (m_matmul->run(fused))
                return;
        }
        m_matmul->run(p);
        if (gelu_out)
            cuda::geluForward(m_launch, gelu_out, out, static_cast<std::size_t>(BT) * OC);
    }

    void matmulBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp, const void* weight,
        int BT, int C, int OC) override
    {
        if (BT <= 0 || OC <= 0 || C <= 0)
            return;
        activate();
        if (dinp)
            m_matmul->run(inputGradient(dinp, dout, weight, BT, C, OC));
        if (dweight) {
            // dweight (OC x C) += dout^T . inp: column-major dweight^T (C x OC) += inp^T (C x BT) . dout (BT x OC).
            cuda::Matmul::Product p;
            p.transB = true;
            p.m = C;
            p.n = OC;
            p.k = BT;
            p.A = inp;
            p.lda = C;
            p.B = dout;
            p.ldb = OC;
            p.D = dweight;
            p.ldd = C;
            p.beta = 1.0f;
            if (dbias) {
                // The bias gradient from the same product (cuBLASLt's BGRADB epilogue: dout's column sums while it
                // reads dout anyway), written to scratch and added: the contract accumulates. Without an algorithm
                // for the epilogue, the product and then the column sums.
                Buffer scratch(*this, static_cast<std::size_t>(OC), act());
                p.biasGradient = scratch.data();
                if (m_matmul->run(p)) {
                    cuda::residualForward(m_launch, dbias, dbias, scratch.data(), static_cast<std::size_t>(OC));
                    return;
                }
                p.biasGradient = nullptr;
            }
            m_matmul->run(p);
        }
        if (dbias)
            cuda::biasBackward(m_launch, dbias, dout, BT, OC);
    }

    void matmulBackwardGelu(
        void* dinp, const void* dout, const void* weight, const void* pre_gelu, int BT, int C, int OC) override
    {
        if (BT <= 0 || OC <= 0 || C <= 0)
            return;
        activate();
        cuda::Matmul::Product p = inputGradient(dinp, dout, weight, BT, C, OC);
        p.dgeluAux = pre_gelu; // cuBLASLt's DGELU epilogue: the product times GELU'(the forward's aux)
        if (m_matmul->run(p))
            return;
        p.dgeluAux = nullptr; // no algorithm with the epilogue: the product, then GELU's backward in place
        m_matmul->run(p);
        cuda::geluBackward(m_launch, dinp, pre_gelu, dinp, static_cast<std::size_t>(BT) * C);
    }

    std::size_t attentionStashCount(const AttentionShape& a) const override
    {
        return static_cast<std::size_t>(a.batch) * a.heads * a.seq; // the log-sum-exp of each row
    }
    void attentionForward(void* out, float* stash, const void* qkv, const AttentionShape& a) override
    {
        activate();
        if (!bf16())
            m_cudnn.noteOwn("fp32");
        else if (m_cudnn.forward(m_scratch, out, stash, qkv, a))
            return;
        cuda::attentionForward(m_launch, out, stash, qkv, a);
    }
    void attentionBackward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stash,
        const AttentionShape& a) override
    {
        activate();
        if (!bf16())
            m_cudnn.noteOwn("fp32");
        else if (m_cudnn.backward(m_scratch, dqkv, dout, qkv, out, stash, a))
            return;
        cuda::attentionBackward(m_launch, dqkv, dout, qkv, out, stash, a);
    }
    /// What ran the last attention call (cudaAttentionKernels).
    std::string attentionKernels() const { return m_cudnn.kernels(); }
    void rmsnormForward(void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps) override
    {
        activate();
        cuda::rmsnormForward(m_launch, out, rstd, inp, weight, BT, C, eps);
    }
    void rmsnormBackward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
        const float* rstd, int BT, int C) override
    {
        activate();
        cuda::rmsnormBackward(m_launch, dinp, dweight, dout, inp, weight, rstd, BT, C);
    }
    void rotary(void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse) override
    {
        activate();
        cuda::rotary(m_launch, x, table, B, T, heads, hs, stride, inverse);
    }
    void swigluForward(void* out, const void* inp, int BT, int F) override
    {
        activate();
        cuda::swigluForward(m_launch, out, inp, BT, F);
    }
    void swigluBackward(void* dinp, const void* inp, const void* dout, int BT, int F) override
    {
        activate();
        cuda::swigluBackward(m_launch, dinp, inp, dout, BT, F);
    }

    void geluForward(void* out, const void* inp, std::size_t n) override
    {
        activate();
        cuda::geluForward(m_launch, out, inp, n);
    }
    void geluBackward(void* dinp, const void* inp, const void* dout, std::size_t n) override
    {
        activate();
        cuda::geluBackward(m_launch, dinp, inp, dout, n);
    }
    void residualForward(void* out, const void* a, const void* b, std::size_t n) override
    {
        activate();
        cuda::residualForward(m_launch, out, a, b, n);
    }
    void classifier(
        float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale) override
    {
        activate();
        cuda::classifier(m_launch, losses, logits, targets, BT, V, stride, dscale);
    }
    void classifierStats(
        float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride) override
    {
        activate();
        cuda::classifierStats(m_launch, stats, logits, targets, BT, V, stride);
    }
    void classifierFinish(float* losses, void* logits, const float* stats, int ranks, const std::int32_t* targets,
        int BT, int V, int stride, float dscale) override
    {
        activate();
        cuda::classifierFinish(m_launch, losses, logits, stats, ranks, targets, BT, V, stride, dscale);
    }
    void mean(float* out, const float* x, std::size_t n) override
    {
        activate();
        cuda::mean(m_launch, out, x, n);
    }

    void scale(void* x, float factor, std::size_t n) override
    {
        activate();
        cuda::scale(m_launch, x, factor, n);
    }
    void sumSquares(float* out, const void* x, std::size_t n) override
    {
        activate();
        cuda::sumSquares(m_launch, out, x, n);
    }
    void addDifference(float* sum, const void* a, const void* b, std::size_t n) override
    {
        activate();
        cuda::addDifference(m_launch, sum, a, b, n);
    }
    void addUpdate(void* params, float* master, const float* update, std::size_t n) override
    {
        activate();
        cuda::addUpdate(m_launch, params, master, update, n);
    }
    void adamw(void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr, float beta1,
        float beta2, float eps, float decay_factor, float c1, float c2) override
    {
        activate();
        cuda::adamw(m_launch, params, master, grads, m, v, n, lr, beta1, beta2, eps, decay_factor, c1, c2);
    }
    void adamwTensors(void* params, float* master, const void* grads, float* m, float* v,
        std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor,
        float c1, float c2) override
    {
        activate();
        cuda::adamwTensors(m_launch, params, master, grads, m, v, tensors, lr, beta1, beta2, eps, decay_factor, c1, c2);
    }

private:
    /// Copies `count` elements of `size` bytes from the device through the staging chunks, with up to half the
    /// chunks in flight, and hands each chunk's elements to `land(chunk, first, n)` in order once its copy is done
    /// (so the host reads one chunk while the next ones copy); returns when all have landed.
    template <class Land> void downloadStaged(const void* src, std::size_t size, std::size_t count, Land land)
    {
        const std::size_t per = kStageBytes / size;
        struct Pending
        {
            Staging::Chunk* chunk;
            std::size_t first, n;
        };
        std::deque<Pending> pending;
        const auto finish = [&] {
            const Pending p = pending.front();
            pending.pop_front();
            PW_CUDA(cudaEventSynchronize(p.chunk->copied));
            p.chunk->held = false;
            land(static_cast<const void*>(p.chunk->host), p.first, p.n); // in elements
        };
        try {
            for (std::size_t first = 0; first < count; first += per) {
                // At most half the chunks hold unread data, so acquire() always finds one it may reuse.
                if (pending.size() == kMaxStages / 2)
                    finish();
                const std::size_t n = std::min(per, count - first);
                Staging::Chunk& c = m_staging.acquire();
                PW_CUDA(cudaMemcpyAsync(c.host, static_cast<const char*>(src) + first * size, n * size,
                    cudaMemcpyDeviceToHost, m_stream.get()));
                PW_CUDA(cudaEventRecord(c.copied, m_stream.get()));
                c.held = true;
                pending.push_back({&c, first, n});
            }
            while (!pending.empty())
                finish();
        } catch (...) {
            for (auto& p : pending)
                p.chunk->held = false;
            throw;
        }
    }
    bool bf16() const { return m_precision == Precision::Bf16Mixed; }
    void activate() const { cuda::useDevice(m_device); }
    /// dinp (BT x C) = dout . weight, written (beta 0: nothing read or zeroed first): column-major dinp^T (C x BT)
    /// = weight (C x OC) . dout^T (OC x BT).
    static cuda::Matmul::Product inputGradient(void* dinp, const void* dout, const void* weight, int BT, int C, int OC)
    {
        cuda::Matmul::Product p;
        p.m = C;
        p.n = BT;
        p.k = OC;
        p.A = weight;
        p.lda = C;
        p.B = dout;
        p.ldb = OC;
        p.D = dinp;
        p.ldd = C;
        p.beta = 0.0f;
        return p;
    }

    int m_device;
    Precision m_precision;
    std::string m_name;
    // Destroyed in reverse: the matrix products and staging before the memory, the memory before the stream.
    Stream m_stream;
    Arena m_arena;
    ScratchSpace m_scratch;
    Staging m_staging;
    cuda::CudnnRunner m_cudnn; ///< cuDNN's attention in bf16 (its handle on m_stream: destroyed before it)
    void* m_workspace = nullptr;
    std::unique_ptr<cuda::Matmul> m_matmul;
    cuda::Launch m_launch;
};

} // namespace

int cudaVisibleDeviceCount()
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); // no driver, no device: an answer, not an error
        return 0;
    }
    return count;
}

CudaPlace cudaPlace(const Backend& backend)
{
    const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
    return cuda ? cuda->place() : CudaPlace {};
}

CudaAttention cudaAttentionFromEnvironment()
{
    const char* v = std::getenv("PW_CUDA_ATTENTION");
    return v != nullptr && std::string(v) == "own" ? CudaAttention::Own : CudaAttention::Cudnn;
}

std::string cudaAttentionKernels(const Backend& backend)
{
    const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
    return cuda ? cuda->attentionKernels() : std::string();
}

std::unique_ptr<Backend> makeCudaBackend(int device, Precision precision, CudaAttention attention)
{
    const int count = cudaVisibleDeviceCount();
    if (device < 0 || device >= count)
        throw std::runtime_error("cuda:" + std::to_string(device) + " does not exist: "
            + (count == 0 ? std::string("no CUDA device is visible to this process (no GPU, no driver, or "
                                        "CUDA_VISIBLE_DEVICES hides them)")
                          : std::to_string(count) + " CUDA device(s) visible"));
    return std::make_unique<CudaBackend>(device, precision, attention);
}

} // namespace pw::engine
