// SPDX-License-Identifier: MIT
// pipewright-cli end to end: help, the demo, the file contracts, and clear errors on bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_harness.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using namespace pw::cli::test;

fs::path tempDir()
{
    auto dir = fs::temp_directory_path() / ("pw-cli-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir;
}

} // namespace

TEST_CASE("every subcommand has --help", "[cli]")
{
    for (auto args : std::vector<std::vector<std::string>> {{"--help"}, {"plan", "--help"}, {"simulate", "--help"},
             {"export", "--help"}, {"demo", "--help"}, {"compare", "--help"}, {"algorithms", "--help"},
             {"profile", "import-pipedream", "--help"}, {"profile", "transformer", "--help"}}) {
        auto r = cli(args);
        INFO(args.front() << " " << args.back());
        CHECK(r.code == 0);
        CHECK(r.out.find("Usage") != std::string::npos);
    }
    auto r = cli({"plan", "--help"});
    CHECK(r.out.find("--pipedream-variant") != std::string::npos);
}

TEST_CASE("usage errors exit non-zero with one line", "[cli]")
{
    auto r = cli({"plan", "--model", "x.json"});
    CHECK(r.code != 0);
    CHECK(r.err.rfind("pipewright-cli: error:", 0) == 0);
    auto unknown = cli({"frobnicate"});
    CHECK(unknown.code != 0);
}

TEST_CASE("the demo plans and simulates", "[cli]")
{
    auto r = cli({"demo"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("interleaved") != std::string::npos);
    CHECK(r.out.find("HetPipe cluster") != std::string::npos);
    auto j = cli({"demo", "--json"});
    REQUIRE(j.code == 0);
    auto parsed = json::parse(j.out);
    CHECK(parsed.at("runs").size() >= 9);
    for (const auto& run : parsed.at("runs")) {
        CHECK(run.at("throughput_samples_per_s").get<double>() > 0);
        CHECK(run.at("fits_memory").get<bool>());
    }
}

TEST_CASE("import, plan, simulate and export follow the contracts", "[cli]")
{
    auto dir = tempDir();
    auto model = (dir / "vgg16.json").string();
    auto r = cli({"profile", "import-pipedream", kProfiles + "/pipedream/vgg16/graph.txt", "-o", model});
    REQUIRE(r.code == 0);
    auto planPath = (dir / "plan.json").string();
    r = cli({"plan", "--model", model, "--cluster", kDemo + "/dgx-h100.json", "--algorithm", "pipedream", "--schedule",
        "1f1b", "--microbatches", "8", "-o", planPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto plan = json::parse(std::ifstream(planPath));
    REQUIRE(plan.at("stages").is_array());
    int next = 0;
    for (const auto& s : plan.at("stages")) {
        CHECK(s.at("first_layer").get<int>() == next);
        next = s.at("last_layer").get<int>() + 1;
        CHECK(!s.at("devices").empty());
    }
    CHECK(plan.at("objective_s").get<double>() > 0);

    auto sim = cli({"simulate", planPath, "--json", "--trace", (dir / "trace.json").string()});
    REQUIRE(sim.code == 0);
    auto metrics = json::parse(sim.out);
    for (auto key : {"iteration_time_s", "throughput_samples_per_s", "bubble_fraction", "stages"})
        CHECK(metrics.contains(key));
    CHECK(metrics.at("stages").at(0).contains("peak_memory_bytes"));
    CHECK(fs::file_size(dir / "trace.json") > 100);

    for (auto format : {"chrome-trace", "actions-csv", "graph-txt", "schedule-json"}) {
        auto out = (dir / (std::string("export.") + format)).string();
        auto e = cli({"export", planPath, "--format", format, "-o", out});
        INFO(format << ": " << e.err);
        CHECK(e.code == 0);
        CHECK(fs::file_size(out) > 0);
    }
    // The exported graph.txt carries the stages and reads back.
    auto again = cli(
        {"profile", "import-pipedream", (dir / "export.graph-txt").string(), "-o", (dir / "again.json").string()});
    CHECK(again.code == 0);
    fs::remove_all(dir);
}

TEST_CASE("bad input names the file, the line and the field", "[cli]")
{
    auto cluster = kDemo + "/dgx-h100.json";
    SECTION("truncated JSON")
    {
        auto r = cli(
            {"plan", "--model", kData + "/bad/truncated-model.json", "--cluster", cluster, "--algorithm", "uniform"});
        CHECK(r.code == 1);
        CHECK(r.err.find("truncated-model.json:") != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
    SECTION("graph.txt with a malformed line")
    {
        auto r = cli(
            {"plan", "--model", kData + "/bad/malformed-graph.txt", "--cluster", cluster, "--algorithm", "uniform"});
        CHECK(r.code == 1);
        CHECK(r.err.find("malformed-graph.txt:2") != std::string::npos);
        CHECK(r.err.find("backward_compute_time") != std::string::npos);
    }
    SECTION("a cluster with zero devices")
    {
        auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster",
            kData + "/bad/zero-devices-cluster.json", "--algorithm", "pipedream"});
        CHECK(r.code == 1);
        CHECK(r.err.find("zero-devices-cluster.json:") != std::string::npos);
        CHECK(r.err.find("/nodes/0/count") != std::string::npos);
    }
    SECTION("a plan that does not fit memory")
    {
        auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kData + "/bad/tiny-gpu-cluster.json",
            "--algorithm", "uniform"});
        CHECK(r.code == 3); // printed (and written with -o), but over memory: README "Exit status"
        CHECK(r.err.find("does not fit device memory") != std::string::npos);
        auto limited = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster",
            kData + "/bad/tiny-gpu-cluster.json", "--algorithm", "pipedream", "--memory-limit"});
        CHECK(limited.code == 1);
        CHECK(limited.err.find("memory") != std::string::npos);
    }
    SECTION("a missing file")
    {
        auto r = cli({"simulate", "/nonexistent/plan.json"});
        CHECK(r.code == 1);
        CHECK(r.err.find("/nonexistent/plan.json") != std::string::npos);
    }
}

TEST_CASE("the executable exits non-zero on bad input", "[cli]")
{
    std::string cmd = std::string(PW_CLI_EXE) + " simulate /nonexistent/plan.json 2>/dev/null";
    int status = std::system(cmd.c_str());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
}

TEST_CASE("schedule problems of a loaded plan name the plan file and field", "[cli]")
{
    auto dir = tempDir();
    auto planPath = (dir / "plan.json").string();
    auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
        "uniform", "--microbatches", "8", "-o", planPath});
    REQUIRE(r.code == 0);
    auto plan = json::parse(std::ifstream(planPath));
    plan["schedule"]["kind"] = "2bw";
    plan["schedule"]["microbatches"] = 2; // 2BW needs at least one microbatch per stage
    std::ofstream(planPath) << plan.dump(2);
    auto sim = cli({"simulate", planPath});
    CHECK(sim.code == 1);
    CHECK(sim.err.find(planPath + ":") != std::string::npos);
    CHECK(sim.err.find("/schedule/microbatches") != std::string::npos);
    fs::remove_all(dir);
}

namespace {
/// Compares `actual` with the golden file, or rewrites it when PW_UPDATE_GOLDEN is set.
void checkGolden(const std::string& name, const std::string& actual)
{
    const auto path = fs::path(kData) / "golden" / name;
    if (std::getenv("PW_UPDATE_GOLDEN")) {
        std::ofstream(path, std::ios::binary) << actual;
        return;
    }
    std::ifstream f(path, std::ios::binary);
    REQUIRE(f);
    std::stringstream expected;
    expected << f.rdbuf();
    CHECK(actual == expected.str());
}

std::string slurp(const fs::path& p)
{
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}
} // namespace

TEST_CASE("plan summary, actions CSV and graph.txt match their golden files", "[cli][golden]")
{
    auto dir = tempDir();
    const std::string golden = kData + "/golden/";
    auto planPath = (dir / "plan.json").string();
    auto r = cli({"plan", "--model", golden + "tiny-model.json", "--cluster", golden + "four-gpus.json", "--algorithm",
        "manual", "--boundaries", "0,1,2", "--schedule", "1f1b", "--microbatches", "4", "-o", planPath});
    INFO(r.err);
    REQUIRE(r.code == 0);
    // The summary without its last line (which names the temporary file).
    checkGolden("tiny-1f1b.summary.txt", r.out.substr(0, r.out.rfind("wrote ")));
    REQUIRE(cli({"export", planPath, "--format", "actions-csv", "-o", (dir / "a.csv").string()}).code == 0);
    checkGolden("tiny-1f1b.actions.csv", slurp(dir / "a.csv"));
    REQUIRE(cli({"export", planPath, "--format", "graph-txt", "-o", (dir / "g.txt").string()}).code == 0);
    checkGolden("tiny-1f1b.graph.txt", slurp(dir / "g.txt"));
    fs::remove_all(dir);
}

TEST_CASE("export writes another runtime's files into a directory or refuses naming the plan's line", "[cli]")
{
    const fs::path dir = fs::temp_directory_path() / ("pw-cli-runtime-export-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const std::string tiny = kDemo + "/gpt2-tiny-local.plan.json";
    auto r = cli({"export", tiny, "--format", "torchtitan", "-o", (dir / "tt").string()});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("wrote " + (dir / "tt" / "schedule.csv").string()) != std::string::npos);
    CHECK(r.out.find("note: ") != std::string::npos);
    CHECK(slurp(dir / "tt" / "schedule.csv") == "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n");
    r = cli({"export", tiny, "--format", "megatron", "-o", (dir / "mg").string(), "--json"});
    REQUIRE(r.code == 0);
    const auto summary = nlohmann::json::parse(r.out);
    CHECK(summary.at("files").at(0).at("name") == (dir / "mg" / "megatron_args.sh").string());
    CHECK(summary.at("notes").size() == 2);
    // A plan the runtime cannot express: one line naming the file, the line and the field; nothing written.
    auto plan = nlohmann::json::parse(slurp(tiny));
    plan["schedule"]["kind"] = "pipedream";
    const fs::path async = dir / "async.plan.json";
    std::ofstream(async) << plan.dump(2);
    r = cli({"export", async.string(), "--format", "deepspeed", "-o", (dir / "ds").string()});
    CHECK(r.code == 1);
    CHECK(r.err.find("error: " + async.string() + ":") != std::string::npos);
    CHECK(r.err.find("/schedule/kind") != std::string::npos);
    CHECK(r.err.find("schedule 'pipedream' is asynchronous") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(dir / "ds"));
    fs::remove_all(dir);
}

TEST_CASE("the CLI loads no CUDA library, OpenBLAS, libssh or libcrypto to start, plan or simulate", "[cli]")
{
    // issue 30 item 10: every start mapped cuBLASLt (541 MB, 60 ms, 211 MB resident) before `--version` printed, on
    // machines without a GPU too; then OpenBLAS (its thread pool started at load), libssh with Kerberos and
    // libcrypto were 10 of the 16 ms left. The dynamic loader's own trace (LD_DEBUG=files) lists every library it
    // loads, dlopen'ed ones included. (Speed and memory: tests/bench/bench_cli_start.cpp.)
    const auto loaded = [](const std::string& args) {
        std::string out;
        std::FILE* pipe
            = ::popen(("LD_DEBUG=files " + std::string(PW_CLI_EXE) + " " + args + " 2>&1 >/dev/null").c_str(), "r");
        REQUIRE(pipe);
        char buffer[4096];
        for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
            out.append(buffer, n);
        CHECK(::pclose(pipe) == 0);
        return out;
    };
    for (const std::string& args :
        std::vector<std::string> {"--version", "--help", "simulate " + kDemo + "/gpt2-tiny-local.plan.json",
            "plan --model " + kDemo + "/gpt-demo.json --cluster " + kDemo + "/dgx-h100.json --algorithm megatron"}) {
        const std::string trace = loaded(args);
        INFO(args);
        REQUIRE_THAT(trace, Catch::Contains("file=")); // the trace is there
        CHECK_THAT(trace, !Catch::Contains("cublas") && !Catch::Contains("libcudnn") && !Catch::Contains("libnccl"));
        CHECK_THAT(trace, !Catch::Contains("libopenblas") && !Catch::Contains("libgfortran"));
        CHECK_THAT(trace, !Catch::Contains("libssh") && !Catch::Contains("libkrb5") && !Catch::Contains("libgssapi"));
        CHECK_THAT(trace, !Catch::Contains("libcrypto"));
    }
}
