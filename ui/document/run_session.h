// SPDX-License-Identifier: MIT
// A training run driven from the desktop app: app::RunController on a thread of its own (it blocks for the whole
// run), its reports delivered to the GUI thread as signals, the measured timeline growing in place for the run
// monitor. The controller writes the history through a store it opens on its thread; the GUI thread never waits
// for it.
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "app/run/comparison.h"
#include "app/run/controller.h"
#include "planner/timeline.h"

namespace pw::ui {

class RunSession : public QObject
{
    Q_OBJECT

public:
    /// A run of `request` recorded in the history file `historyPath`; nothing starts before start().
    RunSession(app::RunRequest request, std::filesystem::path historyPath, QObject* parent = nullptr);
    /// Stops a run still going and waits for its thread (agents stopped, history written).
    ~RunSession() override;

    /// Starts the controller's thread. A run the controller refuses (a plan it cannot train) ends with
    /// finished() and status failed, the reason in its message.
    void start();
    /// Asks the run to stop (agents get Stop, then SIGTERM, then SIGKILL); finished() follows.
    void stop();
    bool running() const { return m_running; }
    /// Runs the event loop until finished() (tests, screenshots); false on timeout.
    bool waitForFinished(int timeoutMs = 120'000);

    const app::RunRequest& request() const { return m_request; }
    const std::filesystem::path& historyPath() const { return m_historyPath; }
    QString runId() const { return m_runId; }
    /// Measured spans so far (t from the run's start); grows while the run goes on. GUI thread only.
    std::shared_ptr<const planner::Timeline> measured() const { return m_measured; }
    /// The prediction the controller stored (its first steps); empty until predicted().
    std::shared_ptr<const planner::Timeline> predictedTimeline() const { return m_predicted; }
    int predictedSteps() const { return m_predictedSteps; }
    /// Each device's measured peak memory beside the planner's, once the run has finished (app::compareMemory).
    const std::vector<app::DeviceMemory>& memory() const { return m_memory; }
    /// The plan's predicted iteration time (app::planIterationTime, simulated on the controller's thread).
    double planIterationTime() const { return m_planIterationS; }
    const std::vector<app::RunProgress>& progressHistory() const { return m_progress; }
    const std::vector<app::AgentStatus>& agents() const { return m_agents; }
    const app::RunOutcome& outcome() const { return m_outcome; }
    /// The run's time by cause and stragglers so far (once a second while it runs; from the history at its end).
    const app::RunDiagnosis& diagnosis() const { return m_diagnosis; }

signals:
    /// The run is in the history; its prediction is predictedTimeline().
    void created(const QString& runId);
    void predictionLoaded();
    /// New spans were appended to measured().
    void spansAppended();
    void progressed(const app::RunProgress& progress);
    void agentsChanged();
    void logLine(const QString& agent, const QString& level, const QString& text);
    void finished();
    void diagnosed();

private:
    void work();
    /// Moves spans the controller's thread collected into measured() (GUI thread).
    void takeSpans();

    app::RunRequest m_request;
    std::filesystem::path m_historyPath;
    QString m_runId;
    std::shared_ptr<planner::Timeline> m_measured;
    std::shared_ptr<planner::Timeline> m_predicted;
    int m_predictedSteps = 0;
    double m_planIterationS = 0;
    std::vector<app::DeviceMemory> m_memory;
    std::vector<app::RunProgress> m_progress;
    std::vector<app::AgentStatus> m_agents;
    app::RunDiagnosis m_diagnosis;
    app::RunOutcome m_outcome;
    bool m_running = false;
    bool m_finished = false;

    std::mutex m_mutex; ///< guards the two members below (written by the controller's thread)
    std::vector<planner::Span> m_incoming;
    bool m_takePosted = false;
    std::atomic<app::RunController*> m_controller {nullptr};
    std::atomic<bool> m_stopRequested {false};
    std::thread m_thread; // last: joined before the rest is destroyed
};

} // namespace pw::ui
