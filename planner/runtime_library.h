// SPDX-License-Identifier: MIT
// A shared library loaded at run time (dlopen), so that a program maps it only where it is first needed: the CLI,
// the app and the agent start without OpenBLAS, cuBLASLt, NCCL, libssh or libcrypto (issue 30 item 10). Each user
// loads its library once per process into a table of function pointers and keeps why it could not, to throw where
// the library is needed; nothing is ever unloaded.
#pragma once

#include <string>
#include <string_view>

namespace pw::planner {

/// @brief One library, loaded with RTLD_NOW | RTLD_LOCAL, and the first thing missing from it.
class RuntimeLibrary
{
public:
    /// Loads `soname`; when that fails, error() is "SONAME could not be loaded (the loader's reason): " + ifMissing.
    /// `ifOld` is what error() adds to "SONAME has no SYMBOL" when find() misses a symbol (empty: nothing).
    RuntimeLibrary(std::string soname, std::string_view ifMissing, std::string_view ifOld = {});

    /// Points `fn` at the library's symbol `name` (null when it is not there, which error() then says).
    template <class Fn> void find(Fn*& fn, const char* name) { fn = reinterpret_cast<Fn*>(symbol(name)); }

    bool ok() const { return m_error.empty(); }
    /// Why the library cannot be used (the first failure), empty when it can.
    const std::string& error() const { return m_error; }

private:
    void* symbol(const char* name);

    std::string m_soname;
    std::string m_ifOld;
    void* m_handle = nullptr;
    std::string m_error;
};

} // namespace pw::planner
