// SPDX-License-Identifier: MIT
#include "plan_document.h"

#include <QUndoCommand>

#include "planner/errors.h"

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
    m_plan.reset();
    m_prediction.reset();
    m_predictionError.clear();
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
    show(std::move(plan));
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

void PlanDocument::show(planner::Plan plan)
{
    m_plan = std::move(plan);
    m_prediction.reset();
    m_predictionError.clear();
    try {
        m_prediction = std::make_shared<const planner::SimulationResult>(planner::simulate(*m_plan));
    } catch (const planner::InputError& e) {
        m_predictionError = QString::fromStdString(planner::formatInputError(e));
    }
    emit planChanged();
    emit predictionChanged();
}

} // namespace pw::ui
