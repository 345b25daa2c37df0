// SPDX-License-Identifier: MIT
// Internal to engine/: how the CUDA backend checks the CUDA runtime and cuBLASLt. Every call goes through PW_CUDA or
// PW_CUBLAS, and every kernel launch is followed by PW_CUDA_LAUNCHED(): a failure throws std::runtime_error naming
// the call, its file and line and the library's own words, so the executor reports it like any other run error
// (never exit(), never a message on stderr that nobody reads).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace pw::engine::cuda {

[[noreturn]] void throwCudaError(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void throwCublasError(cublasStatus_t status, const char* call, const char* file, int line);
/// Makes `device` current on the calling thread: the executor's, the telemetry thread that resolves spans, or
/// whichever thread frees a buffer may each hold another device.
void useDevice(int device);
/// Whether the event has completed; never blocks.
bool eventDone(cudaEvent_t event);

} // namespace pw::engine::cuda

#define PW_CUDA(call)                                                                                                  \
    do {                                                                                                               \
        const cudaError_t pw_cuda_error_ = (call);                                                                     \
        if (pw_cuda_error_ != cudaSuccess)                                                                             \
            ::pw::engine::cuda::throwCudaError(pw_cuda_error_, #call, __FILE__, __LINE__);                             \
    } while (false)

#define PW_CUBLAS(call)                                                                                                \
    do {                                                                                                               \
        const cublasStatus_t pw_cublas_status_ = (call);                                                               \
        if (pw_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                                \
            ::pw::engine::cuda::throwCublasError(pw_cublas_status_, #call, __FILE__, __LINE__);                        \
    } while (false)

/// After a kernel launch: a bad configuration (too much shared memory, no kernel image for this GPU) shows here.
#define PW_CUDA_LAUNCHED() PW_CUDA(cudaGetLastError())
