// SPDX-License-Identifier: MIT
// Commands for the packaging tests: run one through /bin/sh and keep its output and exit status, quote a word for
// the shell, and a temporary directory that is removed with what it holds.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace pw::test {

/// @brief What a command printed (stdout and stderr together) and how it ended.
struct Shell
{
    int status = -1; ///< the exit status; -1 when it did not exit normally
    std::string output;
};

/// Runs `command` with /bin/sh -c, stderr folded into stdout.
inline Shell shell(const std::string& command)
{
    Shell r;
    std::FILE* pipe = ::popen(("exec 2>&1; " + command).c_str(), "r");
    if (!pipe)
        return r;
    char buffer[4096];
    while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe))
        r.output.append(buffer, n);
    const int raw = ::pclose(pipe);
    r.status = raw != -1 && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    return r;
}

/// `word` as one single-quoted shell word.
inline std::string quote(const std::string& word)
{
    std::string q = "'";
    for (char c : word)
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

/// Whether `tool` is on the PATH.
inline bool haveTool(const std::string& tool)
{
    return shell("command -v " + quote(tool) + " >/dev/null").status == 0;
}

/// @brief A fresh directory under the system's temporary one, removed with everything in it.
struct ScratchDir
{
    std::filesystem::path path;
    ScratchDir()
    {
        std::string pattern = (std::filesystem::temp_directory_path() / "pw-pkg-XXXXXX").string();
        path = ::mkdtemp(pattern.data());
    }
    ~ScratchDir()
    {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
};

} // namespace pw::test
