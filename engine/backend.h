// SPDX-License-Identifier: MIT
// The engine's device seam. A Backend is one device (the host's CPU, or one CUDA GPU) with its memory (an arena:
// freed blocks are kept for the next allocation of their size, so a run allocates during its first step only),
// its stream (every call below is ordered on it; the host waits only in download() and synchronize()), its action
// timer, and its kernel table: the operations of decoder-only transformers (llm.c's GPT-2 ones, RMSNorm, rotary
// embeddings, SwiGLU, grouped-query attention), forward and backward, plus the few vector operations the model
// and the executor need (copies, zeroing, scaling, AdamW). ops.h is the CPU entry of the table and the
// oracle of every other one. StageModel and DeviceExecutor call only this interface: they run the same schedule
// on either backend and never ask which one they have.
//
// Pointers given to kernels are the backend's device pointers. "act" pointers hold the backend's activation
// dtype (act(): fp32, or bf16 in mixed precision), as do parameters and their gradients; float pointers are fp32
// on every backend (layer-norm statistics, losses, AdamW's master weights and moments). Backward kernels
// accumulate (+=) into the parameters' gradients (weights, biases, layer norms, embeddings) and into the layer
// norm's input gradient (the residual's sum); the input gradients of the products, GELU and attention are written
// (=), so that nothing is zeroed to be overwritten (issue 33 item 2), as ops.h does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_shape.h"

namespace pw::engine {

enum class DType : std::uint8_t { F32, BF16, I32 };
std::size_t byteSize(DType t);
const char* toString(DType t);

/// @brief What the parameters, gradients and activations are stored in.
/// Fp32: everything fp32 (the CPU engine, and the CUDA backend's testing mode: TF32 off). Bf16Mixed: parameters,
/// gradients and activations bf16, fp32 master weights and AdamW moments (the planner's 16 B per parameter).
enum class Precision : std::uint8_t { Fp32, Bf16Mixed };
const char* toString(Precision p);

/// @brief A device's memory as the backend counts it, in bytes.
struct MemoryStats
{
    std::size_t allocated = 0; ///< held by live buffers
    std::size_t peak = 0; ///< the most allocated at once since the backend was made (or resetPeak)
    std::size_t reserved = 0; ///< taken from the device by the arena (allocated + cached free blocks)

    bool operator==(const MemoryStats&) const = default;
};

class Backend;

/// @brief Device memory of `count` elements of `dtype`, from its backend's arena; owned, move-only.
class Buffer
{
public:
    Buffer() = default;
    Buffer(Backend& backend, std::size_t count, DType dtype); ///< uninitialised
    ~Buffer();
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() { return m_data; }
    const void* data() const { return m_data; }
    template <class T> T* as() { return static_cast<T*>(m_data); }
    template <class T> const T* as() const { return static_cast<const T*>(m_data); }
    std::size_t count() const { return m_count; }
    DType dtype() const { return m_dtype; }
    std::size_t bytes() const { return m_count * byteSize(m_dtype); }
    bool empty() const { return m_count == 0; }
    Backend* backend() const { return m_backend; }

    /// Makes this `count` elements of `dtype` on `backend`, reallocating only when the shape differs (contents are
    /// then undefined).
    void ensure(Backend& backend, std::size_t count, DType dtype);
    void reset();

    /// The contents as host memory, when the backend's memory is the host's (the CPU backend); throws otherwise.
    template <class T> std::span<T> host();
    template <class T> std::span<const T> host() const;

private:
    Backend* m_backend = nullptr;
    void* m_data = nullptr;
    std::size_t m_count = 0;
    DType m_dtype = DType::F32;
};

/// @brief Times actions as the device executes them: begin() and end() mark the stream; resolve() reports the
/// device's start and end of every finished action, in the order they began, on the host's monotonic clock (the
/// clock of every span). The CPU's marks are the host clock itself; CUDA's are event pairs, resolved against an
/// event recorded at a known host time.
class ActionTimer
{
public:
    virtual ~ActionTimer() = default;
    virtual std::uint64_t begin() = 0;
    virtual void end(std::uint64_t ticket) = 0;
    /// Calls done(ticket, t0, t1) for each finished action in order; with wait, blocks until every one has.
    virtual void resolve(const std::function<void(std::uint64_t ticket, double t0, double t1)>& done, bool wait) = 0;
};

/// @brief A point on a backend's stream (Backend::record): the work enqueued there before it. Another backend whose
/// memory it shares (Backend::sharesMemoryWith) can order its own stream after it (waitFor), the host can wait for
/// it (hostWait). Shared, immutable once recorded; any thread may hold it.
class DeviceEvent
{
public:
    virtual ~DeviceEvent() = default;
};

/// @brief A tensor of a stage's parameter vector as AdamW updates it: `size` elements from element `offset`, with
/// the weight decay or without.
struct AdamWTensor
{
    std::size_t offset = 0;
    std::size_t size = 0;
    bool decayed = false;

    bool operator==(const AdamWTensor&) const = default;
};

/// @brief fp32 values on their way from a device to the host (Backend::readBack).
class HostCopy
{
public:
    virtual ~HostCopy() = default;
    /// Waits for the copy (that is, for the work enqueued before it, not for the whole stream) and returns the values.
    virtual std::vector<float> take() = 0;
};

/// @brief One device: memory, stream, timer and kernel table.
class Backend
{
public:
    virtual ~Backend() = default;

    /// "cpu (OpenBLAS ..., 8 threads)", "cuda:0 NVIDIA H100 80GB HBM3 (bf16 mixed)".
    virtual std::string name() const = 0;
    virtual Precision precision() const = 0;
    /// The dtype of parameters, gradients and activations.
    DType act() const { return precision() == Precision::Bf16Mixed ? DType::BF16 : DType::F32; }
    /// Whether a Buffer's data() is host memory (then transports need no staging and Buffer::host works).
    virtual bool hostAddressable() const = 0;
    /// The head's logits cover the padded vocabulary (llm.c's Vp: aligned matrix products) or only V columns.
    virtual bool padsLogits() const = 0;

    // Memory and the stream ------------------------------------------------------------------------------------
    virtual void* allocate(std::size_t bytes) = 0;
    virtual void release(void* p, std::size_t bytes) = 0;
    virtual MemoryStats memory() const = 0;
    virtual void resetPeak() = 0;
    virtual void zero(void* dst, std::size_t bytes) = 0;
    virtual void copy(void* dst, const void* src, std::size_t bytes) = 0; ///< device to device
    /// Host fp32 to device elements of `dtype` (converted); the host memory may be reused when this returns.
    virtual void upload(void* dst, DType dtype, const float* host, std::size_t count) = 0;
    virtual void uploadTokens(std::int32_t* dst, const std::int32_t* host, std::size_t count) = 0;
    /// Raw bytes from the host, as they are (bf16 activations staged for a host transport travel as bf16); the host
    /// memory may be reused when this returns.
    virtual void uploadBytes(void* dst, const void* host, std::size_t bytes) = 0;
    /// Raw bytes to the host; waits for the stream up to here.
    virtual void downloadBytes(void* host, const void* src, std::size_t bytes) = 0;
    /// Device elements of `dtype` to host fp32; waits for the stream up to here.
    virtual void download(float* host, const void* src, DType dtype, std::size_t count) = 0;
    virtual void synchronize() = 0;
    /// Starts copying `count` fp32 elements at `src` to the host, ordered on the stream, without waiting: a read-back
    /// taken a step later finds them landed and never drains the stream (the executor's losses, issue 33).
    virtual std::unique_ptr<HostCopy> readBack(const float* src, std::size_t count) = 0;
    virtual std::unique_ptr<ActionTimer> makeTimer() = 0;

    // Between backends that share memory (stages of one GPU: the device fabric, engine/device_fabric.h) --------
    /// Whether `other`'s device pointers are valid in this backend's calls (the same GPU; the host for the CPU): its
    /// buffers may then be copied (copy()) and summed (sum()) on this backend's stream, ordered by events.
    virtual bool sharesMemoryWith(const Backend& other) const = 0;
    /// Marks the stream here: the event completes when the work enqueued so far has (the CPU: at once).
    virtual std::shared_ptr<const DeviceEvent> record() = 0;
    /// Work enqueued on this stream after this call waits for `event` (recorded by this backend or one sharing its
    /// memory); the host does not wait.
    virtual void waitFor(const DeviceEvent& event) = 0;
    /// Blocks the host until `event` has completed.
    virtual void hostWait(const DeviceEvent& event) = 0;
    /// out = parts[0] + parts[1] + ... (n act elements each, summed in fp32 in this order and rounded once): the
    /// fabric's all-reduce, the same result on every member. out may be one of the parts.
    virtual void sum(void* out, std::span<const void* const> parts, std::size_t n) = 0;

    // Transformer layers (shapes: B sequences of T positions, C channels, NH heads; BT = B T) ----------------
    /// wpe null (rotary positions): the token rows alone; in the backward, dwpe null likewise. A negative token is
    /// another rank's row of a vocabulary-parallel table: zeros (plus wpe) forward, nothing in dwte backward.
    virtual void encoderForward(
        void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C)
        = 0;
    virtual void encoderBackward(
        void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C)
        = 0;
    virtual void layernormForward(
        void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias, int BT, int C)
        = 0;
    /// dinp null: the weight and bias gradients only (weight unused); dweight and dbias both null: dinp only. The
    /// split backward (StageModel::backwardInput / backwardWeight) computes each part in its own call.
    virtual void layernormBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
        const void* weight, const float* mean, const float* rstd, int BT, int C)
        = 0;
    /// RMSNorm (ops::rmsnormForward): rstd per position, fp32.
    virtual void rmsnormForward(void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps)
        = 0;
    /// dweight null: dinp alone; dinp null: dweight alone; both accumulated.
    virtual void rmsnormBackward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
        const float* rstd, int BT, int C)
        = 0;
    /// A residual branch joined with the norm that follows it, in one pass (issue 33 item 2): sum = a + b, then
    /// out = the norm of sum (layernormForward's, or with rstd alone rmsnormForward's; mean null for RMSNorm, which
    /// then uses eps). The same values as residualForward followed by the norm's forward.
    virtual void residualNormForward(void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
        const void* weight, const void* bias, int BT, int C, float eps)
        = 0;
    /// dinp = dresidual + the norm's input gradient (LayerNorm's with mean, RMSNorm's with mean null), written:
    /// the residual's gradient and its norm's joined in one pass (a copy and the norm's accumulating backward
    /// before). dresidual may be dinp itself (then accumulated, as layernormBackward does).
    virtual void normBackwardResidual(void* dinp, const void* dresidual, const void* dout, const void* inp,
        const void* weight, const float* mean, const float* rstd, int BT, int C)
        = 0;
    /// Rotary position embedding in place over the first `heads` heads of each row (ops::rotary); table fp32.
    virtual void rotary(void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse) = 0;
    /// out (BT x F) = SiLU(inp[:, :F]) * inp[:, F:] (inp BT x 2F); the backward writes dinp (BT x 2F).
    virtual void swigluForward(void* out, const void* inp, int BT, int F) = 0;
    virtual void swigluBackward(void* dinp, const void* inp, const void* dout, int BT, int F) = 0;
    /// out (BT x OC) = inp (BT x C) . weight^T (OC x C) + bias (may be null); with gelu_out, also
    /// gelu_out = GELU(out) (fused into the matrix product's epilogue where the backend can).
    virtual void matmulForward(
        void* out, const void* inp, const void* weight, const void* bias, int BT, int C, int OC, void* gelu_out)
        = 0;
    /// Any of dinp, dweight, dbias may be null, its part then skipped: dinp alone is the input gradient (inp
    /// unused, dinp written), dweight and dbias alone the weight gradient (weight unused, both accumulated).
    virtual void matmulBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
        const void* weight, int BT, int C, int OC)
        = 0;
    /// The input gradient of a product whose input was GELU(pre_gelu) (the MLP's down projection, after the up
    /// projection's fused GELU), through the GELU: dinp (BT x C) = GELU'(pre_gelu) * (dout (BT x OC) . weight),
    /// written; matmulBackward's dinp followed by geluBackward, fused into the product's epilogue where the backend
    /// can.
    virtual void matmulBackwardGelu(
        void* dinp, const void* dout, const void* weight, const void* pre_gelu, int BT, int C, int OC)
        = 0;
    /// fp32 elements the attention's forward keeps for its backward (the CPU: the softmax, B NH T T; a fused
    /// kernel: the log-sum-exp of each row, B NH T).
    virtual std::size_t attentionStashCount(const AttentionShape& a) const = 0;
    /// Causal attention, grouped-query when a.kv_heads < a.heads (ops::attentionForward's layout).
    virtual void attentionForward(void* out, float* stash, const void* qkv, const AttentionShape& a) = 0;
    /// dqkv written; a key or value head's gradient sums its query heads' in a fixed order (deterministic).
    virtual void attentionBackward(
        void* dqkv, const void* dout, const void* qkv, const void* out, const float* stash, const AttentionShape& a)
        = 0;
    virtual void geluForward(void* out, const void* inp, std::size_t n) = 0;
    /// dinp = GELU'(inp) * dout, written (dinp may be dout itself).
    virtual void geluBackward(void* dinp, const void* inp, const void* dout, std::size_t n) = 0;
    virtual void residualForward(void* out, const void* a, const void* b, std::size_t n) = 0; ///< out = a + b
    /// The classifier's loss and its gradient in one pass over the logits (BT rows of `stride` columns, the first
    /// V real): losses[i] = the row's cross-entropy against targets[i]; the row becomes, in place,
    /// (softmax - onehot) x dscale (0 in the padded columns). fp32 logits of the whole batch are never kept.
    virtual void classifier(
        float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale)
        = 0;
    /// The vocabulary-parallel classifier (tensor parallelism: each rank holds V of the vocabulary's columns, and the
    /// logits of no row are whole anywhere), ops::crossEntropyStats then ops::crossEntropyFinish: each rank's stats
    /// (BT x 3 fp32), all-gathered by the group, then every rank's loss and its columns' gradient in place. targets
    /// are the rank's own column indices (outside [0, V): not here).
    virtual void classifierStats(
        float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride)
        = 0;
    virtual void classifierFinish(float* losses, void* logits, const float* stats, int ranks,
        const std::int32_t* targets, int BT, int V, int stride, float dscale)
        = 0;
    /// *out = mean of x[0..n) (fp32, on the device).
    virtual void mean(float* out, const float* x, std::size_t n) = 0;

    // Vectors (parameters, gradients, updates) ---------------------------------------------------------------
    virtual void scale(void* x, float factor, std::size_t n) = 0; ///< act elements
    /// *out = sum of x^2 over act elements (fp32 accumulation, on the device): the gradient norm's square.
    virtual void sumSquares(float* out, const void* x, std::size_t n) = 0;
    /// sum += a - b (sum fp32, a and b act): HetPipe's per-wave update.
    virtual void addDifference(float* sum, const void* a, const void* b, std::size_t n) = 0;
    /// params (and master, when mixed) += update (fp32): a pulled wave.
    virtual void addUpdate(void* params, float* master, const float* update, std::size_t n) = 0;
    /// One AdamW step over n parameters (PyTorch's order: decay first). master is null in fp32 (params are the
    /// master copy); in mixed precision params becomes bf16(master).
    virtual void adamw(void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr,
        float beta1, float beta2, float eps, float decay_factor, float c1, float c2)
        = 0;
    /// adamw() over the `tensors` of one parameter vector (params, master, grads, m and v point at its element 0):
    /// decay_factor on the decayed ones, none on the others, in as few launches as the backend can (CUDA: up to 64
    /// contiguous tensors a launch; a GPT-2 block's 12 tensors were 12 launches). The same values as adamw() per
    /// tensor.
    virtual void adamwTensors(void* params, float* master, const void* grads, float* m, float* v,
        std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor,
        float c1, float c2)
        = 0;
};

/// The host's CPU (ops.h), fp32. One per executor: its memory counts are its own.
std::unique_ptr<Backend> makeCpuBackend();
/// A process-wide CPU backend, for code and tests that hold one stage outside an executor.
Backend& cpuBackend();

/// @brief Which device a run's stage trains on.
struct DeviceChoice
{
    std::optional<int> cuda; ///< a CUDA device index (of those visible), or the CPU
    Precision precision = Precision::Fp32;

    bool operator==(const DeviceChoice&) const = default;
};
/// The backend of `choice`; throws std::runtime_error naming why when CUDA was not built in or the device is
/// missing.
std::unique_ptr<Backend> makeBackend(const DeviceChoice& choice);

/// Whether this build holds CUDA kernels (PW_WITH_CUDA found a compiler).
bool cudaCompiledIn();
/// CUDA devices visible to this process (0 when none or not compiled in).
int cudaDeviceCount();

template <class T> std::span<T> Buffer::host()
{
    if (m_backend && !m_backend->hostAddressable())
        throw std::logic_error("Buffer::host on a device buffer");
    return {static_cast<T*>(m_data), bytes() / sizeof(T)};
}
template <class T> std::span<const T> Buffer::host() const
{
    if (m_backend && !m_backend->hostAddressable())
        throw std::logic_error("Buffer::host on a device buffer");
    return {static_cast<const T*>(m_data), bytes() / sizeof(T)};
}

} // namespace pw::engine
