// SPDX-License-Identifier: MIT
// Internal to engine/: a CUDA backend's way to cuDNN's attention, without cuDNN's types, so that the backend is the
// same code with or without cuDNN's headers (cudnn_runner.cpp implements it; no_cudnn.cpp where the headers were
// missing at build time, as nccl_absent.cpp does for NCCL).
#pragma once

#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "../attention_shape.h"
#include "kernels.h"

namespace pw::engine::cuda {

/// @brief Runs a backend's bf16 attention calls through cuDNN where it can; the caller runs its own kernels where
/// forward() or backward() returns false.
class CudnnRunner
{
public:
    /// `enabled` false: every call is refused ("PW_CUDA_ATTENTION=own"). cuDNN is loaded at the first call.
    CudnnRunner(int device, cudaStream_t stream, bool enabled);
    ~CudnnRunner();
    CudnnRunner(const CudnnRunner&) = delete;
    CudnnRunner& operator=(const CudnnRunner&) = delete;

    /// Enqueues the forward through cuDNN (workspace from `scratch`); false when cuDNN does not run it.
    bool forward(Scratch& scratch, void* out, float* lse, const void* qkv, const AttentionShape& a);
    /// Enqueues the backward through cuDNN; false when cuDNN does not run it.
    bool backward(Scratch& scratch, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
        const AttentionShape& a);
    /// Notes that the caller ran a call on its own kernels for `why` (fp32): kernels() reports it.
    void noteOwn(const char* why);
    /// What ran the last call: "cuDNN 9.19.0", or "own kernels (why)"; empty before the first.
    std::string kernels() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace pw::engine::cuda
