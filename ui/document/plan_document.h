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

namespace pw::ui {

/// @brief The current plan and its simulated prediction; edits are undoable steps.
///
/// Every change of the plan re-simulates it (metrics, spans and memory for the views) and emits planChanged()
/// then predictionChanged(). A boundary drag previews plans without touching the undo stack and commits the
/// whole drag as one step.
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
    /// The current plan's prediction; empty when it could not be simulated (predictionError() says why).
    const std::shared_ptr<const planner::SimulationResult>& prediction() const { return m_prediction; }
    const QString& predictionError() const { return m_predictionError; }
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
    void predictionChanged();
    /// A drag's preview ended without being committed: cancelled, or cut short by undo, redo or a new plan.
    void previewAborted();

private:
    friend class PlanCommand;
    void show(planner::Plan plan);
    /// Forgets the plan before the preview (the caller shows another plan); emits previewAborted().
    void abortPreview();

    std::optional<planner::Plan> m_plan;
    std::optional<planner::Plan> m_beforePreview;
    std::shared_ptr<const planner::SimulationResult> m_prediction;
    QString m_predictionError;
    QUndoStack m_undo;
};

} // namespace pw::ui
