// SPDX-License-Identifier: MIT
// The CUDA half of probeCuda() (engine/devices.h): the runtime's, driver's and cuBLASLt's versions and every visible
// device, through the CUDA runtime API. Plain C++: nothing here runs on the GPU.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "../devices.h"
#include "cublaslt.h"

namespace pw::engine {

CudaInfo probeCudaRuntime();

namespace {

std::string errorText(cudaError_t e)
{
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Whether device `index` has its primary context active in this process (a backend, or a caller, uses it). Read
/// through the driver's entry point that the runtime hands out, so that nothing links libcuda itself. When the
/// driver does not tell, the device counts as in use: its context is then left as it is.
bool primaryContextActive(int index)
{
    using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
    using GetDevice = CUresult (*)(CUdevice*, int);
    void* state = nullptr;
    void* device = nullptr;
    cudaDriverEntryPointQueryResult found {};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 12000, cudaEnableDefault, &found)
            != cudaSuccess
        || found != cudaDriverEntryPointSuccess
        || cudaGetDriverEntryPointByVersion("cuDeviceGet", &device, 12000, cudaEnableDefault, &found) != cudaSuccess
        || found != cudaDriverEntryPointSuccess)
        return true;
    CUdevice dev = 0;
    unsigned int flags = 0;
    int active = 1;
    if (reinterpret_cast<GetDevice>(device)(&dev, index) != CUDA_SUCCESS
        || reinterpret_cast<GetState>(state)(dev, &flags, &active) != CUDA_SUCCESS)
        return true;
    return active != 0;
}

} // namespace

CudaInfo probeCudaRuntime()
{
    CudaInfo info;
    int version = 0;
    if (cudaRuntimeGetVersion(&version) == cudaSuccess)
        info.runtime = cudaVersionString(version);
    version = 0;
    info.driver = cudaDriverGetVersion(&version) == cudaSuccess && version > 0 ? cudaVersionString(version) : "none";
    info.cublas = cuda::cublasLtVersion(); // loads it: a probe asks what a GPU run would use

    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
        info.error = errorText(e);
        cudaGetLastError(); // a failed initialisation must not be reported by the next call
        return info;
    }
    if (count == 0) {
        info.error = "no CUDA device is visible";
        return info;
    }
    int current = -1;
    const bool hadCurrent = cudaGetDevice(&current) == cudaSuccess;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp p {};
        if (const cudaError_t e = cudaGetDeviceProperties(&p, i); e != cudaSuccess) {
            info.error += (info.error.empty() ? "" : "; ") + ("device " + std::to_string(i) + ": " + errorText(e));
            cudaGetLastError();
            continue;
        }
        GpuInfo g;
        g.index = i;
        g.name = p.name;
        g.memory_bytes = static_cast<std::int64_t>(p.totalGlobalMem);
        g.cc_major = p.major;
        g.cc_minor = p.minor;
        // Free memory needs a context on the device. One this process did not hold is released again at once: an
        // agent that probed eight GPUs must not keep a context (hundreds of MiB) on the seven it does not train on.
        const bool keep = primaryContextActive(i);
        std::size_t free = 0, total = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess)
            g.free_bytes = static_cast<std::int64_t>(free);
        else {
            g.free_bytes = -1; // unknown
            cudaGetLastError();
        }
        if (!keep)
            cudaDeviceReset();
        info.gpus.push_back(std::move(g));
    }
    if (hadCurrent)
        cudaSetDevice(current);
    return info;
}

} // namespace pw::engine
