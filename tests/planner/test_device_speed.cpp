// SPDX-License-Identifier: MIT
// Device speed on a model (issue 10 item 1): measured times, relative_speed, the profiled device and, when nothing
// better is known, peak FLOP/s relative to the profiled device; the simulator and the heterogeneous planners
// (HetPipe, BaPipe, Megatron's search) plan with it and say when it is a guess.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/costs.h"
#include "planner/device_presets.h"
#include "planner/io/transformer.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

constexpr double kSlowPeak = 121; // TFLOP/s: the "H100 + (121 TFLOP/s) device" cluster

DeviceType slowType()
{
    DeviceType t;
    t.name = "slow";
    t.memory_bytes = 80e9;
    t.peak_tflops = kSlowPeak;
    return t;
}

/// `perType` devices of each of `types`, one node per type, fast links.
Cluster clusterOf(const std::vector<DeviceType>& types, int perType)
{
    Cluster c;
    c.name = "mixed";
    c.device_types = types;
    for (const auto& t : types)
        c.nodes.push_back({"node-" + t.name, "", 22, "", t.name, perType, 4.5e11, 5e-6});
    c.inter_node_bandwidth_bytes_per_s = 5e10;
    c.inter_node_latency_s = 1e-5;
    return c;
}

ModelProfile deviceSpeedGpt()
{
    return transformerProfile({12, 1024, 16, 1024, 51200, 4, 2}, *devicePreset("H100")); // profiled on H100
}

bool hasCode(const PartitionResult& r, const std::string& code)
{
    return std::any_of(r.diagnostics.begin(), r.diagnostics.end(), [&](const auto& d) { return d.code == code; });
}

/// Transformer layers of the stages on devices of `type` (per stage, in order).
std::vector<int> layersOn(const Plan& plan, const std::string& type)
{
    std::vector<int> out;
    for (const auto& st : plan.stages)
        if (plan.cluster->typeOf(st.devices[0]).name == type)
            out.push_back(st.layerCount());
    return out;
}

} // namespace

TEST_CASE("deviceSpeed: relative_speed, measured times, the profiled device, peak ratio, unknown", "[device-speed]")
{
    auto model = deviceSpeedGpt();
    const auto h100 = *devicePreset("H100");
    using Source = DeviceSpeed::Source;

    // The profiled device, matched case-insensitively.
    auto lower = h100;
    lower.name = "h100";
    CHECK(deviceSpeed(lower, model).source == Source::Profiled);
    CHECK(deviceSpeed(lower, model).factor == 1.0);

    // Peak ratio against the profiled device: its peak from `types` first, else the preset.
    const auto slow = deviceSpeed(slowType(), model);
    CHECK(slow.source == Source::PeakRatio);
    CHECK(slow.estimated());
    CHECK(slow.factor == Approx(kSlowPeak / 989.0));
    auto tunedH100 = h100;
    tunedH100.peak_tflops = 242; // a cluster file that says what its H100 reaches
    CHECK(deviceSpeed(slowType(), model, {tunedH100, slowType()}).factor == Approx(0.5));
    CHECK_FALSE(speedNote(slowType(), model, slow).empty());

    // relative_speed beats the peak ratio.
    auto given = slowType();
    given.relative_speed = 0.25;
    CHECK(deviceSpeed(given, model).source == Source::Relative);
    CHECK(deviceSpeed(given, model).factor == 0.25);
    CHECK(speedNote(given, model, deviceSpeed(given, model)).empty());

    // Measured times on some layers: their ratio serves the unmeasured ones.
    auto measured = model;
    measured.layers[3].device_times["slow"] = {measured.layers[3].forward_ms * 3, measured.layers[3].backward_ms * 3};
    const auto m = deviceSpeed(slowType(), measured);
    CHECK(m.source == Source::Measured);
    CHECK(m.factor == Approx(1.0 / 3));
    CHECK(
        layerTimesOn(measured.layers[4], slowType(), m.factor).forward_ms == Approx(measured.layers[4].forward_ms * 3));
    CHECK(layerTimesOn(measured.layers[3], slowType(), 123.0).forward_ms == measured.layers[3].forward_ms * 3);

    // Nothing known: no profiled device, or no peak on either side.
    auto anonymous = model;
    anonymous.profiled_device.clear();
    CHECK(deviceSpeed(slowType(), anonymous).source == Source::Unknown);
    CHECK(deviceSpeed(slowType(), anonymous).factor == 1.0);
    auto noPeak = slowType();
    noPeak.peak_tflops = 0;
    CHECK(deviceSpeed(noPeak, model).source == Source::Unknown);
}

TEST_CASE("the simulator runs a device known by its peak at its peak ratio", "[device-speed]")
{
    // Before: both stages ran at H100 speed, whatever the second type's peak.
    PartitionOptions o;
    o.boundaries = {6};
    o.schedule.microbatches = 4;
    const auto model = deviceSpeedGpt();
    const auto cluster = clusterOf({*devicePreset("H100"), slowType()}, 1);
    auto r = findPartitioner("manual")->partition({model, cluster, o}, {}, {});
    INFO(r.errorText());
    REQUIRE(r.ok());
    CHECK(hasCode(r, "estimated-speed"));
    const auto cost = CostModel::fromPlan(*r.plan);
    double fast = 0, slow = 0;
    for (int l = 0; l <= 6; ++l)
        fast += model.layers[l].forward_ms;
    for (int l = 7; l < model.layerCount(); ++l)
        slow += model.layers[l].forward_ms;
    CHECK(cost.forward(0, 0) == Approx(fast * 1e-3));
    CHECK(cost.forward(1, 0) == Approx(slow * 1e-3 * 989.0 / kSlowPeak));
}

TEST_CASE(
    "BaPipe and HetPipe give a slower device fewer layers, Megatron's search plans at its speed", "[device-speed]")
{
    const auto model = deviceSpeedGpt();
    const auto mixed = clusterOf({*devicePreset("H100"), slowType()}, 2);

    SECTION("bapipe")
    {
        PartitionOptions o;
        o.schedule.microbatches = 8;
        auto r = findPartitioner("bapipe")->partition({model, mixed, o}, {}, {});
        INFO(r.errorText());
        REQUIRE(r.ok());
        CHECK(hasCode(r, "estimated-speed"));
        const auto fast = layersOn(*r.plan, "H100"), slow = layersOn(*r.plan, "slow");
        REQUIRE(!fast.empty());
        REQUIRE(!slow.empty());
        CHECK(*std::max_element(slow.begin(), slow.end()) < *std::min_element(fast.begin(), fast.end()));
    }
    SECTION("hetpipe")
    {
        PartitionOptions o;
        o.schedule.microbatches = 8;
        o.params = {{"policy", "ed"}};
        auto r = findPartitioner("hetpipe")->partition({model, mixed, o}, {}, {});
        INFO(r.errorText());
        REQUIRE(r.ok());
        CHECK(hasCode(r, "estimated-speed"));
        const auto fast = layersOn(*r.plan, "H100"), slow = layersOn(*r.plan, "slow");
        REQUIRE(!fast.empty());
        REQUIRE(!slow.empty());
        int fastLayers = 0, slowLayers = 0;
        for (int n : fast)
            fastLayers += n;
        for (int n : slow)
            slowLayers += n;
        CHECK(slowLayers < fastLayers);
    }
    SECTION("megatron")
    {
        PartitionOptions o;
        o.schedule.microbatches = 8;
        const auto h100s = clusterOf({*devicePreset("H100")}, 4);
        const auto slows = clusterOf({slowType()}, 4);
        const json params = {{"global-batch", 8}, {"pipeline-sizes", {2}}, {"tensor-sizes", {1}},
            {"microbatch-sizes", {4}}, {"chunks", {1}}, {"recompute", "off"}};
        o.params = params;
        auto fast = findPartitioner("megatron")->partition({model, h100s, o}, {}, {});
        auto slow = findPartitioner("megatron")->partition({model, slows, o}, {}, {});
        INFO(fast.errorText() << slow.errorText());
        REQUIRE(fast.ok());
        REQUIRE(slow.ok());
        CHECK(hasCode(slow, "estimated-speed"));
        CHECK_FALSE(hasCode(fast, "estimated-speed"));
        const auto config = [](const Plan& p) {
            const auto& j = p.algorithm_options.at("chosen");
            return megatron::Config {j.at("p").get<int>(), j.at("t").get<int>(), j.at("d").get<int>(),
                j.at("b").get<int>(), j.at("v").get<int>(),
                recomputeNamed(j.at("recompute").get<std::string>(), "recompute"), j.at("m").get<int>()};
        };
        const auto ef = megatron::estimate(*fast.plan, config(*fast.plan));
        const auto es = megatron::estimate(*slow.plan, config(*slow.plan));
        CHECK(es.stage_time_s == Approx(ef.stage_time_s * 989.0 / kSlowPeak));
    }
}
