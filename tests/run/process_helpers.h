// SPDX-License-Identifier: MIT
// Processes for the run tests: a temporary directory, the agent processes a parent has, executable scripts.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/types.h>
#include <unistd.h>

namespace pw::test {

/// @brief A fresh directory under the system's temporary one, removed with everything in it.
struct TempDir
{
    std::filesystem::path path;
    TempDir()
    {
        std::string pattern = (std::filesystem::temp_directory_path() / "pw-run-XXXXXX").string();
        path = ::mkdtemp(pattern.data());
    }
    ~TempDir()
    {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

/// The field after a process's name in /proc/PID/stat (state, ppid, ...); the name may hold spaces and ')'.
inline bool readStat(pid_t pid, std::string& name, char& state, pid_t& ppid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line))
        return false;
    const auto open = line.find('(');
    const auto close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 >= line.size())
        return false;
    name = line.substr(open + 1, close - open - 1);
    state = line[close + 2];
    ppid = static_cast<pid_t>(std::atol(line.c_str() + close + 4));
    return true;
}

/// @brief A live (not zombie) process as /proc/PID/stat shows it.
struct ProcessInfo
{
    pid_t pid = 0;
    std::string name; ///< the kernel's 15 characters of its command's name
    pid_t ppid = 0;
};

/// Every live (not zombie) process, ascending by pid.
inline std::vector<ProcessInfo> liveProcesses()
{
    std::vector<ProcessInfo> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string n = entry.path().filename().string();
        if (n.empty() || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
            continue;
        ProcessInfo p;
        p.pid = static_cast<pid_t>(std::atol(n.c_str()));
        char state = 0;
        if (readStat(p.pid, p.name, state, p.ppid) && state != 'Z')
            out.push_back(std::move(p));
    }
    std::sort(out.begin(), out.end(), [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
    return out;
}

/// Live pipewright-agent processes whose parent is `parent`, ascending.
inline std::vector<pid_t> childAgents(pid_t parent)
{
    std::vector<pid_t> out;
    for (const auto& p : liveProcesses())
        if (p.ppid == parent && p.name.rfind("pipewright-agen", 0) == 0) // the kernel keeps 15 characters
            out.push_back(p.pid);
    return out;
}

/// Whether `pid` is a live process (a zombie counts as gone).
inline bool alive(pid_t pid)
{
    std::string name;
    char state = 0;
    pid_t ppid = 0;
    return readStat(pid, name, state, ppid) && state != 'Z';
}

/// Writes an executable /bin/sh script with `body` and returns its path.
inline std::filesystem::path script(const std::filesystem::path& path, const std::string& body)
{
    {
        std::ofstream out(path);
        out << "#!/bin/sh\n" << body;
    }
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
}

} // namespace pw::test
