// SPDX-License-Identifier: MIT
#include "run_session.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QMetaObject>
#include <QThread>
#include <cmath>
#include <map>

#include "app/history/history.h"
#include "app/run/comparison.h"

namespace pw::ui {

RunSession::RunSession(app::RunRequest request, std::filesystem::path historyPath, QObject* parent)
    : QObject(parent)
    , m_request(std::move(request))
    , m_historyPath(std::move(historyPath))
    , m_measured(std::make_shared<planner::Timeline>())
{
    m_measured->source = planner::Timeline::Source::Measured;
    m_measured->clock = planner::ClockDomain::Host;
    m_measured->label = "measured";
}

RunSession::~RunSession()
{
    stop();
    if (m_thread.joinable())
        m_thread.join();
}

void RunSession::start()
{
    if (m_running || m_finished)
        return;
    m_running = true;
    m_thread = std::thread([this] { work(); });
}

void RunSession::stop()
{
    m_stopRequested = true;
    std::lock_guard lock(m_mutex);
    if (auto* c = m_controller.load())
        c->stop();
}

bool RunSession::waitForFinished(int timeoutMs)
{
    QElapsedTimer timer;
    timer.start();
    while (!m_finished && timer.elapsed() < timeoutMs) {
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
        QThread::msleep(5);
    }
    QCoreApplication::processEvents();
    return m_finished;
}

void RunSession::takeSpans()
{
    std::vector<planner::Span> spans;
    {
        std::lock_guard lock(m_mutex);
        spans.swap(m_incoming);
        m_takePosted = false;
    }
    if (spans.empty())
        return;
    for (const auto& s : spans) {
        if (s.device >= static_cast<int>(m_measured->device_names.size()))
            for (int d = static_cast<int>(m_measured->device_names.size()); d <= s.device; ++d)
                m_measured->device_names.push_back("device " + std::to_string(d));
        m_measured->spans.push_back(s);
    }
    emit spansAppended();
}

void RunSession::work()
{
    // Everything the controller reports arrives on this thread and is posted to the GUI thread as values.
    app::RunOutcome outcome;
    std::vector<app::DeviceMemory> memory;
    app::RunDiagnosis diagnosis;
    try {
        auto history = app::HistoryStore::open(m_historyPath);
        history.markInterrupted();
        app::RunController controller(m_request, history);
        {
            std::lock_guard lock(m_mutex);
            m_controller = &controller;
        }
        if (m_stopRequested)
            controller.stop();
        app::RunObserver o;
        o.created = [&](const std::string& id) {
            auto predicted = std::make_shared<planner::Timeline>(history.predictedTimeline(id));
            const int steps = static_cast<int>(history.run(id)->predicted_steps);
            const double iteration = app::planIterationTime(m_request.plan); // a simulation: not on the GUI thread
            QMetaObject::invokeMethod(
                this,
                [this, id = QString::fromStdString(id), predicted, steps, iteration, names = predicted->device_names] {
                    m_runId = id;
                    m_predicted = predicted;
                    m_predictedSteps = steps;
                    m_planIterationS = iteration;
                    if (m_measured->device_names.size() < names.size())
                        m_measured->device_names = names;
                    emit created(id);
                    emit predictionLoaded();
                },
                Qt::QueuedConnection);
        };
        o.progress = [this](const app::RunProgress& p) {
            QMetaObject::invokeMethod(
                this,
                [this, p] {
                    m_progress.push_back(p);
                    emit progressed(p);
                },
                Qt::QueuedConnection);
        };
        o.spans = [this](std::span<const planner::Span> spans) {
            bool post = false;
            {
                std::lock_guard lock(m_mutex);
                m_incoming.insert(m_incoming.end(), spans.begin(), spans.end());
                post = !m_takePosted;
                m_takePosted = true;
            }
            if (post) // one delivery at a time, however fast the spans come: the GUI takes them in batches
                QMetaObject::invokeMethod(
                    this, [this] { takeSpans(); }, Qt::QueuedConnection);
        };
        o.agents = [this](const std::vector<app::AgentStatus>& agents) {
            QMetaObject::invokeMethod(
                this,
                [this, agents] {
                    m_agents = agents;
                    emit agentsChanged();
                },
                Qt::QueuedConnection);
        };
        o.log = [this](const std::string& agent, const std::string& level, const std::string& text) {
            QMetaObject::invokeMethod(
                this,
                [this, a = QString::fromStdString(agent), l = QString::fromStdString(level),
                    t = QString::fromStdString(text)] { emit logLine(a, l, t); },
                Qt::QueuedConnection);
        };
        o.diagnosis = [this](const app::RunDiagnosis& d) {
            QMetaObject::invokeMethod(
                this,
                [this, d] {
                    m_diagnosis = d;
                    emit diagnosed();
                },
                Qt::QueuedConnection);
        };
        outcome = controller.run(o);
        // Each device's measured peak memory beside the planner's (a simulation: here, not on the GUI thread).
        if (!outcome.run_id.empty()) {
            std::map<int, double> peaks;
            for (const auto& m : history.metrics(outcome.run_id, std::string(planner::kDeviceMemoryPeakCounter)))
                if (m.device >= 0 && std::isfinite(m.value))
                    peaks[m.device] = std::max(peaks[m.device], m.value);
            memory = app::compareMemory(m_request.plan, peaks);
            // The whole run's time by cause (a sweep of every span: here, not on the GUI thread); a run it cannot
            // diagnose keeps its outcome.
            try {
                diagnosis = app::diagnoseRun(m_request.plan, m_request.training.steps,
                    history.measuredTimeline(outcome.run_id), history.predictedTimeline(outcome.run_id));
            } catch (const std::exception&) {
                diagnosis = {};
            }
        }
        std::lock_guard lock(m_mutex);
        m_controller = nullptr;
    } catch (const std::exception& e) {
        {
            std::lock_guard lock(m_mutex);
            m_controller = nullptr;
        }
        outcome.status = app::RunStatus::Failed;
        outcome.message = e.what();
    }
    QMetaObject::invokeMethod(
        this,
        [this, outcome, memory, diagnosis] {
            takeSpans();
            m_outcome = outcome;
            m_memory = memory;
            if (!diagnosis.causes.steps.empty()) {
                m_diagnosis = diagnosis;
                emit diagnosed();
            }
            if (m_runId.isEmpty())
                m_runId = QString::fromStdString(outcome.run_id);
            m_running = false;
            m_finished = true;
            emit finished();
        },
        Qt::QueuedConnection);
}

} // namespace pw::ui
