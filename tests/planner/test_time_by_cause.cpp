// SPDX-License-Identifier: MIT
// Time by cause and stragglers (planner/analysis/time_by_cause.h) on simulated runs, where every wait is known: the
// prediction read as a measurement puts every wait into the plan's bubble; a run whose stage 1 computes slower than
// its plan names device 1 as the straggler and its neighbours' waits beyond the plan as waits on it; a run twice as
// slow everywhere is not a straggler; the causes always sum to the step.
#include <catch2/catch.hpp>

#include <string>

#include "fixtures.h"
#include "planner/analysis/time_by_cause.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// 4 stages of one layer on 4 devices, 1F1B, 8 microbatches, 3 steps; 1 ms forward, 2 ms backward, 1 MB crossing
/// every cut over 10 GB/s links of 10 us latency; no data parallelism. Two nodes of two devices, whose link (between
/// devices 1 and 2) is `interBandwidth`.
Plan timeByCauseFourStages(const std::string& kind = "1f1b", double interBandwidth = 1e10)
{
    Plan plan = pw::test::chainPlan(4, 8, kind, {1, 2, 1e6, 1e6, {}}, {80e9, 100, 1e10, 1e-5, 0, 0});
    plan.cluster = pw::test::uniformCluster(2, 2, {80e9, 100, 1e10, 1e-5, interBandwidth, 1e-5});
    plan.schedule.iterations = 3;
    return plan;
}

Timeline simulated(const Plan& plan)
{
    return simulate(plan, generateSchedule(plan)).timeline;
}

/// The plan with stage `stage`'s layer `factor` times slower (forward and backward).
Plan slowed(Plan plan, int stage, double factor)
{
    auto& layer = plan.model.edit().layers[static_cast<std::size_t>(plan.stages[stage].first_layer)];
    layer.forward_ms *= factor;
    layer.backward_ms *= factor;
    return plan;
}

void checkSums(const TimeByCause& t)
{
    for (const auto& s : t.steps) {
        INFO("device " << s.device << " step " << s.step);
        CHECK(s.causes.total() == Approx(s.t1 - s.t0).epsilon(1e-9));
        CHECK(s.causes.compute_s >= 0);
        CHECK(s.causes.bubble_s >= 0);
        CHECK(s.causes.late_s >= 0);
        CHECK(s.causes.host_gap_s >= -1e-12);
    }
}

} // namespace

TEST_CASE("the prediction read as a measurement: every wait is the plan's bubble", "[time-by-cause]")
{
    for (const std::string kind : {"1f1b", "zb-h1", "gpipe"}) {
        INFO(kind);
        const Plan plan = timeByCauseFourStages(kind);
        const auto schedule = generateSchedule(plan);
        const auto predicted = simulated(plan);
        const auto t = timeByCause(predicted, predicted, schedule);
        CHECK(t.scale == Approx(1));
        REQUIRE(t.stepCount() == 3);
        REQUIRE(t.deviceCount() == 4);
        REQUIRE(t.steps.size() == 12);
        checkSums(t);
        for (int d = 0; d < 4; ++d) {
            INFO("device " << d);
            const auto c = t.device(d);
            CHECK(c.late_s == Approx(0).margin(1e-12));
            CHECK(c.compute_s > 0);
            // The idle is the bubble and the transfers (no host issues work late in a simulation).
            CHECK(c.bubble_s + c.p2p_exposed_s == Approx(c.idle()).margin(1e-9));
            CHECK(c.bubble_s >= 0.9 * (c.idle() - c.p2p_exposed_s));
        }
        CHECK(findStragglers(predicted, predicted, schedule).empty());
    }
}

TEST_CASE("a stage slower than its plan is named, and its neighbours wait on it beyond the plan", "[time-by-cause]")
{
    const Plan plan = timeByCauseFourStages();
    const auto schedule = generateSchedule(plan);
    const auto predicted = simulated(plan);
    const auto measured = simulated(slowed(plan, 1, 3.0));
    const auto t = timeByCause(measured, predicted, schedule);
    checkSums(t);
    // The median device runs at the plan's pace: the waits the plan has are the bubble, the rest late on device 1.
    CHECK(t.scale == Approx(1));
    for (int d : {0, 2, 3}) {
        INFO("device " << d);
        const auto c = t.device(d);
        CHECK(c.late_s > 0.5 * c.idle());
        double onOne = 0, onOthers = 0;
        for (const auto& s : t.steps)
            for (const auto& l : s.late_by)
                if (s.device == d)
                    (l.peer == 1 ? onOne : onOthers) += l.seconds; // device 3 waits on 2, which waits on 1
        CHECK(onOne > 0);
        CHECK(onOthers == Approx(0).margin(1e-12));
    }
    const auto stragglers = findStragglers(measured, predicted, schedule);
    REQUIRE(stragglers.size() >= 2); // its F and its B
    for (const auto& s : stragglers) {
        INFO(s.text());
        CHECK(s.device == 1);
        CHECK(s.peer == -1);
        CHECK(s.slowdown == Approx(3).epsilon(0.02));
        CHECK(s.since_step == 0);
        CHECK(s.last_step == 2);
    }
    CHECK_THAT(stragglers.front().text(), Catch::StartsWith("device 1 runs ") && Catch::Contains("3.0x slower"));
    const std::string text = timeByCauseText(t, stragglers);
    CHECK_THAT(text, Catch::Contains("beyond the plan on device 1"));
    CHECK_THAT(text, Catch::Contains("straggler: device 1 runs"));
}

TEST_CASE("a run uniformly slower than its plan has no straggler and keeps its bubble", "[time-by-cause]")
{
    const Plan plan = timeByCauseFourStages();
    const auto schedule = generateSchedule(plan);
    const auto predicted = simulated(plan);
    Plan slow = plan;
    for (auto& layer : slow.model.edit().layers) {
        layer.forward_ms *= 2;
        layer.backward_ms *= 2;
    }
    const auto measured = simulated(slow);
    const auto t = timeByCause(measured, predicted, schedule);
    checkSums(t);
    CHECK(t.scale == Approx(2));
    CHECK(findStragglers(measured, predicted, schedule).empty());
    for (int d = 0; d < 4; ++d) {
        const auto c = t.device(d);
        INFO("device " << d);
        // The transfers did not slow down: the waits are the plan's at twice the pace, at most.
        CHECK(c.bubble_s >= 0.9 * (c.bubble_s + c.late_s));
    }
}

TEST_CASE("a slow link is named as a link", "[time-by-cause]")
{
    const Plan plan = timeByCauseFourStages();
    const auto schedule = generateSchedule(plan);
    const auto predicted = simulated(plan);
    const auto measured = simulated(timeByCauseFourStages("1f1b", 5e8)); // 0.5 GB/s between the nodes: devices 1 and 2
    const auto stragglers = findStragglers(measured, predicted, schedule);
    REQUIRE_FALSE(stragglers.empty());
    const auto& s = stragglers.front();
    INFO(s.text());
    CHECK(((s.device == 1 && s.peer == 2) || (s.device == 2 && s.peer == 1)));
    CHECK(s.slowdown > 5);
    CHECK_THAT(s.text(), Catch::StartsWith("link "));
}

TEST_CASE("data-parallel replicas: the all-reduce's wait is planned and its time exposed", "[time-by-cause]")
{
    // Stage 0 on devices 0 and 1 (their gradients all-reduced every step), stage 1 on device 2.
    Plan plan = pw::test::chainPlan(2, 8, "1f1b", {1, 2, 1e6, 1e8, {}}, {80e9, 100, 1e10, 1e-5, 0, 0});
    plan.cluster.edit().nodes[0].count = 3;
    plan.stages[0].devices = {0, 1};
    plan.stages[1].devices = {2};
    plan.schedule.iterations = 3;
    const auto schedule = generateSchedule(plan);
    const auto predicted = simulated(plan);
    const auto t = timeByCause(predicted, predicted, schedule);
    REQUIRE(t.stepCount() == 3);
    checkSums(t);
    for (int d = 0; d < 3; ++d) {
        INFO("device " << d);
        CHECK(t.device(d).late_s == Approx(0).margin(1e-9));
    }
    CHECK(t.device(0).collective_exposed_s > 0);
    CHECK(t.device(1).collective_exposed_s > 0);
    bool collective = false;
    for (const auto& o : t.overlap)
        collective = collective || o.kind == CommOverlap::Kind::Collective;
    CHECK(collective);
}
