// SPDX-License-Identifier: MIT
// Cluster: JSON contract, validation naming the field, devices, links and PipeDream's hierarchy.
#include <catch2/catch.hpp>

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
