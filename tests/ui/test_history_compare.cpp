// SPDX-License-Identifier: MIT
// The history browser compares runs (offscreen): two recorded runs selected, Compare reads and compares them off
// the UI thread, and the view shows each run, only the configuration field that differs with both values, the
// stages' compute and idle with deltas against the first run, and exports what it shows as CSV.
#include <catch2/catch.hpp>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QPushButton>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>

#include <qcustomplot.h>

#include "app/history/history.h"
#include "app/run/compare_runs.h"
#include "planner/sim/simulator.h"
#include "tests/engine/engine_fixtures.h"
#include "ui/jobs/job_runner.h"
#include "ui/models/run_list_model.h"
#include "ui/widgets/elided_label.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/history_view.h"
#include "ui/widgets/run_compare_view.h"

using namespace pw;

namespace {

std::string recordRun(app::HistoryStore& h, const planner::Plan& plan)
{
    app::NewRun nr;
    nr.plan_json = planner::toJson(plan).dump();
    nr.label = "compare me";
    nr.steps_planned = 2;
    const auto id = h.createRun(nr);
    planner::Plan p = plan;
    p.schedule.iterations = 2;
    std::vector<app::MeasuredSpan> spans;
    std::map<int, std::int64_t> seq;
    for (const auto& s : planner::simulate(p).timeline.spans)
        spans.push_back({s, s.device, ++seq[s.device]});
    h.appendSpans(id, spans);
    const std::vector<app::MetricSample> losses {{0, "loss", 4.0, 0.1, -1}, {1, "loss", 3.5, 0.2, -1}};
    h.appendMetrics(id, losses);
    h.finishRun(id, app::RunStatus::Succeeded, "");
    return id;
}

} // namespace

TEST_CASE("history browser: two selected runs compare side by side, only what differs, and export as CSV", "[ui]")
{
    QTemporaryDir dir;
    const std::filesystem::path file = dir.filePath(QStringLiteral("history.sqlite")).toStdString();
    {
        auto h = app::HistoryStore::open(file);
        const auto shape = test::tinyGpt2(2);
        recordRun(h, test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 4));
        recordRun(h, test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "gpipe", 4));
    }
    ui::HistoryView view;
    view.resize(1200, 800);
    view.setHistoryPath(file);
    view.show();
    view.refresh();
    REQUIRE(view.model()->rowCount() == 2);
    QPushButton* compareButton = nullptr;
    for (auto* b : view.findChildren<QPushButton*>())
        if (b->text() == QStringLiteral("Compare"))
            compareButton = b;
    REQUIRE(compareButton);
    view.table()->selectRow(0);
    CHECK(view.selectedRuns().size() == 1);
    CHECK_FALSE(compareButton->isEnabled()); // one run: nothing to compare
    view.table()->selectAll();
    REQUIRE(view.selectedRuns().size() == 2);
    CHECK(compareButton->isEnabled());

    view.compareSelected();
    REQUIRE(view.jobs()->waitForIdle(30000));
    auto* cv = view.compareView();
    REQUIRE(cv->isVisible());
    CHECK(cv->height() > view.height() / 3); // not squeezed under the list
    CHECK(cv->runsTable()->rowCount() == 2);
    // Newest first in the list: run 1 is the GPipe one.
    REQUIRE(cv->differencesTable()->rowCount() == 1);
    CHECK(cv->differencesTable()->item(0, 0)->text() == QStringLiteral("/schedule/kind"));
    CHECK(cv->differencesTable()->item(0, 1)->text() == QStringLiteral("\"gpipe\""));
    CHECK(cv->differencesTable()->item(0, 2)->text() == QStringLiteral("\"1f1b\""));
    REQUIRE(cv->stagesTable()->rowCount() == 2);
    CHECK(cv->stagesTable()->item(0, 3)->text().contains(QStringLiteral("s (")));
    const auto& c = cv->comparison();
    REQUIRE(c.compute_delta_s.size() == 2);
    // The same compute per step (the same microbatches), the bubble differs between the schedules' orders.
    CHECK(c.compute_delta_s[0][1] == Approx(0.0).margin(1e-9));

    // Metrics overlaid (a curve per run, any x axis, smoothing) and both timelines on one time axis.
    REQUIRE(cv->metricsPlot()->graphCount() == 2);
    CHECK(cv->metricsPlot()->graph(0)->data()->size() == 2);
    cv->axisBox()->setCurrentIndex(cv->axisBox()->findData(static_cast<int>(app::OverlayAxis::Relative)));
    CHECK((cv->metricsPlot()->graph(1)->data()->constEnd() - 1)->key == Approx(1.0));
    cv->smoothingBox()->setValue(0.5);
    CHECK(cv->metricsPlot()->graph(0)->data()->size() == 2);
    CHECK(cv->gantt()->blockCount() == 2);
    cv->tabs()->setCurrentIndex(2);

    // Three tables, three CSV files named after the one chosen (issue 30 item 18: one file held all three, and
    // a name without ".csv" was written as it was).
    const QStringList written = cv->exportCsv(dir.filePath(QStringLiteral("compare")));
    REQUIRE(written
        == QStringList {dir.filePath(QStringLiteral("compare.csv")),
            dir.filePath(QStringLiteral("compare-differences.csv")),
            dir.filePath(QStringLiteral("compare-stages.csv"))});
    const auto slurp = [](const QString& path) {
        QFile f(path);
        REQUIRE(f.open(QIODevice::ReadOnly));
        return QString::fromUtf8(f.readAll());
    };
    const QString runs = slurp(written[0]), differences = slurp(written[1]), stagesCsv = slurp(written[2]);
    CHECK(differences.contains(QStringLiteral("/schedule/kind,\"\"\"gpipe\"\"\",\"\"\"1f1b\"\"\"")));
    // issue 19 item 13: numbers in one unit per column (seconds, named in the header), no unit text.
    CHECK(runs.startsWith(QStringLiteral("run,run_id,status,steps,")));
    CHECK(runs.contains(QStringLiteral(",iteration_s,predicted_iteration_s,")));
    CHECK(stagesCsv.startsWith(QStringLiteral("stage,run_1_compute_s,run_1_idle_s,")));
    for (const QString& text : {runs, differences, stagesCsv}) {
        CHECK_FALSE(text.contains(QStringLiteral(" ms")));
        CHECK_FALSE(text.contains(QStringLiteral("µs")));
        CHECK_FALSE(text.contains(QLatin1Char('#'))); // one table per file: no section comments
    }
    const QStringList stageLines = stagesCsv.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    REQUIRE(stageLines.size() == 3); // the header, two stages
    for (int i = 1; i < stageLines.size(); ++i)
        for (const QString& field : stageLines[i].split(QLatin1Char(','))) {
            bool number = false;
            field.toDouble(&number);
            CHECK((number || field.isEmpty()));
        }
    CHECK(stageLines[1].split(QLatin1Char(','))[1].toDouble() == Approx(c.runs[0].stages[0].compute_s));
    // A name with its extension writes the same three.
    CHECK(cv->exportCsv(dir.filePath(QStringLiteral("again.csv"))).size() == 3);
    CHECK(QFileInfo::exists(dir.filePath(QStringLiteral("again-stages.csv"))));

    // Tags: one run tagged, the tag filter finds it alone; untagged, the filter finds none.
    const std::string first = view.model()->run(0).id;
    REQUIRE(view.setTags(first, {"baseline", "gpipe"}));
    view.tagFilterEdit()->setText(QStringLiteral("baseline"));
    REQUIRE(view.model()->rowCount() == 1);
    CHECK(view.model()->run(0).id == first);
    CHECK(view.model()->run(0).tags == std::vector<std::string> {"baseline", "gpipe"});
    REQUIRE(view.setTags(first, {"gpipe"}));
    CHECK(view.model()->rowCount() == 0);
    view.tagFilterEdit()->clear();
    CHECK(view.model()->rowCount() == 2);
}

TEST_CASE("history browser: a long summary is elided with its whole text in the tooltip, tags match substrings", "[ui]")
{
    QTemporaryDir dir;
    // A file that is not a history: the summary says why, a sentence longer than the tab is wide at 1024 px.
    const QString bad = dir.filePath(QStringLiteral("a-history-file-with-a-long-name-that-is-no-database.sqlite"));
    {
        QFile f(bad);
        REQUIRE(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(4096, 'x'));
    }
    ui::HistoryView view;
    view.resize(406, 500); // the History tab's width in a 1024x700 window, beside the two docks
    view.show();
    view.setHistoryPath(bad.toStdString());
    view.refresh();
    const ui::ElidedLabel* summary = view.summaryLabel();
    REQUIRE(summary);
    CHECK(summary->fullText().startsWith(QStringLiteral("Cannot read the history: ")));
    CHECK(summary->fullText().contains(QStringLiteral("no-database.sqlite")));
    CHECK(summary->elided());
    CHECK(summary->text().endsWith(QStringLiteral("…")));
    CHECK(summary->toolTip() == summary->fullText());
    CHECK(summary->geometry().right() < view.width());

    // Tags: a part of a tag, in any case, finds the run (as the plan filter finds part of a label).
    const std::filesystem::path file = dir.filePath(QStringLiteral("history.sqlite")).toStdString();
    std::string tagged;
    {
        auto h = app::HistoryStore::open(file);
        const auto shape = test::tinyGpt2(2);
        tagged = recordRun(h, test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 4));
        recordRun(h, test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "gpipe", 4));
        h.addTag(tagged, "Nightly-2026");
    }
    view.setHistoryPath(file);
    view.refresh();
    REQUIRE(view.model()->rowCount() == 2);
    CHECK(summary->fullText().startsWith(QStringLiteral("2 runs in "))); // the error is gone
    view.tagFilterEdit()->setText(QStringLiteral("night"));
    REQUIRE(view.model()->rowCount() == 1);
    CHECK(view.model()->run(0).id == tagged);
    view.tagFilterEdit()->setText(QStringLiteral("weekly"));
    CHECK(view.model()->rowCount() == 0);
}
