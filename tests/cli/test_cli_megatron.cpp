// SPDX-License-Identifier: MIT
// pipewright-cli with --algorithm megatron: the demo model on the demo cluster, a tensor-parallel plan file
// that simulates and exports, and option errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli_harness.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pw::cli::test;

TEST_CASE("megatron plans the demo and its tensor-parallel plans simulate and export", "[cli][megatron]")
{
    auto r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("megatron") != std::string::npos);

    const auto dir = fs::temp_directory_path() / ("pw-cli-megatron-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto planPath = (dir / "plan.json").string();
    r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "tensor-sizes=2", "--set", "pipeline-sizes=2", "-o", planPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto plan = json::parse(std::ifstream(planPath));
    CHECK(plan.at("tensor_parallel") == 2);
    CHECK(plan.at("stages").at(0).at("devices").size() % 2 == 0);
    auto sim = cli({"simulate", planPath, "--json"});
    INFO(sim.err);
    REQUIRE(sim.code == 0);
    CHECK(json::parse(sim.out).at("throughput_samples_per_s").get<double>() > 0);
    auto e = cli({"export", planPath, "--format", "schedule-json", "-o", (dir / "schedule.json").string()});
    CHECK(e.code == 0);
    fs::remove_all(dir);

    auto bad = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "global-batch=-4"});
    CHECK(bad.code != 0);
    CHECK(bad.err.find("global-batch") != std::string::npos);
}
