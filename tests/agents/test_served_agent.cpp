// SPDX-License-Identifier: MIT
// A served agent (pipewright-agent --session, what an SSH deployment starts): its run survives the loss of the
// connection that started it; a controller that attaches again and sends Resume gets every telemetry batch it
// missed, once, then the rest and Done; after Stop the agent is gone. A controller that never comes back makes the
// agent stop itself after the linger time.
#include <catch2/catch.hpp>

#ifdef PW_AGENT_EXE

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/agents/agent_process.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/process_helpers.h"

using namespace pw;
using namespace pw::agents;
using test::AgentProcess;

namespace {

RunSpec servedRun(const std::filesystem::path& dir, int steps)
{
    RunSpec spec;
    spec.run_id = "served-test";
    spec.agent = "agent 0";
    spec.plan = planner::toJson(test::gpt2Plan(test::tinyGpt2(2), {{0, 3, {0}}}, "gpipe", 2));
    spec.devices = {0};
    spec.training.steps = steps;
    spec.training.data = {DataKind::Synthetic, "", 1234};
    spec.training.lr = 1e-3;
    spec.training.seed = 1234;
    spec.threads = 1;
    spec.journal_path = (dir / "journal.bin").string();
    spec.transport = Transport::Local;
    spec.telemetry_batch = 4;
    return spec;
}

bool processAlive(std::int64_t pid)
{
    return test::alive(static_cast<pid_t>(pid));
}

/// @brief What a controller keeps of an agent's telemetry: every batch number and span number it saw.
struct Received
{
    std::vector<std::int64_t> seqs;
    std::int64_t spans = 0;
    std::int64_t nextSpan = 1;
    bool contiguousSpans = true;
    std::optional<Done> done;

    void take(const Message& m)
    {
        if (const auto* t = std::get_if<Telemetry>(&m)) {
            if (!seqs.empty() && t->seq <= seqs.back())
                return; // a batch already stored: a controller ignores it
            seqs.push_back(t->seq);
            contiguousSpans = contiguousSpans && (t->spans.empty() || t->first_span == nextSpan);
            nextSpan += static_cast<std::int64_t>(t->spans.size());
            spans += static_cast<std::int64_t>(t->spans.size());
        } else if (const auto* d = std::get_if<Done>(&m)) {
            done = *d;
        }
    }
    /// Reads from `agent` until `batches` telemetry batches have come.
    void takeBatches(AgentProcess& agent, std::size_t batches)
    {
        while (seqs.size() < batches) {
            auto m = agent.next();
            REQUIRE(m);
            take(*m);
        }
    }
    /// Reads from `agent` until its Done.
    void takeUntilDone(AgentProcess& agent)
    {
        while (!done) {
            auto m = agent.next(std::chrono::milliseconds(30000));
            REQUIRE(m);
            take(*m);
        }
    }
};

} // namespace

TEST_CASE("agent: a served agent's run survives a dropped connection and resumes without loss or duplicates",
    "[agent][served]")
{
    test::TempDir dir;
    const std::string socket = (dir.path / "agent-0.sock").string();
    const int steps = 60;
    Received got;
    std::int64_t servedPid = 0;
    {
        AgentProcess first({"--session", socket, "--linger", "10"});
        auto hello = first.next();
        REQUIRE(hello);
        REQUIRE(std::holds_alternative<Hello>(*hello));
        servedPid = std::get<Hello>(*hello).pid;
        CHECK(servedPid != first.pid); // the agent runs apart from the process on the connection
        first.send(servedRun(dir.path, steps));
        first.send(Start {});
        got.takeBatches(first, 3);
        // The connection drops: the process relaying it dies (as sshd's child does when a link goes down).
        ::kill(first.pid, SIGKILL);
        first.wait();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE(processAlive(servedPid)); // still training
    const auto beforeDrop = got.seqs.size();

    AgentProcess second({"--attach", socket});
    second.send(Resume {got.seqs.back()});
    got.takeUntilDone(second);
    CHECK(got.done->status == DoneStatus::Succeeded);
    CHECK(got.done->steps == steps);
    CHECK(got.seqs.size() > beforeDrop);
    for (std::size_t i = 0; i < got.seqs.size(); ++i)
        CHECK(got.seqs[i] == static_cast<std::int64_t>(i) + 1); // nothing lost, nothing twice
    CHECK(got.contiguousSpans);
    // gpipe on one device: per step 2 forwards, 2 backwards and an optimizer step.
    CHECK(got.spans == steps * 5);

    second.send(Stop {"goodbye"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (processAlive(servedPid) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(processAlive(servedPid));
    CHECK_FALSE(std::filesystem::exists(socket));
}

TEST_CASE("agent: a relay ends on SIGTERM, its link still open, and the next relay takes the agent", "[agent][served]")
{
    // issue 30 item 9: the relay's SIGTERM handler only asked for a stop and its poll loop went on after EINTR, so a
    // relay stuck on a dead link kept the served agent's one connection when the controller came back (the new relay
    // ends the old one with SIGTERM), and the run failed as silent 10 s later.
    test::TempDir dir;
    const std::string socket = (dir.path / "agent-0.sock").string();
    const int steps = 60;
    Received got;
    AgentProcess first({"--session", socket, "--linger", "10"});
    auto hello = first.next();
    REQUIRE(hello);
    const auto servedPid = std::get<Hello>(*hello).pid;
    first.send(servedRun(dir.path, steps));
    first.send(Start {});
    got.takeBatches(first, 2);
    // The relay's stdin stays open (a link that is silent, not closed): only the signal can end it.
    ::kill(first.pid, SIGTERM);
    const int status = first.wait(std::chrono::milliseconds(2000));
    CHECK(WIFEXITED(status));
    REQUIRE(processAlive(servedPid)); // the agent trains on
    AgentProcess second({"--attach", socket});
    second.send(Resume {got.seqs.back()});
    got.takeUntilDone(second);
    CHECK(got.done->status == DoneStatus::Succeeded);
    CHECK(got.contiguousSpans);
    second.send(Stop {"goodbye"});
}

TEST_CASE("agent: a served agent whose controller stays away stops its run after the linger time", "[agent][served]")
{
    test::TempDir dir;
    const std::string socket = (dir.path / "agent-0.sock").string();
    std::int64_t servedPid = 0;
    {
        AgentProcess first({"--session", socket, "--linger", "1"});
        auto hello = first.next();
        REQUIRE(hello);
        servedPid = std::get<Hello>(*hello).pid;
        first.send(servedRun(dir.path, 1000000));
        first.send(Start {});
        for (int i = 0; i < 3; ++i)
            REQUIRE(first.next());
        ::kill(first.pid, SIGKILL);
        first.wait();
    }
    const auto start = std::chrono::steady_clock::now();
    while (processAlive(servedPid) && std::chrono::steady_clock::now() - start < std::chrono::seconds(8))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(processAlive(servedPid));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    std::ifstream log(socket + ".log");
    std::stringstream text;
    text << log.rdbuf();
    INFO(text.str());
    CHECK_FALSE(std::filesystem::exists(socket));
}

#endif
