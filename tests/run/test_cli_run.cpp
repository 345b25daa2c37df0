// SPDX-License-Identifier: MIT
// `pipewright-cli run --local` and `history` as a user runs them: the real executable in its own process, finding
// the agent beside it. Its JSON report, the history commands on the run it recorded, a plan without a model shape
// refused, and the controller killed with SIGKILL: no agent left within 5 s, a sound history file, the run marked
// interrupted by the next command.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
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
#include "engine/llmc.h"
#include "engine/model.h"
#include "engine/safetensors.h"
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

struct CliRunResult
{
    int code = -1;
    std::string out;
    std::string err;
};

std::string cliRunSlurp(const fs::path& p)
{
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

CliRunResult runCli(const test::TempDir& dir, const std::vector<std::string>& args)
{
    const pid_t pid = startCli(args, dir.path / "out.txt", dir.path / "err.txt");
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, cliRunSlurp(dir.path / "out.txt"),
        cliRunSlurp(dir.path / "err.txt")};
}

/// Waits (30 s at most) until the CLI `cli` has its two agents and reported `step` steps on `err`; returns the agents.
std::vector<pid_t> waitUntilTraining(pid_t cli, const fs::path& err, int step)
{
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
        REQUIRE(Clock::now() < deadline);
        auto agents = test::childAgents(cli);
        if (agents.size() == 2 && cliRunSlurp(err).find("step " + std::to_string(step) + "/") != std::string::npos)
            return agents;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
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
    CHECK_THAT(show.out, Contains("per action kind and step"));
    // Each agent's clock offset, which the history stores (issue 30 item 15): two local agents, measured.
    CHECK_THAT(show.out, Contains("  clocks: each agent's host clock minus the controller's"));
    CHECK_THAT(show.out, Contains("    agent 0 ") && Contains("    agent 1 ") && Contains(" round trips)"));

    // The prediction's error per action kind (issue 23 item 5): 2 stages x 4 microbatches of F and B per step, as
    // many measured as predicted, each taking time on both sides.
    const auto showJson = runCli(dir, {"history", "show", id, "--history", history, "--json"});
    REQUIRE(showJson.code == 0);
    const auto shown = json::parse(showJson.out);
    REQUIRE(shown.at("clocks").size() == 2);
    CHECK(shown.at("clocks").at(0).at("samples").get<int>() > 0);
    std::map<std::string, json> kinds;
    for (const auto& k : shown.at("kinds"))
        kinds[k.at("kind").get<std::string>()] = k;
    for (const char* name : {"F", "B", "send", "receive", "optimizer"}) {
        INFO(name << ": " << (kinds.count(name) ? kinds.at(name).dump() : std::string("missing")));
        REQUIRE(kinds.count(name) == 1);
        const auto& k = kinds.at(name);
        CHECK(k.at("counts_match") == true);
        CHECK(k.at("measured").at("actions") == k.at("predicted").at("actions"));
        CHECK(k.at("measured").at("time_s").get<double>() > 0);
        CHECK(k.at("error").get<double>() > -1);
    }
    CHECK(kinds.count("I") == 0);
    CHECK(kinds.count("W") == 0);
    for (const char* name : {"F", "B"}) {
        const auto& k = kinds.at(name);
        CHECK(k.at("predicted").at("actions") == 8);
        CHECK(k.at("predicted").at("time_s").get<double>() > 0);
        CHECK(k.at("measured").at("mean_s").get<double>() == Approx(k.at("measured").at("time_s").get<double>() / 8));
    }

    const auto csv = dir.path / "spans.csv";
    REQUIRE(runCli(dir, {"history", "export", id, "--history", history, "-o", csv.string()}).code == 0);
    CHECK_THAT(cliRunSlurp(csv), Contains("device,lane,kind"));
    const auto trace = dir.path / "trace.json";
    REQUIRE(
        runCli(dir, {"history", "export", id, "--history", history, "--format", "chrome-trace", "-o", trace.string()})
            .code
        == 0);
    CHECK(json::parse(cliRunSlurp(trace)).at("traceEvents").size() > 0);

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
    const auto agents = waitUntilTraining(cli, dir.path / "err.txt", 3);
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

TEST_CASE("cli: a loss that stops being finite fails the run cleanly naming the step, with every step kept",
    "[run][cli][faults]")
{
    test::TempDir dir;
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = (dir.path / "history.sqlite").string();
    const auto r = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "6", "--threads", "1", "--lr", "1e9", "--history", history,
            "--json"});
    INFO(r.err);
    CHECK(r.code == 4);
    const auto report = json::parse(r.out);
    CHECK(report.at("status") == "failed");
    const std::regex step(R"(the loss is (NaN|infinite) at step (\d+) of 6)");
    std::smatch m;
    const std::string message = report.at("message");
    REQUIRE(std::regex_search(message, m, step));
    const int failedAt = std::stoi(m[2]);

    auto store = app::HistoryStore::open(history);
    CHECK(store.integrityCheck() == "ok");
    const auto runs = store.listRuns();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].status == app::RunStatus::Failed); // not running, then interrupted
    const auto losses = store.metrics(runs[0].id, "loss");
    REQUIRE(static_cast<int>(losses.size()) >= failedAt); // every step up to the failure, the bad one included
    for (int s = 0; s < failedAt - 1; ++s)
        CHECK(std::isfinite(losses[static_cast<std::size_t>(s)].value));
    CHECK(!std::isfinite(losses[static_cast<std::size_t>(failedAt - 1)].value));
    CHECK(runs[0].steps_done == static_cast<std::int64_t>(losses.size()));

    // Told to go on, the run trains every step and keeps the non-finite losses.
    const auto on = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "6", "--threads", "1", "--lr", "1e9", "--stop-on-nonfinite", "off",
            "--history", history, "--json"});
    INFO(on.err);
    CHECK(on.code == 0);
    const auto onReport = json::parse(on.out);
    CHECK(onReport.at("status") == "succeeded");
    CHECK(store.metrics(onReport.at("run_id"), "loss").size() == 6);
    const auto list = runCli(dir, {"history", "list", "--history", history});
    CHECK(list.code == 0);
    CHECK_THAT(list.out, Contains("6/6"));
}

TEST_CASE("cli: SIGHUP (the terminal closed) stops the run like Ctrl+C: recorded as stopped, no agent left",
    "[run][cli][faults]")
{
    test::TempDir dir;
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = dir.path / "history.sqlite";
    const pid_t cli = startCli(
        {"run", plan.string(), "--local", "--steps", "100000", "--threads", "1", "--history", history.string()},
        dir.path / "out.txt", dir.path / "err.txt");
    const auto agents = waitUntilTraining(cli, dir.path / "err.txt", 2);
    // As a terminal's hang-up does: to the whole foreground process group (here: the CLI's, as spawned).
    REQUIRE(::kill(cli, SIGHUP) == 0);
    int status = 0;
    waitpid(cli, &status, 0);
    INFO(cliRunSlurp(dir.path / "err.txt"));
    REQUIRE(WIFEXITED(status)); // not killed by the signal (129)
    CHECK(WEXITSTATUS(status) == 4);
    CHECK(std::none_of(agents.begin(), agents.end(), test::alive));
    auto store = app::HistoryStore::open(history);
    const auto runs = store.listRuns();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].status == app::RunStatus::Stopped);
    CHECK(runs[0].steps_done >= 2);
}

TEST_CASE("cli: a history one may read but not write is listed, shown, exported and compared, a missing one is "
          "not created",
    "[run][cli]")
{
    test::TempDir dir;
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto shared = dir.path / "shared";
    fs::create_directories(shared);
    const auto history = (shared / "history.sqlite").string();
    std::vector<std::string> ids;
    for (int i = 0; i < 2; ++i) {
        const auto r = runCli(
            dir, {"run", plan.string(), "--local", "--steps", "2", "--threads", "1", "--history", history, "--json"});
        REQUIRE(r.code == 0);
        ids.push_back(json::parse(r.out).at("run_id"));
    }
    const auto size = fs::file_size(history);
    const auto mtime = fs::last_write_time(history);
    // Readable by all, writable by nobody else: another user (root drops to nobody) or, for a user, no write bit.
    const bool root = ::geteuid() == 0;
    fs::permissions(history,
        root ? fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read
             : fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    fs::permissions(dir.path,
        fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read
            | fs::perms::others_exec);
    fs::permissions(shared,
        fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read
            | fs::perms::others_exec);
    const auto out = dir.path / "out";
    fs::create_directories(out);
    fs::permissions(out, fs::perms::all);
    // The build tree may lie where another user cannot reach (/root): that user runs a copy.
    const auto cliCopy = out / "pipewright-cli";
    if (root) {
        fs::copy_file(PW_CLI_EXE, cliCopy);
        fs::permissions(cliCopy, fs::perms::all);
    }
    const auto asReader = [&](std::vector<std::string> args) {
        if (root)
            args.insert(args.begin(), {"--reuid=65534", "--regid=65534", "--clear-groups", "--", cliCopy.string()});
        const std::string program = root ? "/usr/bin/setpriv" : PW_CLI_EXE;
        std::vector<char*> argv;
        std::string name = program;
        argv.push_back(name.data());
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        const auto o = out / "stdout", e = out / "stderr";
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, o.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, e.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        pid_t pid = 0;
        REQUIRE(posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ) == 0);
        posix_spawn_file_actions_destroy(&actions);
        int status = 0;
        waitpid(pid, &status, 0);
        return CliRunResult {WIFEXITED(status) ? WEXITSTATUS(status) : -1, cliRunSlurp(o), cliRunSlurp(e)};
    };
    // The owner reads it first: a read-only reader leaves a -shm file behind, private to the owner.
    REQUIRE(runCli(dir, {"history", "list", "--history", history}).code == 0);
    const auto list = asReader({"history", "list", "--history", history});
    INFO(list.err);
    CHECK(list.code == 0);
    CHECK_THAT(list.out, Contains(ids[0]) && Contains(ids[1]) && Contains("2/2"));
    const auto show = asReader({"history", "show", ids[0], "--history", history});
    INFO(show.err);
    CHECK(show.code == 0);
    CHECK_THAT(show.out, Contains(ids[0]));
    const auto csv = (out / "spans.csv").string();
    const auto exported = asReader({"history", "export", ids[1], "--history", history, "-o", csv});
    INFO(exported.err);
    CHECK(exported.code == 0);
    CHECK_THAT(cliRunSlurp(csv), Contains("device,lane,kind"));
    const auto compare = asReader({"history", "compare", ids[0], ids[1], "--history", history});
    INFO(compare.err);
    CHECK(compare.code == 0);
    CHECK(fs::file_size(history) == size);
    CHECK(fs::last_write_time(history) == mtime);
    // Writing commands name the file and say why.
    const auto del = asReader({"history", "delete", ids[0], "--history", history});
    CHECK(del.code != 0);
    CHECK_THAT(del.err, Contains(history));

    // Listing a history that does not exist creates neither it nor its directory.
    const auto missing = dir.path / "none" / "deeper" / "history.sqlite";
    const auto empty = runCli(dir, {"history", "list", "--history", missing.string()});
    CHECK(empty.code == 0);
    CHECK_THAT(empty.out, Contains("no runs"));
    CHECK(!fs::exists(dir.path / "none"));
    const auto noShow = runCli(dir, {"history", "show", "latest", "--history", missing.string()});
    CHECK(noShow.code != 0);
    CHECK_THAT(noShow.err, Contains(missing.string()));
    CHECK(!fs::exists(dir.path / "none"));
}

namespace {

/// Whether the history file holds a run (false when the file does not exist).
bool recordedAnyRun(const fs::path& history)
{
    if (!fs::exists(history))
        return false;
    return !app::HistoryStore::open(history).listRuns().empty();
}

} // namespace

TEST_CASE("cli: run refuses settings out of range naming the option, before the history file exists", "[run][cli]")
{
    test::TempDir dir;
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = dir.path / "history.sqlite";
    const std::string tooMany = std::to_string(std::thread::hardware_concurrency() + 1);
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--lr", "-1"}, "--lr (learning rate): must be a finite number >= 0, got -1"},
        {{"--lr", "nan"}, "--lr (learning rate)"},
        {{"--lr", "inf"}, "--lr (learning rate): must be a finite number >= 0, got inf"},
        {{"--weight-decay", "-0.5"}, "--weight-decay (weight decay): must be a finite number >= 0, got -0.5"},
        {{"--threads", "0"}, "--threads (threads per agent): must be at least 1, got 0"},
        {{"--threads", "-4"}, "--threads (threads per agent): must be at least 1, got -4"},
        {{"--warmup", "-3"}, "--warmup (warm-up steps): must be 0 or more, got -3"},
        {{"--seed", "-1"}, "--seed (seed): must be a whole number from 0 to 18446744073709551615, got '-1'"},
        {{"--seed", "18446744073709551616"}, "--seed (seed)"},
    };
    for (const auto& [options, message] : cases) {
        std::vector<std::string> args = {"run", plan.string(), "--local", "--steps", "2", "--history", history};
        args.insert(args.end(), options.begin(), options.end());
        const auto r = runCli(dir, args);
        INFO(options[0] << " " << options[1] << ": " << r.err);
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Contains("pipewright-cli: error: " + message));
        CHECK_FALSE(fs::exists(history));
    }
    // Threads above the cores exceed this machine: refused by the controller before the run is recorded (the
    // history file is open by then), unless --force.
    const auto many
        = runCli(dir, {"run", plan.string(), "--local", "--steps", "1", "--threads", tooMany, "--history", history});
    CHECK(many.code == 1);
    CHECK_THAT(many.err,
        Contains("pipewright-cli: error: --threads " + tooMany + " per agent is above this machine's "
            + std::to_string(std::thread::hardware_concurrency()) + " cores: give --force to start it anyway"));
    CHECK_FALSE(fs::exists(history)); // not even created
    const auto forced = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "1", "--threads", tooMany, "--force", "--history", history,
            "--json"});
    INFO(forced.err);
    CHECK(forced.code == 0);
    CHECK(recordedAnyRun(history));
}

TEST_CASE("cli: --init and --data are checked against the plan before anything is recorded: file and field named",
    "[run][cli]")
{
    test::TempDir dir;
    const auto shape = tinyGpt2(2); // vocabulary 32, sequences of 8, microbatches of 2 sequences
    const auto plan = writePlan(dir, gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = dir.path / "history.sqlite";
    auto config = engine::ModelConfig::fromTransformer(shape);
    const auto checkpoint = [&](const std::string& name, engine::ModelConfig c) {
        engine::Checkpoint ckpt {c, std::vector<float>(engine::parameterCount(c), 0.01f)};
        engine::writeCheckpoint(dir.path / name, ckpt);
        return (dir.path / name).string();
    };
    auto otherVocab = config;
    otherVocab.vocab = 40;
    auto shorter = config;
    shorter.max_seq = 4;
    engine::writeTokens(dir.path / "outside.bin", {1, 2, 3, 40, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18});
    engine::writeTokens(dir.path / "few.bin", std::vector<std::int32_t>(10, 1));
    {
        std::vector<std::int32_t> header(256, 0);
        header[0] = engine::kTokensMagic;
        header[1] = 2; // a version llm.c has not written
        std::ofstream(dir.path / "v2.bin", std::ios::binary).write(reinterpret_cast<const char*>(header.data()), 1024);
    }
    fs::create_directories(dir.path / "folder");
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--init", checkpoint("vocab40.bin", otherVocab)},
            "vocab40.bin: header vocab: the checkpoint's model has vocab 40, the plan's 32"},
        {{"--init", checkpoint("short.bin", shorter)},
            "short.bin: header maxT: the checkpoint's model has 4 positions (maxT), the plan's sequences are 8"},
        {{"--init", (dir.path / "outside.bin").string()}, "outside.bin: header magic: not an llm.c GPT-2 checkpoint"},
        {{"--init", (dir.path / "folder").string()}, "folder: is a directory, not a file"},
        {{"--data", (dir.path / "outside.bin").string()},
            "outside.bin: tokens: token 40 at position 3 is outside the plan's vocabulary of 32"},
        {{"--data", (dir.path / "few.bin").string()}, "few.bin: tokens: holds 10 tokens; one microbatch reads 17"},
        {{"--data", (dir.path / "v2.bin").string()}, "v2.bin: header version: token file version 2 is not supported"},
        {{"--data", (dir.path / "folder").string()}, "folder: is a directory, not a token or text file"},
    };
    for (const auto& [options, message] : cases) {
        std::vector<std::string> args
            = {"run", plan.string(), "--local", "--steps", "2", "--threads", "1", "--history", history};
        args.insert(args.end(), options.begin(), options.end());
        const auto r = runCli(dir, args);
        INFO(options[0] << " " << options[1] << ": " << r.err);
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Contains("pipewright-cli: error: ") && Contains(message));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1); // one line
        CHECK_FALSE(fs::exists(history)); // not even created
    }
    // What fits is trained: a checkpoint of the plan's shape (more positions than used), enough tokens.
    auto longer = config;
    longer.max_seq = 16;
    std::vector<std::int32_t> tokens(400);
    for (std::size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = static_cast<std::int32_t>(i * 7 % 32);
    engine::writeTokens(dir.path / "ok.bin", tokens);
    const auto ok = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "2", "--threads", "1", "--history", history, "--init",
            checkpoint("ok-init.bin", longer), "--data", (dir.path / "ok.bin").string(), "--json"});
    INFO(ok.err);
    CHECK(ok.code == 0);
}

TEST_CASE("cli: a local run beyond this machine (agents above its cores, memory above its RAM) is refused with the "
          "numbers",
    "[run][cli]")
{
    test::TempDir dir;
    const auto history = dir.path / "history.sqlite";
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    std::vector<int> devices(static_cast<std::size_t>(cores) + 1);
    std::iota(devices.begin(), devices.end(), 0);
    const auto wide = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 3, devices}}, "1f1b"));
    const auto r = runCli(dir, {"run", wide.string(), "--local", "--steps", "1", "--history", history});
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK_THAT(r.err,
        Contains("the plan starts " + std::to_string(cores + 1) + " agents (one per device) on this machine's "
            + std::to_string(cores) + " cores: give --force to start it anyway"));
    CHECK_FALSE(fs::exists(history)); // not even created

    // 4 blocks of width 32768: 52 G parameters, some 800 GiB with AdamW's state, above any test machine's RAM.
    planner::TransformerConfig huge {4, 32768, 16, 8, 32, 1, 4};
    const auto big = gpt2Plan(huge, {{0, 5, {0}}}, "1f1b");
    const auto bigPath = dir.path / "big.json";
    std::ofstream(bigPath) << planner::toJson(big).dump(2);
    const auto m = runCli(dir, {"run", bigPath.string(), "--local", "--steps", "1", "--history", history});
    INFO(m.err);
    CHECK(m.code == 1);
    CHECK_THAT(m.err,
        Contains("the predicted peak memory of its 1 devices, ") && Contains("GiB together, is above this machine's")
            && Contains("GiB of memory: give --force"));
    CHECK_FALSE(fs::exists(history)); // not even created
}

TEST_CASE("cli: run names the plan's file and field: unknown schedule kind, missing architecture, layer count, "
          "bf16 weights",
    "[run][cli]")
{
    test::TempDir dir;
    const auto history = (dir.path / "h.sqlite").string();
    auto plan = gpt2Plan(tinyGpt2(2), {{0, 3, {0}}}, "gpipe");
    const auto refused = [&](const planner::Plan& p) {
        const auto path = writePlan(dir, p);
        const auto r = runCli(dir, {"run", path.string(), "--local", "--steps", "1", "--history", history});
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Contains("pipewright-cli: error: " + path.string() + ":")); // and its line, where known
        return r.err;
    };
    auto kind = plan;
    kind.schedule.kind = "zigzag";
    CHECK_THAT(refused(kind),
        Contains("/schedule/kind: unknown schedule kind 'zigzag' (known: gpipe, 1f1b, pipedream, 2bw, interleaved"));
    auto noShape = plan;
    auto model = *plan.model;
    model.architecture.reset();
    noShape.model = model;
    CHECK_THAT(refused(noShape), Contains("/model/architecture: the plan's model") && Contains("profile transformer"));
    auto layers = plan;
    model = *plan.model;
    model.architecture->layers = 6;
    layers.model = model;
    CHECK_THAT(refused(layers),
        Contains("/model/layers: the profile lists 4 layers, but its architecture's 6 transformer blocks make 8 "
                 "layers to train: the embedding, the 6 blocks and the head"));
    auto bf16 = plan;
    model = *plan.model;
    model.architecture->bytes_per_element = 2;
    bf16.model = model;
    CHECK_THAT(refused(bf16),
        Contains("/model/architecture/bytes_per_element: the plan's weights are bf16")
            && Contains("--bytes-per-element 4"));
    // The architecture must describe the profile's layers (issue 30 item 3): a microbatch, hidden size or sequence
    // edited in the file trained another model than the one planned (a 1000-sample microbatch at 9.47 s per step
    // against 18 ms predicted; agents dying of bad_alloc), and another family was trained as GPT-2.
    const auto edited = [&](const std::function<void(planner::TransformerConfig&)>& edit) {
        auto p = plan;
        auto m = *plan.model;
        edit(*m.architecture);
        p.model = m;
        return p;
    };
    CHECK_THAT(refused(edited([](auto& a) { a.microbatch = 1000; })),
        Contains("/model/architecture/microbatch: 1000, but the profile's layers are of microbatches of "));
    CHECK_THAT(refused(edited([](auto& a) { a.hidden = 1 << 20; })),
        Contains("/model/layers/1/activation_bytes: block 0") && Contains("describe different models"));
    CHECK_THAT(refused(edited([](auto& a) { a.sequence = 1000000000; })),
        Contains("/model/layers/1/activation_bytes: block 0"));
    {
        auto j = planner::toJson(plan);
        j["model"]["architecture"]["type"] = "llama";
        const auto path = dir.path / "llama.json";
        std::ofstream(path) << j.dump(2);
        const auto r = runCli(dir, {"run", path.string(), "--local", "--steps", "1", "--history", history});
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Contains("/model/architecture/type: 'llama' is not a model type Pipewright knows"));
    }
    CHECK_FALSE(fs::exists(dir.path / "h.sqlite")); // not even created
}

TEST_CASE("cli: --save is checked with the other inputs, before anything trains or is recorded", "[run][cli]")
{
    // issue 30 item 6: a missing folder trained, then failed (the training lost); a directory recorded a failed run.
    test::TempDir dir;
    const auto history = (dir.path / "h.sqlite").string();
    const auto plan = writePlan(dir, gpt2Plan(tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const std::vector<std::pair<std::string, std::string>> cases = {
        {(dir.path / "missing" / "model.bin").string(),
            "the folder " + (dir.path / "missing").string() + " does not exist"},
        {dir.path.string(), "it is a directory"},
        {(dir.path / "h.sqlite" / "x.bin").string(), ""}, // under a file that is not there yet: a missing folder
    };
    for (const auto& [save, message] : cases) {
        const auto r
            = runCli(dir, {"run", plan.string(), "--local", "--steps", "1", "--save", save, "--history", history});
        INFO(save << ": " << r.err);
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Contains(save + ": cannot save the trained model there: " + message));
        CHECK_FALSE(fs::exists(history));
    }
    if (::geteuid() != 0) { // root writes anywhere
        const auto locked = dir.path / "locked";
        fs::create_directories(locked);
        fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
        const auto r = runCli(dir,
            {"run", plan.string(), "--local", "--steps", "1", "--save", (locked / "m.bin").string(), "--history",
                history});
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Contains("is not writable"));
        fs::permissions(locked, fs::perms::owner_all);
    }
    const auto good = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "1", "--save", (dir.path / "m.bin").string(), "--history",
            history});
    INFO(good.err);
    CHECK(good.code == 0);
    CHECK(fs::file_size(dir.path / "m.bin") > 0);
}

TEST_CASE("cli: a Llama plan trains on two agents, saves safetensors, and a second run starts from them", "[run][cli]")
{
    test::TempDir dir;
    auto shape = tinyGpt2(2);
    shape.heads = 4;
    shape = test::asLlama(shape, 2, 24);
    const auto plan = writePlan(dir, gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b"));
    const auto history = (dir.path / "h.sqlite").string();
    // llm.c's format holds GPT-2's block only: refused before anything trains.
    const auto bin = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "1", "--save", (dir.path / "m.bin").string(), "--history",
            history});
    CHECK(bin.code == 1);
    CHECK_THAT(bin.err, Contains("give a name ending in .safetensors"));
    CHECK_FALSE(fs::exists(history));
    const auto saved = (dir.path / "m.safetensors").string();
    const auto first = runCli(
        dir, {"run", plan.string(), "--local", "--steps", "3", "--save", saved, "--history", history, "--json"});
    INFO(first.err);
    REQUIRE(first.code == 0);
    const auto config = engine::ModelConfig::fromTransformer(shape);
    const auto trained = engine::loadSafetensorsModel(saved, config);
    CHECK(std::any_of(trained.begin(), trained.end(), [](float v) { return v != 0.0f; }));
    const auto second = runCli(
        dir, {"run", plan.string(), "--local", "--steps", "1", "--init", saved, "--history", history, "--json"});
    INFO(second.err);
    CHECK(second.code == 0);
    // A checkpoint of another shape is refused naming the file and the tensor.
    auto other = config;
    other.ffn_hidden = 32;
    engine::saveSafetensorsModel(
        dir.path / "other.safetensors", other, std::vector<float>(engine::parameterCount(other)));
    const auto wrong = runCli(dir,
        {"run", plan.string(), "--local", "--steps", "1", "--init", (dir.path / "other.safetensors").string(),
            "--history", history});
    CHECK(wrong.code == 1);
    CHECK_THAT(wrong.err, Contains("other.safetensors") && Contains("model.layers.0.mlp.gate_proj.weight/shape"));
}
