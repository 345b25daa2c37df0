// SPDX-License-Identifier: MIT
// Comparing recorded runs: only the configuration fields that differ are listed, with each run's value; per stage
// the deltas against the first run are the differences of the stages' measured times; each run's metrics are
// summarised. Runs are recorded into a real history file with simulated timelines as their measured spans.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "app/history/history.h"
#include "app/run/compare_runs.h"
#include "planner/sim/simulator.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;

namespace {

/// Records a run of `plan`: its simulated timeline as measured spans, losses per step.
std::string record(app::HistoryStore& h, const planner::Plan& plan, int steps, double lossScale)
{
    app::NewRun nr;
    nr.plan_json = planner::toJson(plan).dump();
    nr.cluster_json = planner::toJson(*plan.cluster).dump();
    nr.hosts_json = R"([{"device":0,"host":"localhost"}])";
    nr.label = "compare test";
    nr.steps_planned = steps;
    const auto id = h.createRun(nr);
    planner::Plan p = plan;
    p.schedule.iterations = steps;
    const auto sim = planner::simulate(p);
    std::vector<app::MeasuredSpan> spans;
    std::map<int, std::int64_t> seq;
    for (const auto& s : sim.timeline.spans)
        spans.push_back({s, s.device, ++seq[s.device]});
    h.appendSpans(id, spans);
    std::vector<app::MetricSample> metrics;
    for (int k = 0; k < steps; ++k) {
        metrics.push_back({k, "loss", lossScale * (4.0 - 0.1 * k), 0.01 * (k + 1), -1});
        metrics.push_back({k, "tokens_per_s", 1000.0 * (k + 1), 0.01 * (k + 1), -1});
    }
    h.appendMetrics(id, metrics);
    h.finishRun(id, app::RunStatus::Succeeded, "");
    return id;
}

} // namespace

TEST_CASE("comparing runs lists only what differs and the stages' time deltas against the first run", "[history]")
{
    const auto dir = std::filesystem::temp_directory_path() / ("pw-compare-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    {
        auto h = app::HistoryStore::open(dir / "history.sqlite");
        const auto shape = test::tinyGpt2(2);
        const auto a = test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 4);
        const auto b = test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 8);
        const auto idA = record(h, a, 3, 1.0);
        const auto idB = record(h, b, 3, 0.9);
        const auto c = app::compareRuns({app::loadRunSnapshot(h, idA), app::loadRunSnapshot(h, idB)});

        REQUIRE(c.runs.size() == 2);
        CHECK(c.runs[0].run_id == idA);
        CHECK(c.runs[0].steps == 3);
        CHECK(c.runs[0].final_loss == Approx(3.8));
        CHECK(c.runs[1].final_loss == Approx(0.9 * 3.8));
        CHECK(c.runs[1].tokens_per_s == Approx(3000));
        CHECK(c.runs[1].iteration_s > c.runs[0].iteration_s); // twice the microbatches per step

        // Only the microbatches differ between the two configurations.
        REQUIRE(c.differences.size() == 1);
        CHECK(c.differences[0].field == "/schedule/microbatches");
        CHECK(c.differences[0].values == std::vector<std::string> {"4", "8"});

        // The deltas are the stages' measured times minus the first run's, computed here from the timelines.
        const auto stagesA = app::stageTimes(a, h.measuredTimeline(idA), 3);
        const auto stagesB = app::stageTimes(b, h.measuredTimeline(idB), 3);
        REQUIRE(c.compute_delta_s.size() == 2);
        for (std::size_t s = 0; s < 2; ++s) {
            CHECK(c.compute_delta_s[s][0] == Approx(0.0));
            CHECK(c.compute_delta_s[s][1] == Approx(stagesB[s].compute_s - stagesA[s].compute_s));
            CHECK(c.idle_delta_s[s][1] == Approx(stagesB[s].idle_s - stagesA[s].idle_s));
            CHECK(c.compute_delta_s[s][1] > 0); // twice the microbatches: about twice the compute per step
        }
        CHECK_THROWS(app::compareRuns({app::loadRunSnapshot(h, idA)}));
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("metric overlays: steps, wall clock or relative time on x, debiased exponential smoothing", "[history]")
{
    app::RunSnapshot a, b;
    a.record.id = "a";
    b.record.id = "b";
    for (int k = 0; k < 4; ++k)
        a.losses.push_back({k, "loss", 2.0, 0.5 * (k + 1), -1}); // constant
    for (int k = 0; k < 2; ++k)
        b.losses.push_back({k, "loss", k == 0 ? 4.0 : 2.0, 1.0 * (k + 1), -1});
    const auto raw = app::overlay({a, b}, "loss", app::OverlayAxis::Step, 0.0);
    REQUIRE(raw.size() == 2);
    CHECK(raw[0].x == std::vector<double> {1, 2, 3, 4});
    CHECK(raw[1].y == std::vector<double> {4.0, 2.0});
    const auto smooth = app::overlay({a, b}, "loss", app::OverlayAxis::Relative, 0.5);
    for (double y : smooth[0].y)
        CHECK(y == Approx(2.0)); // a constant stays that constant (debiased)
    CHECK(smooth[1].x == std::vector<double> {0.5, 1.0});
    CHECK(smooth[1].y[0] == Approx(4.0));
    // EMA 0.5: (0.5*4*0.5 + 0.5*2) / (1 - 0.25) = (1 + 1) / 0.75
    CHECK(smooth[1].y[1] == Approx(2.0 / 0.75));
    const auto wall = app::overlay({a, b}, "loss", app::OverlayAxis::WallClock, 0.0);
    CHECK(wall[0].x == std::vector<double> {0.5, 1.0, 1.5, 2.0});
    CHECK_THROWS(app::overlay({a}, "memory", app::OverlayAxis::Step, 0.0));
    CHECK_THROWS(app::overlay({a}, "loss", app::OverlayAxis::Step, 1.0));
}
