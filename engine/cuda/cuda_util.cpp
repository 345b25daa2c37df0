// SPDX-License-Identifier: MIT
// The CUDA backend's error messages (cuda_util.h).
#include "cuda_util.h"

#include <stdexcept>
#include <string>

#include "cublaslt.h"

namespace pw::engine::cuda {

namespace {

std::string where(const char* call, const char* file, int line)
{
    std::string f = file;
    // The path from the repository's engine/ on, not the build machine's checkout.
    if (const auto at = f.rfind("engine/"); at != std::string::npos)
        f = f.substr(at);
    return std::string(call) + " at " + f + ":" + std::to_string(line);
}

} // namespace

void throwCudaError(cudaError_t error, const char* call, const char* file, int line)
{
    // Clears a non-sticky error so that the next call does not report this one again.
    (void)cudaGetLastError();
    throw std::runtime_error("CUDA error in " + where(call, file, line) + ": " + cudaGetErrorString(error) + " ("
        + cudaGetErrorName(error) + ")");
}

void throwCublasError(cublasStatus_t status, const char* call, const char* file, int line)
{
    throw std::runtime_error("cuBLASLt error in " + where(call, file, line) + ": " + cublasLt().getStatusString(status)
        + " (" + cublasLt().getStatusName(status) + ")");
}

void useDevice(int device)
{
    int current = -1;
    PW_CUDA(cudaGetDevice(&current));
    if (current != device)
        PW_CUDA(cudaSetDevice(device));
}

bool eventDone(cudaEvent_t event)
{
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
        (void)cudaGetLastError(); // "not ready" is an answer, not an error for the next check to report
        return false;
    }
    PW_CUDA(status);
    return true;
}

} // namespace pw::engine::cuda
