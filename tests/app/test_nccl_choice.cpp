// SPDX-License-Identifier: MIT
// Which transport a run's agents talk (app/run/gpu_devices.h runTransport): NCCL only when every device of the
// plan trains on a GPU of its own, whatever the nodes' CUDA_VISIBLE_DEVICES renumber; Gloo for a device on the CPU
// and for devices sharing one physical GPU (NCCL refuses two ranks on one GPU). And pre-flight's NCCL check
// (ncclCheck): the nodes of an NCCL run must all have NCCL, in one version, or the check names the nodes and
// versions.
#include <catch2/catch.hpp>

#include "app/run/gpu_devices.h"
#include "app/run/preflight.h"
#include "planner/physical_gpu.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;
using Catch::Contains;

namespace {

/// A 2-stage plan over two nodes of one device each, "a" and "b", on `host` (empty: the node's name).
planner::Plan twoNodes(
    std::vector<int> gpusA, std::vector<int> gpusB, const std::string& hostA = "", const std::string& hostB = "")
{
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    planner::Cluster cluster = *plan.cluster;
    cluster.nodes = {{"a", hostA, 22, "", cluster.device_types[0].name, 1, 1e10, 1e-6},
        {"b", hostB, 22, "", cluster.device_types[0].name, 1, 1e10, 1e-6}};
    cluster.nodes[0].gpus = std::move(gpusA);
    cluster.nodes[1].gpus = std::move(gpusB);
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    plan.cluster = cluster;
    plan.validate();
    return plan;
}

} // namespace

TEST_CASE("NCCL is the transport when every device has a GPU of its own", "[gpu-devices]")
{
    CHECK(app::runTransport(twoNodes({0}, {0})) == agents::Transport::Nccl); // two hosts
    CHECK(app::runTransport(twoNodes({0}, {1}, "gpubox", "gpubox")) == agents::Transport::Nccl);
    CHECK(planner::physicalGpu(*twoNodes({0}, {1}, "gpubox", "gpubox").cluster, 1) == "gpubox/1");
    CHECK_FALSE(planner::physicalGpu(*twoNodes({}, {0}).cluster, 0).has_value());
}

TEST_CASE("Gloo is the transport for a CPU device or two devices on one physical GPU", "[gpu-devices]")
{
    CHECK(app::runTransport(twoNodes({}, {0})) == agents::Transport::Gloo);
    CHECK(app::runTransport(twoNodes({}, {})) == agents::Transport::Gloo);
    CHECK(app::runTransport(twoNodes({0}, {0}, "gpubox", "gpubox")) == agents::Transport::Gloo);

    // Both nodes see their GPU as index 0, but the masks say which card that is.
    auto plan = twoNodes({0}, {0}, "gpubox", "gpubox");
    planner::Cluster cluster = *plan.cluster;
    cluster.nodes[0].env["CUDA_VISIBLE_DEVICES"] = "2,3";
    cluster.nodes[1].env["CUDA_VISIBLE_DEVICES"] = "3";
    plan.cluster = cluster;
    CHECK(app::runTransport(plan) == agents::Transport::Nccl);
    CHECK(planner::physicalGpu(*plan.cluster, 0) == "gpubox/2");
    cluster.nodes[1].env["CUDA_VISIBLE_DEVICES"] = "2";
    plan.cluster = cluster;
    CHECK(app::runTransport(plan) == agents::Transport::Gloo);

    // One node whose two devices share its one GPU.
    auto shared = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    planner::Cluster one = *shared.cluster;
    one.nodes = {{"gpu", "", 22, "", one.device_types[0].name, 2, 1e10, 1e-6}};
    one.nodes[0].gpus = {0, 0};
    shared.cluster = one;
    shared.validate();
    CHECK(app::runTransport(shared) == agents::Transport::Gloo);
    one.nodes[0].gpus = {0, 1};
    shared.cluster = one;
    CHECK(app::runTransport(shared) == agents::Transport::Nccl);
}

TEST_CASE("devices sharing a physical GPU are one agent's, every other device an agent of its own", "[gpu-devices]")
{
    using Groups = std::vector<std::vector<int>>;
    CHECK(app::agentDevices(twoNodes({0}, {0})) == Groups {{0}, {1}}); // two hosts
    CHECK(app::agentDevices(twoNodes({}, {})) == Groups {{0}, {1}}); // CPUs
    CHECK(app::agentDevices(twoNodes({0}, {0}, "gpubox", "gpubox")) == Groups {{0, 1}}); // one card, two nodes

    // Four stages on one node: devices 0 and 2 on GPU 0, 1 and 3 on GPU 1, device 4 on the CPU node.
    auto plan
        = test::gpt2Plan(test::tinyGpt2(4), {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 4, {3}}, {5, 5, {4}}}, "1f1b");
    planner::Cluster cluster = *plan.cluster;
    cluster.nodes = {{"gpu", "", 22, "", cluster.device_types[0].name, 4, 1e10, 1e-6},
        {"cpu", "", 22, "", cluster.device_types[0].name, 1, 1e10, 1e-6}};
    cluster.nodes[0].gpus = {0, 1, 0, 1};
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    plan.cluster = cluster;
    plan.validate();
    CHECK(app::agentDevices(plan) == Groups {{0, 2}, {1, 3}, {4}});
    CHECK(app::runTransport(plan) == agents::Transport::Gloo); // between the agents
}

TEST_CASE("pre-flight's NCCL check wants one NCCL version on every node of an NCCL run", "[gpu-devices]")
{
    const auto nccl = twoNodes({0}, {0});
    const auto same = app::ncclCheck(nccl, {{"a", "2.28.9"}, {"b", "2.28.9"}});
    REQUIRE(same);
    CHECK(same->ok);
    CHECK(same->check == "NCCL version");
    CHECK_THAT(same->detail, Contains("NCCL 2.28.9 on a, b"));

    const auto differ = app::ncclCheck(nccl, {{"a", "2.28.9"}, {"b", "2.21.5"}});
    REQUIRE(differ);
    CHECK_FALSE(differ->ok);
    CHECK_THAT(differ->detail, Contains("differ") && Contains("NCCL 2.21.5 on b") && Contains("NCCL 2.28.9 on a"));
    CHECK_THAT(differ->fix, Contains("same NCCL"));

    const auto missing = app::ncclCheck(nccl, {{"a", "2.28.9"}, {"b", "not found"}});
    REQUIRE(missing);
    CHECK_FALSE(missing->ok);
    CHECK_THAT(missing->detail, Contains("node b") && Contains("no NCCL"));
    CHECK_THAT(missing->fix, Contains("LD_LIBRARY_PATH"));

    // A run that does not talk NCCL has no NCCL check, whatever the nodes have.
    CHECK_FALSE(app::ncclCheck(twoNodes({}, {0}), {{"a", "not found"}, {"b", "2.28.9"}}).has_value());
}
