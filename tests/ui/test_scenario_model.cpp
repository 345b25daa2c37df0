// SPDX-License-Identifier: MIT
// The scenarios table: a row per scenario of the project with the simulator's numbers, the first two checked,
// check states that follow setData and the project's scenarios, and QAbstractItemModelTester through it all.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QBrush>
#include <QSignalSpy>

#include "app/project/demo_project.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "ui/document/project_document.h"
#include "ui/models/scenario_model.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/scenarios_view.h"

using namespace pw;
using ui::ScenarioModel;

namespace {

constexpr auto kScenarioModelFatal = QAbstractItemModelTester::FailureReportingMode::Fatal;

const app::Project& scenarioModelDemo()
{
    static const app::Project project = app::demoProject();
    return project;
}

QStringList names(const app::Project& p, std::initializer_list<int> rows)
{
    QStringList out;
    for (int r : rows)
        out << QString::fromStdString(p.scenarios[r].name);
    return out;
}

bool scenarioModelIsRed(const QVariant& v)
{
    return v.isValid() && v.value<QBrush>().color().red() > 150 && v.value<QBrush>().color().green() < 100;
}

} // namespace

TEST_CASE("scenario model: the demo's scenarios with the simulator's numbers", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(scenarioModelDemo());
    ScenarioModel model(doc);
    QAbstractItemModelTester tester(&model, kScenarioModelFatal);
    const auto& scenarios = doc.project().scenarios;
    REQUIRE(model.rowCount() == 4);
    // The rows are there at once; the numbers land from the project document's background simulation.
    CHECK(model.simulating(0));
    CHECK(model.data(model.index(0, ScenarioModel::Note)).toString() == "simulating…");
    REQUIRE(doc.waitForScenarios());
    CHECK_FALSE(model.simulating(0));
    CHECK(model.columnCount() == ScenarioModel::ColumnCount);
    for (int r = 0; r < 4; ++r) {
        const auto& s = scenarios[r];
        INFO(s.name);
        const auto sim = planner::simulate(s.plan, {false, true});
        auto value
            = [&](int column) { return model.data(model.index(r, column), ScenarioModel::ValueRole).toDouble(); };
        CHECK(value(ScenarioModel::Throughput) == sim.throughput_samples_per_s);
        CHECK(value(ScenarioModel::Iteration) == sim.iteration_time_s);
        CHECK(value(ScenarioModel::Bubble) == sim.bubble_fraction);
        double worst = -1, peak = 0;
        for (const auto& d : sim.devices)
            if (d.peak_memory_bytes / d.memory_capacity_bytes > worst) {
                worst = d.peak_memory_bytes / d.memory_capacity_bytes;
                peak = d.peak_memory_bytes;
            }
        CHECK(value(ScenarioModel::Memory) == peak);
        CHECK(model.data(model.index(r, ScenarioModel::Name)).toString() == QString::fromStdString(s.name));
        CHECK(model.data(model.index(r, ScenarioModel::Algorithm)).toString()
            == QString::fromStdString(s.plan.algorithm));
        CHECK(model.data(model.index(r, ScenarioModel::Config)).toString()
            == QString::fromStdString(s.plan.configString()));
        CHECK(model.data(model.index(r, ScenarioModel::Note)).toString() == QString::fromStdString(s.note));
        CHECK(model.data(model.index(r, ScenarioModel::Throughput)).toString()
            == QString::number(sim.throughput_samples_per_s, 'f', 1));
        CHECK_FALSE(scenarioModelIsRed(model.data(model.index(r, ScenarioModel::Memory), Qt::ForegroundRole)));
        CHECK(model.flags(model.index(r, ScenarioModel::Name)).testFlag(Qt::ItemIsUserCheckable));
        CHECK_FALSE(model.flags(model.index(r, ScenarioModel::Throughput)).testFlag(Qt::ItemIsUserCheckable));
    }
    // The interleaved scenario says so.
    CHECK(model.data(model.index(3, ScenarioModel::Schedule)).toString().contains(QStringLiteral("×2")));
    CHECK(model.headerData(ScenarioModel::Name, Qt::Horizontal).toString() == QStringLiteral("Scenario"));
}

TEST_CASE("scenario model: the first two are checked, setData and the project's scenarios move the checks", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(scenarioModelDemo());
    ScenarioModel model(doc);
    QAbstractItemModelTester tester(&model, kScenarioModelFatal);
    const auto& p = doc.project();
    REQUIRE(model.rowCount() == 4);
    auto state = [&](int r) {
        return model.data(model.index(r, ScenarioModel::Name), Qt::CheckStateRole).value<Qt::CheckState>();
    };
    CHECK(state(0) == Qt::Checked);
    CHECK(state(1) == Qt::Checked);
    CHECK(state(2) == Qt::Unchecked);
    CHECK(state(3) == Qt::Unchecked);
    CHECK(model.checkedNames() == names(p, {0, 1}));
    CHECK_FALSE(model.data(model.index(0, ScenarioModel::Config), Qt::CheckStateRole).isValid());

    QSignalSpy checked(&model, &ScenarioModel::checkedChanged);
    QSignalSpy data(&model, &QAbstractItemModel::dataChanged);
    REQUIRE(model.setData(model.index(3, ScenarioModel::Name), Qt::Checked, Qt::CheckStateRole));
    CHECK(checked.count() == 1);
    REQUIRE(data.count() == 1);
    CHECK(data.at(0).at(0).toModelIndex() == model.index(3, ScenarioModel::Name));
    CHECK(state(3) == Qt::Checked);
    CHECK(model.checkedNames() == names(p, {0, 1, 3}));

    REQUIRE(model.setData(model.index(0, ScenarioModel::Name), Qt::Unchecked, Qt::CheckStateRole));
    CHECK(checked.count() == 2);
    CHECK(model.checkedNames() == names(p, {1, 3}));

    // No change, no signal; other columns and roles are not editable.
    model.setData(model.index(1, ScenarioModel::Name), Qt::Checked, Qt::CheckStateRole);
    CHECK(checked.count() == 2);
    CHECK_FALSE(model.setData(model.index(1, ScenarioModel::Config), Qt::Unchecked, Qt::CheckStateRole));
    CHECK_FALSE(model.setData(model.index(1, ScenarioModel::Name), QStringLiteral("x"), Qt::EditRole));
    CHECK(model.checkedNames() == names(p, {1, 3}));
    model.setChecked(QStringLiteral("no such scenario"), true);
    CHECK(checked.count() == 2);

    // setChecked by name.
    model.setChecked(names(p, {2}).front(), true);
    CHECK(checked.count() == 3);
    CHECK(model.checkedNames() == names(p, {1, 2, 3}));

    // Removing a checked scenario through the document: a reset the tester accepts, the check goes with it.
    const QString removed = names(p, {1}).front();
    const QString second = names(p, {2}).front(), third = names(p, {3}).front();
    REQUIRE(doc.removeScenario(removed));
    CHECK(model.rowCount() == 3);
    CHECK(model.checkedNames() == QStringList({second, third}));
    CHECK(checked.count() >= 4);

    // Saving one adds a row, unchecked; the others keep their checks.
    REQUIRE(doc.saveScenario(QStringLiteral("mine")));
    REQUIRE(model.rowCount() == 4);
    CHECK(model.data(model.index(3, ScenarioModel::Name)).toString() == QStringLiteral("mine"));
    CHECK(state(3) == Qt::Unchecked);
    CHECK(model.checkedNames() == QStringList({second, third}));

    // A whole new project: rows rebuilt; checked names it still has stay checked.
    doc.setProject(scenarioModelDemo());
    CHECK(model.rowCount() == 4);
    CHECK(model.checkedNames() == QStringList({second, third}));
    while (doc.project().scenarios.size() > 0)
        REQUIRE(doc.removeScenario(QString::fromStdString(doc.project().scenarios.back().name)));
    CHECK(model.rowCount() == 0);
    CHECK(model.checkedNames().isEmpty());
}

TEST_CASE("scenario model: a scenario over its devices' memory paints red", "[ui]")
{
    auto project = scenarioModelDemo();
    const auto model = planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    const auto cluster = planner::loadCluster(std::string(PW_DEMO_DIR) + "/hetpipe-cluster.json");
    planner::PartitionOptions o;
    o.schedule.microbatches = 8;
    auto over = planner::findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(over.ok());
    project.scenarios.push_back({"on the HetPipe cluster", "", *over.plan});
    ui::ProjectDocument doc;
    doc.setProject(project);
    ScenarioModel m(doc);
    QAbstractItemModelTester tester(&m, kScenarioModelFatal);
    REQUIRE(doc.waitForScenarios());
    REQUIRE(m.rowCount() == 5);
    CHECK(scenarioModelIsRed(m.data(m.index(4, ScenarioModel::Memory), Qt::ForegroundRole)));
    CHECK_FALSE(scenarioModelIsRed(m.data(m.index(0, ScenarioModel::Memory), Qt::ForegroundRole)));
    CHECK(m.data(m.index(4, ScenarioModel::Memory), ScenarioModel::ValueRole).toDouble() > 6.0 * (1ull << 30));
}

TEST_CASE("scenario model: a scenario of another model is marked, and the view does not stack it", "[ui]")
{
    auto project = scenarioModelDemo();
    auto tiny = planner::loadModel(std::string(PW_DEMO_DIR) + "/../../tests/data/golden/tiny-model.json");
    planner::PartitionOptions o;
    o.schedule.microbatches = 4;
    o.devices = 2;
    auto other = planner::findPartitioner("uniform")->partition({tiny, project.cluster, o}, {}, {});
    REQUIRE(other.ok());
    project.scenarios.insert(project.scenarios.begin(), {"tiny plan", "", *other.plan});
    ui::ProjectDocument doc;
    doc.setProject(project);
    ui::ScenariosView view(doc);
    auto* m = view.model();
    REQUIRE(doc.waitForScenarios());
    CHECK_FALSE(m->matchesProject(0));
    CHECK(m->matchesProject(1));
    CHECK(m->data(m->index(0, ScenarioModel::Name)).toString() == QStringLiteral("tiny plan (other model)"));
    CHECK(
        m->data(m->index(0, ScenarioModel::Name), ScenarioModel::ValueRole).toString() == QStringLiteral("tiny plan"));
    CHECK(m->data(m->index(0, ScenarioModel::Name), Qt::ToolTipRole).toString().contains(QStringLiteral("tiny")));
    REQUIRE(m->checkedNames().contains(QStringLiteral("tiny plan"))); // the first two are ticked
    QCoreApplication::processEvents();
    REQUIRE(view.gantt()->waitForPrepared());
    CHECK(view.gantt()->blockCount() == 1); // only the demo-model scenario is stacked

    // A newly saved scenario is ticked, selected and in view.
    REQUIRE(view.saveCurrent(QStringLiteral("fresh")));
    const int row = doc.project().findScenario("fresh");
    REQUIRE(row >= 0);
    CHECK(m->checkedNames().contains(QStringLiteral("fresh")));
    CHECK(view.selectedName() == QStringLiteral("fresh"));
}
