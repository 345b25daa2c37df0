// SPDX-License-Identifier: MIT
// A CUDA backend's way to cuDNN's attention (cudnn_runner.h): a handle per backend, the process's plans by GPU,
// shape and pass, and the fallback to the engine's own kernels with the reason.
#include "cudnn_runner.h"

#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cudnn_attention.h"

namespace pw::engine::cuda {

// ---- A backend's cuDNN attention ----------------------------------------------------------------------------------

namespace {

using PlanKey = std::tuple<int, int, int, int, int, int, int>; // device, B, T, NH, KV, hs, pass
/// A plan, or why there is none: cuDNN refused to build it, or failed to run it (the plan is then kept: a backend
/// may still hold it).
struct CachedPlan
{
    std::shared_ptr<CudnnAttentionPlan> plan;
    std::string refusal;
};

/// The process's plans, by device, shape and pass: a handful per process, never freed (not even at exit, where
/// destroying them could follow the CUDA runtime's teardown).
std::map<PlanKey, CachedPlan>& planCache()
{
    static auto* cache = new std::map<PlanKey, CachedPlan>;
    return *cache;
}
std::mutex g_planCacheMutex;

PlanKey planKey(int device, const AttentionShape& a, AttentionPass pass)
{
    return {device, a.batch, a.seq, a.heads, a.kv_heads, a.head_size, static_cast<int>(pass)};
}

} // namespace

CudnnAttention::CudnnAttention(int device, cudaStream_t stream)
    : m_api(cudnn())
    , m_device(device)
{
    checkCudnn(m_api, m_api.create(&m_handle), "creating a handle on cuda:" + std::to_string(device));
    try {
        checkCudnn(m_api, m_api.setStream(m_handle, stream), "setting the handle's stream");
        m_properties = std::make_unique<CudnnDevice>(m_api, m_handle);
    } catch (...) {
        m_api.destroy(m_handle);
        throw;
    }
}

CudnnAttention::~CudnnAttention()
{
    m_properties.reset();
    if (m_handle != nullptr)
        m_api.destroy(m_handle);
}

const CudnnAttentionPlan* CudnnAttention::plan(const AttentionShape& a, AttentionPass pass)
{
    if (std::string why = CudnnAttentionPlan::unsupported(a); !why.empty()) {
        m_refusal = std::move(why);
        return nullptr;
    }
    const std::lock_guard lock(g_planCacheMutex);
    auto it = planCache().find(planKey(m_device, a, pass));
    if (it == planCache().end()) {
        CachedPlan built;
        try {
            built.plan = std::make_shared<CudnnAttentionPlan>(*m_properties, a, pass);
        } catch (const CudnnError& e) {
            built.refusal = e.what();
        }
        it = planCache().emplace(planKey(m_device, a, pass), std::move(built)).first;
    }
    if (!it->second.refusal.empty()) {
        m_refusal = it->second.refusal;
        return nullptr;
    }
    m_refusal.clear();
    return it->second.plan.get();
}

void CudnnAttention::refuse(const AttentionShape& a, AttentionPass pass, const std::string& why)
{
    const std::lock_guard lock(g_planCacheMutex);
    planCache()[planKey(m_device, a, pass)].refusal = why;
}

// ---- The backend's runner (cudnn_runner.h) ----------------------------------------------------------------------

struct CudnnRunner::Impl
{
    int device = 0;
    cudaStream_t stream = nullptr;
    bool enabled = true;
    std::unique_ptr<CudnnAttention> cudnn; ///< created at the first call
    std::string absent; ///< why cuDNN cannot be used on this device (empty: it can, or not tried yet)
    bool called = false;
    std::string ownReason; ///< why the last call ran the engine's own kernels (empty: cuDNN ran it)

    /// cuDNN's plan for the call, or null with ownReason saying why not.
    const CudnnAttentionPlan* plan(const AttentionShape& a, AttentionPass pass)
    {
        called = true;
        if (!enabled) {
            ownReason = "PW_CUDA_ATTENTION=own";
            return nullptr;
        }
        if (!cudnn && absent.empty()) {
            try {
                cudnn = std::make_unique<CudnnAttention>(device, stream);
            } catch (const std::exception& e) {
                absent = e.what();
            }
        }
        if (!cudnn) {
            ownReason = absent;
            return nullptr;
        }
        const CudnnAttentionPlan* p = cudnn->plan(a, pass);
        if (p)
            ownReason.clear();
        else if (ownReason != cudnn->refusal())
            ownReason = cudnn->refusal();
        return p;
    }

    /// cuDNN refused to run a plan it built (its status came back at once: nothing was enqueued): this shape and
    /// pass run the engine's own kernels from now on, in every backend of the GPU, and the reason is kept.
    bool failed(const AttentionShape& a, AttentionPass pass, const CudnnError& e)
    {
        cudnn->refuse(a, pass, std::string("cuDNN failed to run its plan: ") + e.what());
        ownReason = std::string("cuDNN failed to run its plan: ") + e.what();
        return false;
    }
};

CudnnRunner::CudnnRunner(int device, cudaStream_t stream, bool enabled)
    : m_impl(std::make_unique<Impl>())
{
    m_impl->device = device;
    m_impl->stream = stream;
    m_impl->enabled = enabled;
}

CudnnRunner::~CudnnRunner() = default;

namespace {

/// The plans promise cuDNN 16-byte aligned tensors; a buffer inside a larger one may not be.
bool aligned16(std::initializer_list<const void*> pointers)
{
    for (const void* p : pointers)
        if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
            return false;
    return true;
}

} // namespace

bool CudnnRunner::forward(Scratch& scratch, void* out, float* lse, const void* qkv, const AttentionShape& a)
{
    if (!aligned16({out, lse, qkv})) {
        noteOwn("a buffer not 16-byte aligned");
        return false;
    }
    const CudnnAttentionPlan* p = m_impl->plan(a, AttentionPass::Forward);
    if (p == nullptr)
        return false;
    try {
        p->forward(m_impl->cudnn->handle(), out, lse, qkv, scratch.get(Scratch::CudnnWorkspace, p->workspaceBytes()));
    } catch (const CudnnError& e) {
        return m_impl->failed(a, AttentionPass::Forward, e);
    }
    return true;
}

bool CudnnRunner::backward(Scratch& scratch, void* dqkv, const void* dout, const void* qkv, const void* out,
    const float* lse, const AttentionShape& a)
{
    if (!aligned16({dqkv, dout, qkv, out, lse})) {
        noteOwn("a buffer not 16-byte aligned");
        return false;
    }
    const CudnnAttentionPlan* p = m_impl->plan(a, AttentionPass::Backward);
    if (p == nullptr)
        return false;
    try {
        p->backward(m_impl->cudnn->handle(), m_impl->stream, dqkv, dout, qkv, out, lse,
            scratch.get(Scratch::CudnnWorkspace, p->workspaceBytes()));
    } catch (const CudnnError& e) {
        return m_impl->failed(a, AttentionPass::Backward, e);
    }
    return true;
}

void CudnnRunner::noteOwn(const char* why)
{
    m_impl->called = true;
    m_impl->ownReason = why;
}

std::string CudnnRunner::kernels() const
{
    if (!m_impl->called)
        return {};
    return m_impl->ownReason.empty() ? "cuDNN " + cudnnVersion() : "own kernels (" + m_impl->ownReason + ")";
}

} // namespace pw::engine::cuda
