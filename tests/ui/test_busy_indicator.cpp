// SPDX-License-Identifier: MIT
// The status bar's busy sign: shown only once work has lasted 100 ms, gone when nothing is busy; a main window's
// long simulation shows it.
#include <catch2/catch.hpp>

#include <QStatusBar>
#include <QTest>

#include "app/project/project.h"
#include "ui/document/project_document.h"
#include "ui/widgets/busy_indicator.h"
#include "ui/widgets/main_window.h"

using namespace pw;
using namespace pw::ui;

TEST_CASE("busy indicator: appears after 100 ms of work, never for short work", "[ui]")
{
    QWidget parent;
    auto* busy = new BusyIndicator(&parent);
    parent.show();
    busy->setBusy(QStringLiteral("Simulating"), true);
    busy->setBusy(QStringLiteral("Simulating"), false); // a job of a few ms
    QTest::qWait(2 * BusyIndicator::kDelayMs);
    CHECK_FALSE(busy->isVisible());

    busy->setBusy(QStringLiteral("Simulating"), true);
    CHECK_FALSE(busy->isVisible());
    QTest::qWait(2 * BusyIndicator::kDelayMs);
    CHECK(busy->isVisible());
    busy->setBusy(QStringLiteral("Comparing"), true);
    CHECK(busy->text() == QStringLiteral("Comparing, Simulating"));
    busy->setBusy(QStringLiteral("Simulating"), false);
    CHECK(busy->isVisible()); // something still runs
    busy->setBusy(QStringLiteral("Comparing"), false);
    CHECK_FALSE(busy->isVisible());
}

TEST_CASE("busy indicator: a main window shows it while a large plan is simulated", "[ui][large]")
{
    MainWindow w;
    auto project = app::loadProject(std::string(PW_DEMO_DIR) + "/gpt3-175b-64xh100.pwproj");
    project.plan->predicted.reset();
    w.resize(1024, 700);
    w.show();
    w.document().setProject(project); // 3.8 M actions: several hundred ms
    QTest::qWait(2 * BusyIndicator::kDelayMs);
    bool seen = w.busyIndicator()->isVisible();
    CHECK(w.busyIndicator()->text().contains(QStringLiteral("Simulating")));
    REQUIRE(w.waitUntilIdle());
    CHECK(seen);
    CHECK_FALSE(w.busyIndicator()->isVisible());
}
