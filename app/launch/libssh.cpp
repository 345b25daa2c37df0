// SPDX-License-Identifier: MIT
// libssh loaded at run time (libssh.h).
#include "libssh.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <dlfcn.h>

namespace pw::agents::libssh {

namespace {

constexpr const char* kLibrary = "libssh.so.4";

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
                + "): connecting to a cluster's nodes needs libssh (Debian: apt install libssh-4)";
            return out;
        }
        Api& a = out.first;
        const auto find = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && out.second.empty())
                out.second = std::string(kLibrary) + " has no " + name + ": libssh 0.9 or later is needed";
        };
#define PW_LIBSSH_FIND(name) find(a.name, #name);
        PW_LIBSSH_FUNCTIONS(PW_LIBSSH_FIND)
#undef PW_LIBSSH_FIND
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

} // namespace pw::agents::libssh
