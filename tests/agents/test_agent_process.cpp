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
#include "tests/agents/agent_process.h"

using namespace pw::agents;
using Catch::Contains;
using pw::test::AgentProcess;
using Clock = std::chrono::steady_clock;

namespace {

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
