// SPDX-License-Identifier: MIT
// cudnn_runner.h where cuDNN's headers were missing at build time: attention always runs the engine's own kernels.
#include "cudnn_runner.h"

namespace pw::engine::cuda {

struct CudnnRunner::Impl
{
    bool enabled = true;
    std::string why; ///< of the last call; empty before the first
};

CudnnRunner::CudnnRunner(int, cudaStream_t, bool enabled)
    : m_impl(std::make_unique<Impl>())
{
    m_impl->enabled = enabled;
}

CudnnRunner::~CudnnRunner() = default;

bool CudnnRunner::forward(Scratch&, void*, float*, const void*, const AttentionShape&)
{
    noteOwn(m_impl->enabled ? "built without cuDNN's headers" : "PW_CUDA_ATTENTION=own");
    return false;
}

bool CudnnRunner::backward(Scratch&, void*, const void*, const void*, const void*, const float*, const AttentionShape&)
{
    noteOwn(m_impl->enabled ? "built without cuDNN's headers" : "PW_CUDA_ATTENTION=own");
    return false;
}

void CudnnRunner::noteOwn(const char* why)
{
    m_impl->why = why;
}

std::string CudnnRunner::kernels() const
{
    return m_impl->why.empty() ? std::string() : "own kernels (" + m_impl->why + ")";
}

} // namespace pw::engine::cuda
