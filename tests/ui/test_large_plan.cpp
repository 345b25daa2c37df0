// SPDX-License-Identifier: MIT
// The app on a large plan (the bundled GPT-3 175B project: 64 stages, 10,000 microbatches): the event loop keeps
// turning while a five-million-action plan is re-simulated after an edit, and the window never outgrows its screen.
#include <catch2/catch.hpp>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QScreen>
#include <QTimer>

#include "app/project/project.h"
#include "planner/edit.h"
#include "planner/partition/partitioner.h"
#include "ui/document/project_document.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/main_window.h"
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
