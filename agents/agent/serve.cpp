// SPDX-License-Identifier: MIT
#include "serve.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

namespace pw::agents {

namespace {

bool addressOf(const std::string& path, sockaddr_un& a)
{
    a = {};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path)
        return false;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    return true;
}

/// A connected socket to `path`, or -1.
int connectTo(const std::string& path)
{
    sockaddr_un a;
    if (!addressOf(path, a))
        return -1;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

bool writeAllTo(int fd, const char* data, std::size_t n)
{
    while (n > 0) {
        const ssize_t w = ::write(fd, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        data += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

/// The relay that served the controller before this one (SOCKET.relay names it), when it still runs: a relay
/// whose SSH link went silent lives on, holding the served agent's connection (the agent accepts one controller at
/// a time). The controller that attaches again has given up that link, so the old relay is ended here, and the
/// agent, seeing its connection end, takes the new one.
void endPreviousRelay(const std::string& socket)
{
    const std::string file = socket + ".relay";
    long pid = 0;
    std::ifstream(file) >> pid;
    if (pid > 0 && pid != ::getpid()) {
        std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
        std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        // Only a relay of this socket: the pid may have been reused by another process since.
        if (cmd.find("pipewright-agent") != std::string::npos && cmd.find(socket) != std::string::npos
            && (cmd.find("--attach") != std::string::npos || cmd.find("--session") != std::string::npos)) {
            ::kill(static_cast<pid_t>(pid), SIGTERM);
            for (int i = 0; i < 100 && ::kill(static_cast<pid_t>(pid), 0) == 0; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    std::ofstream(file, std::ios::trunc) << ::getpid() << "\n";
}

} // namespace

int serveCommand(const std::string& socket, std::chrono::seconds linger)
{
    sockaddr_un a;
    if (!addressOf(socket, a)) {
        std::cerr << "pipewright-agent: socket path too long (" << socket.size() << " bytes): " << socket << "\n";
        return 2;
    }
    if (const int live = connectTo(socket); live >= 0) {
        ::close(live);
        std::cerr << "pipewright-agent: an agent already serves " << socket << "\n";
        return 2;
    }
    ::unlink(socket.c_str()); // a stale socket of an agent that died
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const mode_t old = ::umask(0077); // only this user may connect
    const bool bound = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 4) == 0;
    ::umask(old);
    if (!bound) {
        std::cerr << "pipewright-agent: cannot listen on " << socket << ": " << std::strerror(errno) << "\n";
        return 1;
    }
    std::ofstream(socket + ".pid") << ::getpid() << "\n";
    // The first controller connection.
    pollfd p {fd, POLLIN, 0};
    int connection = -1;
    if (::poll(&p, 1, static_cast<int>(linger.count() * 1000)) > 0)
        connection = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    int status = 1;
    if (connection >= 0)
        status = runServedSession(connection, {fd, linger});
    else
        std::cerr << "pipewright-agent: no controller connected to " << socket << " within " << linger.count()
                  << " s\n";
    ::unlink(socket.c_str());
    ::unlink((socket + ".pid").c_str());
    return status;
}

int attachCommand(const std::string& socket, std::chrono::seconds wait)
{
    int fd = -1;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while ((fd = connectTo(socket)) < 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fd < 0) {
        std::cerr << "pipewright-agent: no agent serves " << socket << "\n";
        return 1;
    }
    endPreviousRelay(socket);
    // The agent listens: its run directory is no longer one being deployed, which a cleanup must keep
    // (app/run/remote.h, removeLeftoverRuns).
    ::unlink((std::filesystem::path(socket).parent_path() / ".preparing").c_str());
    std::signal(SIGPIPE, SIG_IGN);
    // The agent's output is buffered here, not in the agent: while the controller's link is silent (packets
    // dropped, no reset), sshd stops taking bytes, and an agent writing into a full socket would stop training.
    // Up to kRelayBuffer waits here; beyond that the relay lets go, and the agent journals until the controller is
    // back (Resume). A new relay ends this one (endPreviousRelay).
    constexpr std::size_t kRelayBuffer = 64u << 20;
    const int outFlags = ::fcntl(STDOUT_FILENO, F_GETFL);
    ::fcntl(STDOUT_FILENO, F_SETFL, outFlags | O_NONBLOCK);
    std::array<char, 1 << 16> buffer;
    std::string pending; // from the agent, not yet taken by stdout
    std::size_t sent = 0; // of pending
    bool agentEnded = false;
    for (;;) {
        const bool waiting = sent < pending.size();
        std::array<pollfd, 3> fds {pollfd {STDIN_FILENO, POLLIN, 0}, pollfd {agentEnded ? -1 : fd, POLLIN, 0},
            pollfd {waiting ? STDOUT_FILENO : -1, POLLOUT, 0}};
        if ((agentEnded && !waiting) || agentStopRequested())
            break;
        // A bounded wait: a SIGTERM that lands just before poll is seen within it.
        if (::poll(fds.data(), fds.size(), 200) < 0) {
            // SIGTERM (the relay that replaces this one, endPreviousRelay, or the user) ends the relay: it must let
            // go of the agent's connection, which the agent hands to one relay at a time.
            if (errno == EINTR && !agentStopRequested())
                continue;
            break;
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            const ssize_t n = ::read(STDIN_FILENO, buffer.data(), buffer.size());
            if (n <= 0 || !writeAllTo(fd, buffer.data(), static_cast<std::size_t>(n)))
                break; // the controller closed the channel: the served agent sees the socket end
        }
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            const ssize_t n = ::read(fd, buffer.data(), buffer.size());
            if (n <= 0)
                agentEnded = true; // the served agent ended: what it said still goes out
            else
                pending.append(buffer.data(), static_cast<std::size_t>(n));
            if (pending.size() - sent > kRelayBuffer)
                break; // the controller has not read for a long while: the agent journals from here
        }
        if (sent < pending.size() && ((fds[2].revents & (POLLOUT | POLLERR | POLLHUP)) != 0 || agentEnded)) {
            const ssize_t n = ::write(STDOUT_FILENO, pending.data() + sent, pending.size() - sent);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                break; // the channel is gone
            if (n > 0)
                sent += static_cast<std::size_t>(n);
            if (sent == pending.size() || sent > (1u << 20)) { // compact now and then, not per write
                pending.erase(0, sent);
                sent = 0;
            }
        }
    }
    ::fcntl(STDOUT_FILENO, F_SETFL, outFlags);
    ::close(fd);
    return 0;
}

int sessionCommand(const std::string& socket, std::chrono::seconds linger)
{
    if (const int live = connectTo(socket); live >= 0) {
        ::close(live);
        return attachCommand(socket, std::chrono::seconds {10});
    }
    // Start the served agent apart from this process: its own session (no SIGHUP when the SSH session ends),
    // reparented to init (double fork), output to SOCKET.log.
    const std::string log = socket + ".log";
    const std::string lingerText = std::to_string(linger.count());
    const pid_t first = ::fork();
    if (first < 0) {
        std::cerr << "pipewright-agent: fork: " << std::strerror(errno) << "\n";
        return 1;
    }
    if (first == 0) {
        ::setsid();
        if (::fork() != 0)
            ::_exit(0);
        const int in = ::open("/dev/null", O_RDONLY);
        const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        ::dup2(in, STDIN_FILENO);
        ::dup2(out, STDOUT_FILENO);
        ::dup2(out, STDERR_FILENO);
        const char* argv[] = {"pipewright-agent", "--serve", socket.c_str(), "--linger", lingerText.c_str(), nullptr};
        ::execv("/proc/self/exe", const_cast<char* const*>(argv));
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(first, &status, 0);
    return attachCommand(socket, std::chrono::seconds {10});
}

int listenProbeCommand(const std::string& host)
{
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
        std::cerr << host << ": cannot resolve: " << ::gai_strerror(rc) << "\n";
        return 1;
    }
    int fd = -1;
    for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1) != 0)) {
            ::close(fd);
            fd = -1;
        }
    }
    ::freeaddrinfo(found);
    if (fd < 0) {
        std::cerr << host << ": cannot listen: " << std::strerror(errno) << "\n";
        return 1;
    }
    sockaddr_storage bound {};
    socklen_t len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    const int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    std::cout << port << std::endl;
    pollfd p {fd, POLLIN, 0};
    const bool came = ::poll(&p, 1, 10000) == 1;
    if (came)
        ::close(::accept(fd, nullptr, nullptr));
    ::close(fd);
    if (!came)
        std::cerr << "no connection to " << host << ":" << port << " within 10 s\n";
    return came ? 0 : 1;
}

int probeCommand(const std::string& host, int port)
{
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
        std::cerr << host << ": cannot resolve: " << ::gai_strerror(rc) << "\n";
        return 1;
    }
    std::string why = "no address";
    for (addrinfo* a = found; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pollfd p {fd, POLLOUT, 0};
            rc = ::poll(&p, 1, 3000) == 1 ? 0 : -1;
            int error = rc == 0 ? 0 : ETIMEDOUT;
            socklen_t len = sizeof error;
            if (rc == 0)
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
            rc = error == 0 ? 0 : -1;
            errno = error;
        }
        if (rc == 0) {
            ::close(fd);
            ::freeaddrinfo(found);
            return 0;
        }
        why = std::strerror(errno);
        ::close(fd);
    }
    ::freeaddrinfo(found);
    std::cerr << host << ":" << port << ": " << why << "\n";
    return 1;
}

} // namespace pw::agents
