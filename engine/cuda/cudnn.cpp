// SPDX-License-Identifier: MIT
// cuDNN loaded at run time (cudnn.h).
#include "cudnn.h"

#include <atomic>
#include <stdexcept>
#include <utility>

#include "planner/runtime_library.h"

namespace pw::engine::cuda {

namespace {

#define PW_CUDNN_STRINGIFY2(x) #x
#define PW_CUDNN_STRINGIFY(x) PW_CUDNN_STRINGIFY2(x)
constexpr const char* kCudnnLibrary = "libcudnn.so." PW_CUDNN_STRINGIFY(CUDNN_MAJOR);

std::atomic<bool> g_cudnnLoaded {false};

/// The API and, when it could not be loaded, why (empty when it was).
const std::pair<CudnnApi, std::string>& loadedCudnn()
{
    static const std::pair<CudnnApi, std::string> api = [] {
        planner::RuntimeLibrary lib(kCudnnLibrary,
            "install cuDNN 9 on this machine, or put its lib folder in LD_LIBRARY_PATH (attention then runs on the "
            "engine's own kernels)",
            "cuDNN 9.0 or newer is needed");
        CudnnApi a;
        const auto find = [&](auto& fn, const char* name) { lib.find(fn, name); };
        find(a.getVersion, "cudnnGetVersion");
        find(a.getErrorString, "cudnnGetErrorString");
        find(a.getLastErrorString, "cudnnGetLastErrorString");
        find(a.create, "cudnnCreate");
        find(a.destroy, "cudnnDestroy");
        find(a.setStream, "cudnnSetStream");
        find(a.createDescriptor, "cudnnBackendCreateDescriptor");
        find(a.destroyDescriptor, "cudnnBackendDestroyDescriptor");
        find(a.setAttribute, "cudnnBackendSetAttribute");
        find(a.getAttribute, "cudnnBackendGetAttribute");
        find(a.finalize, "cudnnBackendFinalize");
        find(a.execute, "cudnnBackendExecute");
        g_cudnnLoaded = lib.ok();
        return std::pair {a, lib.error()};
    }();
    return api;
}

} // namespace

const char* cudnnLibrary()
{
    return kCudnnLibrary;
}

const CudnnApi& cudnn()
{
    const auto& [api, error] = loadedCudnn();
    if (!error.empty())
        throw std::runtime_error(error);
    return api;
}

bool cudnnLoaded()
{
    return g_cudnnLoaded;
}

std::string cudnnVersion()
{
    const auto& [api, error] = loadedCudnn();
    if (!error.empty())
        return "none (" + error + ")";
    const std::size_t v = api.getVersion(); // major * 10000 + minor * 100 + patch (cuDNN 9)
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

} // namespace pw::engine::cuda
