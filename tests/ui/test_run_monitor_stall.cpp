// SPDX-License-Identifier: MIT
// The run monitor's Stall tab: a past run that stalled shows the controller's report (the chain of waits) and each
// device's flight recorder, the action it was in marked in progress; a run without a stall says so.
#include <catch2/catch.hpp>

#include <QTableWidget>
#include <QTemporaryDir>

#include "app/history/history.h"
#include "app/run/snapshot.h"
#include "ui/widgets/run_monitor.h"

using namespace pw;
using Catch::Contains;

TEST_CASE("run monitor: a stalled run shows its stall report and each device's last actions", "[ui][run][stall]")
{
    QTemporaryDir dir;
    auto history = app::HistoryStore::open((dir.path() + QStringLiteral("/history.sqlite")).toStdString());
    app::NewRun run;
    run.label = "stalled";
    const std::string id = history.createRun(run);
    const std::string quiet = history.createRun(run);
    planner::Span forward;
    forward.device = 0;
    forward.microbatch = 12;
    forward.t0 = 1.25;
    forward.t1 = 1.5;
    planner::Span recv;
    recv.device = 1;
    recv.lane = planner::Lane::Recv;
    recv.kind = planner::ActionKind::RecvActivation;
    recv.microbatch = 12;
    recv.peer = 0;
    recv.bytes = 2048;
    recv.t0 = 1.5;
    const std::string report = "stalled: no device finished an action for 60 s: stage 1 (device 1, host b, cpu) "
                               "waits 62 s for F mb 12 from stage 0; stage 0 (device 0, host a, cpu) has sent "
                               "nothing for 61 s (stopped or hung)";
    history.addStall(id, {63.5, report, {1, 0}}, {{0, forward, false, "controller"}, {1, recv, true, "agent"}});
    history.finishRun(id, app::RunStatus::Failed, report);
    history.finishRun(quiet, app::RunStatus::Succeeded);

    ui::RunMonitor monitor;
    monitor.showSnapshot(std::make_shared<app::RunSnapshot>(app::loadRunSnapshot(history, id)));
    CHECK_THAT(monitor.stallText().toStdString(), Contains(report));
    auto* table = monitor.flightRecorderTable();
    REQUIRE(table->rowCount() == 2);
    CHECK(table->item(0, 0)->text() == QStringLiteral("0"));
    CHECK(table->item(0, 8)->text() == QStringLiteral("1.500"));
    CHECK_THAT(table->item(0, 0)->toolTip().toStdString(), Contains("did not answer"));
    CHECK(table->item(1, 2)->text() == QStringLiteral("RECV_F"));
    CHECK(table->item(1, 4)->text() == QStringLiteral("12"));
    CHECK(table->item(1, 5)->text() == QStringLiteral("0"));
    CHECK(table->item(1, 8)->text() == QStringLiteral("in progress"));

    monitor.showSnapshot(std::make_shared<app::RunSnapshot>(app::loadRunSnapshot(history, quiet)));
    CHECK(monitor.stallText().isEmpty());
    CHECK(monitor.flightRecorderTable()->rowCount() == 0);
}
