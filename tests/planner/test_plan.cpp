// SPDX-License-Identifier: MIT
// Plan: JSON round trip, the validation rules of docs/formats.md, and bounds on what a plan may ask for.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "planner/errors.h"
#include "planner/plan.h"

using namespace pw::planner;
using nlohmann::json;

namespace {
Plan threeLayerPlan(bool graph)
{
    Plan p;
    p.model.edit().is_graph = graph;
    for (int i = 0; i < 3; ++i) {
        Layer l;
        l.name = "l" + std::to_string(i);
        l.forward_ms = 1;
        l.backward_ms = 2;
        if (graph && i > 0)
            l.inputs = {i - 1};
        p.model.edit().layers.push_back(l);
    }
    p.cluster.edit().device_types = {{"gpu", 1e9, 1, 0, {}, 0}};
    p.cluster.edit().nodes = {{"n", "n", 22, "", "gpu", 2, 1e10, 0}};
    p.stages = {{0, 1, {0}}, {2, 2, {1}}};
    return p;
}

std::string fieldOf(const json& j)
{
    try {
        planFromJson(j);
    } catch (const InputError& e) {
        return e.field();
    }
    return "accepted";
}
} // namespace

TEST_CASE("plan JSON round-trips and carries its model and cluster", "[plan]")
{
    auto p = threeLayerPlan(false);
    p.validate();
    auto j = toJson(p);
    CHECK(j.at("config") == "1-1");
    CHECK(j.at("provenance").at("model_digest").get<std::string>().size() == 16);
    CHECK(toJson(planFromJson(j)) == j);

    // The prediction a planner or the app recorded comes back too (it was written but not read before).
    p.predicted = PredictedMetrics {0.25, 512, 0.125, {1e9, 2.5e9}};
    j = toJson(p);
    const Plan back = planFromJson(j);
    REQUIRE(back.predicted.has_value());
    CHECK(back.predicted->throughput_samples_per_s == 512);
    CHECK(back.predicted->stage_peak_memory_bytes == std::vector<double> {1e9, 2.5e9});
    CHECK(toJson(back) == j);
    j["predicted"]["stage_peak_memory_bytes"][1] = "big";
    CHECK(fieldOf(j) == "/predicted/stage_peak_memory_bytes/1");
    j["predicted"].erase("stage_peak_memory_bytes");
    j["predicted"]["bubble_fraction"] = -1;
    CHECK(fieldOf(j) == "/predicted/bubble_fraction");
}

TEST_CASE("plan validation rejects what cannot run, naming the field", "[plan]")
{
    auto j = toJson(threeLayerPlan(false));
    auto gap = j;
    gap["stages"][1]["first_layer"] = 3;
    CHECK(fieldOf(gap) == "/stages/1/first_layer");
    auto twice = j;
    twice["stages"][1]["devices"] = {0};
    CHECK(fieldOf(twice) == "/stages/1/devices");
    auto missing = j;
    missing["stages"][1]["devices"] = {7};
    CHECK(fieldOf(missing) == "/stages/1/devices/0");
    auto overflow = j;
    overflow["stages"][1]["devices"] = {4294967296LL};
    CHECK(fieldOf(overflow) == "/stages/1/devices/0");
    auto lots = j;
    lots["schedule"]["microbatches"] = 2000000;
    CHECK(fieldOf(lots) == "/schedule/microbatches");
    auto chunks = j;
    chunks["schedule"]["chunks"] = 3;
    CHECK(fieldOf(chunks) == "/schedule/chunks");
    auto optimizer = j;
    optimizer["schedule"]["optimizer"] = "lion";
    CHECK(fieldOf(optimizer) == "/schedule/optimizer");
    auto reordered = j;
    reordered["layer_order"] = {1, 0, 2};
    CHECK(fieldOf(reordered) == "/layer_order/0");
}

TEST_CASE("a graph plan's layer order must stay topological", "[plan]")
{
    auto p = threeLayerPlan(true);
    p.layer_order = {0, 2, 1};
    CHECK_THROWS_WITH(p.validate(), Catch::Contains("before its input"));
    p.layer_order = {0, 1, 2};
    CHECK_NOTHROW(p.validate());
}

TEST_CASE("a device's role names its stages, replica and tensor rank", "[plan]")
{
    Plan p = threeLayerPlan(false);
    CHECK(p.deviceRole(0) == "stage 0");
    CHECK(p.deviceRole(1) == "stage 1");
    CHECK(p.deviceRole(5).empty());
    p.stages = {{0, 1, {0, 1, 2, 3}}, {2, 2, {4, 5}}};
    CHECK(p.deviceRole(3) == "stage 0, replica 3");
    p.tensor_parallel = 2;
    CHECK(p.deviceRole(3) == "stage 0, replica 1, tensor rank 1/2");
    CHECK(p.deviceRole(4) == "stage 1, tensor rank 0/2");
    p.tensor_parallel = 1;
    p.stages = {{0, 0, {0}}, {1, 1, {1}}, {2, 2, {0}}};
    CHECK(p.deviceRole(0) == "stages 0+2");
}
