// SPDX-License-Identifier: MIT
// The prediction's error per action kind (issue 23 item 5): a simulated run against a "measured" copy of it whose
// forwards took 20 % longer shows +20 % on F and nothing elsewhere; the compute rows add up to the per-stage compute;
// the simulator's receives count as the sends they pair with; a run whose actions differ from the plan's is named;
// zero-bubble plans have I and W rows instead of B.
#include <catch2/catch.hpp>

#include <algorithm>

#include "app/run/comparison.h"
#include "planner/sim/simulator.h"
#include "tests/app/measured_fixture.h"
#include "tests/planner/fixtures.h"

using namespace pw;

namespace {

/// The simulator's timeline of `steps` steps of `plan`.
planner::Timeline simulated(const planner::Plan& plan, int steps)
{
    planner::Plan p = plan;
    p.schedule.iterations = steps;
    return planner::simulate(p).timeline;
}

const app::KindComparison* row(const std::vector<app::KindComparison>& rows, app::KindRow kind)
{
    for (const auto& r : rows)
        if (r.kind == kind)
            return &r;
    return nullptr;
}

} // namespace

TEST_CASE("per action kind: forwards 20 % slower show +20 % on F and no error elsewhere", "[history][kinds]")
{
    const planner::Plan plan = test::chainPlan(4, 8, "1f1b");
    const auto predicted = simulated(plan, 2);
    auto measured = test::asMeasured(predicted);
    for (auto& s : measured.spans)
        if (s.kind == planner::ActionKind::Forward)
            s.t1 = s.t0 + (s.t1 - s.t0) * 1.2;
    const auto c = app::compareRun(plan, predicted, 2, measured, 2);
    REQUIRE(c.kinds == app::compareKinds(predicted, 2, measured, 2));
    std::vector<app::KindRow> kinds;
    for (const auto& k : c.kinds)
        kinds.push_back(k.kind);
    using app::KindRow;
    CHECK(kinds
        == std::vector<KindRow> {
            KindRow::Forward, KindRow::Backward, KindRow::Send, KindRow::Receive, KindRow::OptimizerStep});
    for (const auto& k : c.kinds) {
        INFO(app::toString(k.kind));
        CHECK(k.counts_match);
        CHECK(k.predicted.actions == k.measured.actions);
        CHECK(k.error == Approx(k.kind == KindRow::Forward ? 0.2 : 0.0).margin(1e-9));
        if (k.predicted.actions > 0)
            CHECK(k.predicted.mean_s == Approx(k.predicted.time_s / k.predicted.actions));
    }
    // 4 stages x 8 microbatches of F and of B per step; 3 boundaries x 8 microbatches x 2 directions of transfers;
    // one optimizer step per stage.
    CHECK(row(c.kinds, KindRow::Forward)->predicted.actions == 32);
    CHECK(row(c.kinds, KindRow::Backward)->measured.actions == 32);
    CHECK(row(c.kinds, KindRow::Send)->predicted.actions == 48);
    CHECK(row(c.kinds, KindRow::OptimizerStep)->predicted.actions == 4);
    // The simulator records a receive only when it waits; its row still counts every receive.
    int receiveSpans = 0;
    for (const auto& s : predicted.spans)
        receiveSpans += planner::isRecv(s.kind) ? 1 : 0;
    CHECK(receiveSpans < 2 * 48);
    CHECK(row(c.kinds, KindRow::Receive)->predicted.actions == 48);
    // One layer of 1 ms forward, 2 ms backward per stage: the means are the layers' times (and 1.2 ms measured).
    CHECK(row(c.kinds, KindRow::Forward)->predicted.mean_s == Approx(1e-3));
    CHECK(row(c.kinds, KindRow::Forward)->measured.mean_s == Approx(1.2e-3));
    CHECK(row(c.kinds, KindRow::Backward)->predicted.mean_s == Approx(2e-3));

    // The compute rows add up to the per-stage table's compute (one device per stage: no replicas to weigh).
    for (const bool measuredSide : {false, true}) {
        double kindsCompute = 0, stagesCompute = 0;
        for (const auto& k : c.kinds)
            if (k.kind == KindRow::Forward || k.kind == KindRow::Backward || k.kind == KindRow::OptimizerStep)
                kindsCompute += measuredSide ? k.measured.time_s : k.predicted.time_s;
        for (const auto& s : c.stages)
            stagesCompute += measuredSide ? s.measured.compute_s : s.predicted.compute_s;
        CHECK(kindsCompute == Approx(stagesCompute));
    }
}

TEST_CASE("per action kind: a run whose actions differ from the plan's is told apart", "[history][kinds]")
{
    const planner::Plan plan = test::chainPlan(2, 4, "1f1b");
    const auto predicted = simulated(plan, 1);
    auto measured = test::asMeasured(predicted);
    // One forward too few: the run did not run the plan's actions.
    const auto forward = std::find_if(measured.spans.begin(), measured.spans.end(),
        [](const planner::Span& s) { return s.kind == planner::ActionKind::Forward; });
    REQUIRE(forward != measured.spans.end());
    measured.spans.erase(forward);
    // ... and an all-reduce the plan has none of.
    planner::Span extra;
    extra.kind = planner::ActionKind::AllReduce;
    extra.lane = planner::Lane::Collective;
    extra.t0 = 0;
    extra.t1 = 1e-3;
    measured.spans.push_back(extra);
    const auto kinds = app::compareKinds(predicted, 1, measured, 1);
    for (const auto& k : kinds) {
        INFO(app::toString(k.kind));
        CHECK(k.counts_match == (k.kind != app::KindRow::Forward && k.kind != app::KindRow::AllReduce));
    }
    const auto* f = row(kinds, app::KindRow::Forward);
    REQUIRE(f);
    CHECK(f->predicted.actions == 8);
    CHECK(f->measured.actions == 7);
    const auto* allReduce = row(kinds, app::KindRow::AllReduce);
    REQUIRE(allReduce);
    CHECK(allReduce->predicted.actions == 0);
    CHECK(allReduce->measured.time_s == Approx(1e-3));
    CHECK(allReduce->error == 0); // nothing predicted: no error to give

    // Without a prediction (none stored) there is nothing to disagree with.
    for (const auto& k : app::compareKinds({}, 0, measured, 1)) {
        CHECK(k.counts_match);
        CHECK(k.error == 0);
        CHECK(k.predicted.time_s == 0);
    }
}

TEST_CASE("per action kind: a zero-bubble run has I and W rows and no fused B", "[history][kinds]")
{
    const planner::Plan plan = test::chainPlan(4, 8, "zb-h1");
    const auto predicted = simulated(plan, 1);
    auto measured = test::asMeasured(predicted);
    for (auto& s : measured.spans)
        if (s.kind == planner::ActionKind::BackwardWeight)
            s.t1 = s.t0 + (s.t1 - s.t0) * 0.5;
    const auto kinds = app::compareKinds(predicted, 1, measured, 1);
    CHECK_FALSE(row(kinds, app::KindRow::Backward));
    const auto* i = row(kinds, app::KindRow::BackwardInput);
    const auto* w = row(kinds, app::KindRow::BackwardWeight);
    REQUIRE(i);
    REQUIRE(w);
    CHECK(i->predicted.actions == 32);
    CHECK(w->measured.actions == 32);
    CHECK(i->error == Approx(0).margin(1e-9));
    CHECK(w->error == Approx(-0.5));
    CHECK(app::toString(app::KindRow::BackwardInput) == "I");
    CHECK(app::toString(app::KindRow::BackwardWeight) == "W");
    CHECK(app::kindRow(planner::ActionKind::RecvGradient) == app::KindRow::Receive);
    CHECK(app::kindRow(planner::ActionKind::SendActivation) == app::KindRow::Send);
}
