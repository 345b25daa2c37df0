// SPDX-License-Identifier: MIT
// The metrics panel's stage table: passes QAbstractItemModelTester while the document changes, shows each
// stage's layers, devices, time and memory, and marks a stage over its devices' memory in red.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QBrush>

#include "planner/edit.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "ui/document/plan_document.h"
#include "ui/models/stage_model.h"

using namespace pw;

namespace {

planner::Plan demoPlan(double memory = 0)
{
    auto model = planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    if (memory > 0)
        cluster.device_types[0].memory_bytes = memory;
    planner::PartitionOptions o;
    o.devices = 4;
    o.schedule.microbatches = 8;
    auto r = planner::findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(r.ok());
    return *r.plan;
}

} // namespace

TEST_CASE("the stage model follows the document and passes the model tester", "[models]")
{
    ui::PlanDocument doc;
    ui::StageModel model(doc);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    CHECK(model.rowCount() == 0);
    doc.reset(demoPlan());
    REQUIRE(model.rowCount() == 4);
    // The rows follow the plan at once; memory follows when the background simulation lands.
    CHECK(model.data(model.index(0, ui::StageModel::Memory)).toString() == "simulating…");
    REQUIRE(doc.waitForPrediction());
    CHECK(model.columnCount() == ui::StageModel::ColumnCount);
    const auto& plan = doc.plan();
    for (int s = 0; s < 4; ++s) {
        CHECK(model.data(model.index(s, ui::StageModel::Layers)).toString()
            == QStringLiteral("%1-%2").arg(plan.stages[s].first_layer).arg(plan.stages[s].last_layer));
        CHECK(model.data(model.index(s, ui::StageModel::Memory), ui::StageModel::ValueRole).toDouble()
            == doc.prediction()->stages[s].peak_memory_bytes);
        CHECK(model.data(model.index(s, ui::StageModel::Compute), ui::StageModel::ValueRole).toDouble() > 0);
        CHECK_FALSE(model.data(model.index(s, ui::StageModel::Memory), Qt::ForegroundRole).isValid());
    }
    CHECK(model.headerData(ui::StageModel::Memory, Qt::Horizontal).toString() == "Peak of capacity");

    // An edit changes the cells; a split adds a row; undo takes both back.
    const int last = plan.stages[0].last_layer;
    REQUIRE(doc.apply("Move", [&](const planner::Plan& p) { return planner::edit::moveBoundary(p, 0, last + 2); }));
    CHECK(model.data(model.index(0, ui::StageModel::Layers), ui::StageModel::ValueRole).toInt() == last + 3);
    REQUIRE(doc.apply("Split", [](const planner::Plan& p) {
        return planner::edit::splitStage(p, 1, p.stages[1].first_layer, planner::edit::freeDevices(p));
    }));
    CHECK(model.rowCount() == 5);
    CHECK(model.data(model.index(2, ui::StageModel::Devices), ui::StageModel::ValueRole).toInt() == 4);
    doc.undoStack()->undo();
    doc.undoStack()->undo();
    CHECK(model.rowCount() == 4);
    CHECK(model.data(model.index(0, ui::StageModel::Layers), ui::StageModel::ValueRole).toInt() == last + 1);
}

TEST_CASE("a stage over its devices' memory is shown in red with the numbers", "[models]")
{
    ui::PlanDocument doc;
    ui::StageModel model(doc);
    doc.reset(demoPlan(4e9)); // 4 GB devices: the uniform stages of the 355M GPT do not fit
    REQUIRE(doc.waitForPrediction());
    int over = 0;
    for (int s = 0; s < model.rowCount(); ++s) {
        const auto brush = model.data(model.index(s, ui::StageModel::Memory), Qt::ForegroundRole);
        const bool red = brush.isValid() && brush.value<QBrush>().color().red() > 150;
        const bool exceeds = doc.prediction()->stages[s].peak_memory_bytes > 4e9;
        CHECK(red == exceeds);
        if (red) {
            ++over;
            CHECK(model.data(model.index(s, ui::StageModel::Stage), Qt::ToolTipRole).toString().contains("needs"));
        }
    }
    CHECK(over > 0);
}
