// SPDX-License-Identifier: MIT
// Hangs that name their cause, end to end: a local 2-agent Gloo run in which one agent is stopped (SIGSTOP), or one
// send is dropped (the agents' PIPEWRIGHT_TEST_DROP_SEND hook), stalls; the controller's report names the chain of
// waits within the stall threshold + 5 s, the flight recorders land in the history, and no agent process is left.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "app/history/history.h"
#include "app/run/controller.h"
#include "planner/plan.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/process_helpers.h"

using namespace pw;
using Catch::Contains;
using Catch::StartsWith;
using pw::test::gpt2Plan;
using pw::test::tinyGpt2;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr double kThreshold = 3.0; // the tests' --stall-timeout

app::RunRequest stallRequest()
{
    app::RunRequest r;
    r.plan = gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    r.plan_label = "stall test";
    r.training.steps = 100000; // until it stalls
    r.training.data = {agents::DataKind::Synthetic, "", 1234};
    r.training.lr = 1e-2;
    r.threads = 1;
    r.force = true;
    r.agent_executable = PW_AGENT_EXE;
    r.stall_timeout = std::chrono::milliseconds(static_cast<int>(kThreshold * 1000));
    return r;
}

/// @brief Sets an environment variable for the agents this test starts, and removes it after.
struct StallScopedEnv
{
    std::string name;
    StallScopedEnv(std::string n, const std::string& value)
        : name(std::move(n))
    {
        ::setenv(name.c_str(), value.c_str(), 1);
    }
    ~StallScopedEnv() { ::unsetenv(name.c_str()); }
};

/// @brief What the observer saw: the agents' pids (from their hellos) and when the stall report came.
struct Watch
{
    std::vector<app::AgentStatus> agents;
    std::optional<Clock::time_point> reported;
    std::string report;

    void observe(app::RunObserver& o)
    {
        o.agents = [this](const std::vector<app::AgentStatus>& a) { agents = a; };
        o.log = [this](const std::string&, const std::string&, const std::string& text) {
            if (!reported && text.rfind("stalled", 0) == 0) {
                reported = Clock::now();
                report = text;
            }
        };
    }
    pid_t pidOf(int device) const
    {
        for (const auto& a : agents)
            if (!a.devices.empty() && a.devices.front() == device)
                return static_cast<pid_t>(a.pid);
        return 0;
    }
};

/// Devices whose flight recorder the run stored, and whether each came from its agent.
std::set<int> recordedDevices(const std::vector<app::RecordedAction>& recorder, const std::string& source)
{
    std::set<int> out;
    for (const auto& a : recorder)
        if (a.source == source)
            out.insert(a.span.device);
    return out;
}

} // namespace

TEST_CASE("a stopped agent is named by the stall report within the threshold and 5 s", "[run][faults][stall]")
{
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    app::RunController controller(stallRequest(), history);
    Watch watch;
    app::RunObserver observer;
    watch.observe(observer);
    pid_t frozen = 0;
    std::vector<pid_t> pids;
    Clock::time_point stoppedAt;
    std::optional<Clock::time_point> firstStep;
    observer.progress = [&](const app::RunProgress&) {
        // A few seconds in: every agent has reported its progress (a heartbeat a second) and sent spans.
        if (!firstStep)
            firstStep = Clock::now();
        if (frozen != 0 || Clock::now() - *firstStep < 2500ms)
            return;
        pids = {watch.pidOf(0), watch.pidOf(1)};
        frozen = pids[0];
        REQUIRE(frozen > 0);
        stoppedAt = Clock::now();
        ::kill(frozen, SIGSTOP);
    };
    const auto outcome = controller.run(observer);
    REQUIRE(frozen != 0);
    CHECK(outcome.status == app::RunStatus::Failed);
    CHECK_THAT(outcome.message, StartsWith("stalled: no device finished an action for"));
    // The device still running waits on the stopped one (for its activations or gradients, or in the all-reduce of
    // the tied embedding before the step, depending on where it stopped), whose agent went silent.
    CHECK_THAT(outcome.message, StartsWith("stalled: no device finished an action for 3 s: stage 1 (device 1, host "));
    CHECK_THAT(outcome.message, Contains(" stage 0; stage 0 (device 0, host "));
    // Hosts by the cluster's node name (two hosts may share a hostname), the reported hostname beside it.
    CHECK_THAT(outcome.message, Contains("(device 1, host local"));
    CHECK_THAT(outcome.message, Contains("has sent nothing for"));
    CHECK_THAT(outcome.message, Contains("(stopped or hung"));
    REQUIRE(watch.reported);
    CHECK(std::chrono::duration<double>(*watch.reported - stoppedAt).count() < kThreshold + 5);
    CHECK(watch.report == outcome.message);

    const auto stalls = history.stalls(outcome.run_id);
    REQUIRE(stalls.size() == 1);
    CHECK(stalls[0].report == outcome.message);
    CHECK(stalls[0].chain == std::vector<int> {1, 0});
    // Device 1's agent answered with its own recorder, the action that waits on device 0 in progress; the stopped
    // agent could not, so the controller stored what it had received from it.
    const auto recorder = history.flightRecorder(outcome.run_id);
    CHECK(recordedDevices(recorder, "agent") == std::set<int> {1});
    CHECK(recordedDevices(recorder, "controller") == std::set<int> {0});
    bool waiting = false;
    std::size_t device1 = 0;
    for (const auto& a : recorder)
        if (a.span.device == 1) {
            ++device1;
            waiting = waiting
                || (a.in_progress
                    && (a.span.kind == planner::ActionKind::OptimizerStep
                        || a.span.kind == planner::ActionKind::AllReduce // the tied embedding's, as said above
                        || (planner::isRecv(a.span.kind) && a.span.peer == 0)));
        }
    CHECK(waiting);
    // The report rests on the newest state of the stopped device (issue 30 item 5: it named "B mb 248" while the
    // recorder showed RECV_B mb 341 finished): an action it still calls in progress began after every one it had
    // finished, and a stopped device's peer waiting on it is no cycle.
    double newestFinished = -1;
    for (const auto& a : recorder)
        if (a.span.device == 0 && !a.in_progress)
            newestFinished = std::max(newestFinished, a.span.t0);
    for (const auto& a : recorder)
        if (a.span.device == 0 && a.in_progress) {
            INFO("in progress on device 0 from " << a.span.t0 << " s; the newest finished began at " << newestFinished);
            CHECK(a.span.t0 > newestFinished);
        }
    CHECK_THAT(outcome.message, !Contains("cycle"));
    CHECK(device1 > 10);
    CHECK(device1 <= agents::kFlightRecorderActions + 1);
    CHECK(history.run(outcome.run_id)->status == app::RunStatus::Failed);
    CHECK(test::childAgents(getpid()).empty());
    for (pid_t p : pids)
        CHECK_FALSE(test::alive(p));
    CHECK(history.integrityCheck() == "ok");
}

TEST_CASE("a stopped local agent that misses its heartbeats before the stall timeout is named with the chain of "
          "waits",
    "[run][faults][stall]")
{
    // The defaults' order: the heartbeat timeout (here 3 s) ends the run long before the stall timeout (60 s); the
    // message still says who waits on the silent agent, and the flight recorders are stored.
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto request = stallRequest();
    request.stall_timeout = std::chrono::seconds(60);
    request.heartbeat_timeout = std::chrono::seconds(3);
    app::RunController controller(request, history);
    Watch watch;
    app::RunObserver observer;
    watch.observe(observer);
    std::vector<pid_t> pids;
    Clock::time_point stoppedAt;
    std::optional<Clock::time_point> firstStep;
    observer.progress = [&](const app::RunProgress&) {
        if (!firstStep)
            firstStep = Clock::now();
        if (!pids.empty() || Clock::now() - *firstStep < 2500ms)
            return;
        pids = {watch.pidOf(0), watch.pidOf(1)};
        REQUIRE(pids[0] > 0);
        stoppedAt = Clock::now();
        ::kill(pids[0], SIGSTOP);
    };
    const auto outcome = controller.run(observer);
    const double took = std::chrono::duration<double>(Clock::now() - stoppedAt).count();
    REQUIRE(!pids.empty());
    CHECK(outcome.status == app::RunStatus::Failed);
    CHECK_THAT(outcome.message, StartsWith("agent 0 sent nothing for 3 s (stalled or hung): stage 1 (device 1, host "));
    CHECK_THAT(outcome.message, Contains(" stage 0; stage 0 (device 0, host "));
    CHECK(took < 3 + 5);
    const auto stalls = history.stalls(outcome.run_id);
    REQUIRE(stalls.size() == 1);
    CHECK(stalls[0].report == outcome.message);
    CHECK(stalls[0].chain == std::vector<int> {1, 0});
    CHECK(recordedDevices(history.flightRecorder(outcome.run_id), "agent") == std::set<int> {1});
    CHECK(test::childAgents(getpid()).empty());
    for (pid_t p : pids)
        CHECK_FALSE(test::alive(p));
}

TEST_CASE("a dropped send is named: its receiver waits for that microbatch from its peer", "[run][faults][stall]")
{
    // Device 0 skips F mb 41 (step 11: after a few heartbeats) to stage 1.
    const StallScopedEnv drop("PIPEWRIGHT_TEST_DROP_SEND", "0:F:0:41");
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    app::RunController controller(stallRequest(), history);
    Watch watch;
    app::RunObserver observer;
    watch.observe(observer);
    std::optional<Clock::time_point> droppedAt;
    std::vector<pid_t> pids;
    const auto logged = observer.log;
    observer.log = [&](const std::string& agent, const std::string& level, const std::string& text) {
        if (!droppedAt && text.find("PIPEWRIGHT_TEST_DROP_SEND") != std::string::npos) {
            droppedAt = Clock::now();
            pids = {watch.pidOf(0), watch.pidOf(1)};
        }
        logged(agent, level, text);
    };
    const auto outcome = controller.run(observer);
    REQUIRE(droppedAt);
    CHECK(outcome.status == app::RunStatus::Failed);
    CHECK_THAT(outcome.message, StartsWith("stalled: no device finished an action for 3 s: "));
    CHECK_THAT(outcome.message, Contains("stage 1 (device 1, host "));
    CHECK_THAT(outcome.message, Contains("waits"));
    CHECK_THAT(outcome.message, Contains("for F mb 41 from stage 0"));
    CHECK_THAT(outcome.message, !Contains("has sent nothing")); // both agents still speak: a cycle of waits
    CHECK_THAT(outcome.message, Contains("a cycle of waits"));
    REQUIRE(watch.reported);
    CHECK(std::chrono::duration<double>(*watch.reported - *droppedAt).count() < kThreshold + 5);

    const auto stalls = history.stalls(outcome.run_id);
    REQUIRE(stalls.size() == 1);
    CHECK(stalls[0].report == outcome.message);
    // Both agents answered with their own recorders; device 1's last action is the receive that never completes.
    const auto recorder = history.flightRecorder(outcome.run_id);
    CHECK(recordedDevices(recorder, "agent") == std::set<int> {0, 1});
    bool waiting = false;
    for (const auto& a : recorder)
        waiting = waiting
            || (a.span.device == 1 && a.in_progress && a.span.kind == planner::ActionKind::RecvActivation
                && a.span.microbatch == 41 && a.span.peer == 0);
    CHECK(waiting);
    CHECK(test::childAgents(getpid()).empty());
    REQUIRE(pids.size() == 2);
    for (pid_t p : pids)
        CHECK_FALSE(test::alive(p));
}

TEST_CASE("with on-stall wait a stall is reported and the run waits on until it is stopped", "[run][faults][stall]")
{
    const StallScopedEnv drop("PIPEWRIGHT_TEST_DROP_SEND", "0:F:0:41");
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto req = stallRequest();
    req.on_stall = app::RunRequest::OnStall::Wait;
    app::RunController controller(req, history);
    std::optional<Clock::time_point> reported;
    app::RunObserver observer;
    observer.log = [&](const std::string&, const std::string& level, const std::string& text) {
        if (!reported && text.rfind("stalled", 0) == 0) {
            CHECK(level == "warning");
            reported = Clock::now();
        }
        // Still running 2 s after the report: then stop it.
    };
    observer.agents = [&](const std::vector<app::AgentStatus>&) {
        if (reported && Clock::now() - *reported > 2s)
            controller.stop();
    };
    const auto outcome = controller.run(observer);
    REQUIRE(reported);
    CHECK(outcome.status == app::RunStatus::Stopped);
    CHECK(history.stalls(outcome.run_id).size() == 1);
    CHECK_FALSE(history.flightRecorder(outcome.run_id).empty());
    CHECK(test::childAgents(getpid()).empty());
}

TEST_CASE("cli: run --stall-timeout fails a stalled run and history show prints the report and flight recorder",
    "[run][cli][stall]")
{
    const StallScopedEnv drop("PIPEWRIGHT_TEST_DROP_SEND", "0:F:0:41");
    test::TempDir dir;
    const auto plan = dir.path / "plan.json";
    std::ofstream(plan) << planner::toJson(stallRequest().plan).dump();
    const auto history = (dir.path / "history.sqlite").string();
    const auto cli = [&](const std::string& args) {
        const std::string command = std::string(PW_CLI_EXE) + " " + args + " >" + (dir.path / "out.txt").string()
            + " 2>" + (dir.path / "err.txt").string() + " </dev/null";
        const int status = std::system(command.c_str());
        std::ifstream out(dir.path / "out.txt"), err(dir.path / "err.txt");
        std::ostringstream text;
        text << out.rdbuf() << err.rdbuf();
        return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str());
    };
    const auto [code, run] = cli("run " + plan.string()
        + " --local --steps 100000 --threads 1 --force --stall-timeout "
          "3 --history "
        + history);
    CHECK(code != 0);
    CHECK_THAT(run, Contains("stalled: no device finished an action for 3 s") && Contains("for F mb 41 from stage 0"));
    CHECK(test::childAgents(getpid()).empty());

    const auto [showCode, show] = cli("history show latest --history " + history);
    REQUIRE(showCode == 0);
    CHECK_THAT(show, Contains("  stall at ") && Contains("for F mb 41 from stage 0"));
    CHECK_THAT(show, Contains("flight recorder") && Contains("    device 1 (agent 1, ") && Contains("in progress"));
    const auto [jsonCode, text] = cli("history show latest --json --history " + history);
    REQUIRE(jsonCode == 0);
    const auto j = nlohmann::json::parse(text);
    REQUIRE(j["stalls"].size() == 1);
    CHECK_THAT(j["stalls"][0]["report"].get<std::string>(), Contains("for F mb 41 from stage 0"));
    bool waiting = false;
    for (const auto& a : j["flight_recorder"])
        waiting = waiting
            || (a["device"] == 1 && a["in_progress"] == true && a["kind"] == "RECV_F" && a["microbatch"] == 41);
    CHECK(waiting);

    CHECK(cli("run " + plan.string() + " --local --stall-timeout 0.5 --history " + history).first != 0);
    CHECK(cli("run " + plan.string() + " --local --on-stall never --history " + history).first != 0);
}

TEST_CASE("a stopped rank of a tensor-parallel group is named by the stall report with its group and rank",
    "[run][faults][stall][tensor-parallel]")
{
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto request = stallRequest();
    request.plan = gpt2Plan(tinyGpt2(2), {{0, 3, {0, 1}}}, "1f1b");
    request.plan.tensor_parallel = 2; // one stage, its two devices one group of two ranks
    request.plan.validate();
    app::RunController controller(request, history);
    Watch watch;
    app::RunObserver observer;
    watch.observe(observer);
    pid_t frozen = 0;
    std::optional<Clock::time_point> firstStep;
    observer.progress = [&](const app::RunProgress&) {
        if (!firstStep)
            firstStep = Clock::now();
        if (frozen != 0 || Clock::now() - *firstStep < 2500ms)
            return;
        frozen = watch.pidOf(1);
        REQUIRE(frozen > 0);
        ::kill(frozen, SIGSTOP);
    };
    const auto outcome = controller.run(observer);
    REQUIRE(frozen != 0);
    CHECK(outcome.status == app::RunStatus::Failed);
    // Rank 0 waits inside a forward or backward for rank 1, whose agent went silent.
    CHECK_THAT(outcome.message, StartsWith("stalled: no device finished an action for 3 s: stage 0 (device 0, host "));
    CHECK_THAT(outcome.message,
        Contains("in a collective of its tensor-parallel group (devices 0, 1) with tensor rank 1, "
                 "stage 0 (device 1); stage 0 (device 1, host "));
    CHECK_THAT(outcome.message, Contains("has sent nothing for"));
    const auto stalls = history.stalls(outcome.run_id);
    REQUIRE(stalls.size() == 1);
    CHECK(stalls[0].chain == std::vector<int> {0, 1});
}
