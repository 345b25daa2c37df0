// SPDX-License-Identifier: MIT
// cuBLASLt loaded at run time (cublaslt.h).
#include "cublaslt.h"

#include <atomic>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <cublas_api.h>

#include "planner/runtime_library.h"

namespace pw::engine::cuda {

namespace {

#define PW_STRINGIFY2(x) #x
#define PW_STRINGIFY(x) PW_STRINGIFY2(x)
constexpr const char* kLibrary = "libcublasLt.so." PW_STRINGIFY(CUBLAS_VER_MAJOR);

std::atomic<bool> g_loaded {false};

/// The API and, when it could not be loaded, why (empty when it was).
const std::pair<CublasLtApi, std::string>& loaded()
{
    static const std::pair<CublasLtApi, std::string> api = [] {
        planner::RuntimeLibrary lib(
            kLibrary, "install the CUDA toolkit's cuBLAS on this machine, or put its lib folder in LD_LIBRARY_PATH");
        CublasLtApi a;
        const auto find = [&](auto& fn, const char* name) { lib.find(fn, name); };
        find(a.getVersion, "cublasLtGetVersion");
        find(a.getStatusName, "cublasLtGetStatusName");
        find(a.getStatusString, "cublasLtGetStatusString");
        find(a.create, "cublasLtCreate");
        find(a.destroy, "cublasLtDestroy");
        find(a.matmulDescCreate, "cublasLtMatmulDescCreate");
        find(a.matmulDescDestroy, "cublasLtMatmulDescDestroy");
        find(a.matmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
        find(a.matrixLayoutCreate, "cublasLtMatrixLayoutCreate");
        find(a.matrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
        find(a.matmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
        find(a.matmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
        find(a.matmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
        find(a.matmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
        find(a.matmul, "cublasLtMatmul");
        g_loaded = lib.ok();
        return std::pair {a, lib.error()};
    }();
    return api;
}

} // namespace

const char* cublasLtLibrary()
{
    return kLibrary;
}

const CublasLtApi& cublasLt()
{
    const auto& [api, error] = loaded();
    if (!error.empty())
        throw std::runtime_error(error);
    return api;
}

bool cublasLtLoaded()
{
    return g_loaded;
}

std::string cublasLtVersion()
{
    const auto& [api, error] = loaded();
    if (!error.empty())
        return "none (" + error + ")";
    const std::size_t v = api.getVersion(); // major * 10000 + minor * 100 + patch
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

} // namespace pw::engine::cuda
