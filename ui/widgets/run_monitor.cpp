// SPDX-License-Identifier: MIT
#include "run_monitor.h"

#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>
#include <qcustomplot.h>

#include "app/history/history.h"
#include "planner/schedule.h"
#include "planner/units.h"
#include "ui/document/run_session.h"
#include "ui/models/format.h"
#include "ui/widgets/causes_view.h"
#include "ui/widgets/gantt_view.h"

namespace pw::ui {

namespace {

QString signedPercentText(double relative)
{
    return (relative >= 0 ? QStringLiteral("+") : QString()) + QString::number(relative * 100, 'f', 1)
        + QStringLiteral(" %");
}

QString runStatusText(app::RunStatus s)
{
    return QString::fromUtf8(app::toString(s).data(), static_cast<int>(app::toString(s).size()));
}

} // namespace

RunMonitor::RunMonitor(QWidget* parent)
    : QWidget(parent)
{
    m_status = new QLabel(tr("No run yet: Plan ▸ Run locally (F6) trains the current plan, or open a run from the "
                             "History tab."),
        this);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setWordWrap(true);
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setEnabled(false);
    m_stop->setToolTip(tr("Stop every agent of the run (the run is recorded as stopped)"));
    auto* header = new QHBoxLayout;
    header->addWidget(m_status, 1);
    header->addWidget(m_stop);

    m_gantt = new GanttView(this, false);
    m_curves = new QCustomPlot(this);
    m_curves->setMinimumHeight(140);
    m_curves->xAxis->setLabel(tr("step"));
    m_curves->yAxis->setLabel(tr("loss (nats per token)"));
    m_curves->yAxis2->setVisible(true);
    m_curves->yAxis2->setLabel(tr("throughput (tokens/s)"));
    auto* loss = m_curves->addGraph(m_curves->xAxis, m_curves->yAxis);
    loss->setName(tr("loss"));
    loss->setPen(QPen(QColor(31, 119, 180), 2));
    auto* tps = m_curves->addGraph(m_curves->xAxis, m_curves->yAxis2);
    tps->setName(tr("throughput"));
    tps->setPen(QPen(QColor(255, 127, 14), 1.5));
    m_noCurves = new QCPItemText(m_curves);
    m_noCurves->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_noCurves->position->setCoords(0.5, 0.5);
    // Short lines: the plot may be a hundred pixels wide at 1024x700. (A run imported from profiler traces has none.)
    m_noCurves->setText(tr("no loss or\nthroughput\nrecorded"));
    m_noCurves->setClipToAxisRect(false);
    m_noCurves->setColor(palette().color(QPalette::PlaceholderText));
    m_noCurves->setVisible(false);
    m_curves->legend->setVisible(true);
    m_curves->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
    m_curves->legend->setIconSize(16, 8);
    // Few step ticks: the plot may be narrow, and steps run to millions.
    m_curves->xAxis->ticker()->setTickCount(3);
    m_curves->xAxis->ticker()->setTickStepStrategy(QCPAxisTicker::tssMeetTickCount);
    // The legend sits in a row above the plot, as in the model view: inside a narrow plot (1024 x 700) it covered
    // the curves and the throughput axis's ticks.
    m_curves->plotLayout()->insertRow(0);
    m_curves->plotLayout()->addElement(0, 0, m_curves->legend);
    m_curves->plotLayout()->setRowStretchFactor(0, 0.001);
    m_curves->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m_curves->legend->setBorderPen(Qt::NoPen);

    m_agents = new QTableWidget(0, 7, this);
    m_agents->setHorizontalHeaderLabels(
        {tr("Agent"), tr("Devices"), tr("Host"), tr("PID"), tr("State"), tr("Step"), tr("Silent")});
    m_agents->verticalHeader()->hide();
    m_agents->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_agents->horizontalHeader()->setStretchLastSection(true);
    m_log = new QPlainTextEdit(this);
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(10000);
    // Each table in a scroll area: it must not set the window's minimum width.
    const auto scrolled = [this](QLabel*& label) {
        label = new QLabel(this);
        label->setAlignment(Qt::AlignTop | Qt::AlignLeft);
        label->setTextInteractionFlags(Qt::TextSelectableByMouse);
        label->setMargin(6);
        auto* scroll = new QScrollArea(this);
        scroll->setWidget(label);
        scroll->setWidgetResizable(true);
        scroll->setFrameShape(QFrame::NoFrame);
        return scroll;
    };
    m_tabs = new QTabWidget(this);
    m_tabs->addTab(m_agents, tr("Agents"));
    m_tabs->addTab(m_log, tr("Log"));
    m_tabs->addTab(scrolled(m_comparison), tr("Predicted vs measured"));
    // Its own tab: in a small window the per-stage and memory tables fill the first one.
    m_tabs->addTab(scrolled(m_kinds), tr("Per action kind"));
    m_causes = new CausesView(this);
    m_tabs->addTab(m_causes, tr("Why slow"));
    // A stalled run: the report (the chain of waits) over each device's last actions.
    // A splitter, so that a long report scrolls in a small window rather than pushing the table out.
    auto* stallPage = new QSplitter(Qt::Vertical, this);
    m_stallReport = new QPlainTextEdit(tr("No stall."), stallPage);
    m_stallReport->setReadOnly(true);
    m_recorder = new QTableWidget(0, 9, stallPage);
    m_recorder->setHorizontalHeaderLabels({tr("Device"), tr("Agent"), tr("Action"), tr("Stage"), tr("Microbatch"),
        tr("Peer"), tr("Bytes"), tr("Start (s)"), tr("End (s)")});
    m_recorder->verticalHeader()->hide();
    m_recorder->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_recorder->horizontalHeader()->setStretchLastSection(true);
    stallPage->addWidget(m_stallReport);
    stallPage->addWidget(m_recorder);
    stallPage->setStretchFactor(0, 1);
    stallPage->setStretchFactor(1, 2);
    m_stallTab = m_tabs->addTab(stallPage, tr("Stall"));

    auto* bottom = new QSplitter(Qt::Horizontal, this);
    bottom->addWidget(m_curves);
    bottom->addWidget(m_tabs);
    bottom->setSizes({1000, 1000});
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(m_gantt);
    split->addWidget(bottom);
    split->setSizes({600, 400});
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(header);
    layout->addWidget(split, 1);
    m_gantt->setEmptyMessage(tr("The measured timeline appears here, under the predicted one, once a run starts."));
    connect(m_stop, &QPushButton::clicked, this, [this] {
        if (m_session)
            m_session->stop();
        m_stop->setEnabled(false);
    });
}

RunMonitor::~RunMonitor() = default;

bool RunMonitor::showTab(const QString& title)
{
    for (int i = 0; i < m_tabs->count(); ++i)
        if (m_tabs->tabText(i) == title) {
            m_tabs->setCurrentIndex(i);
            return true;
        }
    return false;
}

void RunMonitor::clear()
{
    for (auto& c : m_connections)
        disconnect(c);
    m_connections.clear();
    m_session = nullptr;
    m_agents->setRowCount(0);
    m_log->clear();
    m_comparison->clear();
    m_kinds->clear();
    m_causes->clear();
    setStalls({}, {});
    setCurves({}, {}, {});
    m_stop->setEnabled(false);
}

void RunMonitor::attach(RunSession* session)
{
    clear();
    m_session = session;
    m_stop->setEnabled(true);
    m_status->setText(tr("Starting the agents…"));
    m_gantt->setEmptyMessage(tr("Starting the agents…"));
    m_connections.push_back(connect(session, &RunSession::predictionLoaded, this, [this] {
        std::vector<GanttBlock> blocks;
        blocks.push_back({tr("predicted (first %1 steps simulated)").arg(m_session->predictedSteps()),
            m_session->predictedTimeline()});
        blocks.push_back({tr("measured"), m_session->measured()});
        m_gantt->setBlocks(std::move(blocks));
    }));
    m_connections.push_back(connect(session, &RunSession::spansAppended, this, [this] {
        if (m_gantt->blockCount() == 2)
            m_gantt->timelineGrew(1);
    }));
    m_connections.push_back(connect(session, &RunSession::progressed, this, &RunMonitor::onProgress));
    m_connections.push_back(connect(session, &RunSession::agentsChanged, this, &RunMonitor::onAgents));
    m_connections.push_back(connect(session, &RunSession::logLine, this, &RunMonitor::appendLog));
    m_connections.push_back(connect(session, &RunSession::finished, this, &RunMonitor::onFinished));
    m_connections.push_back(
        connect(session, &RunSession::diagnosed, this, [this] { m_causes->setDiagnosis(m_session->diagnosis()); }));
    m_connections.push_back(connect(session, &QObject::destroyed, this, [this] { m_session = nullptr; }));
}

void RunMonitor::onProgress()
{
    const auto& history = m_session->progressHistory();
    if (history.empty())
        return;
    std::vector<double> steps, losses, tps;
    for (const auto& p : history) {
        steps.push_back(p.step);
        losses.push_back(p.loss);
        tps.push_back(p.tokens_per_s);
    }
    setCurves(steps, losses, tps);
    const auto& p = history.back();
    m_status->setText(tr("Run %1 — running: step %2 of %3, loss %4, %5 tokens/s, %6")
                          .arg(QString::fromStdString(p.run_id))
                          .arg(p.step)
                          .arg(p.steps)
                          .arg(p.loss, 0, 'f', 4)
                          .arg(p.tokens_per_s, 0, 'f', 0)
                          .arg(secondsText(p.elapsed_s, 1)));
}

void RunMonitor::onAgents()
{
    const auto& agents = m_session->agents();
    m_agents->setRowCount(static_cast<int>(agents.size()));
    for (int r = 0; r < static_cast<int>(agents.size()); ++r) {
        const auto& a = agents[static_cast<std::size_t>(r)];
        QStringList devices;
        for (int d : a.devices)
            devices << QString::number(d);
        const auto state = app::toString(a.state);
        const QStringList cells = {QString::fromStdString(a.name), devices.join(QStringLiteral(", ")),
            QString::fromStdString(a.host), a.pid > 0 ? QString::number(a.pid) : QString(),
            QString::fromUtf8(state.data(), static_cast<int>(state.size())), QString::number(a.step),
            QString::number(a.silent_s, 'f', 1) + QStringLiteral(" s")};
        for (int c = 0; c < cells.size(); ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (!a.message.empty())
                item->setToolTip(QString::fromStdString(a.message));
            if (a.state == app::AgentStatus::State::Failed || a.state == app::AgentStatus::State::Exited)
                item->setForeground(QColor(200, 30, 30));
            m_agents->setItem(r, c, item);
        }
    }
    m_agents->resizeColumnsToContents();
}

void RunMonitor::onFinished()
{
    m_stop->setEnabled(false);
    const auto& o = m_session->outcome();
    QString text = tr("Run %1 — %2").arg(QString::fromStdString(o.run_id), runStatusText(o.status));
    if (!o.losses.empty())
        text += tr(": %1 steps, final loss %2, %3 tokens/s, %4")
                    .arg(o.losses.size())
                    .arg(o.losses.back(), 0, 'f', 4)
                    .arg(o.tokens_per_s, 0, 'f', 0)
                    .arg(secondsText(o.seconds, 1));
    if (!o.message.empty())
        text += QStringLiteral(" (") + QString::fromStdString(o.message) + QStringLiteral(")");
    m_status->setText(text);
    // What the controller stored of a stall (its report and the flight recorders): read back from the history.
    try {
        auto history = app::HistoryStore::open(m_session->historyPath(), app::HistoryStore::Access::ReadOnly);
        setStalls(history.stalls(o.run_id), history.flightRecorder(o.run_id));
    } catch (const std::exception&) {
        // No history to read (the run failed before it was recorded): nothing stalled.
    }
    if (m_session->predictedTimeline() && !o.losses.empty()) {
        auto comparison
            = app::compareRun(m_session->request().plan, *m_session->predictedTimeline(), m_session->predictedSteps(),
                *m_session->measured(), static_cast<int>(o.losses.size()), m_session->planIterationTime());
        comparison.memory = m_session->memory();
        setComparison(comparison, m_session->predictedSteps(), m_session->request().plan);
    }
}

void RunMonitor::showSnapshot(std::shared_ptr<const app::RunSnapshot> s)
{
    clear();
    const auto& r = s->record;
    // Steps: those with a loss, or the complete steps measured (a run imported from traces has no loss).
    const std::size_t stepsDone
        = !s->losses.empty() ? s->losses.size() : static_cast<std::size_t>(s->diagnosis.causes.stepCount());
    QString text = tr("Run %1 (%2) — %3, %4 of %5 steps")
                       .arg(QString::fromStdString(r.id), QString::fromStdString(r.label), runStatusText(r.status))
                       .arg(stepsDone)
                       .arg(r.steps_planned);
    if (!s->losses.empty())
        text += tr(", final loss %1").arg(s->losses.back().value, 0, 'f', 4);
    if (!s->tokens_per_s.empty())
        text += tr(", %1 tokens/s").arg(s->tokens_per_s.back().value, 0, 'f', 0);
    if (r.ended_unix_s > 0)
        text += QStringLiteral(", ") + secondsText(r.ended_unix_s - r.started_unix_s, 1);
    text += tr(", started %1")
                .arg(QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.started_unix_s))
                         .toString(QStringLiteral("yyyy-MM-dd hh:mm:ss")));
    if (!r.status_message.empty())
        text += QStringLiteral(" (") + QString::fromStdString(r.status_message) + QStringLiteral(")");
    m_status->setText(text);

    // The agents as the run recorded them (where each ran), with how the run ended.
    try {
        const auto hosts = nlohmann::json::parse(r.hosts_json.empty() ? "[]" : r.hosts_json);
        m_agents->setRowCount(static_cast<int>(hosts.size()));
        for (int row = 0; row < static_cast<int>(hosts.size()); ++row) {
            const auto& h = hosts[static_cast<std::size_t>(row)];
            const int device = h.value("device", -1);
            const QStringList cells = {tr("agent %1").arg(device), QString::number(device),
                QString::fromStdString(h.value("host", std::string())), QString(), runStatusText(r.status),
                QString::number(s->losses.size()), QString()};
            for (int c = 0; c < cells.size(); ++c)
                m_agents->setItem(row, c, new QTableWidgetItem(cells[c]));
        }
        m_agents->resizeColumnsToContents();
    } catch (const std::exception&) {
        m_agents->setRowCount(0); // a history written by something else: the log still tells
    }

    std::vector<GanttBlock> blocks;
    if (!s->predicted->spans.empty())
        blocks.push_back({tr("predicted (first %1 steps simulated)").arg(r.predicted_steps), s->predicted});
    blocks.push_back({tr("measured"), s->measured});
    m_gantt->setBlocks(std::move(blocks));

    std::vector<double> steps, losses, tps;
    for (const auto& l : s->losses) {
        steps.push_back(l.step + 1);
        losses.push_back(l.value);
    }
    for (const auto& t : s->tokens_per_s)
        tps.push_back(t.value);
    tps.resize(losses.size(), std::nan(""));
    setCurves(steps, losses, tps);
    m_noCurves->setVisible(s->losses.empty() && s->tokens_per_s.empty());
    for (const auto& l : s->logs)
        appendLog(l.agent < 0 ? tr("controller") : tr("agent %1").arg(l.agent), QString::fromStdString(l.level),
            QString::fromStdString(l.text));
    setStalls(s->stalls, s->flight_recorder);
    m_causes->setDiagnosis(s->diagnosis);
    if (s->plan)
        setComparison(s->comparison, static_cast<int>(r.predicted_steps), *s->plan);
    else
        m_comparison->setText(tr("The stored plan cannot be read: %1").arg(QString::fromStdString(s->plan_error)));
}

void RunMonitor::setCurves(
    const std::vector<double>& steps, const std::vector<double>& losses, const std::vector<double>& tokensPerS)
{
    const QVector<double> x(steps.begin(), steps.end());
    m_noCurves->setVisible(false);
    m_curves->graph(0)->setData(x, QVector<double>(losses.begin(), losses.end()), true);
    m_curves->graph(1)->setData(x, QVector<double>(tokensPerS.begin(), tokensPerS.end()), true);
    if (!steps.empty()) {
        m_curves->xAxis->setRange(0, std::max(1.0, steps.back()));
        bool found = false;
        const auto lr = m_curves->graph(0)->getValueRange(found);
        if (found)
            m_curves->yAxis->setRange(std::min(0.0, lr.lower), lr.upper * 1.05);
        const auto tpsRange = m_curves->graph(1)->getValueRange(found);
        if (found)
            m_curves->yAxis2->setRange(0, std::max(1.0, tpsRange.upper * 1.1));
    }
    m_curves->replot(QCustomPlot::rpQueuedReplot);
}

QString RunMonitor::stallText() const
{
    return m_stallReport->property("report").toString();
}

void RunMonitor::setStalls(
    const std::vector<app::StallRecord>& stalls, const std::vector<app::RecordedAction>& recorder)
{
    QStringList reports;
    for (const auto& s : stalls)
        reports << tr("At %1: %2").arg(secondsText(s.t_s, 1), QString::fromStdString(s.report));
    m_stallReport->setProperty("report", reports.join(QStringLiteral("\n")));
    m_stallReport->setPlainText(reports.isEmpty() ? tr("No stall.")
                                                  : reports.join(QStringLiteral("\n"))
                + tr("\nEach device's last actions before it (times from the run's start; \"in progress\": "
                     "the action it was in):"));
    if (!reports.isEmpty())
        m_tabs->setCurrentIndex(m_stallTab); // what a stalled run's user looks for first
    m_recorder->setRowCount(static_cast<int>(recorder.size()));
    for (int r = 0; r < static_cast<int>(recorder.size()); ++r) {
        const auto& a = recorder[static_cast<std::size_t>(r)];
        const auto kind = planner::toString(a.span.kind);
        const QStringList cells = {QString::number(a.span.device), QString::number(a.agent),
            QString::fromUtf8(kind.data(), static_cast<int>(kind.size())), QString::number(a.span.stage),
            a.span.microbatch >= 0 ? QString::number(a.span.microbatch) : QString(),
            a.span.peer >= 0 ? QString::number(a.span.peer) : QString(),
            a.span.bytes > 0 ? QString::fromStdString(planner::formatBytes(a.span.bytes)) : QString(),
            QString::number(a.span.t0, 'f', 3), a.in_progress ? tr("in progress") : QString::number(a.span.t1, 'f', 3)};
        for (int c = 0; c < cells.size(); ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (a.source == "controller")
                item->setToolTip(tr("The agent did not answer: as the controller had received its actions"));
            if (a.in_progress)
                item->setForeground(QColor(200, 30, 30));
            m_recorder->setItem(r, c, item);
        }
    }
    if (!recorder.empty())
        m_recorder->resizeColumnsToContents();
    // The first device's action in progress in view, with the actions that led to it above it.
    const auto stuck = std::find_if(recorder.begin(), recorder.end(), [](const auto& a) { return a.in_progress; });
    if (stuck != recorder.end()) {
        // Once laid out: a table not shown yet has no viewport to scroll.
        const int row = static_cast<int>(stuck - recorder.begin());
        QTimer::singleShot(0, m_recorder, [table = m_recorder, row] {
            table->scrollToItem(table->item(row, 0), QAbstractItemView::PositionAtBottom);
        });
    }
}

bool RunMonitor::curvesSayNone() const
{
    return m_noCurves->visible();
}

int RunMonitor::lossPoints() const
{
    return m_curves->graph(0)->dataCount();
}

void RunMonitor::setComparison(const app::RunComparison& c, int predictedSteps, const planner::Plan& plan)
{
    QString html = tr("<p>Iteration time per step: predicted <b>%1</b> (the plan's), measured <b>%3</b>, error "
                      "<b>%4</b>; per stage the first %2 steps simulated, errors = measured / predicted - 1</p>")
                       .arg(secondsText(c.predicted_iteration_s, 2))
                       .arg(predictedSteps)
                       .arg(secondsText(c.measured_iteration_s, 2), signedPercentText(c.iteration_error));
    html += tr("<table cellspacing='0' cellpadding='3' border='1'><tr><th>stage</th><th>compute<br>predicted</th>"
               "<th>compute<br>measured</th><th>compute<br>error</th><th>idle<br>predicted</th><th>idle<br>measured"
               "</th><th>compute + idle<br>error</th></tr>");
    for (const auto& s : c.stages)
        html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td><td>%7</td></tr>")
                    .arg(s.stage)
                    .arg(secondsText(s.predicted.compute_s, 2), secondsText(s.measured.compute_s, 2),
                        signedPercentText(s.compute_error), secondsText(s.predicted.idle_s, 2),
                        secondsText(s.measured.idle_s, 2), signedPercentText(s.iteration_error));
    html += QStringLiteral("</table>");
    if (!c.memory.empty()) {
        html += tr("<p>Memory per device: peak of the engine's buffers against the planner's</p>"
                   "<table cellspacing='0' cellpadding='3' border='1'><tr><th>device</th><th>in the plan</th>"
                   "<th>peak<br>predicted</th><th>peak<br>measured</th><th>error</th></tr>");
        // Each device's stage, replica and tensor rank: a tensor-parallel group's devices read as one.
        for (const auto& m : c.memory)
            html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td></tr>")
                        .arg(m.device)
                        .arg(QString::fromStdString(plan.deviceRole(m.device)),
                            QString::fromStdString(planner::formatBytes(m.predicted_peak_bytes)),
                            QString::fromStdString(planner::formatBytes(m.measured_peak_bytes)),
                            m.predicted_peak_bytes > 0 ? signedPercentText(m.error) : tr("no prediction"));
        html += QStringLiteral("</table>");
    }
    m_comparison->setText(html);
    setKinds(c.kinds);
}

void RunMonitor::setKinds(const std::vector<app::KindComparison>& kinds)
{
    if (kinds.empty()) {
        m_kinds->setText(tr("No spans to compare."));
        return;
    }
    // Which part of the cost model is off: the stages' comparison per action kind.
    QString html = tr("<p>Per step: time = the kind's spans summed over every device,<br>mean = per action, "
                      "error = measured / predicted - 1</p>"
                      "<table cellspacing='0' cellpadding='2' border='1'><tr><th>kind</th><th>time<br>predicted</th>"
                      "<th>time<br>measured</th><th>error</th><th>mean<br>predicted</th><th>mean<br>measured</th>"
                      "<th>actions<br>per step</th></tr>");
    const auto count = [](double n) {
        return std::abs(n - std::round(n)) < 1e-9 ? QString::number(n, 'f', 0) : QString::number(n, 'f', 2);
    };
    QStringList differ;
    for (const auto& k : kinds) {
        const auto name = app::toString(k.kind);
        const QString kind = QString::fromUtf8(name.data(), static_cast<int>(name.size()));
        const QString actions = k.counts_match ? count(k.measured.actions)
                                               : QStringLiteral("<span style='color:#c81e1e'>%1 / %2</span>")
                                                     .arg(count(k.predicted.actions), count(k.measured.actions));
        html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td><td>%7</td></tr>")
                    .arg(kind, secondsText(k.predicted.time_s, 2), secondsText(k.measured.time_s, 2),
                        signedPercentText(k.error), secondsText(k.predicted.mean_s, 2),
                        secondsText(k.measured.mean_s, 2), actions);
        if (!k.counts_match)
            differ
                << tr("%1: %2 predicted, %3 measured").arg(kind, count(k.predicted.actions), count(k.measured.actions));
    }
    html += QStringLiteral("</table>");
    if (!differ.isEmpty())
        // A line per kind, as short as the notes below: a long line would need scrolling sideways in a small window.
        html += tr("<p style='color:#c81e1e'>The run did not follow the plan: its actions per<br>step differ from "
                   "the prediction's, or it stopped within a step:<br>%1</p>")
                    .arg(differ.join(QStringLiteral("<br>")));
    html
        += tr("<p>send: predicted, the transfer from its start to its arrival;<br>measured, the sender posting it (the "
              "transfer goes on<br>in the background and shows in the receiver's wait).<br>receive: the wait until "
              "the data is there, on both sides.</p>");
    m_kinds->setText(html);
}

QString RunMonitor::statusText() const
{
    return m_status->text();
}

QString RunMonitor::comparisonText() const
{
    return m_comparison->text();
}

QString RunMonitor::kindsText() const
{
    return m_kinds->text();
}

void RunMonitor::appendLog(const QString& agent, const QString& level, const QString& text)
{
    m_log->appendPlainText(QStringLiteral("%1 %2: %3").arg(agent, level, text));
}

} // namespace pw::ui
