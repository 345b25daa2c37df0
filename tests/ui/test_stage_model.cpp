// SPDX-License-Identifier: MIT
// The metrics panel's stage table: passes QAbstractItemModelTester while the document changes, shows each
// stage's layers, devices, time and memory, and marks a stage over its devices' memory in red.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QBrush>
#include <QLabel>
#include <algorithm>

#include "planner/analysis/flops.h"
#include "planner/costs.h"
#include "planner/edit.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"
#include "tests/engine/engine_fixtures.h"
#include "ui/document/plan_document.h"
#include "ui/models/format.h"
#include "ui/models/stage_model.h"
#include "ui/widgets/metrics_panel.h"

using namespace pw;

namespace {

planner::Plan stageModelDemoPlan(double memory = 0)
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
    doc.reset(stageModelDemoPlan());
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
    doc.reset(stageModelDemoPlan(4e9)); // 4 GB devices: the uniform stages of the 355M GPT do not fit
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

TEST_CASE("the stage table's time per microbatch is what the simulation charges, its parts in the tooltip",
    "[models][charge]")
{
    // issue 19 item 9: the "F+B" column left out the recomputed forward (large demo: 92.55 ms shown, 123.4 ms
    // simulated).
    planner::Plan plan = stageModelDemoPlan();
    plan.schedule.recompute = planner::Recompute::Full;
    ui::PlanDocument doc;
    ui::StageModel model(doc);
    doc.reset(plan);
    REQUIRE(doc.waitForPrediction());
    CHECK(model.headerData(ui::StageModel::Compute, Qt::Horizontal).toString() == QStringLiteral("Per µbatch"));
    for (int s = 0; s < model.rowCount(); ++s) {
        INFO("stage " << s);
        const auto& charge = doc.prediction()->stages[s].charge;
        const auto totals
            = planner::stageTotals(doc.plan(), s, doc.plan().cluster->typeOf(doc.plan().stages[s].devices[0]));
        const double shown = model.data(model.index(s, ui::StageModel::Compute), ui::StageModel::ValueRole).toDouble();
        CHECK(shown == charge.total_s());
        CHECK(shown == Approx(2 * totals.forward_s + totals.backward_s));
        const QString tip = model.data(model.index(s, ui::StageModel::Compute), Qt::ToolTipRole).toString();
        CHECK(tip.contains(QStringLiteral("recomputed forward")));
        CHECK(tip.contains(QStringLiteral("backward")));
    }
}

TEST_CASE("the metrics panel shows MFU and HFU apart, FLOP rates in the unit that fits", "[models][flops]")
{
    // issue 19 item 10: "MFU 39.2 % (0.0 TFLOP/s)" on a CPU-speed cluster, and the recomputed forward counted.
    auto model = planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    cluster.device_types[0].relative_speed = 1e-3; // a thousand times slower than the profile's H100
    cluster.device_types[0].peak_tflops = 1;
    planner::PartitionOptions o;
    o.devices = 4;
    o.schedule.microbatches = 8;
    o.schedule.recompute = planner::Recompute::Full;
    auto r = planner::findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(r.ok());
    ui::PlanDocument doc;
    ui::MetricsPanel panel(doc);
    doc.reset(*r.plan);
    REQUIRE(doc.waitForPrediction());
    const auto flops = planner::flopsReport(doc.plan(), doc.prediction()->throughput_samples_per_s);
    REQUIRE(flops);
    REQUIRE(flops->model_flops_per_s_per_gpu < 1e12);
    const QString mfu = panel.value(QStringLiteral("mfu")), hfu = panel.value(QStringLiteral("hfu"));
    CHECK(mfu.contains(QStringLiteral("GFLOP/s")));
    CHECK_FALSE(mfu.contains(QStringLiteral("0.0 TFLOP/s")));
    CHECK(mfu.startsWith(ui::percentText(flops->mfu)));
    CHECK(hfu.startsWith(ui::percentText(flops->hfu)));
    CHECK(flops->hfu > flops->mfu); // recomputation: HFU counts the forward twice, MFU once
    CHECK(mfu.contains(QString::fromStdString(planner::formatFlopRate(flops->model_flops_per_s_per_gpu))));
}

TEST_CASE("the metrics panel shows all-reduce waiting apart from the bubble", "[widgets]")
{
    // issue 31 item 5: four data-parallel replicas of one stage have no pipeline bubble, but wait for their
    // all-reduce.
    auto model = planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    planner::Plan plan;
    plan.model = model;
    plan.cluster = cluster;
    plan.stages = {{0, model.layerCount() - 1, {0, 1, 2, 3}}};
    plan.schedule.microbatches = 8;
    ui::PlanDocument doc;
    ui::MetricsPanel panel(doc);
    doc.reset(plan);
    REQUIRE(doc.waitForPrediction());
    const auto& r = *doc.prediction();
    REQUIRE(r.data_parallel_wait_fraction > 0);
    CHECK(panel.value(QStringLiteral("wait")) == ui::percentText(r.data_parallel_wait_fraction));
    CHECK(panel.value(QStringLiteral("bubble")) == ui::percentText(r.bubble_fraction));
    CHECK(r.bubble_fraction < r.data_parallel_wait_fraction);
}

TEST_CASE("the metrics panel writes peak memory and capacity each in the unit that fits", "[widgets]")
{
    // issue 30 item 16: a tiny model read "0.00 of 80.00 GiB" beside the per-stage table's "8.53 MiB".
    const auto shape = pw::test::tinyGpt2(2);
    planner::Plan plan = pw::test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    ui::PlanDocument doc;
    ui::MetricsPanel panel(doc);
    doc.reset(plan);
    REQUIRE(doc.waitForPrediction());
    const auto worst = planner::worstMemory(*doc.prediction());
    REQUIRE(worst.peak_bytes < (1 << 30));
    const QString memory = panel.value(QStringLiteral("memory"));
    CHECK(memory
        == QString::fromStdString(
            planner::formatBytes(worst.peak_bytes) + " of " + planner::formatBytes(worst.capacity_bytes)));
    CHECK_FALSE(memory.startsWith(QStringLiteral("0.00")));
    // The per-stage table beside it writes each stage's peak in the unit that fits too ("0.00 of 16.00 GiB" before).
    ui::StageModel model(doc);
    for (int s = 0; s < model.rowCount(); ++s) {
        const double peak = doc.prediction()->stages[static_cast<std::size_t>(s)].peak_memory_bytes;
        REQUIRE(peak < (1 << 30));
        const QString cell = model.data(model.index(s, ui::StageModel::Memory)).toString();
        CHECK(cell.startsWith(QString::fromStdString(planner::formatBytes(peak)) + QStringLiteral(" of ")));
        CHECK_FALSE(cell.startsWith(QStringLiteral("0.00")));
    }
}

TEST_CASE("the metrics panel's plan line wraps in a narrow dock, never cut", "[widgets]")
{
    // issue 30 item 18: at 1024x700 the plan line read "2 stages (1-1),...h2, cut by hand", elided mid-word.
    const auto shape = pw::test::tinyGpt2(2);
    planner::Plan plan = pw::test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "zb-h2");
    ui::PlanDocument doc;
    ui::MetricsPanel panel(doc);
    panel.resize(240, 400);
    panel.show();
    doc.reset(plan);
    REQUIRE(doc.waitForPrediction());
    const QString full = panel.value(QStringLiteral("plan"));
    REQUIRE(full.contains(QStringLiteral("zb-h2")));
    // What is drawn is the whole text: the label that shows it holds it unshortened, on as many lines as it needs.
    const auto labels = panel.findChildren<QLabel*>();
    const auto shown = std::find_if(labels.begin(), labels.end(), [&](const QLabel* l) { return l->text() == full; });
    REQUIRE(shown != labels.end());
    CHECK((*shown)->wordWrap());
}

TEST_CASE("the metrics panel counts a plan's pipeline stages, and its chunks apart", "[widgets]")
{
    // A V on 2 devices (4 virtual stages) read "4 stages (1-1)" while a long configuration counted its pipeline
    // stages ("32 stages × 1"): both count pipeline stages now, and say the chunks.
    const auto shape = pw::test::tinyGpt2(2);
    planner::Plan plan
        = pw::test::gpt2Plan(shape, {{0, 0, {0}}, {1, 1, {1}}, {2, 2, {1}}, {3, 3, {0}}}, "v-half", 4, 2);
    ui::PlanDocument doc;
    ui::MetricsPanel panel(doc);
    doc.reset(plan);
    REQUIRE(doc.waitForPrediction());
    CHECK(panel.value(QStringLiteral("plan")).startsWith(QStringLiteral("2 stages (1-1), 2 chunks each, 4 × ")));
}
