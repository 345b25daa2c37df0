// SPDX-License-Identifier: MIT
// The probe of engine/devices.h. The CUDA half (engine/cuda/cuda_info.cpp) exists only in a build with CUDA; this
// file answers for a build without, so that every agent can say what it lacks.
#include "devices.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string_view>

#include <dlfcn.h>

namespace pw::engine {

#if PW_HAVE_CUDA
/// engine/cuda/cuda_info.cpp: the runtime's, driver's and cuBLASLt's versions and the devices.
CudaInfo probeCudaRuntime();
#endif

namespace {

#if PW_HAVE_CUDA
/// The SM architectures of the build: CMake's CMAKE_CUDA_ARCHITECTURES ("80 90", "80-real,90-virtual": entries
/// apart by a space, a comma or a semicolon), passed by engine/CMakeLists.txt as PW_CUDA_ARCHITECTURES. Entries
/// without a number ("native", "all") are left out.
std::vector<int> builtArchitectures()
{
#ifdef PW_CUDA_ARCHITECTURES
    std::vector<int> out;
    const std::string_view list = PW_CUDA_ARCHITECTURES;
    for (std::size_t at = 0; at < list.size();) {
        const std::size_t end = std::min(list.find_first_of(";, ", at), list.size());
        int value = 0;
        std::size_t i = at;
        for (; i < end && std::isdigit(static_cast<unsigned char>(list[i])); ++i)
            value = value * 10 + (list[i] - '0');
        if (i > at)
            out.push_back(value);
        at = end + 1;
    }
    return out;
#else
    // Without the definition: the top-level CMakeLists.txt's default, which a build that sets none gets.
    return {80, 90};
#endif
}
#endif

/// NCCL's version through libnccl.so.2 when the dynamic loader finds it: the agent must start where there is no
/// NCCL (one GPU, or CPUs only), so it is looked up, not linked.
std::string ncclVersion()
{
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return "not found";
    std::string out = "not found (libnccl.so.2 has no ncclGetVersion)";
    using GetVersion = int (*)(int*);
    if (auto get = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"))) {
        int code = 0;
        if (get(&code) == 0) {
            // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9, major * 1000 + minor * 100 + patch
            // before.
            const int major = code >= 10000 ? code / 10000 : code / 1000;
            const int rest = code >= 10000 ? code % 10000 : code % 1000;
            out = std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
        }
    }
    dlclose(lib);
    return out;
}

#if !PW_HAVE_CUDA
/// The driver's CUDA version without the runtime (a build without CUDA on a GPU machine still says what is
/// there): libcuda.so.1's cuDriverGetVersion.
std::string driverVersion()
{
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return "none";
    std::string out = "none";
    using GetVersion = int (*)(int*);
    if (auto get = reinterpret_cast<GetVersion>(dlsym(lib, "cuDriverGetVersion"))) {
        int v = 0;
        if (get(&v) == 0 && v > 0)
            out = cudaVersionString(v);
    }
    dlclose(lib);
    return out;
}
#endif

} // namespace

std::string cudaVersionString(int version)
{
    return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

CudaInfo probeCuda()
{
#if PW_HAVE_CUDA
    CudaInfo info;
    try {
        info = probeCudaRuntime();
    } catch (const std::exception& e) { // an allocation failing while names are copied: say so, never throw
        info.error = e.what();
    }
    info.compiled_in = true;
    info.architectures = builtArchitectures();
    info.nccl = ncclVersion();
    return info;
#else
    CudaInfo info;
    info.compiled_in = false;
    info.driver = driverVersion();
    info.nccl = ncclVersion();
    info.error = "this build has no CUDA kernels (configured with PW_WITH_CUDA=OFF, or no CUDA compiler was found)";
    return info;
#endif
}

} // namespace pw::engine
