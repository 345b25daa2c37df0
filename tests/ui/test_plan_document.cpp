// SPDX-License-Identifier: MIT
// The desktop app's plan document: every edit is one undo step that re-simulates, undo restores the plan and
// its prediction exactly, a failed edit changes nothing, and a drag previews without steps and commits one.
#include <catch2/catch.hpp>

#include "planner/edit.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "ui/document/plan_document.h"

using namespace pw;

namespace {

planner::Plan demoPlan()
{
    static const auto model = planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    static const auto cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    planner::PartitionOptions o;
    o.devices = 4;
    o.schedule.microbatches = 8;
    auto r = planner::findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(r.ok());
    return *r.plan;
}

/// The current plan's iteration time, once its simulation (in the background) has landed.
double iteration(ui::PlanDocument& d)
{
    REQUIRE(d.waitForPrediction());
    REQUIRE(d.isPredictionCurrent());
    REQUIRE(d.prediction());
    return d.prediction()->iteration_time_s;
}

} // namespace

TEST_CASE("an edit is one undo step, undo and redo restore plan and prediction exactly", "[document]")
{
    ui::PlanDocument doc;
    int planSignals = 0, predictionSignals = 0;
    QObject::connect(&doc, &ui::PlanDocument::planChanged, [&] { ++planSignals; });
    QObject::connect(&doc, &ui::PlanDocument::predictionChanged, [&] { ++predictionSignals; });
    doc.reset(demoPlan());
    const auto original = planner::toJson(doc.plan());
    const double t0 = iteration(doc);
    CHECK(planSignals == 1);
    CHECK(doc.undoStack()->count() == 0);

    const int last = doc.plan().stages[0].last_layer;
    REQUIRE(doc.apply(
        "Move boundary", [&](const planner::Plan& p) { return planner::edit::moveBoundary(p, 0, last + 3); }));
    CHECK(doc.plan().stages[0].last_layer == last + 3);
    CHECK(doc.undoStack()->count() == 1);
    CHECK(doc.undoStack()->undoText() == "Move boundary");
    const double t1 = iteration(doc);
    CHECK(t1 != t0);
    CHECK(predictionSignals == planSignals);

    doc.undoStack()->undo();
    CHECK(planner::toJson(doc.plan()) == original);
    CHECK(iteration(doc) == t0);
    doc.undoStack()->redo();
    CHECK(doc.plan().stages[0].last_layer == last + 3);
    CHECK(iteration(doc) == t1);
}

TEST_CASE("a failed edit changes nothing and says why", "[document]")
{
    ui::PlanDocument doc;
    doc.reset(demoPlan());
    const auto before = planner::toJson(doc.plan());
    QString error;
    CHECK_FALSE(doc.apply(
        "Move boundary", [](const planner::Plan& p) { return planner::edit::moveBoundary(p, 0, 10'000); }, &error));
    CHECK(error.contains("may end at layers"));
    CHECK(planner::toJson(doc.plan()) == before);
    CHECK(doc.undoStack()->count() == 0);
}

TEST_CASE("a drag previews without undo steps and commits one", "[document]")
{
    ui::PlanDocument doc;
    doc.reset(demoPlan());
    const auto original = planner::toJson(doc.plan());
    const double t0 = iteration(doc);
    const int last = doc.plan().stages[1].last_layer;
    for (int step = 1; step <= 3; ++step) {
        doc.preview(planner::edit::moveBoundary(doc.plan(), 1, doc.plan().stages[1].last_layer + 1));
        CHECK(doc.previewing());
        CHECK(doc.plan().stages[1].last_layer == last + step);
        REQUIRE(doc.waitForPrediction()); // re-simulated at every step
        CHECK(doc.isPredictionCurrent());
        CHECK(doc.prediction());
    }
    CHECK(doc.undoStack()->count() == 0);
    doc.commitPreview("Drag boundary");
    CHECK_FALSE(doc.previewing());
    CHECK(doc.undoStack()->count() == 1);
    CHECK(doc.plan().stages[1].last_layer == last + 3);
    doc.undoStack()->undo();
    CHECK(planner::toJson(doc.plan()) == original);
    CHECK(iteration(doc) == t0);

    // Cancelled, or dragged back to the start: no step.
    doc.preview(planner::edit::moveBoundary(doc.plan(), 1, last + 2));
    doc.cancelPreview();
    CHECK(planner::toJson(doc.plan()) == original);
    doc.preview(planner::edit::moveBoundary(doc.plan(), 1, last + 2));
    doc.preview(planner::edit::moveBoundary(doc.plan(), 1, last));
    doc.commitPreview("Drag boundary");
    CHECK(planner::toJson(doc.plan()) == original); // the algorithm's name too, not "manual"
    CHECK(doc.undoStack()->count() == 1); // only the first drag's step, still redoable
    CHECK(doc.undoStack()->canRedo());
}

TEST_CASE("a plan of a two-batch kind is simulated in its steady state, whatever iterations it says", "[document]")
{
    // issue 30 item 12: a zb-h2 plan with iterations 1 (cut by hand, or loaded) was simulated over one batch, where
    // it equals zb-h1; a partitioner's plan of the same kind over three.
    planner::Plan plan = demoPlan();
    plan.schedule.kind = "zb-h2";
    plan.schedule.iterations = 1;
    ui::PlanDocument doc;
    doc.reset(plan);
    iteration(doc);
    CHECK(doc.prediction()->batch_ends_s.size() == 3); // planner::simulatedIterations: zb-h2's three batches
    CHECK(doc.plan().schedule.iterations == 1); // the plan keeps its own
}
