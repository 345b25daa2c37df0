// SPDX-License-Identifier: MIT
// `pipewright-cli run --local` and `history` as a user runs them: the real executable in its own process, finding
// the agent beside it. Its JSON report, the history commands on the run it recorded, a plan without a model shape
// refused, and the controller killed with SIGKILL: no agent left within 5 s, a sound history file, the run marked
// interrupted by the next command.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/history/history.h"
#include "planner/io/json_file.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/process_helpers.h"

extern char** environ;

using namespace pw;
using Catch::Contains;
using nlohmann::json;
using pw::test::gpt2Plan;
using pw::test::tinyGpt2;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

/// Starts pipewright-cli with `args`, its stdout and stderr into files; returns its pid.
pid_t startCli(const std::vector<std::string>& args, const fs::path& out, const fs::path& err)
{
    std::vector<std::string> all = {PW_CLI_EXE};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, PW_CLI_EXE, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
    return pid;
}

struct Result
{
    int code = -1;
    std::string out;
    std::string err;
};

std::string slurp(const fs::path& p)
{
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

Result runCli(const test::TempDir& dir, const std::vector<std::string>& args)
{
    const pid_t pid = startCli(args, dir.path / "out.txt", dir.path / "err.txt");
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir.path / "out.txt"), slurp(dir.path / "err.txt")};
}

fs::path writePlan(const test::TempDir& dir, const planner::Plan& plan)
{
    const auto path = dir.path / "plan.json";
    std::ofstream(path) << planner::toJson(plan).dump(2);
    return path;
}

} // namespace

TEST_CASE("cli: run --local --json trains and reports: history lists, shows, exports and deletes the run", "[run][cli]")
{
    test::TempDir dir;
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = (dir.path / "history.sqlite").string();
    const auto r = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "5", "--threads", "1", "--lr", "0.01", "--history", history,
            "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto report = json::parse(r.out);
    CHECK(report.at("status") == "succeeded");
    REQUIRE(report.at("losses").size() == 5);
    CHECK(report.at("final_loss").get<double>() == report.at("losses").back().get<double>());
    CHECK(report.at("losses").back().get<double>() < report.at("losses").front().get<double>());
    CHECK(report.at("tokens_per_s").get<double>() > 0);
    const std::string id = report.at("run_id");

    const auto list = runCli(dir, {"history", "list", "--history", history, "--json"});
    REQUIRE(list.code == 0);
    const auto runs = json::parse(list.out);
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].at("run_id") == id);

    const auto show = runCli(dir, {"history", "show", id.substr(0, id.size() - 2), "--history", history});
    INFO(show.err);
    REQUIRE(show.code == 0);
    CHECK_THAT(show.out, Contains(id));
    CHECK_THAT(show.out, Contains("predicted"));
    CHECK_THAT(show.out, Contains("measured"));
    const auto latest = runCli(dir, {"history", "show", "latest", "--history", history});
    REQUIRE(latest.code == 0);
    CHECK(latest.out == show.out);

    const auto csv = dir.path / "spans.csv";
    REQUIRE(runCli(dir, {"history", "export", id, "--history", history, "-o", csv.string()}).code == 0);
    CHECK_THAT(slurp(csv), Contains("device,lane,kind"));
    const auto trace = dir.path / "trace.json";
    REQUIRE(
        runCli(dir, {"history", "export", id, "--history", history, "--format", "chrome-trace", "-o", trace.string()})
            .code
        == 0);
    CHECK(json::parse(slurp(trace)).at("traceEvents").size() > 0);

    // A second, shorter run, compared with the first: only what differs, and both runs' figures.
    const auto second = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "3", "--threads", "1", "--lr", "0.01", "--history", history,
            "--json"});
    REQUIRE(second.code == 0);
    const std::string id2 = json::parse(second.out).at("run_id");
    const auto compare = runCli(dir, {"history", "compare", id, id2, "--history", history, "--json"});
    INFO(compare.err);
    REQUIRE(compare.code == 0);
    const auto c = json::parse(compare.out);
    REQUIRE(c.at("runs").size() == 2);
    CHECK(c.at("runs")[1].at("steps") == 3);
    REQUIRE(c.at("differences").size() == 1);
    CHECK(c.at("differences")[0].at("field") == "/run/steps_planned");
    CHECK(c.at("stages").size() == 2);
    const auto text = runCli(dir, {"history", "compare", id, "latest", "--history", history});
    CHECK_THAT(text.out, Contains("/run/steps_planned: 5 | 3") && Contains("stage 1:"));
    CHECK(runCli(dir, {"history", "compare", id, "--history", history}).code != 0);
    REQUIRE(runCli(dir, {"history", "delete", id2, "--history", history}).code == 0);

    REQUIRE(runCli(dir, {"history", "delete", id, "--history", history}).code == 0);
    const auto gone = runCli(dir, {"history", "show", id, "--history", history});
    CHECK(gone.code != 0);
    CHECK_THAT(gone.err, Contains("no run '" + id + "'"));
    CHECK_THAT(runCli(dir, {"history", "show", "latest", "--history", history}).err, Contains("no run in"));
}

TEST_CASE("cli: run refuses a plan without a model shape, naming the reason", "[run][cli]")
{
    test::TempDir dir;
    auto plan = gpt2Plan(tinyGpt2(2), {{0, 3, {0}}}, "gpipe");
    auto model = *plan.model;
    model.architecture.reset();
    plan.model = model;
    const auto path = writePlan(dir, plan);
    const auto r = runCli(dir, {"run", path.string(), "--local", "--history", (dir.path / "h.sqlite").string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Contains("profile transformer"));
}

TEST_CASE("cli: a controller killed with SIGKILL leaves no agent and a sound history: the run is then interrupted",
    "[run][cli][faults]")
{
    test::TempDir dir;
    // Orphaned agents become this process's children, so that they can be seen (and reaped) here.
    REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = dir.path / "history.sqlite";
    const pid_t cli = startCli(
        {"run", plan.string(), "--local", "--steps", "100000", "--threads", "1", "--history", history.string()},
        dir.path / "out.txt", dir.path / "err.txt");
    // Wait until it trains (steps land in the history), then kill it.
    std::vector<pid_t> agents;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
        REQUIRE(Clock::now() < deadline);
        agents = test::childAgents(cli);
        if (agents.size() == 2 && slurp(dir.path / "err.txt").find("step 3/") != std::string::npos)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(600)); // the controller stores what it has every 250 ms
    REQUIRE(::kill(cli, SIGKILL) == 0);
    const auto killed = Clock::now();
    int status = 0;
    waitpid(cli, &status, 0);
    bool gone = false;
    while (!gone && Clock::now() - killed < std::chrono::seconds(5)) {
        while (waitpid(-1, &status, WNOHANG) > 0) { } // reap the orphans handed to us
        gone = std::none_of(agents.begin(), agents.end(), test::alive);
        if (!gone)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(gone);
    INFO("agents gone after " << std::chrono::duration<double>(Clock::now() - killed).count() << " s");

    auto store = app::HistoryStore::open(history);
    CHECK(store.integrityCheck() == "ok");
    const auto runs = store.listRuns();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].status == app::RunStatus::Running);
    CHECK(store.markInterrupted() == 1);
    CHECK(store.run(runs[0].id)->status == app::RunStatus::Interrupted);
    CHECK(!store.metrics(runs[0].id, "loss").empty());
    prctl(PR_SET_CHILD_SUBREAPER, 0);
}
