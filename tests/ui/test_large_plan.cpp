// SPDX-License-Identifier: MIT
// The app on a large plan (the bundled GPT-3 175B project: 64 stages, 10,000 microbatches): the event loop keeps
// turning while a five-million-action plan is re-simulated after an edit, and the window never outgrows its screen.
#include <catch2/catch.hpp>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QScreen>
#include <QTimer>

#include <qcustomplot.h>

#include "app/project/project.h"
#include "planner/edit.h"
#include "planner/partition/partitioner.h"
#include "ui/document/project_document.h"
#include "ui/models/format.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/main_window.h"
#include "ui/widgets/model_view.h"
#include "ui/widgets/partition_panel.h"

using namespace pw;
using namespace pw::ui;

namespace {

app::Project largeProject(int microbatches = 10'000)
{
    auto project = app::loadProject(std::string(PW_DEMO_DIR) + "/gpt3-175b-64xh100.pwproj");
    REQUIRE(project.plan);
    REQUIRE(project.plan->stageCount() == 64);
    project.plan->schedule.microbatches = microbatches;
    project.plan->predicted.reset();
    return project;
}

} // namespace

TEST_CASE("large plan: the event loop keeps turning while 5 M actions are re-simulated after an edit", "[ui][large]")
{
    MainWindow w;
    w.document().setProject(largeProject(13'200)); // 380 actions per microbatch: 5.0 M actions
    w.resize(1280, 720);
    w.show();
    auto& doc = w.document().planDocument();
    REQUIRE(w.waitUntilIdle());
    REQUIRE(doc.prediction());
    CHECK(doc.prediction()->simulated_actions >= 5'000'000);

    // A 50 ms timer, as a person's clicks and repaints would need; each tick notes whether the simulation runs.
    QTimer tick;
    tick.setInterval(50);
    int ticks = 0, ticksWhileSimulating = 0;
    QElapsedTimer clock;
    qint64 last = 0, longestGap = 0;
    QObject::connect(&tick, &QTimer::timeout, [&] {
        ++ticks;
        ticksWhileSimulating += doc.simulating();
        longestGap = std::max(longestGap, clock.elapsed() - last);
        last = clock.elapsed();
    });
    clock.start();
    tick.start();
    const int last0 = doc.plan().stages[0].last_layer;
    QElapsedTimer edit;
    edit.start();
    REQUIRE(doc.apply(
        "Move boundary", [&](const planner::Plan& p) { return planner::edit::moveBoundary(p, 0, last0 - 1); }));
    const qint64 editMs = edit.elapsed();
    CHECK(doc.plan().stages[0].last_layer == last0 - 1); // the plan changed at once
    CHECK(doc.simulating()); // its prediction is on its way
    CHECK_FALSE(doc.isPredictionCurrent());
    REQUIRE(w.waitUntilIdle());
    tick.stop();
    INFO("edit returned after " << editMs << " ms; " << ticks << " ticks, " << ticksWhileSimulating
                                << " while simulating; longest gap " << longestGap << " ms");
    CHECK(ticksWhileSimulating >= 2); // the timer kept firing while the simulation ran
    CHECK(doc.isPredictionCurrent());
    CHECK(doc.prediction()->simulated_actions >= 5'000'000);

    // The schedule tab indexes the 5 M spans off the GUI thread too: the switch returns at once, the chart lands.
    ticks = ticksWhileSimulating = 0;
    int ticksWhilePreparing = 0;
    QObject::connect(&tick, &QTimer::timeout, [&] { ticksWhilePreparing += w.ganttView()->preparing(); });
    tick.start();
    w.showView(QStringLiteral("gantt"));
    CHECK(w.ganttView()->preparing());
    REQUIRE(w.ganttView()->waitForPrepared());
    tick.stop();
    CHECK(w.ganttView()->blockCount() == 1);
    CHECK(ticksWhilePreparing >= 1);
}

TEST_CASE("large plan: the main window never grows wider than its screen", "[ui][large]")
{
    MainWindow w;
    w.document().setProject(largeProject());
    const QRect screen = w.screen()->availableGeometry();
    for (const QSize size : {QSize(1024, 700), QSize(1280, 720), QSize(1920, 1080)}) {
        INFO(size.width() << "x" << size.height());
        w.resize(size);
        w.show();
        for (const QString& view : MainWindow::viewNames()) {
            INFO(view.toStdString());
            w.showView(view);
            REQUIRE(w.waitUntilIdle());
            w.replotAll();
            CHECK(w.minimumSizeHint().width() <= size.width());
            CHECK(w.width() <= std::max(size.width(), screen.width()));
            CHECK(w.width() == size.width());
            CHECK(w.height() == size.height());
            CHECK(w.screenshotWidget(view)->grab().size() == size); // what --screenshot --size writes
        }
    }
}

TEST_CASE("large plan: choosing another algorithm never grows the window", "[ui][large]")
{
    MainWindow w;
    w.document().setProject(largeProject());
    w.resize(1280, 720);
    w.show();
    REQUIRE(w.waitUntilIdle());
    for (const auto* p : planner::partitioners()) {
        const QString name = QString::fromUtf8(p->name().data(), static_cast<int>(p->name().size()));
        INFO(name.toStdString());
        w.partitionPanel()->setAlgorithm(name); // its options form replaces the last one
        QCoreApplication::processEvents();
        CHECK(w.size() == QSize(1280, 720));
        CHECK(w.minimumSizeHint().height() <= 720);
    }
}

TEST_CASE("large plan: labels that fit, thin handles, a layer's hover, lanes by node, one unit per axis", "[ui][large]")
{
    MainWindow w;
    w.document().setProject(largeProject());
    w.resize(1920, 1080);
    w.show();
    w.showView(QStringLiteral("model"));
    REQUIRE(w.waitUntilIdle());
    w.replotAll();
    auto* view = w.modelView();
    // 98 layers in ~700 px: no stage label fits between its edges, the handles are thin lines.
    CHECK(view->labelsShown() < 64);
    CHECK(view->denseHandles());
    // Zoomed to a few layers, labels and grips come back.
    view->plot()->xAxis->setRange(10, 14);
    QCoreApplication::processEvents();
    w.replotAll();
    CHECK(view->labelsShown() >= 1);
    CHECK_FALSE(view->denseHandles());
    // A layer's hover: its name, kind, stage, device, times and bytes, each with a unit.
    const QString tip = view->layerToolTip(12.5);
    INFO(tip.toStdString());
    CHECK(tip.contains(QStringLiteral("layer 12")));
    CHECK(tip.contains(QStringLiteral("stage 6")));
    CHECK(tip.contains(QStringLiteral("dgx0/gpu6")));
    CHECK(tip.contains(QStringLiteral(" ms")));
    CHECK(tip.contains(QStringLiteral(" MiB")));
    CHECK(view->layerToolTip(-1).isEmpty());
    CHECK(view->layerToolTip(98.5).isEmpty());

    // The schedule: 64 lanes in ~800 px label the nodes, and the memory plot's legend gives way to a note.
    w.showView(QStringLiteral("gantt"));
    REQUIRE(w.waitUntilIdle());
    w.replotAll();
    w.replotAll();
    auto* gantt = w.ganttView();
    const auto ticks = qSharedPointerCast<QCPAxisTickerText>(gantt->ganttPlot()->yAxis->ticker())->ticks();
    REQUIRE(ticks.size() == 8);
    CHECK(ticks.first() == QStringLiteral("dgx0 ×8"));
    CHECK_FALSE(gantt->memoryPlot()->legend->visible());
    // One unit on every tick of the time axis, whatever the zoom ("0 ms, 500 ms", never "0 s, 500.0 ms, 1.0 s").
    for (const double window : {1249.0, 0.8, 0.002}) {
        gantt->setTimeWindow(0, window);
        w.replotAll();
        const QVector<QString> labels = gantt->ganttPlot()->xAxis->tickVectorLabels();
        INFO(window);
        REQUIRE(labels.size() >= 2);
        const QString unit = labels.front().section(QLatin1Char(' '), -1);
        for (const QString& l : labels)
            CHECK(l.section(QLatin1Char(' '), -1) == unit);
    }
    CHECK(secondsTextIn(500, 1, 0) == QStringLiteral("500 s"));
    CHECK(secondsTextIn(0.5, 1e-3, 0) == QStringLiteral("500 ms"));
    CHECK(secondsTextIn(0, 1e-3, 1) == QStringLiteral("0.0 ms"));
}
