// SPDX-License-Identifier: MIT
#include "demo_project.h"

#include <cstdlib>
#include <filesystem>

#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

namespace pw::app {

std::string demoDirectory()
{
    namespace fs = std::filesystem;
    if (const char* env = std::getenv("PIPEWRIGHT_DEMO_DIR"); env && *env)
        return env;
    // An installed program (bin/ beside share/: /usr/bin/pipewright, the .deb) reads its own copy first, so that
    // it never depends on the source tree it was built from still being there, nor reads a newer one.
    std::error_code ec;
    auto exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        auto shared = exe.parent_path().parent_path() / "share" / "pipewright" / "demo";
        if (fs::exists(shared / "gpt-demo.json"))
            return shared.string();
    }
    for (const char* dir : {PW_DEMO_DIR, PW_INSTALLED_DEMO_DIR})
        if (fs::exists(fs::path(dir) / "gpt-demo.json"))
            return dir;
    throw planner::InputError("cannot find the bundled demo; set PIPEWRIGHT_DEMO_DIR to resources/demo");
}

namespace {

planner::Plan planWith(const Project& project, const std::string& algorithm, const std::string& kind, int chunks = 1)
{
    planner::PartitionOptions options;
    options.schedule.kind = kind;
    options.schedule.microbatches = 16;
    options.schedule.chunks = chunks;
    if (chunks > 1)
        options.stages = 0;
    const planner::Partitioner* partitioner = planner::findPartitioner(algorithm);
    auto result = partitioner->partition({project.model, project.cluster, options}, {}, {});
    if (!result.ok())
        throw planner::InputError("demo project: " + algorithm + ": " + result.errorText());
    result.plan->predicted = planner::predictedMetrics(planner::simulate(*result.plan, {false, false}));
    return std::move(*result.plan);
}

} // namespace

Project demoProject()
{
    namespace fs = std::filesystem;
    const fs::path dir = demoDirectory();
    Project project = newProject(
        planner::loadModel((dir / "gpt-demo.json").string()), planner::loadCluster((dir / "dgx-h100.json").string()));
    project.name = "Demo: " + project.model->name + " on " + project.cluster->name;
    project.partition.algorithm = "pipedream";
    project.partition.schedule.kind = "1f1b";
    project.partition.schedule.microbatches = 16;
    project.plan = planWith(project, "pipedream", "1f1b");
    project.scenarios.push_back({"PipeDream, 1F1B", "PipeDream's DP with replication", *project.plan});
    project.scenarios.push_back(
        {"8 stages, GPipe", "uniform layers, one stage per GPU", planWith(project, "uniform", "gpipe")});
    project.scenarios.push_back(
        {"8 stages, 1F1B", "uniform layers, one stage per GPU", planWith(project, "uniform", "1f1b")});
    project.scenarios.push_back({"8 stages x 2, interleaved", "uniform layers, two chunks per GPU",
        planWith(project, "uniform", "interleaved", 2)});
    project.validate();
    return project;
}

} // namespace pw::app
