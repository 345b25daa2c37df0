// SPDX-License-Identifier: MIT
// pipewright-agent as a process: --capabilities (JSON and for people, CUDA and the GPUs included), the handshake it
// opens a session with, and how it ends when its controller sends garbage, goes away, or it is asked to terminate:
// a clear Error or Done frame and an exit, never a crash or a process left behind.
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
#include <utility>
#include <vector>

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

/// What `command` prints on stdout, and its exit status.
std::pair<std::string, int> capture(const std::string& command)
{
    FILE* p = popen(command.c_str(), "r");
    REQUIRE(p);
    std::string text;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, p))
        text += buffer;
    const int status = pclose(p);
    return {text, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

bool has(const std::vector<std::string>& list, const std::string& item)
{
    return std::find(list.begin(), list.end(), item) != list.end();
}

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

TEST_CASE("agent: --capabilities describes its CUDA and every GPU it sees - cuda only with a device", "[agent]")
{
    const auto [text, status] = capture(PW_AGENT_EXE " --capabilities --json");
    REQUIRE(status == 0);
    const auto hello = Hello::fromJson(nlohmann::json::parse(text));
    const auto& cuda = hello.cuda;
    CHECK(has(hello.backends, "cuda") == (cuda.compiled_in && !hello.gpus.empty()));
    CHECK(cuda.compiled_in == !cuda.architectures.empty());
    CHECK_FALSE(cuda.driver.empty()); // a version, or "none"
    CHECK_FALSE(cuda.nccl.empty()); // a version, or "not found"
    if (hello.gpus.empty())
        CHECK_FALSE(cuda.error.empty()); // why there is none
    for (std::size_t i = 0; i < hello.gpus.size(); ++i) {
        const auto& g = hello.gpus[i];
        CHECK(g.index == static_cast<int>(i));
        CHECK_FALSE(g.name.empty());
        CHECK(g.memory_bytes > 0);
        CHECK(g.free_bytes <= g.memory_bytes);
        CHECK(g.cc_major > 0);
    }
    if (!cuda.compiled_in) {
        CHECK(hello.gpus.empty());
        CHECK(cuda.runtime.empty());
    }

    // CUDA_VISIBLE_DEVICES hides every GPU: none listed, no cuda backend, the reason said.
    const auto [hiddenText, hiddenStatus] = capture("CUDA_VISIBLE_DEVICES= " PW_AGENT_EXE " --capabilities");
    REQUIRE(hiddenStatus == 0);
    const auto hidden = Hello::fromJson(nlohmann::json::parse(hiddenText));
    CHECK(hidden.gpus.empty());
    CHECK_FALSE(has(hidden.backends, "cuda"));
    CHECK_FALSE(hidden.cuda.error.empty());
    CHECK(hidden.cuda.compiled_in == cuda.compiled_in);
}

TEST_CASE("agent: --capabilities --human prints every item for people", "[agent]")
{
    const auto hello = Hello::fromJson(nlohmann::json::parse(capture(PW_AGENT_EXE " --capabilities").first));
    const auto [text, status] = capture("CUDA_VISIBLE_DEVICES=-1 " PW_AGENT_EXE " --capabilities --human");
    REQUIRE(status == 0);
    CHECK_THAT(text, Contains("pipewright-agent " + hello.agent_version));
    CHECK_THAT(text, Contains("(protocol " + std::to_string(kProtocolVersion) + ")"));
    CHECK_THAT(text, Contains(std::to_string(hello.cores) + " cores") && Contains(hello.blas));
    CHECK_THAT(
        text, Contains(hello.cuda.compiled_in ? "CUDA:         compiled in, kernels for sm_" : "not compiled in"));
    for (const char* item : {"runtime:", "driver:", "cuBLAS:", "NCCL:", "GPUs:"})
        CHECK_THAT(text, Contains(item));
    CHECK_THAT(text, Contains("driver:       " + hello.cuda.driver));
    CHECK_THAT(text, Contains("NCCL:         " + hello.cuda.nccl));
    CHECK_THAT(text, Contains("CUDA_VISIBLE_DEVICES: '-1'"));
    // -1 hides every device: none is listed, and the reason is.
    CHECK_THAT(text, Contains("GPUs:         none ("));

    const auto [usage, bad] = capture(PW_AGENT_EXE " --capabilities --yaml 2>&1");
    CHECK(bad == 2);
    CHECK_THAT(usage, Contains("usage: pipewright-agent --capabilities [--json | --human]"));
}

TEST_CASE("agent: OpenBLAS is loaded when asked for, and a library that is not OpenBLAS is named", "[agent]")
{
    // issue 30 item 10: OpenBLAS is loaded at run time (engine/openblas.cpp), not linked. A libopenblas.so.0 found
    // first that is not OpenBLAS (here zlib under its name) leaves the agent up, without the cpu backend, saying why.
    const std::string dir = "/tmp/pw-fake-blas-" + std::to_string(::getpid());
    REQUIRE(std::system(("mkdir -p " + dir
                + " && cp -L \"$(ldconfig -p | awk '$1 == \"libz.so.1\" && /x86-64/ "
                  "{ print $NF; exit }')\" "
                + dir + "/libopenblas.so.0")
                            .c_str())
        == 0);
    const auto [text, status] = capture("LD_LIBRARY_PATH=" + dir + " " PW_AGENT_EXE " --capabilities");
    std::system(("rm -rf " + dir).c_str());
    REQUIRE(status == 0);
    const auto hello = Hello::fromJson(nlohmann::json::parse(text));
    CHECK_THAT(hello.blas, Contains("none (libopenblas.so.0 has no cblas_sgemm: it is not OpenBLAS)"));
    CHECK(std::find(hello.backends.begin(), hello.backends.end(), "cpu") == hello.backends.end());
    CHECK(std::find(hello.backends.begin(), hello.backends.end(), "gloo") != hello.backends.end());
    // The real one, found by the loader's own search, is OpenBLAS and the cpu backend is offered.
    const auto real = Hello::fromJson(nlohmann::json::parse(capture(PW_AGENT_EXE " --capabilities").first));
    CHECK_THAT(real.blas, Contains("OpenBLAS"));
    CHECK(std::find(real.backends.begin(), real.backends.end(), "cpu") != real.backends.end());
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
