// SPDX-License-Identifier: MIT
// Runs of a cluster whose node lists its devices' GPUs ("gpus", docs/formats.md): the controller gives each agent
// its CUDA device in the run spec and the agent trains there, or fails the run at once naming the device, what it
// sees (CUDA_VISIBLE_DEVICES) and the fix; on a GPU, two stages sharing one card give the CPU run's losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include <unistd.h>

#include "app/history/history.h"
#include "app/run/controller.h"
#include "engine/backend.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/process_helpers.h"
#include "tests/skip.h"

using namespace pw;
using Catch::Contains;

namespace {

app::RunRequest gpuRunRequest(const planner::Plan& plan, int steps)
{
    app::RunRequest r;
    r.plan = plan;
    r.plan_label = "gpu plan";
    r.training.steps = steps;
    r.training.data = {agents::DataKind::Synthetic, "", 1234};
    r.training.lr = 1e-2;
    r.training.seed = 1234;
    r.threads = 1;
    r.force = true;
    r.agent_executable = PW_AGENT_EXE;
    return r;
}

/// Two stages of the tiny GPT-2, both devices of the node on CUDA device 0 when `gpus`.
planner::Plan twoStages(bool gpus)
{
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    if (gpus) {
        planner::Cluster cluster = *plan.cluster;
        cluster.nodes[0].gpus = {0, 0};
        plan.cluster = cluster;
    }
    return plan;
}

/// Sets an environment variable for the scope (the agents the controller starts inherit it).
class ScopedEnv
{
public:
    ScopedEnv(const char* name, const char* value)
        : m_name(name)
    {
        if (const char* old = std::getenv(name))
            m_old = old;
        setenv(name, value, 1);
    }
    ~ScopedEnv()
    {
        if (m_old)
            setenv(m_name.c_str(), m_old->c_str(), 1);
        else
            unsetenv(m_name.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string m_name;
    std::optional<std::string> m_old;
};

} // namespace

TEST_CASE("a device on a GPU its agent does not see fails the run at once naming the device and the fix", "[run][gpu]")
{
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    const ScopedEnv hidden("CUDA_VISIBLE_DEVICES", "-1"); // no GPU, on any machine
    // The controller's own check refuses it before anything is recorded or started (a local run).
    {
        app::RunController controller(gpuRunRequest(twoStages(true), 3), history);
        CHECK_THROWS_WITH(controller.run(), Contains("/cluster/nodes/0/gpus") && Contains("cuda:0"));
        CHECK(history.listRuns().empty());
    }
    // Past that check (as a remote run's agents meet it), the agent refuses at once, naming the device and the fix.
    app::RunController controller(gpuRunRequest(twoStages(true), 3), history);
    const auto outcome = controller.run({}, app::CheckedRun {});
    CHECK(outcome.status == app::RunStatus::Failed);
    CHECK_THAT(outcome.message, Contains("(cuda:0)"));
    if (engine::cudaCompiledIn())
        CHECK_THAT(outcome.message,
            Contains("the agent sees 0 CUDA devices (CUDA_VISIBLE_DEVICES '-1'") && Contains("\"gpus\""));
    else
        CHECK_THAT(outcome.message, Contains("this agent was built without CUDA kernels"));
    CHECK(test::childAgents(getpid()).empty());
}

TEST_CASE("two stages sharing one GPU train as on the CPU in fp32", "[run][gpu][cuda]")
{
    if (engine::cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device here (or this build has no CUDA kernels)");
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    app::RunController cpuRun(gpuRunRequest(twoStages(false), 5), history);
    const auto cpu = cpuRun.run();
    REQUIRE(cpu.status == app::RunStatus::Succeeded);
    app::RunController gpuRun(gpuRunRequest(twoStages(true), 5), history);
    const auto gpu = gpuRun.run();
    INFO(gpu.message);
    REQUIRE(gpu.status == app::RunStatus::Succeeded);
    REQUIRE(gpu.losses.size() == cpu.losses.size());
    for (std::size_t i = 0; i < cpu.losses.size(); ++i)
        CHECK(std::abs(gpu.losses[i] - cpu.losses[i]) <= 1e-4 * std::abs(cpu.losses[i]));
}
