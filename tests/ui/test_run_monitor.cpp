// SPDX-License-Identifier: MIT
// Runs from the desktop app (offscreen): a local run of the bundled tiny GPT-2 fills the run monitor live (the
// measured Gantt under the predicted one, loss and throughput per step, agents, log, the prediction's error) and
// the history list; reopening it from the history shows the same run; Stop stops one; a plan without a model
// shape is refused with the reason; the run list model passes Qt's model tester.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QComboBox>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStatusBar>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <limits>

#include <qcustomplot.h>

#include "app/history/history.h"
#include "app/project/project.h"
#include "app/run/run_checks.h"
#include "planner/schedule/generator.h"
#include "ui/document/run_session.h"
#include "ui/models/run_list_model.h"
#include "ui/widgets/causes_view.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/history_view.h"
#include "ui/widgets/main_window.h"
#include "ui/widgets/run_monitor.h"

using namespace pw;
using namespace pw::ui;
using Catch::Contains;

namespace {

const QString kTinyProject = QStringLiteral(PW_DEMO_DIR "/gpt2-tiny-local.pwproj");

app::RunRequest settings(int steps)
{
    app::RunRequest r;
    r.training.steps = steps;
    r.training.lr = 1e-3;
    r.threads = 1;
    r.agent_executable = PW_AGENT_EXE;
    return r;
}

struct RunMonitorWindow
{
    QTemporaryDir dir;
    MainWindow window;
    RunMonitorWindow()
    {
        REQUIRE(window.openProject(kTinyProject));
        window.setHistoryPath((dir.path() + QStringLiteral("/history.sqlite")).toStdString());
        window.resize(1600, 1000);
        window.show();
        REQUIRE(window.waitUntilIdle());
    }
};

/// Clicks the button of the quit-during-run box whose text starts with `button` as soon as the box shows (it is
/// modal: the close that shows it returns only after the click); `asked` becomes true then.
void answerQuitBox(const QString& button, bool* asked)
{
    auto* timer = new QTimer(qApp);
    timer->setInterval(20);
    QObject::connect(timer, &QTimer::timeout, timer, [timer, button, asked] {
        for (QWidget* w : QApplication::topLevelWidgets()) {
            auto* box = qobject_cast<QMessageBox*>(w);
            if (!box || !box->isVisible() || box->objectName() != QStringLiteral("quitDuringRunBox"))
                continue;
            for (QAbstractButton* b : box->buttons())
                if (b->text().remove(QLatin1Char('&')).startsWith(button)) {
                    *asked = true;
                    timer->deleteLater();
                    b->click();
                    return;
                }
        }
    });
    timer->start();
}

/// Waits until the session has reported `steps` steps.
bool waitForSteps(RunSession* session, std::size_t steps)
{
    QElapsedTimer t;
    t.start();
    while (session->progressHistory().size() < steps && t.elapsed() < 60'000)
        QTest::qWait(20);
    return session->progressHistory().size() >= steps;
}

app::RunStatus recordedStatus(const std::filesystem::path& history, const std::string& id)
{
    auto store = app::HistoryStore::open(history);
    const auto record = store.run(id);
    REQUIRE(record);
    return record->status;
}

} // namespace

TEST_CASE("run monitor: quitting during a run asks first, Stop the run and quit records it stopped", "[ui][run]")
{
    RunMonitorWindow w;
    REQUIRE(w.window.runLocally(settings(1'000'000)));
    RunSession* session = w.window.runSession();
    REQUIRE(waitForSteps(session, 2));
    const std::string id = session->runId().toStdString();
    REQUIRE_FALSE(id.empty());

    // Cancel: the window stays open and the run goes on.
    bool asked = false;
    answerQuitBox(QStringLiteral("Cancel"), &asked);
    CHECK_FALSE(w.window.close());
    CHECK(asked);
    CHECK(w.window.isVisible());
    CHECK(session->running());
    CHECK(recordedStatus(w.window.historyPath(), id) == app::RunStatus::Running);

    // Stop the run and quit: the window closes once the run is over, recorded as stopped.
    asked = false;
    answerQuitBox(QStringLiteral("Stop the run and quit"), &asked);
    CHECK(w.window.close());
    CHECK(asked);
    CHECK_FALSE(w.window.isVisible());
    CHECK_FALSE(session->running());
    CHECK(session->outcome().status == app::RunStatus::Stopped);
    CHECK(recordedStatus(w.window.historyPath(), id) == app::RunStatus::Stopped);
}

TEST_CASE("run monitor: an app that quits during a run without asking still records it stopped", "[ui][run]")
{
    QTemporaryDir dir;
    const std::filesystem::path history = (dir.path() + QStringLiteral("/history.sqlite")).toStdString();
    std::string id;
    {
        MainWindow window;
        REQUIRE(window.openProject(kTinyProject));
        window.setHistoryPath(history);
        window.show();
        REQUIRE(window.waitUntilIdle());
        REQUIRE(window.runLocally(settings(1'000'000)));
        REQUIRE(waitForSteps(window.runSession(), 2));
        id = window.runSession()->runId().toStdString();
    } // QApplication::quit() and the end of main(): the window is destroyed with no close event
    REQUIRE_FALSE(id.empty());
    CHECK(recordedStatus(history, id) == app::RunStatus::Stopped);
}

TEST_CASE("run monitor: a local run started from the app fills the monitor and the history list", "[ui][run]")
{
    RunMonitorWindow w;
    const int steps = 6;
    REQUIRE(w.window.runLocally(settings(steps)));
    RunSession* session = w.window.runSession();
    REQUIRE(session);
    RunMonitor* monitor = w.window.runMonitor();
    CHECK(monitor->stopButton()->isEnabled());
    REQUIRE(session->waitForFinished());
    INFO(session->outcome().message.c_str());
    REQUIRE(session->outcome().status == app::RunStatus::Succeeded);

    // Live: curves per step, both agents done, the measured timeline under the predicted one.
    CHECK(monitor->lossPoints() == steps);
    CHECK_THAT(monitor->statusText().toStdString(), Contains("succeeded") && Contains("6 steps"));
    CHECK_FALSE(monitor->stopButton()->isEnabled());
    REQUIRE(monitor->agentTable()->rowCount() == 2);
    for (int r = 0; r < 2; ++r) {
        CHECK(monitor->agentTable()->item(r, 4)->text() == QStringLiteral("done"));
        CHECK(monitor->agentTable()->item(r, 5)->text() == QString::number(steps));
    }
    REQUIRE(monitor->gantt()->blockCount() == 2);
    auto plan = w.window.document().planDocument().plan();
    plan.schedule.iterations = steps;
    CHECK(session->measured()->spans.size() == planner::generateSchedule(plan).actionCount());
    CHECK(session->predictedSteps() == steps);
    CHECK_THAT(monitor->comparisonText().toStdString(), Contains("Iteration time per step") && Contains("error"));
    // Each device's peak memory as its backend counted it, beside the planner's prediction (issue 20 item 4).
    REQUIRE(session->memory().size() == 2);
    for (const auto& m : session->memory()) {
        CHECK(m.measured_peak_bytes > 0);
        CHECK(m.predicted_peak_bytes > 0);
    }
    CHECK_THAT(monitor->comparisonText().toStdString(), Contains("Memory per device"));
    // Per action kind (issue 23 item 5): the run ran the plan's actions, F and B among them.
    CHECK_THAT(monitor->kindsText().toStdString(),
        Contains("<tr><td>F</td>") && Contains("<tr><td>B</td>") && !Contains("did not follow the plan"));
    CHECK_THAT(monitor->logView()->toPlainText().toStdString(), Contains("run succeeded"));
    // Why slow (issue 35): every step of both devices by cause, as stacked bars (one per cause) and a table.
    REQUIRE(session->diagnosis().causes.stepCount() == steps);
    CHECK(monitor->causes()->plot()->plottableCount() == 6);
    CHECK_THAT(monitor->causes()->tableText().toStdString(), Contains("Time by cause per step") && Contains("bubble"));

    // The history lists it, selected.
    HistoryView* history = w.window.historyView();
    REQUIRE(history->model()->rowCount() == 1);
    const std::string id = session->runId().toStdString();
    CHECK(history->model()->run(0).id == id);
    CHECK(history->selectedRun() == id);

    // A run that is not in the history: the error names it, in the status bar too.
    w.window.openRun(QStringLiteral("no-such-run"));
    REQUIRE(w.window.waitForOpenedRun());
    CHECK_THAT(w.window.lastError().toStdString(), Contains("no-such-run"));
    CHECK(w.window.statusBar()->currentMessage() == w.window.lastError());

    // Reopened from the history: the same run, curves and both timelines; the old error is gone from the status bar.
    w.window.openRun(QString::fromStdString(id));
    REQUIRE(w.window.waitForOpenedRun());
    CHECK(w.window.lastError().isEmpty());
    CHECK_THAT(w.window.statusBar()->currentMessage().toStdString(), Contains("Opened run " + id));
    CHECK_THAT(monitor->statusText().toStdString(), Contains(id) && Contains("6 of 6 steps"));
    CHECK(monitor->lossPoints() == steps);
    CHECK(monitor->gantt()->blockCount() == 2);
    CHECK_THAT(
        monitor->comparisonText().toStdString(), Contains("Iteration time per step") && Contains("Memory per device"));
    CHECK_THAT(monitor->kindsText().toStdString(),
        Contains("<tr><td>F</td>") && Contains("<tr><td>B</td>") && !Contains("did not follow the plan"));
    CHECK_THAT(monitor->causes()->tableText().toStdString(), Contains("the mean of 6 complete steps"));
    CHECK(w.window.lastError().isEmpty());
}

TEST_CASE("run monitor: Stop ends a live run as stopped and leaves the app usable", "[ui][run]")
{
    RunMonitorWindow w;
    REQUIRE(w.window.runLocally(settings(1'000'000)));
    RunSession* session = w.window.runSession();
    QElapsedTimer t;
    t.start();
    while (session->progressHistory().size() < 2 && t.elapsed() < 60'000)
        QTest::qWait(20);
    REQUIRE(session->progressHistory().size() >= 2);
    CHECK_FALSE(w.window.runLocally(settings(5))); // one run at a time
    QTest::mouseClick(w.window.runMonitor()->stopButton(), Qt::LeftButton);
    REQUIRE(session->waitForFinished());
    CHECK(session->outcome().status == app::RunStatus::Stopped);
    CHECK_THAT(w.window.runMonitor()->statusText().toStdString(), Contains("stopped"));
    // The history browser filters by status.
    HistoryView* history = w.window.historyView();
    history->statusBox()->setCurrentIndex(history->statusBox()->findData(QStringLiteral("succeeded")));
    CHECK(history->model()->rowCount() == 0);
    history->statusBox()->setCurrentIndex(history->statusBox()->findData(QStringLiteral("stopped")));
    CHECK(history->model()->rowCount() == 1);
    history->filterEdit()->setText(QStringLiteral("no such plan"));
    CHECK(history->model()->rowCount() == 0);
}

TEST_CASE("run monitor: a plan without a model shape fails with the reason", "[ui][run]")
{
    QTemporaryDir dir;
    // The tiny project with a profile that has lost its transformer shape (as an imported graph.txt has none).
    auto project = app::loadProject(kTinyProject.toStdString());
    auto model = *project.model;
    model.architecture.reset();
    project.model = model;
    auto plan = *project.plan;
    plan.model = project.model;
    project.plan = plan;
    const QString path = dir.path() + QStringLiteral("/no-shape.pwproj");
    app::saveProject(path.toStdString(), project);
    MainWindow window;
    REQUIRE(window.openProject(path));
    window.setHistoryPath((dir.path() + QStringLiteral("/history.sqlite")).toStdString());
    REQUIRE(window.runLocally(settings(3)));
    REQUIRE(window.runSession()->waitForFinished());
    CHECK(window.runSession()->outcome().status == app::RunStatus::Failed);
    CHECK_THAT(window.runSession()->outcome().message, Contains("profile transformer"));
    CHECK_THAT(window.lastError().toStdString(), Contains("profile transformer"));
}

TEST_CASE("run list model: the model tester finds nothing wrong", "[ui][run]")
{
    RunListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    app::RunRecord a;
    a.id = "r-1";
    a.label = "plan.json";
    a.status = app::RunStatus::Failed;
    a.status_message = "agent 1 was killed";
    a.started_unix_s = 1'700'000'000;
    a.ended_unix_s = 1'700'000'012.5;
    a.steps_planned = 20;
    a.steps_done = 7; // it failed at step 7 of 20
    a.tags = {"baseline"};
    app::RunRecord b = a;
    b.id = "r-2";
    b.status = app::RunStatus::Running;
    b.ended_unix_s = 0;
    model.setRuns({a, b});
    REQUIRE(model.rowCount() == 2);
    CHECK(model.data(model.index(0, RunListModel::Duration)).toString() == QStringLiteral("12.5 s"));
    CHECK(model.data(model.index(0, RunListModel::Duration), RunListModel::ValueRole).toDouble() == 12.5);
    CHECK(model.data(model.index(1, RunListModel::Duration)).toString() == QStringLiteral("—"));
    CHECK(model.data(model.index(0, RunListModel::Status), Qt::ToolTipRole).toString()
        == QStringLiteral("agent 1 was killed"));
    CHECK(model.data(model.index(0, RunListModel::Tags)).toString() == QStringLiteral("baseline"));
    CHECK(model.rowOf("r-2") == 1);
    CHECK(model.rowOf("nope") == -1);
    CHECK(model.data(model.index(0, RunListModel::Steps)).toString() == QStringLiteral("7/20"));
    CHECK(model.data(model.index(0, RunListModel::Steps), RunListModel::ValueRole).toLongLong() == 7);
}

TEST_CASE("run locally: the form's settings are checked as the CLI checks them, and a run beyond this machine is "
          "asked about with its numbers",
    "[ui][run]")
{
    RunMonitorWindow w;
    auto bad = settings(3);
    bad.training.lr = -0.5;
    CHECK_FALSE(w.window.runLocally(bad));
    CHECK(w.window.runSession() == nullptr);
    CHECK_THAT(w.window.lastError().toStdString(), Contains("--lr (learning rate): must be a finite number >= 0"));
    bad = settings(3);
    bad.training.weight_decay = std::numeric_limits<double>::quiet_NaN();
    CHECK_FALSE(w.window.runLocally(bad));
    CHECK_THAT(w.window.lastError().toStdString(), Contains("--weight-decay (weight decay)"));

    // More threads per agent than this machine has cores: the user is asked, with the numbers; No starts nothing.
    const int cores = app::MachineResources::thisMachine().cores;
    auto heavy = settings(2);
    heavy.threads = cores + 1;
    QString asked;
    bool answer = false;
    w.window.setRunConfirmer([&](const QString& question) {
        asked = question;
        return answer;
    });
    CHECK_FALSE(w.window.runLocally(heavy));
    CHECK(w.window.runSession() == nullptr);
    CHECK_THAT(asked.toStdString(),
        Contains("--threads " + std::to_string(cores + 1) + " per agent is above this machine's "
            + std::to_string(cores) + " cores"));
    CHECK_THAT(w.window.statusBar()->currentMessage().toStdString(), Contains("Run not started"));
    // Yes starts it: the controller does not refuse what the user accepted.
    asked.clear();
    answer = true;
    REQUIRE(w.window.runLocally(heavy));
    CHECK_FALSE(asked.isEmpty());
    RunSession* session = w.window.runSession();
    REQUIRE(session->waitForFinished());
    INFO(session->outcome().message);
    CHECK(session->outcome().status == app::RunStatus::Succeeded);
    // Within the machine nothing is asked.
    asked.clear();
    REQUIRE(w.window.runLocally(settings(1)));
    CHECK(asked.isEmpty());
    REQUIRE(w.window.runSession()->waitForFinished());
}
