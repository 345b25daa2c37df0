// SPDX-License-Identifier: MIT
// The partition panel: runs a partitioner (or all of them) in the background, lists its plan next to the current
// one, applies a plan as one undo step, cancels a long search without touching the plan, and reports a bad
// option value by name.
#include <catch2/catch.hpp>

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QSet>
#include <QSignalSpy>
#include <QSpinBox>

#include <nlohmann/json.hpp>

#include "app/project/demo_project.h"
#include "planner/edit.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "ui/document/project_document.h"
#include "ui/models/result_model.h"
#include "ui/widgets/partition_panel.h"
#include "ui/widgets/tables.h"

using namespace pw;

namespace {

const app::Project& partitionPanelDemo()
{
    static const app::Project project = app::demoProject();
    return project;
}

/// Processes events until `done` holds or `seconds` pass; true when it holds.
template <class F> bool waitFor(F done, int seconds = 120)
{
    QDeadlineTimer deadline(seconds * 1000);
    while (!done() && !deadline.hasExpired())
        QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    return done();
}

bool waitFinished(QSignalSpy& spy, int count = 1)
{
    return waitFor([&] { return spy.count() >= count; });
}

std::string partitionPanelPlanJson(ui::ProjectDocument& doc)
{
    return planner::toJson(doc.planDocument().plan()).dump();
}

/// A 160-layer GPT on the HetPipe cluster: MadPipe takes seconds to plan it.
app::Project bigProject()
{
    auto cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/hetpipe-cluster.json");
    REQUIRE(cluster.deviceCount() == 16);
    planner::TransformerConfig config {160, 1024, 16, 1024, 50257, 1, 2};
    auto model = planner::transformerProfile(config, cluster.device_types[0]);
    REQUIRE(model.layerCount() == 162);
    auto project = app::newProject(std::move(model), std::move(cluster));
    project.partition.algorithm = "madpipe";
    return project;
}

} // namespace

namespace {

/// The last row of the panel's table whose plan interleaves (Megatron's for the demo), -1 when none does.
/// The row of Megatron's plan: its search picks its own schedule (a zero-bubble one for the demo), unlike the form's.
int megatronRow(ui::PartitionPanel& panel)
{
    int row = -1;
    for (int r = 0; r < panel.results()->rowCount(); ++r)
        if (panel.results()->row(r).plan && panel.results()->row(r).plan->algorithm == "megatron")
            row = r;
    return row;
}

} // namespace

TEST_CASE("partition panel: the form shows the project's partition settings", "[ui]")
{
    ui::ProjectDocument doc;
    auto project = partitionPanelDemo();
    project.partition.algorithm = "pipedream-2bw";
    project.partition.schedule.microbatches = 24;
    project.partition.params = {{"recompute", "on"}};

    SECTION("panel made before the project is opened")
    {
        ui::PartitionPanel panel(doc);
        doc.setProject(project);
        const auto s = panel.settings();
        CHECK(s.algorithm == "pipedream-2bw");
        CHECK(s.schedule.microbatches == 24);
        CHECK(s.params.value("recompute", "") == "on");
        // Another project with the same algorithm and no options: the form shows the defaults again.
        project.partition.params = nlohmann::json::object();
        doc.setProject(project);
        CHECK(panel.settings().params.value("recompute", "") == "auto");
    }
    SECTION("panel made on an open project")
    {
        doc.setProject(project);
        ui::PartitionPanel panel(doc);
        const auto s = panel.settings();
        CHECK(s.algorithm == "pipedream-2bw");
        CHECK(s.schedule.microbatches == 24);
        CHECK(s.params.value("recompute", "") == "on");
        REQUIRE(panel.results()->rowCount() == 1);
        CHECK(panel.results()->row(0).current);
    }
}

TEST_CASE("partition panel: the Megatron settings of the schedule show and come back", "[ui]")
{
    // issue 31: recomputation, sequence parallelism, TP overlap, the distributed optimizer and the two data-parallel
    // overlaps are plan settings the panel shows and returns unchanged.
    ui::ProjectDocument doc;
    auto project = partitionPanelDemo();
    auto& s = project.partition.schedule;
    s.recompute = planner::Recompute::Selective;
    s.sequence_parallel = true;
    s.tp_comm_overlap = true;
    s.distributed_optimizer = true;
    s.overlap_grad_reduce = false;
    s.overlap_param_gather = true;
    doc.setProject(project);
    ui::PartitionPanel panel(doc);
    const auto back = panel.settings().schedule;
    CHECK(back.recompute == planner::Recompute::Selective);
    CHECK(back.sequence_parallel);
    CHECK(back.tp_comm_overlap);
    CHECK(back.distributed_optimizer);
    CHECK_FALSE(back.shard_gradients);
    CHECK_FALSE(back.overlap_grad_reduce);
    CHECK(back.overlap_param_gather);
    // The ZeRO stage: FSDP (3) shards the gradients and the weights too.
    auto* zero = panel.findChild<QComboBox*>(QStringLiteral("zeroStage"));
    REQUIRE(zero);
    CHECK(zero->currentData().toInt() == 1);
    zero->setCurrentIndex(zero->findData(3));
    const auto fsdp = panel.settings().schedule;
    CHECK(fsdp.distributed_optimizer);
    CHECK(fsdp.shard_gradients);
    CHECK(fsdp.shard_weights);
    CHECK(fsdp.shard_group == 0);
    // HSDP: shards over groups of replicas; nothing without a ZeRO stage.
    auto* group = panel.findChild<QSpinBox*>(QStringLiteral("shardGroup"));
    REQUIRE(group);
    group->setValue(8);
    CHECK(panel.settings().schedule.shard_group == 8);
    zero->setCurrentIndex(zero->findData(0));
    CHECK(panel.settings().schedule.shard_group == 0);
    zero->setCurrentIndex(zero->findData(3));
    auto* gather = panel.findChild<QCheckBox*>(QStringLiteral("overlapParamGather"));
    REQUIRE(gather);
    gather->setChecked(false);
    CHECK_FALSE(panel.settings().schedule.overlap_param_gather);
    auto* sum = panel.findChild<QCheckBox*>(QStringLiteral("overlapGradReduce"));
    REQUIRE(sum);
    sum->setChecked(true);
    CHECK(panel.settings().schedule.overlap_grad_reduce);
}

TEST_CASE("partition panel: a PipeDream run lists its plan, applying it is one undo step", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    doc.setProject(partitionPanelDemo());
    auto* undo = doc.planDocument().undoStack();
    // Start from another plan than PipeDream's, so that applying its plan changes something.
    REQUIRE(doc.restoreScenario(QStringLiteral("8 stages, 1F1B")));
    REQUIRE(undo->count() == 1);
    const std::string before = partitionPanelPlanJson(doc);
    REQUIRE(panel.results()->rowCount() == 1);
    CHECK(panel.results()->row(0).current);

    panel.setAlgorithm(QStringLiteral("pipedream"));
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.run();
    REQUIRE(waitFinished(finished));
    CHECK(finished.count() == 1);
    CHECK_FALSE(panel.isRunning());
    CHECK(panel.lastOutcome() == QStringLiteral("done"));
    CHECK(panel.status().contains(QStringLiteral("pipedream")));
    auto* results = panel.results();
    REQUIRE(results->rowCount() >= 2);
    CHECK(results->row(0).current);
    REQUIRE(results->row(0).plan);
    CHECK(planner::toJson(*results->row(0).plan).dump() == before);
    CHECK(results->row(1).label == QStringLiteral("pipedream"));
    REQUIRE(results->row(1).plan);
    CHECK_FALSE(results->row(1).current);
    CHECK(results->row(1).plan->algorithm == "pipedream");
    CHECK(results->row(1).throughput > 0);
    CHECK(undo->count() == 1); // a run alone changes no plan
    CHECK(partitionPanelPlanJson(doc) == before);

    // A row without a plan, the current row and rows out of range are not applied.
    CHECK_FALSE(panel.applyRow(0));
    CHECK_FALSE(panel.applyRow(results->rowCount()));
    CHECK_FALSE(panel.applyRow(-1));
    CHECK(undo->count() == 1);

    const std::string pipedream = planner::toJson(*results->row(1).plan).dump();
    QSignalSpy message(&panel, &ui::PartitionPanel::message);
    REQUIRE(panel.applyRow(1));
    CHECK(message.count() == 1);
    CHECK(undo->count() == 2);
    CHECK(partitionPanelPlanJson(doc) == pipedream);
    CHECK(partitionPanelPlanJson(doc) != before);
    CHECK(doc.isModified());
    // The table now shows the applied plan as the current one, the run's rows below it.
    CHECK(results->row(0).current);
    CHECK(planner::toJson(*results->row(0).plan).dump() == pipedream);
    CHECK(results->row(1).label == QStringLiteral("pipedream"));

    // Row 0 follows the document (undo, redo) and keeps the run's rows.
    const int rows = results->rowCount();
    undo->undo();
    CHECK(partitionPanelPlanJson(doc) == before);
    CHECK(planner::toJson(*results->row(0).plan).dump() == before);
    CHECK(results->rowCount() == rows);
    undo->redo();
    CHECK(partitionPanelPlanJson(doc) == pipedream);
    CHECK(planner::toJson(*results->row(0).plan).dump() == pipedream);
}

TEST_CASE("partition panel: compare all lists a row per algorithm", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    doc.setProject(partitionPanelDemo());
    const std::string before = partitionPanelPlanJson(doc);
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.compareAll();
    REQUIRE(waitFinished(finished));
    CHECK(panel.lastOutcome() == QStringLiteral("done"));
    QSet<QString> expected;
    for (const auto* p : planner::partitioners())
        if (p->name() != "manual")
            expected.insert(QString::fromUtf8(p->name().data(), static_cast<int>(p->name().size())));
    auto* results = panel.results();
    REQUIRE(results->rowCount() == expected.size() + 1);
    CHECK(results->row(0).current);
    QSet<QString> labels;
    int withPlan = 0;
    for (int r = 1; r < results->rowCount(); ++r) {
        labels.insert(results->row(r).label);
        withPlan += results->row(r).plan.has_value();
        CHECK(results->row(r).plan.has_value() == results->row(r).feasible);
    }
    CHECK(labels == expected);
    CHECK(withPlan >= 3);
    CHECK(panel.status().contains(QStringLiteral("%1 of %2").arg(withPlan).arg(expected.size())));
    CHECK(partitionPanelPlanJson(doc) == before);
    CHECK(doc.planDocument().undoStack()->count() == 0);
}

TEST_CASE("partition panel: cancel stops a long MadPipe search and leaves the plan alone", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    doc.setProject(bigProject());
    REQUIRE(doc.planDocument().hasPlan());
    const std::string before = partitionPanelPlanJson(doc);
    auto* undo = doc.planDocument().undoStack();
    const int steps = undo->count();
    panel.setAlgorithm(QStringLiteral("madpipe"));
    REQUIRE(panel.settings().algorithm == "madpipe");

    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.run();
    REQUIRE(panel.isRunning());
    panel.cancel();
    REQUIRE(waitFinished(finished));
    CHECK(finished.count() == 1);
    CHECK_FALSE(panel.isRunning());
    CHECK(panel.lastOutcome() == QStringLiteral("cancelled")); // MadPipe itself saw the stop token
    CHECK(panel.status().contains(QStringLiteral("Cancelled")));
    CHECK(partitionPanelPlanJson(doc) == before);
    CHECK(undo->count() == steps);
    REQUIRE(panel.results()->rowCount() == 1);
    CHECK(panel.results()->row(0).current);

    // Cancelling when nothing runs does nothing; a new run works after a cancelled one.
    panel.cancel();
    CHECK(panel.lastOutcome() == QStringLiteral("cancelled"));
    panel.setAlgorithm(QStringLiteral("uniform"));
    panel.run();
    REQUIRE(waitFinished(finished, 2));
    CHECK(panel.lastOutcome() == QStringLiteral("done"));
    CHECK(partitionPanelPlanJson(doc) == before);
}

TEST_CASE("partition panel: a bad option value fails the run and names the option", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    doc.setProject(partitionPanelDemo());
    const std::string before = partitionPanelPlanJson(doc);
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);

    SECTION("a number editor cannot hold a negative batch: it clamps to auto")
    {
        panel.setAlgorithm(QStringLiteral("pipedream-2bw"));
        panel.setOption(QStringLiteral("batch-size"), -64);
        CHECK_FALSE(panel.settings().params.contains("batch-size"));
        panel.setOption(QStringLiteral("batch-size"), 64);
        CHECK(panel.settings().params.value("batch-size", 0) == 64);
    }
    SECTION("a negative microbatch size in a list")
    {
        panel.setAlgorithm(QStringLiteral("megatron"));
        panel.setOption(QStringLiteral("microbatch-sizes"), nlohmann::json::array({2, -4}));
        panel.run();
        REQUIRE(waitFinished(finished));
        CHECK(panel.lastOutcome() == QStringLiteral("failed"));
        INFO(panel.status().toStdString());
        CHECK(panel.status().contains(QStringLiteral("microbatch-sizes")));
        REQUIRE(panel.results()->rowCount() == 2);
        CHECK_FALSE(panel.results()->row(1).plan);
        CHECK_FALSE(panel.results()->row(1).feasible);
        CHECK(panel.results()->row(1).note.contains(QStringLiteral("microbatch-sizes")));
        CHECK_FALSE(panel.applyRow(1));
    }
    SECTION("a list that is not a list")
    {
        panel.setAlgorithm(QStringLiteral("pipedream-2bw"));
        auto* edit = panel.findChild<QWidget*>(QStringLiteral("microbatch-sizes"));
        REQUIRE(edit != nullptr);
        REQUIRE(edit->metaObject()->indexOfProperty("text") >= 0);
        edit->setProperty("text", QStringLiteral("two"));
        panel.run();
        REQUIRE(waitFinished(finished));
        CHECK(panel.lastOutcome() == QStringLiteral("failed"));
        INFO(panel.status().toStdString());
        CHECK(panel.status().contains(QStringLiteral("microbatch-sizes")));
    }
    CHECK(partitionPanelPlanJson(doc) == before);
    CHECK(doc.planDocument().undoStack()->count() == 0);
}

TEST_CASE("partition panel: closing the panel during a run stops and joins its worker", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(app::demoProject());
    const std::string before = planner::toJson(doc.planDocument().plan()).dump();
    for (int i = 0; i < 3; ++i) {
        ui::PartitionPanel panel(doc);
        panel.compareAll(); // runs every algorithm: still running when the panel goes
        CHECK(panel.isRunning());
    } // ~PartitionPanel must join before the results it writes are destroyed (ASan checks this)
    CHECK(planner::toJson(doc.planDocument().plan()).dump() == before);
    CHECK(doc.planDocument().undoStack()->count() == 0);
}

TEST_CASE("partition panel: after a run the best plan that fits is selected, sorting keeps apply on its row", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    auto project = partitionPanelDemo();
    project.cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/hetpipe-cluster.json");
    project.plan.reset();
    project.scenarios.clear();
    doc.setProject(project); // some algorithms' plans do not fit the 6 GB GPUs here
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.compareAll();
    REQUIRE(waitFinished(finished));
    auto* results = panel.results();
    double bestFitting = 0;
    bool someOver = false;
    for (int r = 0; r < results->rowCount(); ++r) {
        const auto& row = results->row(r);
        if (!row.plan || row.current)
            continue;
        if (row.peak_bytes <= row.capacity_bytes)
            bestFitting = std::max(bestFitting, row.throughput);
        else
            someOver = true;
    }
    REQUIRE(someOver);
    const int selected = ui::selectedSourceRow(panel.table());
    REQUIRE(selected >= 0);
    CHECK(selected == panel.bestRow());
    CHECK(results->row(selected).peak_bytes <= results->row(selected).capacity_bytes);
    CHECK(results->row(selected).throughput == bestFitting);

    // Sorted by throughput (a header click), the view's first row is the fastest; Apply applies that very row.
    panel.table()->sortByColumn(ui::ResultModel::Throughput, Qt::DescendingOrder);
    const int top = ui::sourceRow(panel.table(), panel.table()->model()->index(0, 0));
    double fastest = 0;
    for (int r = 0; r < results->rowCount(); ++r)
        fastest = std::max(fastest, results->row(r).throughput);
    CHECK(results->row(top).throughput == fastest);
    int firstApplicable = -1; // the first row of the sorted view that has a plan to apply
    for (int v = 0; v < results->rowCount() && firstApplicable < 0; ++v) {
        const auto& row = results->row(ui::sourceRow(panel.table(), panel.table()->model()->index(v, 0)));
        if (row.plan && !row.current)
            firstApplicable = v;
    }
    REQUIRE(firstApplicable >= 0);
    const int source = ui::sourceRow(panel.table(), panel.table()->model()->index(firstApplicable, 0));
    const std::string chosen = planner::toJson(*results->row(source).plan).dump();
    panel.table()->selectRow(firstApplicable);
    REQUIRE(panel.applyRow(ui::selectedSourceRow(panel.table())));
    CHECK(partitionPanelPlanJson(doc) == chosen);
}

TEST_CASE(
    "partition panel: applying a plan of another schedule shows its schedule, focus stays off the options", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    panel.show();
    doc.setProject(partitionPanelDemo());
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.compareAll();
    REQUIRE(waitFinished(finished));
    const int megatron = megatronRow(panel);
    REQUIRE(megatron >= 0);
    const auto schedule = panel.results()->row(megatron).plan->schedule;
    REQUIRE(schedule.kind != panel.settings().schedule.kind); // Megatron's search chose its own (zero-bubble) kind
    REQUIRE(panel.applyRow(megatron));
    CHECK(panel.settings().schedule.kind == schedule.kind);
    CHECK(panel.settings().schedule.chunks == schedule.chunks);
    CHECK(panel.settings().schedule.microbatches == doc.planDocument().plan().schedule.microbatches);
    CHECK(panel.focusWidget() == panel.table());
}

TEST_CASE("partition panel: undo of an Apply brings back the form as well as the plan", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    panel.show();
    doc.setProject(partitionPanelDemo());
    // A form that differs from what Megatron's plan will set: another algorithm, an option, a schedule.
    panel.setAlgorithm(QStringLiteral("pipedream-2bw"));
    panel.setOption(QStringLiteral("recompute"), "on");
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.compareAll();
    REQUIRE(waitFinished(finished));
    const int megatron = megatronRow(panel);
    REQUIRE(megatron >= 0);
    const std::string kind = panel.results()->row(megatron).plan->schedule.kind;
    const app::PartitionSettings before = panel.settings();
    REQUIRE(before.algorithm == "pipedream-2bw");
    REQUIRE(before.params.value("recompute", "") == "on");
    REQUIRE(before.schedule.kind != kind);
    const std::string planBefore = partitionPanelPlanJson(doc);
    auto* undo = doc.planDocument().undoStack();
    const int steps = undo->count();

    REQUIRE(panel.applyRow(megatron));
    CHECK(undo->count() == steps + 1); // one step for the plan and the form
    const app::PartitionSettings applied = panel.settings();
    CHECK(applied.schedule.kind == kind);
    CHECK(applied != before);
    // The algorithm box says what made the applied plan (issue 30 item 18: it kept "pipedream-2bw").
    CHECK(applied.algorithm == "megatron");

    undo->undo();
    CHECK(partitionPanelPlanJson(doc) == planBefore);
    CHECK(panel.settings() == before); // the form as it was before Apply: algorithm, option and schedule
    undo->redo();
    CHECK(panel.settings() == applied);
    CHECK(doc.planDocument().plan().schedule.kind == kind);
}

TEST_CASE("partition panel: a DP run does not count candidates it never had, a new project resets the panel", "[ui]")
{
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    doc.setProject(partitionPanelDemo());
    panel.setAlgorithm(QStringLiteral("pipedream"));
    QSignalSpy finished(&panel, &ui::PartitionPanel::finished);
    panel.run();
    REQUIRE(waitFinished(finished));
    CHECK(panel.status().contains(QStringLiteral("pipedream found a plan")));
    CHECK_FALSE(panel.status().contains(QStringLiteral("0 candidates")));
    REQUIRE(panel.results()->rowCount() >= 2);

    // Another project: the last run's message and rows go, the new current plan is row 0 and follows edits.
    doc.setProject(bigProject());
    CHECK(panel.status() == QStringLiteral("Choose an algorithm and press Run."));
    REQUIRE(panel.results()->rowCount() == 1);
    CHECK(panel.results()->row(0).current);
    REQUIRE(doc.planDocument().waitForPrediction());
    CHECK(panel.results()->row(0).throughput > 0);
    REQUIRE(doc.planDocument().apply(
        "Move", [](const planner::Plan& p) { return planner::edit::moveBoundary(p, 0, p.stages[0].last_layer + 1); }));
    REQUIRE(doc.planDocument().waitForPrediction());
    REQUIRE(panel.results()->rowCount() == 1);
    CHECK(planner::toJson(*panel.results()->row(0).plan).dump() == partitionPanelPlanJson(doc));
}

TEST_CASE("partition panel: choosing a schedule sets the chunks it runs", "[ui]")
{
    // issue 30 item 18: zbv kept 1 chunk per device, and every plan made with it was invalid.
    ui::ProjectDocument doc;
    ui::PartitionPanel panel(doc);
    doc.setProject(partitionPanelDemo());
    QComboBox* schedule = nullptr;
    for (auto* box : panel.findChildren<QComboBox*>())
        if (box->findText(QStringLiteral("zbv")) >= 0)
            schedule = box;
    REQUIRE(schedule);
    schedule->setCurrentText(QStringLiteral("zbv"));
    CHECK(panel.settings().schedule.chunks == 2);
    schedule->setCurrentText(QStringLiteral("1f1b"));
    CHECK(panel.settings().schedule.chunks == 1);
    schedule->setCurrentText(QStringLiteral("interleaved"));
    CHECK(panel.settings().schedule.chunks == 2);
    schedule->setCurrentText(QStringLiteral("zb-h1"));
    CHECK(panel.settings().schedule.chunks == 1);
}
