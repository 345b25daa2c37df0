// SPDX-License-Identifier: MIT
// OpenBLAS loaded at run time (openblas.h).
#include "openblas.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "planner/runtime_library.h"

namespace pw::engine::openblas {

namespace {

constexpr const char* kLibrary = "libopenblas.so.0";

std::atomic<bool> g_loaded {false};

/// The API and, when it could not be loaded, why (empty when it was).
const std::pair<Api, std::string>& loadedApi()
{
    static const std::pair<Api, std::string> api = [] {
        planner::RuntimeLibrary lib(kLibrary,
            "the CPU engine's matrix products need OpenBLAS (Debian: apt install libopenblas0)", "it is not OpenBLAS");
        Api a;
        lib.find(a.sgemm, "cblas_sgemm");
        lib.find(a.setNumThreads, "openblas_set_num_threads");
        lib.find(a.getNumThreads, "openblas_get_num_threads");
        lib.find(a.getConfig, "openblas_get_config");
        g_loaded = lib.ok();
        return std::pair {a, lib.error()};
    }();
    return api;
}

} // namespace

const char* library()
{
    return kLibrary;
}

const Api& api()
{
    const auto& [a, error] = loadedApi();
    if (!error.empty())
        throw std::runtime_error(error);
    return a;
}

bool loaded()
{
    return g_loaded;
}

} // namespace pw::engine::openblas
