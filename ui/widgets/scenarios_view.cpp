// SPDX-License-Identifier: MIT
#include "scenarios_view.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "ui/document/project_document.h"
#include "ui/models/format.h"
#include "ui/models/scenario_model.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/tables.h"

namespace pw::ui {

ScenariosView::ScenariosView(ProjectDocument& project, QWidget* parent)
    : QWidget(parent)
    , m_project(project)
{
    auto* layout = new QVBoxLayout(this);
    auto* hint = new QLabel(tr("Saved plans of this project. Tick the ones to compare: their schedules are stacked "
                               "below on one time axis."),
        this);
    hint->setWordWrap(true);
    layout->addWidget(hint);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    auto* top = new QWidget(splitter);
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    m_model = new ScenarioModel(project, this);
    m_table = rowPickingTable(m_model, top);
    topLayout->addWidget(m_table);
    auto* buttons = new QHBoxLayout;
    // Short labels, the long story in tooltips: the row must fit beside the docks of a 1024 px window.
    auto* save = new QPushButton(tr("Save current…"), top);
    save->setToolTip(tr("Save the current plan as a scenario (Ctrl+Shift+N)"));
    auto* restore = new QPushButton(tr("Edit selected"), top);
    restore->setToolTip(tr("Make the selected scenario the current plan (Ctrl+Z undoes it)"));
    auto* remove = new QPushButton(tr("Remove selected"), top);
    buttons->addWidget(save);
    buttons->addWidget(restore);
    buttons->addWidget(remove);
    buttons->addStretch(1);
    topLayout->addLayout(buttons);
    splitter->addWidget(top);
    m_gantt = new GanttView(splitter, false);
    splitter->addWidget(m_gantt);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 4);
    splitter->setSizes({220, 880});
    layout->addWidget(splitter, 1);

    connect(save, &QPushButton::clicked, this, &ScenariosView::saveCurrentAs);
    connect(restore, &QPushButton::clicked, this, [this] {
        QString error;
        const QString name = selectedName();
        if (name.isEmpty())
            emit message(tr("Select a scenario first"));
        else if (!m_project.restoreScenario(name, &error))
            emit message(error);
        else
            emit message(tr("Scenario '%1' is now the current plan (Ctrl+Z undoes it)").arg(name));
    });
    connect(remove, &QPushButton::clicked, this, [this] {
        const QString name = selectedName();
        if (!name.isEmpty()
            && QMessageBox::question(
                   this, tr("Remove scenario"), tr("Remove scenario '%1'? This cannot be undone.").arg(name))
                == QMessageBox::Yes)
            m_project.removeScenario(name);
    });
    connect(m_model, &ScenarioModel::checkedChanged, this, &ScenariosView::refreshGantt);
    refreshGantt();
}

QString ScenariosView::selectedName() const
{
    const int row = selectedSourceRow(m_table);
    return row < 0 ? QString() : QString::fromStdString(m_project.project().scenarios.at(row).name);
}

void ScenariosView::saveCurrentAs()
{
    QString proposal;
    for (std::size_t k = m_project.project().scenarios.size() + 1; proposal.isEmpty(); ++k)
        if (m_project.project().findScenario(tr("Scenario %1").arg(k).toStdString()) < 0)
            proposal = tr("Scenario %1").arg(k);
    bool ok = false;
    const QString name = QInputDialog::getText(
        this, tr("Save scenario"), tr("Name of the scenario:"), QLineEdit::Normal, proposal, &ok);
    if (!ok)
        return;
    if (m_project.project().findScenario(name.trimmed().toStdString()) >= 0
        && QMessageBox::question(
               this, tr("Replace scenario"), tr("A scenario named '%1' exists. Replace it?").arg(name.trimmed()))
            != QMessageBox::Yes)
        return;
    saveCurrent(name);
}

bool ScenariosView::saveCurrent(const QString& name)
{
    QString error;
    if (!m_project.saveScenario(name, {}, &error)) {
        emit message(error);
        return false;
    }
    // The new scenario is selected, ticked (stacked below) and scrolled into view.
    const int row = m_project.project().findScenario(name.trimmed().toStdString());
    m_model->setChecked(name.trimmed(), true);
    selectSourceRow(m_table, m_model, row);
    return true;
}

void ScenariosView::refreshGantt()
{
    std::vector<GanttBlock> blocks;
    QStringList failed, pending, other;
    for (const QString& name : m_model->checkedNames()) {
        const int row = m_project.project().findScenario(name.toStdString());
        const auto& plan = m_project.project().scenarios[row].plan;
        if (!m_model->matchesProject(row)) { // another model's timeline on this axis would compare nothing
            other << name;
            continue;
        }
        const auto& r = m_model->simulation(row); // simulated once, in the background, by the project document
        if (!r) {
            if (m_model->simulating(row))
                pending << name;
            else
                failed << name + QStringLiteral(": ") + m_model->simulationError(row);
            continue;
        }
        // A multi-batch simulation (2BW runs three) is longer on the axis than one batch of another plan: its
        // batches are marked, and the title says that its numbers are per batch.
        const QString batches = r->batch_ends_s.size() > 1
            ? tr(", %1 batches shown (numbers per batch)").arg(r->batch_ends_s.size())
            : QString();
        blocks.push_back({tr("%1 — %2, %3: %4 samples/s, iteration %5, bubble %6%7")
                              .arg(name, configText(QString::fromStdString(plan.configString())),
                                  QString::fromStdString(plan.schedule.kind))
                              .arg(r->throughput_samples_per_s, 0, 'f', 1)
                              .arg(secondsText(r->iteration_time_s), percentText(r->bubble_fraction), batches),
            std::shared_ptr<const planner::Timeline>(r, &r->timeline), {}, r->batch_ends_s});
    }
    if (!other.isEmpty())
        emit message(tr("Not stacked (made for another model or cluster): %1").arg(other.join(QStringLiteral(", "))));
    if (blocks.empty() && !other.isEmpty() && pending.isEmpty() && failed.isEmpty())
        m_gantt->setEmptyMessage(tr("The ticked scenarios were made for another model or cluster: %1")
                                     .arg(other.join(QStringLiteral(", "))));
    else if (blocks.empty())
        m_gantt->setEmptyMessage(m_project.project().scenarios.empty()
                ? tr(
                    "No scenarios yet: save the current plan as a scenario (Plan ▸ Save as scenario) to compare plans.")
                : !pending.isEmpty() ? tr("Simulating %1…").arg(pending.join(QStringLiteral(", ")))
                : failed.isEmpty()   ? tr("Tick one or more scenarios above to see their schedules here.")
                                     : tr("Cannot simulate: %1").arg(failed.join(QStringLiteral("; "))));
    else
        m_gantt->setBlocksInBackground(std::move(blocks));
}

} // namespace pw::ui
