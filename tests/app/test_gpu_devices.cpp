// SPDX-License-Identifier: MIT
// A cluster's devices on its nodes' GPUs (the node's "gpus", docs/formats.md): the field read, written and checked;
// the CUDA device and precision the controller puts in each agent's run spec; pre-flight's device checks of a node
// from its agent's capabilities (enough GPUs, the kernels' compute capability, the predicted memory free), each
// failure naming the node, the GPU and the fix.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "app/run/gpu_devices.h"
#include "app/run/preflight.h"
#include "planner/errors.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;
using Catch::Contains;
using nlohmann::json;

namespace {

constexpr double kGiB = double(1 << 30);

/// Four one-layer stages: devices 0-2 on "gpu-node" (devices 0 and 1 share CUDA device 0, device 2 is on CUDA
/// device 1), device 3 on "cpu-node".
planner::Plan gpuPlan()
{
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 0, {0}}, {1, 1, {1}}, {2, 2, {2}}, {3, 3, {3}}}, "1f1b");
    planner::Cluster cluster = *plan.cluster;
    cluster.device_types[0].memory_bytes = 40 * kGiB;
    cluster.nodes = {{"gpu-node", "", 22, "", cluster.device_types[0].name, 3, 1e10, 1e-6},
        {"cpu-node", "", 22, "", cluster.device_types[0].name, 1, 0, 0}};
    cluster.nodes[0].gpus = {0, 0, 1};
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    plan.cluster = cluster;
    plan.validate();
    return plan;
}

agents::Hello gpuHello(std::vector<agents::GpuCapability> gpus)
{
    agents::Hello h;
    h.cores = 16;
    h.gpus = std::move(gpus);
    h.cuda = {true, "13.0", "13.0", "13.1.0", "2.28.9", {80, 90}, ""};
    return h;
}

const agents::GpuCapability kH100 {0, "NVIDIA H100", std::int64_t(80) << 30, std::int64_t(79) << 30, 9, 0};

std::string loadError(const json& j)
{
    try {
        planner::clusterFromJson(j);
    } catch (const planner::InputError& e) {
        return planner::formatInputError(e);
    }
    return {};
}

} // namespace

TEST_CASE("a node's gpus map its devices onto CUDA devices - absent means CPU devices", "[gpu-devices]")
{
    const auto plan = gpuPlan();
    const json j = planner::toJson(*plan.cluster);
    CHECK(j["nodes"][0]["gpus"] == json::array({0, 0, 1}));
    CHECK_FALSE(j["nodes"][1].contains("gpus")); // not written for a CPU node
    CHECK(planner::clusterFromJson(j) == *plan.cluster);

    json bad = j;
    bad["nodes"][0]["gpus"] = json::array({0, 1});
    CHECK_THAT(loadError(bad), Contains("/nodes/0/gpus") && Contains("lists 2 GPUs for the node's 3 devices"));
    bad["nodes"][0]["gpus"] = json::array({0, -1, 1});
    CHECK_THAT(loadError(bad), Contains("/nodes/0/gpus/1") && Contains("CUDA device index"));
    bad["nodes"][0]["gpus"] = json::array({0, "1", 1});
    CHECK_THAT(loadError(bad), Contains("/nodes/0/gpus/1"));
    bad["nodes"][0]["gpus"] = json::array({0, std::uint64_t(1) << 40, 1});
    CHECK_THAT(loadError(bad), Contains("/nodes/0/gpus/1")); // never wrapped into a small index

    CHECK(app::cudaDeviceOf(*plan.cluster, 0) == 0);
    CHECK(app::cudaDeviceOf(*plan.cluster, 1) == 0);
    CHECK(app::cudaDeviceOf(*plan.cluster, 2) == 1);
    CHECK_FALSE(app::cudaDeviceOf(*plan.cluster, 3));
}

TEST_CASE(
    "the run spec of an agent names its CUDA device and the plan's precision - a CPU agent's neither", "[gpu-devices]")
{
    auto plan = gpuPlan();
    agents::RunSpec spec;
    spec.devices = {2};
    app::assignDevices(spec, plan);
    CHECK(spec.cuda_devices == std::vector<int> {1});
    CHECK(spec.precision == agents::Precision::Fp32);
    spec.devices = {3};
    app::assignDevices(spec, plan);
    CHECK(spec.cuda_devices.empty()); // exactly as a CPU run's spec was before GPUs
    CHECK(spec.precision == agents::Precision::Fp32);
    spec.devices = {1, 3};
    app::assignDevices(spec, plan);
    CHECK(spec.cuda_devices == std::vector<int> {0, -1});

    plan.schedule.precision = "bf16";
    CHECK(app::gpuPrecision(plan) == agents::Precision::Bf16);
    spec.devices = {0};
    app::assignDevices(spec, plan);
    CHECK(spec.precision == agents::Precision::Bf16);
    plan.schedule.precision = "fp16";
    CHECK_THROWS_WITH(app::gpuPrecision(plan), Contains("/schedule/precision") && Contains("fp16"));
}

TEST_CASE("pre-flight checks a GPU node's GPUs from its agent's capabilities", "[gpu-devices]")
{
    const auto plan = gpuPlan();
    const auto& cluster = *plan.cluster;
    const auto find = [](const std::vector<app::PreflightCheck>& checks, const std::string& name) {
        for (const auto& c : checks)
            if (c.check == name)
                return c;
        FAIL("no check " << name);
        return app::PreflightCheck {};
    };
    // Devices 0 and 1 (cuda:0) predicted at 30 + 20 GiB, device 2 (cuda:1) at 50 GiB.
    app::PredictedMemory predicted {{30 * kGiB, 20 * kGiB, 50 * kGiB, 1 * kGiB}, ""};

    SECTION("a CPU node counts cores, as before")
    {
        const auto checks = app::deviceChecks(cluster, &plan, 1, predicted, gpuHello({}), "u@cpu-node");
        REQUIRE(checks.size() == 1);
        CHECK(checks[0].ok);
        CHECK(checks[0].detail == "1 CPU device(s) needed, 16 cores found");
    }
    SECTION("every check passes on two H100s")
    {
        auto second = kH100;
        second.index = 1;
        const auto checks = app::deviceChecks(cluster, &plan, 0, predicted, gpuHello({kH100, second}), "u@gpu");
        REQUIRE(checks.size() == 5); // devices, then kernels and memory per GPU
        for (const auto& c : checks) {
            INFO(c.check << ": " << c.detail);
            CHECK(c.ok);
            CHECK(c.node == "gpu-node");
            CHECK(c.fix.empty());
        }
        CHECK_THAT(find(checks, "devices").detail,
            Contains("3 GPU device(s) needed: cuda:0 for device(s) 0, 1; cuda:1 for device(s) 2"));
        CHECK_THAT(find(checks, "GPU cuda:0 memory").detail,
            Contains("predicted peak 50.00 GiB for device(s) 0, 1") && Contains("79.00 GiB free"));
        CHECK_THAT(find(checks, "GPU cuda:1 kernels").detail,
            Contains("compute capability 9.0: runs the agent's kernels (built for sm_80, sm_90)"));
    }
    SECTION("a GPU the agent does not see")
    {
        const auto checks = app::deviceChecks(cluster, &plan, 0, predicted, gpuHello({kH100}), "u@gpu");
        REQUIRE(checks.size() == 1); // nothing to check on a GPU that is not there
        CHECK_FALSE(checks[0].ok);
        CHECK_THAT(checks[0].detail, Contains("needs CUDA device(s) 1, the agent sees 1 GPU(s): cuda:0 NVIDIA H100"));
        CHECK_THAT(checks[0].fix, Contains("CUDA_VISIBLE_DEVICES") && Contains("\"gpus\""));
    }
    SECTION("an agent built without CUDA")
    {
        auto hello = gpuHello({});
        hello.cuda = {false, "", "13.0", "", "not found", {}, "this build has no CUDA kernels"};
        const auto checks = app::deviceChecks(cluster, &plan, 0, predicted, hello, "u@gpu");
        REQUIRE(checks.size() == 1);
        CHECK_FALSE(checks[0].ok);
        CHECK_THAT(checks[0].detail, Contains("the agent was built without CUDA"));
        CHECK_THAT(checks[0].fix, Contains("PW_WITH_CUDA"));
    }
    SECTION("too little free memory, and a GPU older than the kernels")
    {
        const agents::GpuCapability t4 {1, "Tesla T4", std::int64_t(16) << 30, std::int64_t(15) << 30, 7, 5};
        const auto checks = app::deviceChecks(cluster, &plan, 0, predicted, gpuHello({kH100, t4}), "u@gpu");
        REQUIRE(checks.size() == 5);
        CHECK(find(checks, "GPU cuda:0 kernels").ok);
        CHECK(find(checks, "GPU cuda:0 memory").ok);
        const auto kernels = find(checks, "GPU cuda:1 kernels");
        CHECK_FALSE(kernels.ok);
        CHECK_THAT(kernels.detail, Contains("Tesla T4, compute capability 7.5: does not run the agent's kernels"));
        CHECK_THAT(kernels.fix, Contains("compute capability 8.0 or newer"));
        const auto memory = find(checks, "GPU cuda:1 memory");
        CHECK_FALSE(memory.ok);
        CHECK(memory.node == "gpu-node");
        CHECK_THAT(memory.detail, Contains("Tesla T4: predicted peak 50.00 GiB for device(s) 2, 15.00 GiB free"));
        CHECK_THAT(memory.fix, Contains("free memory on that GPU"));
    }
    SECTION("without a prediction: the cluster's memory against the GPU's total, saying so")
    {
        auto second = kH100;
        second.index = 1;
        second.memory_bytes = std::int64_t(32) << 30;
        const app::PredictedMemory none {{}, "the schedule deadlocks"};
        const auto checks = app::deviceChecks(cluster, &plan, 0, none, gpuHello({kH100, second}), "u@gpu");
        const auto shared = find(checks, "GPU cuda:0 memory"); // two devices of 40 GiB on an 80 GiB GPU
        CHECK(shared.ok);
        CHECK_THAT(
            shared.detail, Contains("no predicted peak (the schedule deadlocks)") && Contains("80.00 GiB in all"));
        CHECK_FALSE(find(checks, "GPU cuda:1 memory").ok); // 40 GiB asked of a 32 GiB GPU
    }
}

TEST_CASE("pre-flight's prediction is the simulator's peak of every device", "[gpu-devices]")
{
    const auto predicted = app::predictedMemory(gpuPlan());
    CHECK(predicted.why.empty());
    REQUIRE(predicted.peak_bytes.size() == 4);
    for (double b : predicted.peak_bytes)
        CHECK(b > 0);
}
