// SPDX-License-Identifier: MIT
#include "runtime_library.h"

#include <dlfcn.h>

namespace pw::planner {

RuntimeLibrary::RuntimeLibrary(std::string soname, std::string_view ifMissing, std::string_view ifOld)
    : m_soname(std::move(soname))
    , m_ifOld(ifOld)
    , m_handle(dlopen(m_soname.c_str(), RTLD_NOW | RTLD_LOCAL))
{
    if (!m_handle) {
        const char* why = dlerror();
        m_error
            = m_soname + " could not be loaded (" + (why ? why : "no reason given") + "): " + std::string(ifMissing);
    }
}

void* RuntimeLibrary::symbol(const char* name)
{
    if (!m_handle)
        return nullptr;
    void* found = dlsym(m_handle, name);
    if (!found && m_error.empty())
        m_error = m_soname + " has no " + name + (m_ifOld.empty() ? "" : ": " + m_ifOld);
    return found;
}

} // namespace pw::planner
