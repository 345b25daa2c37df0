// SPDX-License-Identifier: MIT
// Internal to engine/: causal attention through cuDNN's fused flash attention (its graph API, as cuDNN's frontend
// and PyTorch's cuDNN attention build it, written here against the backend API: nothing vendored). A plan is built
// per shape and pass, for a device (a handle) or for a device's properties as cuDNN serialises them, which lets the
// graphs be built and an engine found for an H100 on a machine without a GPU (a test does).
//
// The graphs read and write the backend's layouts in place: qkv (B, T, (NH + 2 KV) hs) as Q (B, NH, T, hs), K and V
// (B, KV, T, hs) through strides (a grouped-query key or value head is broadcast over its group by cuDNN's products,
// and its gradient summed over the group in the graph: no expanded copy), out and dout (B, T, C), the log-sum-exp (B,
// NH, T) in fp32 (cuDNN's "stats": the row's max plus the log of its sum of exponentials of the scaled scores, which is
// what the engine's own kernels keep, so either backward reads either forward's). Causal masking is the frontend's: a
// score is kept where its row index >= its column index. The backward accumulates dQ in fp32 in the workspace (cuDNN's
// default algorithm on Hopper, not deterministic run to run in its last bits, as FlashAttention-2's); dK and dV are
// written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "../attention_shape.h"
#include "cudnn.h"

namespace pw::engine::cuda {

/// A cuDNN call failed; what() names the call and gives cuDNN's own reason.
class CudnnError : public std::runtime_error
{
public:
    explicit CudnnError(const std::string& what, cudnnStatus_t status = CUDNN_STATUS_SUCCESS, int offered = -1)
        : std::runtime_error(what)
        , m_status(status)
        , m_offered(offered)
    {
    }
    /// The status of the failed call (for "no engine builds a plan": the last engine's).
    cudnnStatus_t status() const { return m_status; }
    /// For "no engine builds a plan": how many engines the heuristics offered (-1 otherwise).
    int offered() const { return m_offered; }

private:
    cudnnStatus_t m_status;
    int m_offered;
};

/// @brief A cuDNN backend descriptor, destroyed with its owner.
class CudnnDescriptor
{
public:
    CudnnDescriptor(const CudnnApi& api, cudnnBackendDescriptorType_t type);
    ~CudnnDescriptor();
    CudnnDescriptor(const CudnnDescriptor&) = delete;
    CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;

    cudnnBackendDescriptor_t get() const { return m_desc; }
    /// Sets one attribute of `count` values; throws CudnnError naming `attribute`.
    CudnnDescriptor& set(cudnnBackendAttributeName_t attribute, cudnnBackendAttributeType_t type, std::int64_t count,
        const void* values);
    CudnnDescriptor& setInt(cudnnBackendAttributeName_t attribute, std::int64_t value);
    CudnnDescriptor& setInts(cudnnBackendAttributeName_t attribute, const std::vector<std::int64_t>& values);
    CudnnDescriptor& setDesc(cudnnBackendAttributeName_t attribute, const CudnnDescriptor& value);
    void finalize(const std::string& what);

private:
    const CudnnApi& m_api;
    cudnnBackendDescriptor_t m_desc = nullptr;
};

/// Throws CudnnError for a failed status: "`what`: STATUS (cuDNN's last error)".
void checkCudnn(const CudnnApi& api, cudnnStatus_t status, const std::string& what);

/// The properties of one NVIDIA H100 SXM5 80 GB (compute capability 9.0) as cuDNN's device-property JSON (the
/// CUDA programming guide's limits for 9.0 and the datasheet's SM count, clocks, L2 and memory): plans built for it
/// on a machine without a GPU are the ones cuDNN builds on that GPU.
std::string h100DeviceJson();

enum class AttentionPass { Forward, Backward };

/// @brief A tensor of an attention graph: its shape and layout (elements), type, unique id (the variant pack's key),
/// and whether it is virtual (inside the fused kernel) or a scalar passed by value.
struct GraphTensor
{
    std::vector<std::int64_t> dims;
    std::vector<std::int64_t> strides;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    std::int64_t uid = 0;
    bool isVirtual = false;
    bool byValue = false;

    bool operator==(const GraphTensor&) const = default;
};

/// @brief An operation of an attention graph, on tensors given by their index in AttentionGraph::tensors (-1: none).
/// Pointwise: y = mode(x[, b][, t]) (binary select: t ? x : b; gen index: the index along `axis`); reduction: y = x
/// summed or maxed over the dimensions where y is 1, and over groups where y's dimension divides x's; matmul:
/// y = x b over the last two dimensions, batched over the first two (broadcast where one has fewer heads); reshape:
/// y = x's elements seen through y's dimensions and strides.
struct GraphOp
{
    enum class Kind { Pointwise, Reduction, Matmul, Reshape };
    Kind kind = Kind::Pointwise;
    cudnnPointwiseMode_t pointwise = CUDNN_POINTWISE_IDENTITY;
    cudnnReduceTensorOp_t reduction = CUDNN_REDUCE_TENSOR_ADD;
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    std::int64_t axis = -1;
    int x = -1, b = -1, t = -1, y = -1;

    bool operator==(const GraphOp&) const = default;
};

/// @brief The graph of one attention pass as data: cuDNN builds it (CudnnAttentionPlan); a test runs it on the CPU.
struct AttentionGraph
{
    std::vector<GraphTensor> tensors;
    std::vector<GraphOp> ops;
};

/// The forward or backward graph of causal attention of `shape` (the frontend's composition).
AttentionGraph attentionGraph(const AttentionShape& shape, AttentionPass pass);

/// @brief The memory an attention call binds to its graph's tensors.
struct AttentionBuffers
{
    const void* qkv = nullptr; ///< (B, T, (NH + 2 KV) hs)
    void* out = nullptr; ///< forward: written (B, T, C)
    const void* outIn = nullptr; ///< backward: the forward's out
    float* lse = nullptr; ///< (B, NH, T): forward written, backward read
    const void* dout = nullptr; ///< backward
    void* dqkv = nullptr; ///< backward: written
    void* rowSums = nullptr; ///< backward: B NH T fp32 of workspace
    void* dqAccum = nullptr; ///< backward: B NH T hs fp32 of workspace
    const float* scale = nullptr; ///< the by-value scalars: 1 / sqrt(hs), -inf, 1
    const float* negInf = nullptr;
    const float* one = nullptr;
};

/// (unique id, address) of every non-virtual tensor of the pass's graph, for elements of `elementBytes` (2: bf16).
std::vector<std::pair<std::int64_t, void*>> attentionBindings(
    const AttentionShape& shape, AttentionPass pass, const AttentionBuffers& buffers, std::size_t elementBytes);

/// @brief A device as cuDNN builds plans for it: a live device's handle, or a device-property JSON.
class CudnnDevice
{
public:
    /// The device of `handle` (the caller's, kept alive by it).
    CudnnDevice(const CudnnApi& api, cudnnHandle_t handle);
    /// A device described by cuDNN's device-property JSON (no GPU needed).
    CudnnDevice(const CudnnApi& api, const std::string& json);

    const CudnnApi& api() const { return m_api; }
    const CudnnDescriptor& properties() const { return *m_properties; }

private:
    const CudnnApi& m_api;
    std::unique_ptr<CudnnDescriptor> m_properties;
};

/// @brief One execution plan of bf16 causal attention (multi-head, grouped-query or multi-query) for one shape and
/// pass.
class CudnnAttentionPlan
{
public:
    /// Builds the graph, asks cuDNN's heuristics for engines and keeps the first that finalises; throws CudnnError
    /// (the graph, or "no engine", with cuDNN's reasons) when none does.
    CudnnAttentionPlan(const CudnnDevice& device, const AttentionShape& shape, AttentionPass pass);
    ~CudnnAttentionPlan();

    AttentionPass pass() const { return m_pass; }
    const AttentionShape& shape() const { return m_shape; }
    /// Device memory execute() needs as `workspace`: cuDNN's own plus, for the backward, the fp32 row sums of dO.O
    /// and dQ's fp32 accumulator.
    std::size_t workspaceBytes() const;
    /// "engine N" (cuDNN's global engine index) of the plan kept, and how many the heuristics offered.
    std::string engineDescription() const;

    /// Enqueues the forward on `handle`'s stream: out (B, T, C), lse (B, NH, T) from qkv (B, T, 3C).
    void forward(cudnnHandle_t handle, void* out, float* lse, const void* qkv, void* workspace) const;
    /// Enqueues the backward: dqkv (B, T, 3C) written from dout (B, T, C) and the forward's qkv, out and lse.
    /// (cuDNN before 9.6 wants dQ's accumulator zeroed: that is done on `stream`, the handle's.)
    void backward(cudnnHandle_t handle, cudaStream_t stream, void* dqkv, const void* dout, const void* qkv,
        const void* out, const float* lse, void* workspace) const;

    /// Whether cuDNN's attention takes this shape at all (bf16 is the caller's to check): query heads in whole
    /// groups per key/value head, a head size that is a multiple of 8 and at most 128; empty when it does, else
    /// why not.
    static std::string unsupported(const AttentionShape& shape);

private:
    struct Graph;
    void execute(
        cudnnHandle_t handle, const std::vector<std::pair<std::int64_t, void*>>& bindings, void* workspace) const;

    const CudnnApi& m_api;
    AttentionShape m_shape;
    AttentionPass m_pass;
    mutable std::mutex m_executing; ///< backends of one GPU share a plan; one enqueues it at a time
    std::unique_ptr<Graph> m_graph;
    std::int64_t m_cudnnWorkspace = 0;
    std::int64_t m_engine = -1;
    int m_offered = 0;
};

/// @brief One backend's cuDNN attention: a handle on its stream and the plans of the shapes it runs. Plans are built
/// once per process, GPU, shape and pass (NVRTC compiles each in a second or two) and shared by the backends of one
/// GPU; a shape cuDNN refuses is remembered with the reason and runs the engine's own kernels.
class CudnnAttention
{
public:
    /// Throws CudnnError (or std::runtime_error when cuDNN cannot be loaded).
    CudnnAttention(int device, cudaStream_t stream);
    ~CudnnAttention();
    CudnnAttention(const CudnnAttention&) = delete;
    CudnnAttention& operator=(const CudnnAttention&) = delete;

    cudnnHandle_t handle() const { return m_handle; }
    /// The plan of `shape` and `pass`, built on first use; null when cuDNN does not run it (refusal() says why).
    const CudnnAttentionPlan* plan(const AttentionShape& shape, AttentionPass pass);
    /// From now on `shape` and `pass` run the engine's own kernels on this GPU, for `why`.
    void refuse(const AttentionShape& shape, AttentionPass pass, const std::string& why);
    /// Why the last shape asked for runs the engine's own kernels (empty when cuDNN runs it).
    const std::string& refusal() const { return m_refusal; }

private:
    const CudnnApi& m_api;
    int m_device;
    cudnnHandle_t m_handle = nullptr;
    std::unique_ptr<CudnnDevice> m_properties;
    std::string m_refusal;
};

} // namespace pw::engine::cuda
