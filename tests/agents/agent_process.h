// SPDX-License-Identifier: MIT
// pipewright-agent as a child process with pipes on its stdin and stdout, for the agent's tests.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/protocol/frame.h"
#include "agents/protocol/messages.h"

namespace pw::test {

using namespace pw::agents;

/// @brief The agent with pipes on its stdin and stdout.
struct AgentProcess
{
    pid_t pid = -1;
    int in = -1; ///< its stdin
    int out = -1; ///< its stdout
    FrameDecoder decoder;

    explicit AgentProcess(const std::vector<std::string>& args = {})
    {
        std::vector<std::string> argv {PW_AGENT_EXE};
        argv.insert(argv.end(), args.begin(), args.end());
        int toAgent[2], fromAgent[2];
        REQUIRE(pipe(toAgent) == 0);
        REQUIRE(pipe(fromAgent) == 0);
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            dup2(toAgent[0], STDIN_FILENO);
            dup2(fromAgent[1], STDOUT_FILENO);
            for (int fd : {toAgent[0], toAgent[1], fromAgent[0], fromAgent[1]})
                close(fd);
            std::vector<char*> raw;
            for (auto& a : argv)
                raw.push_back(a.data());
            raw.push_back(nullptr);
            execv(PW_AGENT_EXE, raw.data());
            _exit(127);
        }
        close(toAgent[0]);
        close(fromAgent[1]);
        in = toAgent[1];
        out = fromAgent[0];
        std::signal(SIGPIPE, SIG_IGN);
    }
    ~AgentProcess()
    {
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    }

    /// The next message within `timeout`, or nullopt at the end of its output.
    std::optional<Message> next(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000))
    {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            if (auto f = decoder.next())
                return decode(*f);
            pollfd p {out, POLLIN, 0};
            const auto left
                = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            REQUIRE(left.count() > 0);
            if (poll(&p, 1, static_cast<int>(left.count())) <= 0)
                continue;
            char buffer[4096];
            const ssize_t n = read(out, buffer, sizeof buffer);
            if (n <= 0)
                return std::nullopt;
            decoder.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
        }
    }

    void send(const Message& m) { writeAll(in, encode(m)); }

    /// Waits for the process to end; returns its wait status (REQUIREs it ends within `timeout`).
    int wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000))
    {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        int status = 0;
        while (waitpid(pid, &status, WNOHANG) == 0) {
            REQUIRE(std::chrono::steady_clock::now() < deadline);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        pid = -1;
        return status;
    }
};

} // namespace pw::test
