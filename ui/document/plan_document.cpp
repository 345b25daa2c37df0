// SPDX-License-Identifier: MIT
#include "plan_document.h"

#include <QUndoCommand>

#include "planner/errors.h"
#include "planner/schedule/generator.h"

namespace pw::ui {

/// @brief One undoable change of the plan: the plans before and after.
class PlanCommand : public QUndoCommand
{
public:
    PlanCommand(PlanDocument& document, const QString& text, planner::Plan before, planner::Plan after)
        : QUndoCommand(text)
        , m_document(document)
        , m_before(std::move(before))
        , m_after(std::move(after))
    {
    }

    // Undo or redo in the middle of a drag (Ctrl+Z with the mouse held) ends the drag first: its preview was
    // built on the plan the step replaces.
    void redo() override
    {
        m_document.abortPreview();
        m_document.show(m_after);
    }
    void undo() override
    {
        m_document.abortPreview();
        m_document.show(m_before);
    }

private:
    PlanDocument& m_document;
    planner::Plan m_before;
    planner::Plan m_after;
};

namespace {

bool sameStages(const planner::Plan& a, const planner::Plan& b)
{
    if (a.stageCount() != b.stageCount())
        return false;
    for (int s = 0; s < a.stageCount(); ++s) {
        const auto &x = a.stages[s], &y = b.stages[s];
        if (x.first_layer != y.first_layer || x.last_layer != y.last_layer || x.devices != y.devices)
            return false;
    }
    return true;
}

} // namespace

PlanDocument::PlanDocument(QObject* parent)
    : QObject(parent)
{
    connect(&m_simulator, &JobRunner::busyChanged, this, &PlanDocument::simulatingChanged);
    connect(&m_simulator, &JobRunner::failed, this, [this](const QString& message) {
        m_prediction.reset();
        m_predictionError = message;
        m_predictedPlan = m_plan;
        m_predictedRevision = m_revision;
        emit predictionChanged();
    });
}

void PlanDocument::abortPreview()
{
    if (!m_beforePreview)
        return;
    m_beforePreview.reset();
    emit previewAborted();
}

void PlanDocument::reset(planner::Plan plan)
{
    abortPreview();
    m_undo.clear();
    show(std::move(plan));
}

void PlanDocument::clear()
{
    abortPreview();
    m_undo.clear();
    m_simulator.cancel();
    m_plan.reset();
    m_prediction.reset();
    m_predictionError.clear();
    m_predictedPlan.reset();
    m_predictedRevision = ++m_revision;
    emit planChanged();
    emit predictionChanged();
}

bool PlanDocument::apply(const QString& text, const Edit& edit, QString* error)
{
    if (!m_plan)
        return false;
    try {
        replace(text, edit(*m_plan));
        return true;
    } catch (const planner::InputError& e) {
        if (error)
            *error = QString::fromStdString(planner::formatInputError(e));
        return false;
    }
}

void PlanDocument::replace(const QString& text, planner::Plan plan)
{
    if (m_beforePreview)
        cancelPreview();
    planner::Plan before = m_plan ? *m_plan : plan;
    // QUndoStack::push runs redo(), which shows the new plan.
    m_undo.push(new PlanCommand(*this, text, std::move(before), std::move(plan)));
}

void PlanDocument::preview(planner::Plan plan)
{
    if (!m_plan)
        return;
    if (!m_beforePreview)
        m_beforePreview = *m_plan;
    show(std::move(plan), true);
}

void PlanDocument::commitPreview(const QString& text)
{
    if (!m_beforePreview)
        return;
    planner::Plan before = std::move(*m_beforePreview);
    m_beforePreview.reset();
    if (sameStages(before, *m_plan)) { // dragged back to where it started: no step, the plan exactly as it was
        show(std::move(before));
        return;
    }
    m_undo.push(new PlanCommand(*this, text, std::move(before), *m_plan));
}

void PlanDocument::cancelPreview()
{
    if (!m_beforePreview)
        return;
    planner::Plan before = std::move(*m_beforePreview);
    m_beforePreview.reset();
    emit previewAborted();
    show(std::move(before));
}

namespace {

/// What a simulation job hands back: a result, or why there is none.
struct Simulated
{
    std::shared_ptr<const planner::SimulationResult> result;
    QString error;
};

} // namespace

void PlanDocument::show(planner::Plan plan, bool drag)
{
    m_plan = std::move(plan);
    const quint64 revision = ++m_revision;
    emit planChanged();
    m_simulator.submit(
        [plan = *m_plan](std::stop_token stop) {
            Simulated s;
            planner::SimulationOptions options;
            options.stop = stop;
            try {
                // Over the batches its kind needs to show its steady state (zb-h2, zbv, 2BW), as a partitioner's
                // plan is: a hand-made or loaded plan says iterations 1 (issue 30 item 12).
                planner::Plan steady = plan;
                steady.schedule.iterations = planner::simulatedIterations(plan);
                s.result = std::make_shared<const planner::SimulationResult>(planner::simulate(steady, options));
            } catch (const planner::InputError& e) {
                s.error = QString::fromStdString(planner::formatInputError(e));
            }
            return s;
        },
        [this, revision, plan = *m_plan](Simulated s) {
            m_prediction = std::move(s.result);
            m_predictionError = std::move(s.error);
            m_predictedPlan = plan;
            m_predictedRevision = revision;
            emit predictionChanged();
        },
        drag ? JobRunner::Supersede::LetRunningFinish : JobRunner::Supersede::StopRunning);
}

} // namespace pw::ui
