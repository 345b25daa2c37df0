// SPDX-License-Identifier: MIT
// What is checked of a run before it is recorded or an agent starts (app/run/run_checks.h): the settings, named as
// the CLI spells them; the seed as written; what the engine trains; what a local run asks of the machine.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "app/run/controller.h"
#include "app/run/gpu_devices.h"
#include "app/run/run_checks.h"
#include "engine/backend.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;
using Catch::Contains;

namespace {

app::RunRequest tinyRequest()
{
    app::RunRequest r;
    r.plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    return r;
}

std::string refusal(const app::RunRequest& r)
{
    try {
        app::validateRunSettings(r);
    } catch (const planner::InputError& e) {
        return e.what();
    }
    return {};
}

} // namespace

TEST_CASE("run settings out of range are refused naming the option", "[run-checks]")
{
    CHECK(refusal(tinyRequest()).empty());
    const auto with = [](auto change) {
        auto r = tinyRequest();
        change(r);
        return refusal(r);
    };
    CHECK(with([](auto& r) { r.training.lr = 0; }).empty()); // a learning rate of 0 evaluates; it is not refused
    CHECK_THAT(with([](auto& r) { r.training.lr = -1e-3; }),
        Contains("--lr (learning rate): must be a finite number >= 0, got -0.001"));
    CHECK_THAT(
        with([](auto& r) { r.training.lr = std::nan(""); }), Contains("--lr (learning rate)") && Contains("nan"));
    CHECK_THAT(with([](auto& r) { r.training.lr = std::numeric_limits<double>::infinity(); }), Contains("got inf"));
    CHECK_THAT(with([](auto& r) { r.training.weight_decay = -0.1; }), Contains("--weight-decay (weight decay)"));
    CHECK_THAT(
        with([](auto& r) { r.training.warmup_steps = -1; }), Contains("--warmup (warm-up steps): must be 0 or more"));
    CHECK_THAT(with([](auto& r) { r.threads = 0; }), Contains("--threads (threads per agent): must be at least 1"));
    CHECK_THAT(with([](auto& r) { r.threads = -2; }), Contains("got -2"));
    CHECK_THAT(with([](auto& r) { r.training.steps = 0; }), Contains("--steps (steps): must be at least 1, got 0"));
    CHECK(app::parseSeed("0") == 0);
    CHECK(app::parseSeed("18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
    for (const char* bad : {"-1", "18446744073709551616", "1e3", "", "12x"})
        CHECK_THROWS_WITH(app::parseSeed(bad), Contains("--seed (seed): must be a whole number from 0 to"));
}

TEST_CASE(
    "a local run beyond the machine is named with its numbers: agents, threads and memory against it", "[run-checks]")
{
    auto r = tinyRequest();
    const app::MachineResources two {2, 8.0 * (1 << 30)};
    auto load = app::localRunLoad(r, nullptr, two);
    CHECK(load == app::LocalRunLoad {2, 1, false, 0});
    CHECK(app::localRunExcess(load, two).empty());
    // Four agents on two cores.
    r.plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0, 1}}, {2, 3, {2, 3}}}, "1f1b");
    load = app::localRunLoad(r, nullptr, two);
    CHECK(load.agents == 4);
    CHECK(load.threads_per_agent == 1);
    CHECK(app::localRunExcess(load, two) == "the plan starts 4 agents (one per device) on this machine's 2 cores");
    // Threads asked above the cores.
    r = tinyRequest();
    r.threads = 3;
    CHECK(app::localRunExcess(app::localRunLoad(r, nullptr, two), two)
        == "--threads 3 per agent is above this machine's 2 cores");
    // The simulator's per-device peaks, summed over the agents, against the machine's memory.
    r = tinyRequest();
    const auto sim = planner::simulate(r.plan);
    load = app::localRunLoad(r, &sim, two);
    REQUIRE(sim.devices.size() == 2);
    CHECK(load.peak_memory_bytes == sim.devices[0].peak_memory_bytes + sim.devices[1].peak_memory_bytes);
    CHECK(load.peak_memory_bytes > 0);
    const app::MachineResources tiny {2, load.peak_memory_bytes / 2};
    CHECK_THAT(app::localRunExcess(load, tiny),
        Contains("the predicted peak memory of its 2 devices, " + planner::formatBytes(load.peak_memory_bytes)
            + " together, is above this machine's " + planner::formatBytes(load.peak_memory_bytes / 2) + " of memory"));
    const auto here = app::MachineResources::thisMachine();
    CHECK(here.cores >= 1);
    CHECK(here.memory_bytes > 0);
}

TEST_CASE("the bundled demo plan is one the engine trains as planned (fp32), a bf16 one is refused", "[run-checks]")
{
    const auto demo = planner::loadPlan(PW_DEMO_DIR "/gpt2-tiny-local.plan.json");
    CHECK_NOTHROW(app::checkTrainable(demo));
    auto bf16 = demo;
    bf16.schedule.precision = "bf16";
    CHECK_THROWS_WITH(app::checkTrainable(bf16), Contains("/schedule/precision") && Contains("fp32 only"));
}

TEST_CASE("a local run on GPUs this machine lacks is refused before it starts, naming the node's gpus", "[run-checks]")
{
    // issue 20: the check ran in the agent, after the run was recorded; now checkRun refuses it first. The GPU asked
    // for is one past those visible, so the test means the same here (none) and on a GPU machine.
    auto plan = planner::loadPlan(PW_DEMO_DIR "/gpt2-tiny-local.plan.json");
    const int visible = engine::cudaDeviceCount();
    plan.cluster.edit().nodes.front().gpus = {visible, visible};
    CHECK(app::trainsOnGpus(plan));
    CHECK_THROWS_WITH(app::checkLocalGpus(plan, nullptr),
        Contains("/nodes/0/gpus") && Contains("cuda:" + std::to_string(visible))
            && (Contains("CUDA device") || Contains("built without CUDA")));
    // Through the controller's check, with nothing recorded: the request is refused before any history exists.
    app::RunRequest request;
    request.plan = plan;
    request.training.steps = 2;
    CHECK_THROWS_WITH(app::checkRun(request), Contains("/nodes/0/gpus"));
    // A GPU device's memory is not counted against this machine's RAM.
    const auto sim = planner::simulate(plan);
    CHECK(app::localRunLoad(request, &sim, app::MachineResources::thisMachine()).peak_memory_bytes == 0);
    // On the CPU (no "gpus") nothing is asked of CUDA.
    auto cpu = planner::loadPlan(PW_DEMO_DIR "/gpt2-tiny-local.plan.json");
    CHECK_NOTHROW(app::checkLocalGpus(cpu, nullptr));
    // Its two devices share one GPU: one agent drives both (over its device fabric); on the CPU, an agent each.
    CHECK(app::localRunLoad(request, &sim, app::MachineResources::thisMachine()).agents == 1);
    request.plan = cpu;
    CHECK(app::localRunLoad(request, nullptr, app::MachineResources::thisMachine()).agents == 2);
}
