// SPDX-License-Identifier: MIT
// What CUDA this process can use: whether the build holds the engine's kernels, the runtime's, driver's, cuBLAS's
// and NCCL's versions, and every visible GPU (name, memory, free memory, compute capability). The agent's hello and
// `pipewright-agent --capabilities` report it; pre-flight checks a plan's GPUs against it on every node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pw::engine {

/// @brief One CUDA device as this process sees it (CUDA_VISIBLE_DEVICES applied: `index` is among the visible).
struct GpuInfo
{
    int index = 0;
    std::string name; ///< "NVIDIA H100 80GB HBM3"
    std::int64_t memory_bytes = 0; ///< the device's total memory
    std::int64_t free_bytes = 0; ///< free when probed (other processes' allocations taken); -1: unreadable
    int cc_major = 0; ///< compute capability, e.g. 9.0
    int cc_minor = 0;

    bool operator==(const GpuInfo&) const = default;
};

/// @brief The CUDA side of this process: the build, the libraries it found and the devices it sees.
struct CudaInfo
{
    bool compiled_in = false; ///< the engine's CUDA kernels are in this build (PW_WITH_CUDA found nvcc)
    std::string runtime; ///< the CUDA runtime linked in, "13.0"; empty when not compiled in
    std::string driver; ///< the CUDA version the driver supports, "13.0"; "none" without a driver
    std::string cublas; ///< cuBLASLt's version, "13.1.0"
    std::string nccl; ///< NCCL's version (libnccl.so.2 looked up at run time), "2.28.9", or "not found"
    std::vector<int> architectures; ///< the SM architectures the kernels were built for, {80, 90}
    std::vector<GpuInfo> gpus; ///< in CUDA's order
    std::string error; ///< why no device is listed when CUDA is compiled in (no driver, no device, ...)

    bool operator==(const CudaInfo&) const = default;
};

/// Probes CUDA without keeping anything: a device whose primary context this process did not hold before is left
/// without one afterwards (the free memory is read through a context, which is then released). Never throws: what
/// fails is said in `error` (devices) or in the version field it concerns.
CudaInfo probeCuda();

/// A CUDA version number as people write it: 13000 -> "13.0", 12080 -> "12.8".
std::string cudaVersionString(int version);

} // namespace pw::engine
