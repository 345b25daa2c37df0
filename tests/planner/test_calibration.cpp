// SPDX-License-Identifier: MIT
// Calibrated costs (planner/sim/calibration.h): fitted to a timeline whose costs are known (a simulated run, and
// hand-made transfers of several sizes), the costs file's round trip, and the errors of costs measured on another
// layout, named by file, line and field.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/sim/calibration.h"
#include "tests/planner/fixtures.h"

using namespace pw;
using namespace pw::planner;
using Catch::Contains;

namespace {

/// Four layers in two stages on one node of two devices, 1f1b, 4 microbatches, three steps; optimizer steps
/// priced by a memory bandwidth so that they take time.
Plan twoStagePlan()
{
    Plan plan = test::chainPlan(2, 4, "1f1b", {1, 2, 1e6, 1e6, {}}, {80e9, 100, 1e10, 5e-6, 0, 0});
    plan.cluster.edit().device_types[0].memory_bandwidth_bytes_per_s = 1e11;
    plan.schedule.iterations = 3;
    plan.validate();
    return plan;
}

SimulationResult simulateWith(const Plan& plan, const CostModel& cost)
{
    return simulate(plan, generateSchedule(plan), cost);
}

} // namespace

TEST_CASE("calibration: fitted to a simulated run, the costs are its per-stage times and reproduce its timeline",
    "[planner][calibration]")
{
    const Plan plan = twoStagePlan();
    CostModel truth = CostModel::fromPlan(plan);
    truth.forward_s = {0.003, 0.005};
    truth.backward_s = {0.007, 0.011};
    auto run = simulateWith(plan, truth);
    for (auto& s : run.timeline.spans)
        if (s.lane == Lane::Send || s.lane == Lane::Recv)
            s.bytes = 1e6; // what an agent reports (the simulator's spans leave it out)

    const auto costs = calibrate(plan, run.timeline);
    REQUIRE(costs.stages.size() == 2);
    CHECK(costs.stages[0].forward_s[0] == Approx(0.003));
    CHECK(costs.stages[1].forward_s[0] == Approx(0.005));
    CHECK(costs.stages[0].backward_s[0] == Approx(0.007));
    CHECK(costs.stages[1].backward_s[0] == Approx(0.011));
    CHECK(costs.stages[1].forward_samples == std::vector<int> {12}); // 4 microbatches x 3 steps
    CHECK(costs.stages[0].optimizer_step_s[0] == Approx(truth.optimizerStepSeconds(0, 0)));
    CHECK(costs.stages[0].optimizer_step_s[0] > 0);
    CHECK(costs.samples_per_microbatch == 1);
    CHECK(costs.devices == 2);
    CHECK(costs.plan_digest == planDigest(plan));
    // Every transfer has one size: the cluster's link is kept, and the transfers are still counted.
    REQUIRE(costs.node_links.size() == 1);
    CHECK_FALSE(costs.node_links[0].fitted);
    CHECK(costs.node_links[0].sizes == 1);
    CHECK(costs.node_links[0].transfers > 0);
    CHECK(costs.node_links[0].link == LinkCost {1e10, 5e-6});

    const CostModel calibrated = calibratedCostModel(costs, plan);
    CHECK(calibrated.forward_s[1] == Approx(0.005));
    CHECK(calibrated.optimizerStepSeconds(1, 1) == Approx(truth.optimizerStepSeconds(1, 1)));
    CHECK(simulateWith(plan, calibrated).makespan_s == Approx(run.makespan_s));
    // The profile's own model (1 and 2 ms per layer) predicts another time.
    CHECK(simulate(plan).makespan_s != Approx(run.makespan_s));
}

TEST_CASE("calibration: links are fitted by least squares over several sizes, per node and between nodes",
    "[planner][calibration]")
{
    Plan plan = test::chainPlan(3, 4, "1f1b", {1, 2, 1e6, 1e6, {}}, {80e9, 100, 1e10, 1e-6, 1e9, 1e-5});
    plan.cluster = test::uniformCluster(2, 2, {80e9, 100, 1e10, 1e-6, 1e9, 1e-5}); // devices 0, 1 | 2, 3
    plan.validate();
    Timeline t;
    // Compute spans so that every stage has its forward and backward.
    for (int s = 0; s < 3; ++s)
        for (auto kind : {ActionKind::Forward, ActionKind::Backward})
            t.spans.push_back({s, Lane::Compute, kind, s, 0, 0, 0.0, 0.001, -1, 0, 0});
    int mb = 0;
    for (double bytes : {1e3, 1e4, 1e5, 1e6, 1e6, 4e6}) {
        // Node 0's link: 20 us + bytes / 5 GB/s; between nodes: 50 us + bytes / 1 GB/s.
        const double intra = 20e-6 + bytes / 5e9, inter = 50e-6 + bytes / 1e9;
        for (const auto& [from, to, seconds] : {std::tuple {0, 1, intra}, std::tuple {1, 2, inter}}) {
            Span send {from, Lane::Send, ActionKind::SendActivation, from, mb, 0, 1.0, 1.0 + 2e-6, to, 0, bytes};
            Span recv {to, Lane::Recv, ActionKind::RecvActivation, from, mb, 0, 0.9, 1.0 + seconds, from, 0, bytes};
            t.spans.push_back(send);
            t.spans.push_back(recv);
        }
        ++mb;
    }
    // A receive posted after its send began says nothing about the link (the data may have waited): left out.
    t.spans.push_back({0, Lane::Send, ActionKind::SendActivation, 0, 99, 0, 1.0, 1.0, 1, 0, 1e3});
    t.spans.push_back({1, Lane::Recv, ActionKind::RecvActivation, 0, 99, 0, 5.0, 5.1, 0, 0, 1e3});

    const auto costs = calibrate(plan, t);
    REQUIRE(costs.node_links.size() == 2);
    const auto& node = costs.node_links[0];
    CHECK(node.fitted);
    CHECK(node.transfers == 6);
    CHECK(node.sizes == 5);
    CHECK(node.link.bandwidth_bytes_per_s == Approx(5e9));
    CHECK(node.link.latency_s == Approx(20e-6));
    CHECK(node.rms_residual_s == Approx(0).margin(1e-12));
    CHECK_FALSE(costs.node_links[1].fitted); // node 1 moved nothing within itself: the cluster's link
    CHECK(costs.node_links[1].transfers == 0);
    CHECK(costs.inter_node.fitted);
    CHECK(costs.inter_node.link.bandwidth_bytes_per_s == Approx(1e9));
    CHECK(costs.inter_node.link.latency_s == Approx(50e-6));

    const auto model = calibratedCostModel(costs, plan);
    CHECK(model.transferSeconds(0, 1, 1e6) == Approx(20e-6 + 1e6 / 5e9));
    CHECK(model.transferSeconds(1, 2, 1e6) == Approx(50e-6 + 1e6 / 1e9));
    CHECK(model.link(2, 3) == LinkCost {1e10, 1e-6}); // node 1's, kept
}

TEST_CASE("calibration: the median or the mean of a stage's spans", "[planner][calibration]")
{
    const Plan plan = twoStagePlan();
    auto run = simulate(plan).timeline;
    for (auto& s : run.spans)
        if (s.stage == 0 && s.kind == ActionKind::Forward && s.microbatch == 0)
            s.t1 = s.t0 + 1.0; // one very slow forward of 12
    const auto median = calibrate(plan, run);
    const auto mean = calibrate(plan, run, SpanStatistic::Mean);
    CHECK(median.statistic == SpanStatistic::Median);
    CHECK(median.stages[0].forward_s[0] == Approx(0.001)); // the profile's 1 ms layer
    CHECK(mean.stages[0].forward_s[0] == Approx((11 * 0.001 + 1.0) / 12));
    CHECK(costsFromJson(toJson(mean)).statistic == SpanStatistic::Mean);
    CHECK_THROWS_WITH(spanStatisticFromString("mode"), Contains("neither median nor mean"));
}

TEST_CASE("calibration: a zero-bubble run is fitted from its I and W spans, and W's measured share is kept",
    "[planner][calibration]")
{
    for (const std::string kind : {"zb-h1", "zb-h2"}) {
        INFO(kind);
        Plan plan = twoStagePlan();
        plan.schedule.kind = kind;
        plan.validate();
        CostModel truth = CostModel::fromPlan(plan);
        truth.forward_s = {0.003, 0.005};
        truth.backward_s = {0.008, 0.012};
        truth.backward_weight_share = {0.25, 0.75}; // W: 2 ms of stage 0's 8, 9 ms of stage 1's 12
        const auto run = simulateWith(plan, truth);
        const auto costs = calibrate(plan, run.timeline);
        REQUIRE(costs.stages.size() == 2);
        CHECK(costs.stages[0].backward_s[0] == Approx(0.008));
        CHECK(costs.stages[1].backward_s[0] == Approx(0.012));
        REQUIRE(costs.stages[0].backward_weight_s.size() == 1);
        CHECK(costs.stages[0].backward_weight_s[0] == Approx(0.002));
        CHECK(costs.stages[1].backward_weight_s[0] == Approx(0.009));
        CHECK(costs.stages[1].backward_samples == std::vector<int> {12});
        // The file keeps W; the model built from it charges I and W as measured and reproduces the run.
        const auto again = costsFromJson(toJson(costs));
        CHECK(again == costs);
        const CostModel calibrated = calibratedCostModel(again, plan);
        CHECK(calibrated.backwardWeight(1, 0) == Approx(0.009));
        CHECK(calibrated.backwardInput(1, 0) == Approx(0.003));
        CHECK(simulateWith(plan, calibrated).makespan_s == Approx(run.makespan_s));
    }
    // A costs file whose W exceeds its backward is refused, naming the field.
    Plan plan = twoStagePlan();
    plan.schedule.kind = "zb-h1";
    plan.validate();
    auto j = toJson(calibrate(plan, simulate(plan).timeline));
    j["stages"][1]["backward_weight_s"][0] = 1.0;
    CHECK_THROWS_WITH(costsFromJson(j), Contains("/stages/1/backward_weight_s/0"));
    // A fused run keeps no W: the profile's share stays.
    CHECK(calibrate(twoStagePlan(), simulate(twoStagePlan()).timeline).stages[0].backward_weight_s.empty());
}

TEST_CASE("calibration: a run without a measured step of every stage cannot be calibrated", "[planner][calibration]")
{
    const Plan plan = twoStagePlan();
    auto run = simulate(plan).timeline;
    std::erase_if(run.spans, [](const Span& s) { return s.stage == 1 && s.kind == ActionKind::Backward; });
    CHECK_THROWS_WITH(calibrate(plan, run), Contains("no measured backward of stage 1 on device 1"));
}

TEST_CASE("calibration: the costs file round-trips and is refused for another layout, naming file, line and field",
    "[planner][calibration]")
{
    const Plan plan = twoStagePlan();
    auto costs = calibrate(plan, simulate(plan).timeline);
    costs.run_id = "run-1";
    CHECK(costsFromJson(nlohmann::json::parse(toJson(costs).dump())) == costs);
    CHECK(toJson(costs).at("format_version") == kCostsFormatVersion);

    auto other = plan;
    other.stages = {{0, 0, {0}}, {1, 1, {1}}};
    other.validate();
    CHECK_NOTHROW(calibratedCostModel(costs, other)); // the same layout
    other.stages = {{0, 0, {1}}, {1, 1, {0}}};
    CHECK_THROWS_WITH(calibratedCostModel(costs, other), Contains("/stages/0/devices") && Contains("puts it on [1]"));
    other.schedule.microbatch_size = 4;
    other.stages = plan.stages;
    CHECK_THROWS_WITH(calibratedCostModel(costs, other), Contains("/samples_per_microbatch"));
    auto three = test::chainPlan(3, 4);
    three.validate();
    CHECK_THROWS_WITH(calibratedCostModel(costs, three), Contains("/devices"));

    const auto path = (std::filesystem::temp_directory_path() / "pw-calibration-test-costs.json").string();
    std::ofstream(path) << toJson(costs).dump(2);
    auto moved = plan;
    moved.stages = {{0, 0, {1}}, {1, 1, {0}}};
    try {
        loadCostModel(path, moved);
        FAIL("a layout on other devices was accepted");
    } catch (const InputError& e) {
        CHECK(e.source() == path);
        CHECK(e.line() > 1);
        CHECK(e.field() == "/stages/0/devices");
    }
    CalibratedCosts loaded;
    loadCostModel(path, plan, &loaded);
    CHECK(loaded == costs);

    auto j = toJson(costs);
    j["stages"][1]["backward_s"][0] = -1;
    CHECK_THROWS_WITH(costsFromJson(j), Contains("/stages/1/backward_s/0"));
    j = toJson(costs);
    j["format_version"] = kCostsFormatVersion + 1;
    CHECK_THROWS_AS(costsFromJson(j), InputError);
    j = toJson(costs);
    j["stages"][0]["forward_s"] = nlohmann::json::array();
    CHECK_THROWS_WITH(costsFromJson(j), Contains("/stages/0/forward_s") && Contains("one value per device"));
    j = toJson(costs);
    j["kind"] = "plan";
    CHECK_THROWS_WITH(costsFromJson(j), Contains("/kind"));
    std::remove(path.c_str());
}
