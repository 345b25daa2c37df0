// SPDX-License-Identifier: MIT
// The partition panel's result table: passes QAbstractItemModelTester through resets; a search's run gives its
// plan (appliable) then its candidates (not appliable); comparison rows carry their plans; a plan over memory and
// a failed row are painted red.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QBrush>
#include <QFont>

#include "planner/analysis/compare.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "ui/models/result_model.h"

using namespace pw;
using ui::ResultModel;
using ui::ResultRow;

namespace {

constexpr auto kResultModelFatal = QAbstractItemModelTester::FailureReportingMode::Fatal;

planner::ModelProfile demoModel()
{
    return planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
}

planner::Cluster demoCluster(const char* file = "dgx-h100.json")
{
    return planner::loadCluster(std::string(PW_DEMO_DIR) + "/" + file);
}

planner::PartitionResult partition(
    const char* algorithm, const planner::ModelProfile& model, const planner::Cluster& cluster, int microbatches = 16)
{
    planner::PartitionOptions o;
    o.schedule.microbatches = microbatches;
    return planner::findPartitioner(algorithm)->partition({model, cluster, o}, {}, {});
}

bool isRed(const QVariant& v)
{
    if (!v.isValid())
        return false;
    const QColor c = v.value<QBrush>().color();
    return c.red() > 150 && c.green() < 100 && c.blue() < 100;
}

QVariant cell(const ResultModel& m, int row, int column, int role = Qt::DisplayRole)
{
    return m.data(m.index(row, column), role);
}

} // namespace

TEST_CASE("result model: a search's run lists its plan first, then its candidates without a plan", "[ui]")
{
    const auto model = demoModel();
    const auto cluster = demoCluster();
    const auto result = partition("pipedream-2bw", model, cluster);
    REQUIRE(result.ok());
    REQUIRE(result.candidates.size() > 1);

    const auto rows = ResultModel::runRows(QStringLiteral("pipedream-2bw"), result);
    REQUIRE(rows.size() == result.candidates.size() + 1);
    REQUIRE(rows[0].plan.has_value());
    CHECK(rows[0].label == QStringLiteral("pipedream-2bw"));
    CHECK_FALSE(rows[0].current);
    CHECK(rows[0].feasible);
    CHECK(planner::toJson(*rows[0].plan) == planner::toJson(*result.plan));
    CHECK(rows[0].config == QString::fromStdString(result.plan->configString()));
    CHECK(rows[0].schedule == QString::fromStdString(result.plan->schedule.kind));
    const auto sim = planner::simulate(*result.plan, {false, true});
    CHECK(rows[0].throughput == sim.throughput_samples_per_s);
    CHECK(rows[0].iteration_s == sim.iteration_time_s);
    CHECK(rows[0].bubble == sim.bubble_fraction);
    CHECK(rows[0].peak_bytes > 0);
    CHECK(rows[0].peak_bytes <= rows[0].capacity_bytes);
    for (std::size_t i = 1; i < rows.size(); ++i) {
        const auto& c = result.candidates[i - 1];
        INFO("candidate " << c.description);
        CHECK_FALSE(rows[i].plan.has_value());
        CHECK(rows[i].label == QStringLiteral("candidate: ") + QString::fromStdString(c.description));
        CHECK(rows[i].throughput == c.throughput_samples_per_s);
        CHECK(rows[i].peak_bytes == c.peak_memory_bytes);
        CHECK(rows[i].feasible == c.feasible);
    }

    ResultModel m;
    QAbstractItemModelTester tester(&m, kResultModelFatal);
    CHECK(m.rowCount() == 0);
    m.setRows(rows);
    REQUIRE(m.rowCount() == static_cast<int>(rows.size()));
    CHECK(m.columnCount() == ResultModel::ColumnCount);
    CHECK(cell(m, 0, ResultModel::Label).toString() == QStringLiteral("pipedream-2bw"));
    CHECK(cell(m, 0, ResultModel::Throughput, ResultModel::ValueRole).toDouble() == sim.throughput_samples_per_s);
    CHECK(cell(m, 0, ResultModel::Throughput).toString() == QString::number(sim.throughput_samples_per_s, 'f', 1));
    CHECK_FALSE(cell(m, 0, ResultModel::Iteration).toString().isEmpty());
    CHECK_FALSE(cell(m, 0, ResultModel::Memory).toString().isEmpty());
    CHECK_FALSE(isRed(cell(m, 0, ResultModel::Memory, Qt::ForegroundRole)));
    // Candidates are grey with a tooltip saying why they cannot be applied.
    CHECK(cell(m, 1, ResultModel::Label, Qt::ForegroundRole).isValid());
    CHECK(cell(m, 1, ResultModel::Label, Qt::ToolTipRole).toString().contains(QStringLiteral("applied")));
    CHECK_FALSE(cell(m, 0, ResultModel::Label, Qt::ForegroundRole).isValid());
    CHECK(cell(m, 1, ResultModel::Iteration).toString().isEmpty()); // unknown for a candidate
    CHECK(m.headerData(ResultModel::Throughput, Qt::Horizontal).toString() == QStringLiteral("Samples/s"));
    CHECK_FALSE(m.headerData(ResultModel::ColumnCount, Qt::Horizontal).isValid());

    // Resets keep the tester happy.
    m.setRows({});
    CHECK(m.rowCount() == 0);
    m.setRows(rows);
    m.setRows({rows[0]});
    CHECK(m.rowCount() == 1);
}

TEST_CASE("result model: a failed run is one red row without a plan", "[ui]")
{
    // Uniform asks for a stage per GPU: more stages than the tiny model has layers.
    auto tiny = planner::loadModel(std::string(PW_DEMO_DIR) + "/../../tests/data/golden/tiny-model.json");
    const auto result = partition("uniform", tiny, demoCluster());
    REQUIRE_FALSE(result.ok());
    const auto rows = ResultModel::runRows(QStringLiteral("uniform"), result);
    REQUIRE(rows.size() == 1);
    CHECK_FALSE(rows[0].plan.has_value());
    CHECK_FALSE(rows[0].feasible);
    CHECK(rows[0].note == QString::fromStdString(result.errorText()));
    ResultModel m;
    QAbstractItemModelTester tester(&m, kResultModelFatal);
    m.setRows(rows);
    CHECK(isRed(cell(m, 0, ResultModel::Note, Qt::ForegroundRole)));
    CHECK(cell(m, 0, ResultModel::Note, Qt::ToolTipRole).toString() == rows[0].note);
    CHECK(cell(m, 0, ResultModel::Throughput).toString().isEmpty());
    CHECK(cell(m, 0, ResultModel::Bubble).toString().isEmpty());
}

TEST_CASE("result model: comparison rows carry their plans and numbers", "[ui]")
{
    const auto model = demoModel();
    const auto cluster = demoCluster();
    planner::ComparisonOptions options;
    options.base.schedule.microbatches = 8;
    options.algorithms = {"uniform", "pipedream", "parameters", "megatron", "no-such-algorithm"};
    options.keep_plans = true;
    const auto comparison = planner::compareAlgorithms(model, cluster, options);
    REQUIRE(comparison.size() == options.algorithms.size());

    std::vector<ResultRow> rows;
    int ok = 0;
    for (const auto& c : comparison) {
        const ResultRow r = ResultModel::comparisonRow(c);
        INFO(c.algorithm << ": " << c.error);
        CHECK(r.label == QString::fromStdString(c.algorithm));
        CHECK(r.plan.has_value() == c.ok);
        CHECK(r.feasible == c.ok);
        if (c.ok) {
            ++ok;
            CHECK(planner::toJson(*r.plan) == planner::toJson(*c.plan));
            CHECK(r.config == QString::fromStdString(c.config));
            CHECK(r.schedule == QString::fromStdString(c.schedule));
            CHECK(r.throughput == c.throughput_samples_per_s);
            CHECK(r.iteration_s == c.iteration_time_s);
            CHECK(r.bubble == c.bubble_fraction);
            CHECK(r.peak_bytes == c.peak_memory_bytes);
            CHECK(r.capacity_bytes == c.memory_capacity_bytes);
            CHECK(r.note.contains(QStringLiteral("over memory")) == (c.memory_ratio > 1));
        } else {
            CHECK(r.note == QString::fromStdString(c.error));
        }
        rows.push_back(r);
    }
    CHECK(ok >= 3);
    CHECK_FALSE(rows.back().plan.has_value()); // the unknown algorithm

    ResultModel m;
    QAbstractItemModelTester tester(&m, kResultModelFatal);
    m.setRows(rows);
    REQUIRE(m.rowCount() == static_cast<int>(rows.size()));
    for (int r = 0; r < m.rowCount(); ++r) {
        CHECK(cell(m, r, ResultModel::Label).toString() == rows[r].label);
        CHECK(cell(m, r, ResultModel::Bubble, ResultModel::ValueRole).toDouble() == rows[r].bubble);
        CHECK(isRed(cell(m, r, ResultModel::Note, Qt::ForegroundRole)) == !rows[r].feasible);
    }
}

TEST_CASE("result model: a plan over its devices' memory paints red", "[ui]")
{
    // Uniform stages of the 355M GPT on the HetPipe cluster, no recomputation: the RTX 2060s (6 GiB) overflow.
    const auto model = demoModel();
    const auto cluster = demoCluster("hetpipe-cluster.json");
    const auto result = partition("uniform", model, cluster, 8);
    REQUIRE(result.ok());
    REQUIRE(result.plan->schedule.recompute == planner::Recompute::None);
    const ResultRow over = ResultModel::planRow(QStringLiteral("uniform"), *result.plan, false);
    REQUIRE(over.plan.has_value());
    CHECK(over.peak_bytes > over.capacity_bytes);
    CHECK(over.note.contains(QStringLiteral("over memory")));

    const auto fits = partition("pipedream", model, demoCluster());
    REQUIRE(fits.ok());
    const ResultRow current = ResultModel::planRow(QStringLiteral("current plan"), *fits.plan, true);
    CHECK(current.peak_bytes <= current.capacity_bytes);
    CHECK(current.note.isEmpty());

    ResultModel m;
    QAbstractItemModelTester tester(&m, kResultModelFatal);
    m.setRows({current, over});
    CHECK_FALSE(isRed(cell(m, 0, ResultModel::Memory, Qt::ForegroundRole)));
    CHECK(isRed(cell(m, 1, ResultModel::Memory, Qt::ForegroundRole)));
    CHECK_FALSE(isRed(cell(m, 1, ResultModel::Throughput, Qt::ForegroundRole)));
    CHECK(cell(m, 1, ResultModel::Memory, ResultModel::ValueRole).toDouble() == over.peak_bytes);
    // The current plan is bold.
    CHECK(cell(m, 0, ResultModel::Label, Qt::FontRole).value<QFont>().bold());
    CHECK_FALSE(cell(m, 1, ResultModel::Label, Qt::FontRole).isValid());
}

TEST_CASE("result model: a peak under 1 GiB is written in the unit that fits, never 0.0 GiB", "[ui]")
{
    // issue 30 item 16: the tiny demo's row read "0.0 / 16 GiB" beside the metrics' "8.53 MiB of 16.00 GiB".
    ResultModel model;
    ResultRow tiny;
    tiny.label = QStringLiteral("current plan");
    tiny.peak_bytes = 8.53 * (1 << 20);
    tiny.capacity_bytes = 16.0 * (1ull << 30);
    ResultRow large = tiny;
    large.peak_bytes = 62.3 * (1ull << 30);
    large.capacity_bytes = 80.0 * (1ull << 30);
    model.setRows({tiny, large});
    CHECK(model.data(model.index(0, ResultModel::Memory)).toString() == QStringLiteral("8.53 MiB / 16.00 GiB"));
    CHECK(model.data(model.index(1, ResultModel::Memory)).toString() == QStringLiteral("62.3 / 80 GiB"));
}
