// SPDX-License-Identifier: MIT
// OpenBLAS loaded at run time (openblas.h).
#include "openblas.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <dlfcn.h>

namespace pw::engine::openblas {

namespace {

constexpr const char* kLibrary = "libopenblas.so.0";

std::atomic<bool> g_loaded {false};

/// The API and, when it could not be loaded, why (empty when it was).
const std::pair<Api, std::string>& loadedApi()
{
    static const std::pair<Api, std::string> api = [] {
        std::pair<Api, std::string> out;
        void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char* why = dlerror();
            out.second = std::string(kLibrary) + " could not be loaded (" + (why ? why : "no reason given")
                + "): the CPU engine's matrix products need OpenBLAS (Debian: apt install libopenblas0)";
            return out;
        }
        Api& a = out.first;
        const auto find = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && out.second.empty())
                out.second = std::string(kLibrary) + " has no " + name + ": it is not OpenBLAS";
        };
        find(a.sgemm, "cblas_sgemm");
        find(a.setNumThreads, "openblas_set_num_threads");
        find(a.getNumThreads, "openblas_get_num_threads");
        find(a.getConfig, "openblas_get_config");
        g_loaded = true;
        return out;
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
