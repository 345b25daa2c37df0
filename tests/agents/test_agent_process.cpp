// SPDX-License-Identifier: MIT
// pipewright-agent as a process: --capabilities, the handshake it opens a session with, and how it ends when its
// controller sends garbage, goes away, or it is asked to terminate: a clear Error or Done frame and an exit, never
// a crash or a process left behind.
#include <catch2/catch.hpp>

#ifdef PW_AGENT_EXE

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/protocol/frame.h"
#include "agents/protocol/messages.h"

using namespace pw::agents;
using Catch::Contains;
using Clock = std::chrono::steady_clock;

namespace {

/// @brief The agent with pipes on its stdin and stdout.
struct AgentProcess
{
    pid_t pid = -1;
    int in = -1; ///< its stdin
    int out = -1; ///< its stdout
    FrameDecoder decoder;

    AgentProcess()
    {
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
            execl(PW_AGENT_EXE, PW_AGENT_EXE, static_cast<char*>(nullptr));
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
        const auto deadline = Clock::now() + timeout;
        for (;;) {
            if (auto f = decoder.next())
                return decode(*f);
            pollfd p {out, POLLIN, 0};
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
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

    /// Waits for the process to end; returns its wait status (REQUIREs it ends within `timeout`).
    int wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000))
    {
        const auto deadline = Clock::now() + timeout;
        int status = 0;
        while (waitpid(pid, &status, WNOHANG) == 0) {
            REQUIRE(Clock::now() < deadline);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        pid = -1;
        return status;
    }
};

} // namespace

TEST_CASE("agent: --capabilities prints this machine's capabilities as JSON", "[agent]")
{
    FILE* p = popen(PW_AGENT_EXE " --capabilities", "r");
    REQUIRE(p);
    std::string text;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, p))
        text += buffer;
    REQUIRE(pclose(p) == 0);
    const auto hello = Hello::fromJson(nlohmann::json::parse(text));
    CHECK(hello.protocol_version == kProtocolVersion);
    CHECK(hello.cores > 0);
    CHECK(hello.memory_bytes > 0);
    CHECK_THAT(hello.blas, Contains("OpenBLAS"));
    CHECK(std::find(hello.backends.begin(), hello.backends.end(), "gloo") != hello.backends.end());
}

TEST_CASE("agent: an unknown argument is refused with the usage", "[agent]")
{
    const int rc = std::system(PW_AGENT_EXE " --bogus 2>/dev/null");
    CHECK(WEXITSTATUS(rc) == 2);
}

TEST_CASE("agent: a session opens with Hello: garbage from the controller is a fatal Error, then an exit", "[agent]")
{
    AgentProcess agent;
    const auto hello = agent.next();
    REQUIRE(hello);
    REQUIRE(std::holds_alternative<Hello>(*hello));
    CHECK(std::get<Hello>(*hello).pid == agent.pid);

    const std::string garbage = "GET / HTTP/1.1\r\n\r\n";
    REQUIRE(write(agent.in, garbage.data(), garbage.size()) == static_cast<ssize_t>(garbage.size()));
    const auto error = agent.next();
    REQUIRE(error);
    REQUIRE(std::holds_alternative<Error>(*error));
    CHECK(std::get<Error>(*error).fatal);
    CHECK_THAT(std::get<Error>(*error).message, Contains("bad magic"));
    const int status = agent.wait();
    CHECK(WIFEXITED(status)); // ended, not crashed
}

TEST_CASE("agent: a frame cut short by the controller's end is reported, then the agent exits", "[agent]")
{
    AgentProcess agent;
    REQUIRE(agent.next());
    const std::string frame = encode(Stop {"because"});
    REQUIRE(write(agent.in, frame.data(), frame.size() - 3) == static_cast<ssize_t>(frame.size() - 3));
    close(agent.in);
    agent.in = -1;
    const auto error = agent.next();
    REQUIRE(error);
    REQUIRE(std::holds_alternative<Error>(*error));
    CHECK_THAT(std::get<Error>(*error).message, Contains("stream ended inside a frame"));
    CHECK(WIFEXITED(agent.wait()));
}

TEST_CASE("agent: a controller that goes away before the run ends the agent", "[agent]")
{
    AgentProcess agent;
    REQUIRE(agent.next());
    close(agent.in);
    agent.in = -1;
    const int status = agent.wait();
    CHECK(WIFEXITED(status));
}

TEST_CASE("agent: SIGTERM before a run is given ends the session with Done(stopped)", "[agent]")
{
    AgentProcess agent;
    REQUIRE(agent.next());
    kill(agent.pid, SIGTERM);
    std::optional<Message> m;
    do
        m = agent.next();
    while (m && !std::holds_alternative<Done>(*m));
    REQUIRE(m);
    CHECK(std::get<Done>(*m).status == DoneStatus::Stopped);
    const int status = agent.wait();
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

#endif
