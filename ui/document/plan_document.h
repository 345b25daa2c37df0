// SPDX-License-Identifier: MIT
// The plan being edited in the desktop app, its prediction and the one undo stack every plan edit goes through.
#pragma once

#include <QObject>
#include <QString>
#include <QUndoStack>
#include <functional>
#include <memory>
#include <optional>

#include "planner/plan.h"
#include "planner/sim/simulator.h"
#include "ui/jobs/job_runner.h"

namespace pw::ui {

/// @brief The current plan and its simulated prediction; edits are undoable steps.
///
/// A change of the plan is immediate (planChanged()); its simulation (metrics, spans and memory for the views) runs
/// on the document's JobRunner, and predictionChanged() follows when it lands, on the GUI thread. Until then
/// prediction() is the newest finished one, which may belong to an earlier plan (isPredictionCurrent() tells;
/// predictedPlan() is the plan it belongs to): views show it rather than nothing. The steps of a drag let a running
/// simulation finish (the views follow the mouse at the speed of one simulation, never queueing a backlog); any other
/// change stops it. A boundary drag previews plans without touching the undo stack and commits the whole drag as one
/// step.
class PlanDocument : public QObject
{
    Q_OBJECT

public:
    explicit PlanDocument(QObject* parent = nullptr);

    /// A new plan to edit (a project opened, a partitioner's plan applied outside the stack): clears the stack.
    void reset(planner::Plan plan);
    /// No plan (a project whose model could not be planned): clears the stack.
    void clear();
    bool hasPlan() const { return m_plan.has_value(); }
    const planner::Plan& plan() const { return *m_plan; }
    /// The newest finished prediction; empty when its plan could not be simulated (predictionError() says why) or
    /// none has finished since the last reset().
    const std::shared_ptr<const planner::SimulationResult>& prediction() const { return m_prediction; }
    const QString& predictionError() const { return m_predictionError; }
    /// The plan prediction() belongs to (the current one when isPredictionCurrent()).
    const std::optional<planner::Plan>& predictedPlan() const { return m_predictedPlan; }
    /// Whether prediction() and predictionError() belong to the plan shown now.
    bool isPredictionCurrent() const { return m_predictedRevision == m_revision; }
    /// A simulation is running or waiting; simulatingChanged() follows its changes.
    bool simulating() const { return m_simulator.busy(); }
    /// Runs the event loop until the current plan's prediction has landed (tests, screenshots, saving).
    bool waitForPrediction(int timeoutMs = 120'000) { return m_simulator.waitForIdle(timeoutMs); }
    QUndoStack* undoStack() { return &m_undo; }
    bool isClean() const { return m_undo.isClean(); }

    using Edit = std::function<planner::Plan(const planner::Plan&)>;
    /// Applies `edit` to the current plan as one undoable step named `text`. When the edit throws an
    /// InputError nothing changes, `error` gets its message and the result is false.
    bool apply(const QString& text, const Edit& edit, QString* error = nullptr);
    /// Replaces the current plan by `plan` as one undoable step (a partitioner's candidate applied).
    void replace(const QString& text, planner::Plan plan);

    /// Shows `plan` (re-simulated) without an undo step: the steps of a drag.
    void preview(planner::Plan plan);
    bool previewing() const { return m_beforePreview.has_value(); }
    /// Ends a drag: one undo step from the plan before the first preview to the one shown (none if equal).
    void commitPreview(const QString& text);
    /// Ends a drag without a step: the plan before the first preview comes back.
    void cancelPreview();

signals:
    void planChanged();
    /// A simulation landed: prediction() and predictionError() changed.
    void predictionChanged();
    void simulatingChanged(bool simulating);
    /// A drag's preview ended without being committed: cancelled, or cut short by undo, redo or a new plan.
    void previewAborted();

private:
    friend class PlanCommand;
    /// Shows `plan` and simulates it in the background; `drag`: a running simulation may finish first.
    void show(planner::Plan plan, bool drag = false);
    /// Forgets the plan before the preview (the caller shows another plan); emits previewAborted().
    void abortPreview();

    std::optional<planner::Plan> m_plan;
    std::optional<planner::Plan> m_beforePreview;
    std::shared_ptr<const planner::SimulationResult> m_prediction;
    QString m_predictionError;
    std::optional<planner::Plan> m_predictedPlan;
    quint64 m_revision = 0; ///< counts the plans shown
    quint64 m_predictedRevision = 0; ///< the revision prediction() belongs to
    QUndoStack m_undo;
    JobRunner m_simulator {QStringLiteral("simulation")}; // last: stopped and joined first
};

} // namespace pw::ui
