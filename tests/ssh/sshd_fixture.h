// SPDX-License-Identifier: MIT
// A real OpenSSH server on 127.0.0.1 for the deployment tests: generated host and user keys (ssh-keygen), its own
// sshd_config, authorized_keys and log in a temporary directory, a free port, started in the foreground
// (/usr/sbin/sshd -D -e) and stopped with the fixture. Needs root (sshd's privilege separation), as CI runs.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/run/process_helpers.h"

namespace pw::test {

/// Runs a program to its end (no shell); returns its exit status.
inline int runProgram(const std::vector<std::string>& argv, const std::filesystem::path& output = "/dev/null")
{
    const pid_t pid = fork();
    if (pid == 0) {
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execv(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string slurpFile(const std::filesystem::path& p)
{
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// A port nobody listens on now (the kernel's choice for port 0).
inline int freePort()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

inline bool portOpen(int port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

/// An ed25519 key pair at `path` and `path`.pub.
inline void makeKey(const std::filesystem::path& path)
{
    if (runProgram({"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pw-test", "-f", path.string()}) != 0)
        throw std::runtime_error("ssh-keygen failed for " + path.string());
}

/// @brief One sshd on 127.0.0.1:port that accepts `user_key` for the user running the tests.
class Sshd
{
public:
    TempDir dir;
    int port = 0;
    std::filesystem::path host_key, user_key, known_hosts;

    /// monotonicOffset > 0: the sshd (and every process it starts: the agents) runs in a Linux time namespace whose
    /// CLOCK_MONOTONIC is that many seconds ahead of this machine's (`unshare --time --monotonic`), a "host" with a
    /// clock of its own.
    explicit Sshd(int monotonicOffset = 0)
        : m_offset(monotonicOffset)
    {
        host_key = dir.path / "host_ed25519";
        user_key = dir.path / "user_ed25519";
        known_hosts = dir.path / "known_hosts"; // empty: the tests decide what is known
        makeKey(host_key);
        makeKey(user_key);
        std::filesystem::copy_file(user_key.string() + ".pub", dir.path / "authorized_keys");
        std::filesystem::permissions(dir.path,
            std::filesystem::perms::owner_all | std::filesystem::perms::group_exec
                | std::filesystem::perms::others_exec);
        start();
    }
    ~Sshd() { stop(); }
    Sshd(const Sshd&) = delete;
    Sshd& operator=(const Sshd&) = delete;

    void start()
    {
        // Another test process may take the same free port between freePort() and sshd's bind: try a new one then.
        for (int attempt = 0;; ++attempt) {
            try {
                startOn(port ? port : freePort());
                return;
            } catch (const std::runtime_error& e) {
                if (attempt >= 5 || std::string(e.what()).find("Address already in use") == std::string::npos)
                    throw;
                port = 0;
            }
        }
    }

    void startOn(int chosen)
    {
        port = chosen;
        std::error_code ec;
        std::filesystem::create_directories("/run/sshd", ec);
        {
            std::ofstream c(dir.path / "sshd_config");
            c << "Port " << port << "\nListenAddress 127.0.0.1\nHostKey " << host_key.string() << "\nPidFile "
              << (dir.path / "sshd.pid").string() << "\nAuthorizedKeysFile " << (dir.path / "authorized_keys").string()
              << "\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                 "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nSubsystem sftp internal-sftp\n"
                 "AllowStreamLocalForwarding yes\nMaxSessions 64\nMaxStartups 64\nLogLevel VERBOSE\n";
        }
        const std::string log = (dir.path / "sshd.log").string();
        m_pid = fork();
        if (m_pid == 0) {
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            const std::string config = (dir.path / "sshd_config").string();
            if (m_offset > 0) {
                const std::string offset = std::to_string(m_offset);
                execl("/usr/bin/unshare", "unshare", "--time", "--monotonic", offset.c_str(), "--fork",
                    "--kill-child=SIGTERM", "/usr/sbin/sshd", "-D", "-e", "-f", config.c_str(), nullptr);
            } else {
                execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", config.c_str(), nullptr);
            }
            _exit(127);
        }
        for (int i = 0; i < 200 && !portOpen(port); ++i) {
            int status = 0;
            if (waitpid(m_pid, &status, WNOHANG) == m_pid) {
                m_pid = -1;
                throw std::runtime_error("sshd did not start (it needs root): " + slurpFile(log));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        if (!portOpen(port))
            throw std::runtime_error("sshd does not listen on port " + std::to_string(port) + ": " + slurpFile(log));
        // The port may answer for another test's sshd: ours must still be running once it is open.
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        int status = 0;
        if (waitpid(m_pid, &status, WNOHANG) == m_pid) {
            m_pid = -1;
            throw std::runtime_error("sshd exited: " + slurpFile(log));
        }
    }

    /// Stops the listener and every connection it serves (its children: the per-connection sshd processes).
    void stop()
    {
        if (m_pid <= 0)
            return;
        // unshare blocks SIGTERM while it waits for its child: it is killed, and --kill-child ends the sshd.
        ::kill(m_pid, m_offset > 0 ? SIGKILL : SIGTERM);
        int status = 0;
        waitpid(m_pid, &status, 0);
        m_pid = -1;
        for (pid_t child : connections())
            ::kill(child, SIGKILL);
    }

    /// The sshd processes serving connections of this server (children of the listener).
    std::vector<pid_t> connections() const
    {
        std::vector<pid_t> out;
        for (const auto& p : liveProcesses())
            if (p.ppid == m_pid && p.name == "sshd")
                out.push_back(p.pid);
        return out;
    }

    /// The known_hosts line for this server's key ("[127.0.0.1]:PORT ssh-ed25519 AAAA...").
    std::string knownHostsLine() const
    {
        std::istringstream pub(slurpFile(host_key.string() + ".pub"));
        std::string type, key;
        pub >> type >> key;
        return "[127.0.0.1]:" + std::to_string(port) + " " + type + " " + key;
    }
    void trust() const { std::ofstream(known_hosts, std::ios::app) << knownHostsLine() << "\n"; }
    /// The SHA256 fingerprint of the host key as ssh-keygen prints it.
    std::string fingerprint() const
    {
        const auto out = dir.path / "fp.txt";
        runProgram({"/usr/bin/ssh-keygen", "-l", "-E", "sha256", "-f", host_key.string() + ".pub"}, out);
        std::istringstream in(slurpFile(out));
        std::string bits, fp;
        in >> bits >> fp;
        return fp;
    }
    std::string log() const { return slurpFile(dir.path / "sshd.log"); }

private:
    int m_offset = 0;
    pid_t m_pid = -1;
};

/// The user running the tests (the account the fixture's sshd lets in).
inline std::string currentUser()
{
    const char* u = std::getenv("USER");
    if (u && *u)
        return u;
    return ::geteuid() == 0 ? "root" : std::to_string(::geteuid());
}

} // namespace pw::test
