// SPDX-License-Identifier: MIT
// Project files: round trip with a plan and scenarios, atomic saves, errors that name the file, line and field,
// and mutated files that are rejected cleanly (a project file crosses a process boundary: it is fuzzed).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

#include "app/project/project.h"
#include "app/run/remote.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"

namespace fs = std::filesystem;
using namespace pw::app;
using pw::planner::InputError;

namespace {

fs::path tempDir()
{
    auto dir = fs::temp_directory_path() / ("pw-project-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir;
}

Project demoProject()
{
    auto p = newProject(pw::planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json"),
        pw::planner::loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json"));
    pw::planner::PartitionOptions o;
    o.schedule.microbatches = 8;
    auto uniform = pw::planner::findPartitioner("uniform")->partition({p.model, p.cluster, o}, {}, {});
    auto pipedream = pw::planner::findPartitioner("pipedream")->partition({p.model, p.cluster, o}, {}, {});
    REQUIRE(uniform.ok());
    REQUIRE(pipedream.ok());
    p.plan = *pipedream.plan;
    p.scenarios.push_back({"uniform", "the baseline", *uniform.plan});
    p.scenarios.push_back({"pipedream", "", *pipedream.plan});
    p.partition.algorithm = "bapipe";
    p.partition.params = {{"schedule", "1f1b-so"}};
    p.partition.schedule.microbatches = 24;
    return p;
}

std::string fileText(const fs::path& path)
{
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace

TEST_CASE("a project round-trips with its plan, scenarios and partition settings", "[project]")
{
    const auto dir = tempDir();
    const auto path = (dir / "demo.pwproj").string();
    const auto p = demoProject();
    saveProject(path, p);
    const auto back = loadProject(path);
    CHECK(back.name == p.name);
    CHECK(toJson(back) == toJson(p));
    REQUIRE(back.plan);
    CHECK(back.plan->configString() == p.plan->configString());
    CHECK(back.findScenario("uniform") == 0);
    CHECK(back.findScenario("nope") == -1);
    CHECK(back.scenarios[0].note == "the baseline");
    CHECK(back.partition.algorithm == "bapipe");
    CHECK(back.partition.params["schedule"] == "1f1b-so");
    CHECK(back.partition.schedule.microbatches == 24);
    // In memory the plans made for the project's model and cluster share its instances (nothing copied).
    CHECK(back.plan->model.sameInstance(back.model));
    CHECK(back.plan->cluster.sameInstance(back.cluster));
    CHECK(back.scenarios[0].plan.model.sameInstance(back.model));
    CHECK_FALSE(fs::exists(path + ".saving"));
    fs::remove_all(dir);
}

TEST_CASE("a save that fails leaves the old file as it was", "[project]")
{
    const auto dir = tempDir();
    const auto path = (dir / "keep.pwproj").string();
    auto p = demoProject();
    saveProject(path, p);
    const auto before = fileText(path);
    p.scenarios.push_back({"uniform", "", p.scenarios[0].plan}); // a duplicate name: invalid
    CHECK_THROWS_WITH(saveProject(path, p), Catch::Contains("two scenarios are named 'uniform'"));
    CHECK(fileText(path) == before);
    CHECK_THROWS_AS(saveProject((dir / "no-such-dir" / "x.pwproj").string(), demoProject()), InputError);
    CHECK(fileText(path) == before);
    fs::remove_all(dir);
}

TEST_CASE("bad project files name the file, the line and the field", "[project]")
{
    const auto dir = tempDir();
    const auto good = toJson(demoProject());
    auto write = [&](const nlohmann::json& j) {
        const auto path = (dir / "bad.pwproj").string();
        pw::planner::writeJsonFile(path, j, 1);
        return path;
    };
    auto noName = good;
    noName["scenarios"][1].erase("name");
    try {
        loadProject(write(noName));
        FAIL("expected an InputError");
    } catch (const InputError& e) {
        CHECK(e.source().find("bad.pwproj") != std::string::npos);
        CHECK(e.line() > 0);
        CHECK(e.field() == "/scenarios/1/name");
    }
    auto otherModel = good;
    otherModel["model"]["layers"][3]["forward_ms"] = 123.0;
    CHECK_THROWS_WITH(loadProject(write(otherModel)), Catch::Contains("another model"));
    auto badLayer = good;
    badLayer["scenarios"][0]["plan"]["model"]["layers"][2]["forward_ms"] = -1.0;
    try {
        loadProject(write(badLayer));
        FAIL("expected an InputError");
    } catch (const InputError& e) {
        CHECK(e.field() == "/scenarios/0/plan/model/layers/2/forward_ms");
        CHECK(e.line() > 0);
    }
    auto notProject = good;
    notProject["kind"] = "something-else";
    CHECK_THROWS_WITH(loadProject(write(notProject)), Catch::Contains("not a Pipewright project"));
    auto future = good;
    future["format_version"] = kProjectFormatVersion + 1;
    CHECK_THROWS_WITH(loadProject(write(future)), Catch::Contains("not supported"));
    CHECK_THROWS_AS(loadProject((dir / "missing.pwproj").string()), InputError);
    fs::remove_all(dir);
}

TEST_CASE("mutated project files load or are rejected with an InputError", "[project][fuzz]")
{
    const auto dir = tempDir();
    const auto path = (dir / "fuzz.pwproj").string();
    const std::string seed = toJson(demoProject()).dump(1);
    std::mt19937 rng(11);
    const std::string alphabet = "{}[]\",:0123456789-.eE truefalsnul";
    int rejected = 0;
    for (int round = 0; round < 300; ++round) {
        std::string s = seed;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const std::size_t at = rng() % s.size();
            switch (rng() % 3) {
            case 0:
                s[at] = alphabet[rng() % alphabet.size()];
                break;
            case 1:
                s.erase(at, 1 + rng() % 8);
                break;
            default:
                s.insert(at, 1, alphabet[rng() % alphabet.size()]);
            }
        }
        std::ofstream(path) << s;
        try {
            loadProject(path).validate(); // what loads is a valid project
        } catch (const InputError&) {
            ++rejected;
        }
    }
    CHECK(rejected > 0);
    fs::remove_all(dir);
}

TEST_CASE("a project file keeps node env names, not their values, unless marked safe to keep", "[project][security]")
{
    auto cluster = pw::planner::loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    cluster.nodes[0].env = {{"WANDB_API_KEY", "wandb-0123456789abcdef"}, {"GLOO_SOCKET_IFNAME", "eth1"}};
    cluster.nodes[0].env_keep = {"GLOO_SOCKET_IFNAME"};
    auto p = newProject(pw::planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json"), cluster);
    const auto path = (tempDir() / "secrets.pwproj").string();
    saveProject(path, p);
    std::ifstream in(path);
    std::stringstream fileText;
    fileText << in.rdbuf();
    CHECK(fileText.str().find("wandb-0123456789abcdef") == std::string::npos);
    CHECK(fileText.str().find("WANDB_API_KEY") != std::string::npos);
    const auto back = loadProject(path);
    CHECK(back.cluster->nodes[0].env.at("WANDB_API_KEY") == pw::planner::kRedactedValue);
    CHECK(back.cluster->nodes[0].env.at("GLOO_SOCKET_IFNAME") == "eth1");
    // Deploying what came back refuses, naming the variable, instead of setting the placeholder on the node.
    CHECK_THROWS_WITH(pw::app::requireEnvValues(*back.cluster), Catch::Contains("/nodes/0/env/WANDB_API_KEY"));
    CHECK_NOTHROW(pw::app::requireEnvValues(*p.cluster));
}
