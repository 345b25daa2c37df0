// SPDX-License-Identifier: MIT
// `pipewright-cli calibrate` end to end: a measured profile, a 2-stage 1F1B plan, a local run with real agents,
// costs fitted to it predict that run within 50 % and a second run of the plan within a factor of 10 (see below);
// simulate and plan take --costs, and refuse costs of another stage layout naming the file and the field.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "planner/device_presets.h"
#include "planner/io/json_file.h"
#include "tests/run/process_helpers.h"

extern char** environ;

using namespace pw;
using Catch::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// Tolerances of the calibrated prediction (means of the spans) against measured iteration times. The two agents
/// share two cores with the controller (and, on a developer's machine, with builds and tests that come and go), so
/// the load can change several-fold between two runs. Measured with a build beside: on the run the costs came from,
/// the calibrated prediction was 0.9 %, 8 % and 15 % off (the profile's own 4x-33x); on a second run 2.6x and 7x
/// off, as the load had changed between the runs. So: within 50 % on the run the costs came from, and within a
/// factor of 10 on a second run (costs in the wrong unit, or missing a stage, are off by far more).
constexpr double kSameRunTolerance = 0.5;
constexpr double kFactor = 10;

bool withinFactor(double measured, double predicted)
{
    return predicted > 0 && measured / predicted < kFactor && predicted / measured < kFactor;
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

Result cli(const test::TempDir& dir, std::vector<std::string> args)
{
    args.insert(args.begin(), PW_CLI_EXE);
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    const auto out = dir.path / "out.txt", err = dir.path / "err.txt";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, PW_CLI_EXE, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

/// The CLI's JSON output, or a failed test showing what it said.
json ok(const Result& r)
{
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out);
}

/// A GPT-2 (2 blocks, hidden 128, sequence 64) measured on this machine with `repeats` repeats, and a cluster of
/// two local CPU devices: the files' paths.
std::pair<std::string, std::string> measuredSetup(const test::TempDir& dir, int repeats)
{
    const auto profile = (dir.path / "measured.json").string();
    ok(cli(dir,
        {"profile", "measure", "--layers", "2", "--hidden", "128", "--heads", "4", "--seq", "64", "--vocab", "256",
            "--microbatch", "2", "--repeats", std::to_string(repeats), "-o", profile, "--json"}));
    planner::Cluster local;
    local.name = "local";
    local.device_types = {*planner::devicePreset("cpu")};
    local.nodes.push_back({"local", "", 22, "", "cpu", 2, 1e10, 1e-6});
    const auto cluster = (dir.path / "cluster.json").string();
    std::ofstream(cluster) << planner::toJson(local).dump(2);
    return {profile, cluster};
}

} // namespace

TEST_CASE("cli: calibrate fits costs to a run, they predict a second run of the plan, simulate and plan take them",
    "[run][cli][calibrate]")
{
    test::TempDir dir;
    const auto [profile, cluster] = measuredSetup(dir, 5);
    const auto plan = (dir.path / "plan.json").string();
    ok(cli(dir,
        {"plan", "--model", profile, "--cluster", cluster, "--algorithm", "manual", "--boundaries", "1", "--schedule",
            "1f1b", "--microbatches", "4", "-o", plan, "--json"}));

    const auto history = (dir.path / "history.sqlite").string();
    const std::vector<std::string> run
        = {"run", plan, "--local", "--steps", "10", "--threads", "1", "--history", history, "--json"};
    const std::string first = ok(cli(dir, run)).at("run_id");

    const auto costsPath = (dir.path / "costs.json").string();
    const auto fit = ok(cli(dir,
        {"calibrate", first.substr(0, first.size() - 1), "-o", costsPath, "--history", history, "--statistic", "mean",
            "--json"}));
    const auto costs = json::parse(slurp(costsPath));
    CHECK(costs.at("format_version") == 1);
    CHECK(costs.at("run_id") == first);
    CHECK(costs.at("statistic") == "mean");
    REQUIRE(costs.at("stages").size() == 2);
    for (const auto& st : costs.at("stages")) {
        CHECK(st.at("forward_s").at(0).get<double>() > 0);
        CHECK(st.at("backward_s").at(0).get<double>() > 0);
        CHECK(st.at("optimizer_step_s").at(0).get<double>() > 0);
        CHECK(st.at("forward_samples").at(0) == 40); // 4 microbatches x 10 steps
    }
    CHECK(costs.at("stages").at(1).at("first_layer") == 2);
    CHECK(fit.at("measured_iteration_s").get<double>() > 0);
    INFO("in the run it was fitted to: calibrated error " << fit.at("calibrated_iteration_error").get<double>()
                                                          << ", profile's error "
                                                          << fit.at("profile_iteration_error").get<double>());
    CHECK(std::abs(fit.at("calibrated_iteration_error").get<double>()) < kSameRunTolerance);

    const auto medianFit
        = cli(dir, {"calibrate", first, "-o", (dir.path / "median.json").string(), "--history", history});
    INFO(medianFit.err);
    CHECK(medianFit.code == 0);
    CHECK_THAT(medianFit.out, Contains("median of the spans") && Contains("iteration time of this run: measured"));

    const std::string second = ok(cli(dir, run)).at("run_id");
    const auto show = ok(cli(dir, {"history", "show", second, "--history", history, "--costs", costsPath, "--json"}));
    const double measured = show.at("measured_iteration_s"), calibrated = show.at("calibrated_iteration_s");
    INFO("second run: measured " << measured * 1e3 << " ms/step, calibrated prediction " << calibrated * 1e3
                                 << " ms, the profile's " << show.at("predicted_iteration_s").get<double>() * 1e3
                                 << " ms");
    CHECK(withinFactor(measured, calibrated));
    CHECK(show.at("calibrated_iteration_error").get<double>() == Approx(measured / calibrated - 1));
    const auto text = cli(dir, {"history", "show", second, "--history", history, "--costs", costsPath});
    CHECK_THAT(text.out, Contains("calibrated (" + costsPath + ")"));

    const auto sim = ok(cli(dir, {"simulate", plan, "--costs", costsPath, "--json"}));
    CHECK(sim.at("costs") == costsPath);
    const auto profileSim = ok(cli(dir, {"simulate", plan, "--json"}));
    CHECK(sim.at("iteration_time_s") != profileSim.at("iteration_time_s"));
    ok(cli(dir,
        {"plan", "--model", profile, "--cluster", cluster, "--algorithm", "manual", "--boundaries", "1", "--schedule",
            "1f1b", "--microbatches", "8", "--costs", costsPath, "--json"}));

    // Costs of the 0-1 | 2-3 layout do not describe a 0-2 | 3 plan.
    const auto other = cli(dir,
        {"plan", "--model", profile, "--cluster", cluster, "--algorithm", "manual", "--boundaries", "2", "--schedule",
            "1f1b", "--costs", costsPath});
    CHECK(other.code == 1);
    CHECK_THAT(other.err, Contains("costs.json:") && Contains("/stages/0/last_layer"));

    const auto missing = cli(dir, {"calibrate", "r-nonexistent", "-o", costsPath, "--history", history});
    CHECK(missing.code == 1);
    CHECK_THAT(missing.err, Contains("no run 'r-nonexistent'"));
}

TEST_CASE("cli: calibrate fits a zero-bubble run from its I and W spans", "[run][cli][calibrate]")
{
    // The zero-bubble kinds split every backward into I and W: calibrate refused them ("no measured backward").
    test::TempDir dir;
    const auto [profile, cluster] = measuredSetup(dir, 3);
    const auto history = (dir.path / "history.sqlite").string();
    struct Kind
    {
        std::string schedule;
        std::vector<std::string> layout;
        std::size_t stages;
    };
    for (const Kind& kind : {Kind {"zb-h1", {"--boundaries", "1"}, 2}, Kind {"zb-h2", {"--boundaries", "1"}, 2},
             Kind {"zbv", {"--boundaries", "0,1,2", "--chunks", "2"}, 4}}) {
        INFO(kind.schedule);
        const auto plan = (dir.path / (kind.schedule + ".json")).string();
        std::vector<std::string> args = {"plan", "--model", profile, "--cluster", cluster, "--algorithm", "manual",
            "--schedule", kind.schedule, "--microbatches", "4", "-o", plan, "--json"};
        args.insert(args.end(), kind.layout.begin(), kind.layout.end());
        ok(cli(dir, args));
        const std::string run
            = ok(cli(dir, {"run", plan, "--local", "--steps", "4", "--threads", "1", "--history", history, "--json"}))
                  .at("run_id");
        const auto costsPath = (dir.path / (kind.schedule + "-costs.json")).string();
        const auto fit
            = ok(cli(dir, {"calibrate", run, "-o", costsPath, "--history", history, "--statistic", "mean", "--json"}));
        const auto costs = json::parse(slurp(costsPath));
        REQUIRE(costs.at("stages").size() == kind.stages);
        for (const auto& st : costs.at("stages")) {
            const double backward = st.at("backward_s").at(0), weight = st.at("backward_weight_s").at(0);
            CHECK(weight > 0);
            CHECK(weight < backward); // I is the rest
            CHECK(st.at("backward_samples").at(0) == 16); // 4 microbatches x 4 steps
        }
        CHECK(fit.at("measured_iteration_s").get<double>() > 0);
        // A few short steps of a small model on shared cores: the factor the second-run check above allows (the
        // transfers and the gaps between these sub-millisecond actions are much of a step here).
        const double error = fit.at("calibrated_iteration_error");
        INFO("calibrated error on the run it was fitted to: " << error << ", the profile's "
                                                              << fit.at("profile_iteration_error").get<double>());
        CHECK(error > 1 / kFactor - 1);
        CHECK(error < kFactor - 1);
        ok(cli(dir, {"simulate", plan, "--costs", costsPath, "--json"}));
    }
}
