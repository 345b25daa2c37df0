// SPDX-License-Identifier: MIT
// libssh loaded at run time (libssh.h).
#include "libssh.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "planner/runtime_library.h"

namespace pw::agents::libssh {

namespace {

constexpr const char* kLibrary = "libssh.so.4";

std::atomic<bool> g_loaded {false};

/// The API and, when it could not be loaded, why (empty when it was).
const std::pair<Api, std::string>& loadedApi()
{
    static const std::pair<Api, std::string> api = [] {
        planner::RuntimeLibrary lib(kLibrary,
            "connecting to a cluster's nodes needs libssh (Debian: apt install libssh-4)",
            "libssh 0.9 or later is needed");
        Api a;
#define PW_LIBSSH_FIND(name) lib.find(a.name, #name);
        PW_LIBSSH_FUNCTIONS(PW_LIBSSH_FIND)
#undef PW_LIBSSH_FIND
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

} // namespace pw::agents::libssh
