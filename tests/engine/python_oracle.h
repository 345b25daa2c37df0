// SPDX-License-Identifier: MIT
// The engine tests' way to an independent Python oracle (tests/oracle/*.py): the interpreter ($PW_PYTHON, a bogus
// path shows the skip, else Debian's /usr/bin/python3, whose python3-torch is the one the project names), whether it
// has a module, a command's standard output, and a scratch folder removed afterwards.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace pw::test {

inline std::string python()
{
    const char* p = std::getenv("PW_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}

inline std::string shellQuoted(const std::filesystem::path& p)
{
    return "'" + p.string() + "'";
}

inline bool pythonHas(const std::string& module)
{
    return std::system((shellQuoted(python()) + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) == 0;
}

/// Runs `command` (its standard error into `errors`) and returns its standard output; REQUIREs exit status 0.
inline std::string runCommand(const std::string& command, const std::filesystem::path& errors)
{
    std::FILE* pipe = ::popen((command + " 2>" + shellQuoted(errors)).c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string out;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
        out.append(buffer, n);
    const int status = ::pclose(pipe);
    std::ifstream err(errors);
    INFO(command << "\nstdout: " << out << "\nstderr: " << err.rdbuf());
    REQUIRE(status == 0);
    return out;
}

/// @brief A folder of the test's own under the system's temporary one, removed with everything in it.
struct ScratchDir
{
    std::filesystem::path path;
    explicit ScratchDir(const std::string& name)
        : path(std::filesystem::temp_directory_path() / ("pw-" + name + "-" + std::to_string(::getpid())))
    {
        std::filesystem::create_directories(path);
    }
    ~ScratchDir() { std::filesystem::remove_all(path); }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
};

} // namespace pw::test
