// SPDX-License-Identifier: MIT
#include "agent_connection.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/protocol/frame.h"

namespace pw::app {

std::string describeExit(int status)
{
    if (WIFSIGNALED(status))
        return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " ("
            + strsignal(WTERMSIG(status)) + ")";
    return "exited with status " + std::to_string(WEXITSTATUS(status));
}

namespace {

/// @brief A child process on two pipes.
class LocalAgent final : public AgentConnection
{
public:
    LocalAgent(pid_t pid, int toAgent, int fromAgent)
        : m_pid(pid)
        , m_to(toAgent)
        , m_from(fromAgent)
    {
        ::fcntl(m_from, F_SETFL, ::fcntl(m_from, F_GETFL) | O_NONBLOCK);
    }
    ~LocalAgent() override
    {
        if (m_to >= 0)
            ::close(m_to);
        if (m_from >= 0)
            ::close(m_from);
        if (!m_reaped) { // a controller that did not wait for it (an exception): it must not stay a zombie
            ::kill(m_pid, SIGKILL);
            ::waitpid(m_pid, nullptr, 0);
        }
    }

    std::string where() const override { return "local"; }
    int pollFd() const override { return m_from; }

    long read(std::span<char> buffer) override
    {
        if (m_from < 0)
            return -1;
        const ssize_t n = ::read(m_from, buffer.data(), buffer.size());
        if (n > 0)
            return n;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        ::close(m_from);
        m_from = -1;
        return -1;
    }

    void write(std::string_view bytes) override
    {
        if (m_to < 0)
            throw std::runtime_error("the agent's input is closed");
        agents::writeAll(m_to, bytes);
    }

    std::optional<std::string> ended(bool wait) override
    {
        if (!m_reaped) {
            int status = 0;
            const pid_t r = ::waitpid(m_pid, &status, wait ? 0 : WNOHANG);
            if (r != m_pid)
                return std::nullopt;
            m_reaped = true;
            m_status = status;
        }
        return describeExit(m_status);
    }

    void signal(int signal) override
    {
        if (!m_reaped)
            ::kill(m_pid, signal);
    }

private:
    pid_t m_pid;
    int m_to;
    int m_from;
    bool m_reaped = false;
    int m_status = 0;
};

} // namespace

std::unique_ptr<AgentConnection> startLocalAgent(const std::filesystem::path& exe)
{
    // Everything the child needs is made before fork(): after it, only async-signal-safe calls (the controller
    // has other threads, one of which may hold the allocator's lock).
    const std::string path = exe.string();
    const std::string failure = "pipewright: cannot start the agent " + path + ": ";
    // OpenMP threads that spin while idle starve the BLAS threads and the other agents of a shared machine (a
    // 2-thread step measured 2.5x slower with GCC's default policy): agents wait passively unless told otherwise.
    std::vector<std::string> env;
    bool waitPolicy = false;
    for (char** e = environ; *e; ++e) {
        env.emplace_back(*e);
        waitPolicy = waitPolicy || env.back().rfind("OMP_WAIT_POLICY=", 0) == 0;
    }
    if (!waitPolicy)
        env.emplace_back("OMP_WAIT_POLICY=PASSIVE");
    std::vector<char*> envp;
    for (auto& e : env)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    char* const argv[] = {const_cast<char*>(path.c_str()), nullptr};

    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    if (pipe2(out, O_CLOEXEC) != 0) {
        ::close(in[0]);
        ::close(in[1]);
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        for (int fd : {in[0], in[1], out[0], out[1]})
            ::close(fd);
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
        // The kernel ends the agent if the controller dies: no agent outlives its controller, even on SIGKILL.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        // Its own process group: the terminal's Ctrl+C or hang-up (SIGINT, SIGHUP to the foreground group) reaches
        // the controller only, which stops the run and its agents in order (a stopped run, not a failed one).
        setpgid(0, 0);
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        execve(path.c_str(), argv, envp.data());
        const char* why = strerror(errno); // not async-signal-safe in general; glibc's reads a static table
        (void)!::write(STDERR_FILENO, failure.data(), failure.size());
        (void)!::write(STDERR_FILENO, why, std::strlen(why));
        (void)!::write(STDERR_FILENO, "\n", 1);
        _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    return std::make_unique<LocalAgent>(pid, in[1], out[0]);
}

} // namespace pw::app
