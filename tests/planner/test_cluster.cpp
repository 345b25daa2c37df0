// SPDX-License-Identifier: MIT
// Cluster: JSON contract, validation naming the field, devices, links and PipeDream's hierarchy.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/cluster.h"
#include "planner/errors.h"

using namespace pw::planner;
using nlohmann::json;

namespace {
json twoNodes()
{
    return {{"name", "c"}, {"device_types", {{{"name", "A"}, {"memory_bytes", 8e9}, {"peak_tflops", 10}}}},
        {"nodes",
            {{{"name", "n0"}, {"device_type", "A"}, {"count", 4}, {"intra_bandwidth_bytes_per_s", 1e11}},
                {{"name", "n1"}, {"device_type", "A"}, {"count", 4}, {"intra_bandwidth_bytes_per_s", 1e11}}}},
        {"inter_node_bandwidth_bytes_per_s", 1e10}};
}
} // namespace

TEST_CASE("cluster JSON accepts the fixed contract and numbers devices node by node", "[cluster]")
{
    auto c = clusterFromJson(twoNodes());
    CHECK(c.deviceCount() == 8);
    CHECK(c.device(5).node == 1);
    CHECK(c.device(5).local == 1);
    CHECK(c.deviceName(5) == "n1/gpu1");
    CHECK(c.bandwidth(0, 3) == 1e11);
    CHECK(c.bandwidth(0, 4) == 1e10);
    CHECK(c.groupBandwidth({0, 1, 2}) == 1e11);
    CHECK(c.groupBandwidth({0, 4}) == 1e10);
    auto levels = c.hierarchy();
    REQUIRE(levels.size() == 2);
    CHECK(levels[0].count == 4);
    CHECK(levels[1].count == 2);
    CHECK(levels[1].bandwidth_bytes_per_s == 1e10);
    CHECK(toJson(clusterFromJson(toJson(c))) == toJson(c));
}

TEST_CASE("groups spread over one-device nodes use the inter-node link", "[cluster]")
{
    auto j = twoNodes();
    j["nodes"][0]["count"] = 1;
    j["nodes"][1]["count"] = 1;
    j["nodes"][0].erase("intra_bandwidth_bytes_per_s");
    j["nodes"][1].erase("intra_bandwidth_bytes_per_s");
    auto c = clusterFromJson(j);
    CHECK(c.groupBandwidth({0, 1}) == 1e10);
}

TEST_CASE("cluster validation names the field", "[cluster]")
{
    auto expect = [](json j, const std::string& field) {
        try {
            clusterFromJson(j);
            FAIL("accepted an invalid cluster");
        } catch (const InputError& e) {
            CHECK(e.field() == field);
        }
    };
    auto zero = twoNodes();
    zero["nodes"][0]["count"] = 0;
    expect(zero, "/nodes/0/count");
    auto unknown = twoNodes();
    unknown["nodes"][1]["device_type"] = "B";
    expect(unknown, "/nodes/1/device_type");
    auto noInter = twoNodes();
    noInter.erase("inter_node_bandwidth_bytes_per_s");
    expect(noInter, "/inter_node_bandwidth_bytes_per_s");
    auto huge = twoNodes();
    huge["nodes"][0]["count"] = 2000000;
    expect(huge, "/nodes");
    auto noTypes = twoNodes();
    noTypes["device_types"] = json::array();
    expect(noTypes, "/device_types");
    auto uneven = clusterFromJson(twoNodes());
    uneven.nodes[1].count = 2;
    CHECK_THROWS_WITH(uneven.hierarchy(), Catch::Contains("equal size"));
}

namespace {
/// `nodes` nodes of `perNode` devices each, as a JSON cluster file would give them.
json manyNodes(int nodes, int perNode)
{
    json list = json::array();
    for (int n = 0; n < nodes; ++n)
        list.push_back({{"name", "n" + std::to_string(n)}, {"device_type", "A"}, {"count", perNode},
            {"intra_bandwidth_bytes_per_s", 1e11}});
    return {{"name", "big"}, {"device_types", {{{"name", "A"}, {"memory_bytes", 8e9}}}}, {"nodes", std::move(list)},
        {"inter_node_bandwidth_bytes_per_s", 1e10}};
}
} // namespace

// #10 item 3: deviceCount() and device(i) walked every node, so a cluster of 100,000 nodes took minutes to plan.
TEST_CASE("a large cluster indexes its devices once and answers every lookup from the index", "[cluster]")
{
    const Cluster c = clusterFromJson(manyNodes(20'000, 8));
    REQUIRE(c.deviceCount() == 160'000);
    bool allRight = true;
    for (int i = 0; i < c.deviceCount(); ++i) {
        auto d = c.device(i);
        allRight = allRight && d.node == i / 8 && d.local == i % 8 && d.type == 0;
    }
    CHECK(allRight);
    CHECK(c.deviceName(159'999) == "n19999/gpu7");
    CHECK(c.nodes.firstDevice(19'999) == 159'992);
    CHECK(c.nodes.indexBuilds() == 1);
    CHECK_THROWS_AS(c.device(160'000), std::out_of_range);
    CHECK_THROWS_AS(c.device(-1), std::out_of_range);

    // A copy shares the index until it is changed; the original keeps its own.
    Cluster copy = c;
    CHECK(copy.device(8).node == 1);
    CHECK(copy.nodes.indexBuilds() == 0);
}

TEST_CASE("the device index follows every change to the nodes", "[cluster]")
{
    Cluster c = clusterFromJson(twoNodes()); // n0: 4, n1: 4
    CHECK(c.device(4).node == 1);
    c.nodes[0].count = 2; // through a non-const reference
    CHECK(c.deviceCount() == 6);
    CHECK(c.device(2).node == 1);
    CHECK(c.device(2).local == 0);
    c.nodes.push_back({"n2", "", 22, "", "A", 3, 1e11, 0});
    CHECK(c.deviceCount() == 9);
    CHECK(c.deviceName(8) == "n2/gpu2");
    c.nodes.insert(c.nodes.begin(), Node {"first", "", 22, "", "A", 1, 0, 0});
    CHECK(c.device(0).node == 0);
    CHECK(c.device(1).node == 1);
    CHECK(c.deviceName(3) == "n1/gpu0");
    c.nodes.erase(c.nodes.begin() + 1, c.nodes.begin() + 3); // drops n0 and n1
    CHECK(c.deviceCount() == 4);
    CHECK(c.deviceName(3) == "n2/gpu2");
    for (auto& n : c.nodes)
        n.count = 5;
    CHECK(c.deviceCount() == 10);
    CHECK(c.device(9).local == 4);
    c.nodes = {Node {"only", "", 22, "", "A", 1, 0, 0}};
    CHECK(c.deviceCount() == 1);
    CHECK_THROWS_AS(c.device(1), std::out_of_range);
    c.nodes.clear();
    CHECK(c.deviceCount() == 0);
}

TEST_CASE("device lookups on one cluster from several threads agree", "[cluster]")
{
    const Cluster c = clusterFromJson(manyNodes(2'000, 4));
    std::vector<int> wrong(4, 0);
    {
        std::vector<std::jthread> pool;
        for (int t = 0; t < 4; ++t)
            pool.emplace_back([&, t] {
                for (int i = t; i < c.deviceCount(); i += 4)
                    wrong[t] += c.device(i).node != i / 4;
            });
    }
    CHECK(wrong == std::vector<int>(4, 0));
    CHECK(c.nodes.indexBuilds() == 1);
}

// #10 item 4: a bandwidth of 1e-320 bytes/s turned every transfer into `inf s` and the bubble into `-nan %`.
TEST_CASE("a bandwidth below 1 byte/s is an error naming the field", "[cluster]")
{
    auto expectBad = [](json j, const std::string& field) {
        try {
            clusterFromJson(j);
            FAIL("accepted a bandwidth below 1 byte/s at " << field);
        } catch (const InputError& e) {
            CHECK(e.field() == field);
            CHECK(e.message().find("at least 1 byte/s") != std::string::npos);
        }
    };
    auto j = twoNodes();
    j["nodes"][1]["intra_bandwidth_bytes_per_s"] = 1e-320;
    expectBad(j, "/nodes/1/intra_bandwidth_bytes_per_s");
    j = twoNodes();
    j["inter_node_bandwidth_bytes_per_s"] = 0.5;
    expectBad(j, "/inter_node_bandwidth_bytes_per_s");
    j = twoNodes();
    j["device_types"][0]["memory_bandwidth_bytes_per_s"] = 1e-9;
    expectBad(j, "/device_types/0/memory_bandwidth_bytes_per_s");
    j = twoNodes();
    j["inter_node_bandwidth_bytes_per_s"] = 1; // slow but meant
    CHECK_NOTHROW(clusterFromJson(j));
}

TEST_CASE("env values are redacted in every cluster JSON written, names kept, unless the name is in env_keep",
    "[cluster][security]")
{
    auto c = clusterFromJson(twoNodes());
    c.nodes[0].env = {{"HF_TOKEN", "hf_s3cr3t-value"}, {"CUDA_VISIBLE_DEVICES", "0,1"}, {"NCCL_IB_HCA", "mlx5"}};
    c.nodes[0].env_keep = {"CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA"};
    const auto text = pw::planner::toJson(c).dump();
    CHECK(text.find("hf_s3cr3t-value") == std::string::npos);
    CHECK(text.find("HF_TOKEN") != std::string::npos);
    const auto back = pw::planner::clusterFromJson(nlohmann::json::parse(text));
    CHECK(back.nodes[0].env.at("HF_TOKEN") == pw::planner::kRedactedValue);
    CHECK(back.nodes[0].env.at("CUDA_VISIBLE_DEVICES") == "0,1");
    CHECK(back.nodes[0].env.at("NCCL_IB_HCA") == "mlx5");
    CHECK(back.nodes[0].env_keep == c.nodes[0].env_keep);
    CHECK(back.nodes[0].redactedEnv() == std::vector<std::string> {"HF_TOKEN"});
    CHECK(c.nodes[0].redactedEnv().empty());
    auto bad = pw::planner::toJson(c);
    bad["nodes"][0]["env_keep"] = nlohmann::json::array({"CUDA_VISIBLE_DEVICES", 7});
    CHECK_THROWS_WITH(pw::planner::clusterFromJson(bad), Catch::Contains("/nodes/0/env_keep/1"));
}
