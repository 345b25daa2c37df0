// SPDX-License-Identifier: MIT
// The run monitor: a training run live (a RunSession) or a past one from the history (app::RunSnapshot). The
// measured Gantt under the predicted one on one time axis, loss and throughput per step, each agent's status,
// the run's log, the prediction's error per stage and per action kind, and for a run that stalled its stall report and
// each device's flight recorder (its last actions); why it is slow (time by cause per device, stragglers).
#pragma once

#include <QWidget>
#include <memory>
#include <vector>

#include "app/run/snapshot.h"

class QCPItemText;
class QCustomPlot;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QTableWidget;
class QTabWidget;

namespace pw::ui {

class CausesView;
class GanttView;
class RunSession;

class RunMonitor : public QWidget
{
    Q_OBJECT

public:
    explicit RunMonitor(QWidget* parent = nullptr);
    ~RunMonitor() override;

    /// Follows a live run (the session outlives the monitor's use of it, or the monitor is attached to another).
    void attach(RunSession* session);
    /// Shows a past run.
    void showSnapshot(std::shared_ptr<const app::RunSnapshot> snapshot);

    /// The one-line summary on top: run, status, step, loss, throughput, time.
    QString statusText() const;
    /// The prediction's error per stage (empty until known).
    QString comparisonText() const;
    /// The prediction's error per action kind (F, B, I, W, send, receive, ...; empty until known).
    QString kindsText() const;
    GanttView* gantt() const { return m_gantt; }
    QCustomPlot* curves() const { return m_curves; }
    QTableWidget* agentTable() const { return m_agents; }
    QPlainTextEdit* logView() const { return m_log; }
    QPushButton* stopButton() const { return m_stop; }
    /// The stall reports (empty text: none) and the flight recorders' actions, a row each.
    QString stallText() const;
    QTableWidget* flightRecorderTable() const { return m_recorder; }
    /// Shows the tab titled `title`; false when there is none.
    bool showTab(const QString& title);
    /// The "Why slow" tab: time by cause per device and the stragglers.
    CausesView* causes() const { return m_causes; }
    /// Points on the loss curve (tests).
    int lossPoints() const;
    /// Whether the curves say that the run recorded none (a finished run without losses: imported from traces).
    bool curvesSayNone() const;

private:
    void clear();
    void onProgress();
    void onAgents();
    void onFinished();
    void setCurves(
        const std::vector<double>& steps, const std::vector<double>& losses, const std::vector<double>& tokensPerS);
    /// `plan`: the run's (each device's role in it).
    void setComparison(const app::RunComparison& c, int predictedSteps, const planner::Plan& plan);
    void setKinds(const std::vector<app::KindComparison>& kinds);
    void appendLog(const QString& agent, const QString& level, const QString& text);
    void setStalls(const std::vector<app::StallRecord>& stalls, const std::vector<app::RecordedAction>& recorder);

    RunSession* m_session = nullptr;
    std::vector<QMetaObject::Connection> m_connections;
    QLabel* m_status = nullptr;
    QPushButton* m_stop = nullptr;
    GanttView* m_gantt = nullptr;
    QCustomPlot* m_curves = nullptr;
    QCPItemText* m_noCurves = nullptr; ///< over the curves of a finished run that recorded none (an imported trace)
    QTabWidget* m_tabs = nullptr;
    QTableWidget* m_agents = nullptr;
    QPlainTextEdit* m_log = nullptr;
    QLabel* m_comparison = nullptr;
    QLabel* m_kinds = nullptr;
    QPlainTextEdit* m_stallReport = nullptr;
    QTableWidget* m_recorder = nullptr;
    CausesView* m_causes = nullptr;
    int m_stallTab = -1; ///< the Stall tab's index in m_tabs
};

} // namespace pw::ui
