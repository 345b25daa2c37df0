// SPDX-License-Identifier: MIT
// pipewright-agent --connect (connect.h): the TCP connection to the controller, its proof, then a session.
#include "connect.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>
#include <vector>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "agents/protocol/connect_auth.h"

namespace pw::agents {

namespace {

/// A connected TCP socket to host:port, or -1 with `why` set.
int dial(const std::string& host, const std::string& port, std::string& why)
{
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        why = "cannot resolve " + host + ": " + ::gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            why = std::string("cannot connect: ") + std::strerror(errno);
            ::close(fd);
            fd = -1;
        }
    }
    ::freeaddrinfo(found);
    return fd;
}

bool readExactly(int fd, char* data, std::size_t n)
{
    while (n > 0) {
        const ssize_t r = ::read(fd, data, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        data += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

bool writeAll(int fd, const std::string& bytes)
{
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t w = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        done += static_cast<std::size_t>(w);
    }
    return true;
}

} // namespace

int connectCommand(const std::string& address, const std::string& secret_file, std::optional<int> task)
{
    const auto colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
        std::cerr << "pipewright-agent: --connect " << address << ": give HOST:PORT\n";
        return 2;
    }
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') // [IPv6]:port
        host = host.substr(1, host.size() - 2);
    const std::string port = address.substr(colon + 1);
    if (!task) {
        const char* procid = std::getenv("SLURM_PROCID");
        if (!procid || !*procid) {
            std::cerr << "pipewright-agent: --connect needs --task N or SLURM_PROCID (srun sets it)\n";
            return 2;
        }
        task = std::atoi(procid);
    }
    std::ifstream in(secret_file, std::ios::binary);
    const std::vector<std::uint8_t> secret {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in.eof() && !in.good()) {
        std::cerr << "pipewright-agent: " << secret_file << ": cannot read the run's secret\n";
        return 1;
    }
    if (secret.size() < 16) {
        std::cerr << "pipewright-agent: " << secret_file << ": no run secret there (" << secret.size() << " bytes)\n";
        return 1;
    }
    // The controller listens before it submits the job, yet a node's route to it may take a moment to come up.
    std::string why;
    int fd = -1;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((fd = dial(host, port, why)) < 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (fd < 0) {
        std::cerr << "pipewright-agent: cannot reach the controller at " << address << ": " << why << "\n";
        return 1;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    std::string hello(kConnectHello.size() + kConnectNonceBytes, '\0');
    if (!readExactly(fd, hello.data(), hello.size()) || std::string_view(hello).substr(0, 4) != kConnectHello) {
        std::cerr << "pipewright-agent: " << address << " is not a Pipewright controller (no challenge)\n";
        ::close(fd);
        return 1;
    }
    const std::string_view nonce = std::string_view(hello).substr(kConnectHello.size());
    if (!writeAll(fd, connectAnswer(secret, nonce, static_cast<std::uint32_t>(*task)))) {
        std::cerr << "pipewright-agent: the controller at " << address << " closed the connection\n";
        ::close(fd);
        return 1;
    }
    // From here on the connection carries the protocol, as stdin/stdout do for a local agent; stdout (the job's
    // output file) keeps what libraries print.
    const int rc = runAgentSession(fd, fd);
    ::close(fd);
    return rc;
}

} // namespace pw::agents
