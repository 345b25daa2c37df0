// SPDX-License-Identifier: MIT
#include "scenario_model.h"

#include <QBrush>
#include <QColor>

#include "planner/errors.h"
#include "ui/document/project_document.h"
#include "ui/models/format.h"

namespace pw::ui {

ScenarioModel::ScenarioModel(ProjectDocument& project, QObject* parent)
    : QAbstractTableModel(parent)
    , m_project(project)
{
    connect(&project, &ProjectDocument::scenariosChanged, this, &ScenarioModel::refresh);
    refresh();
}

void ScenarioModel::refresh()
{
    beginResetModel();
    m_metrics.clear();
    QSet<QString> names;
    for (const auto& s : m_project.project().scenarios) {
        names.insert(QString::fromStdString(s.name));
        Metrics m;
        try {
            // With spans: the scenarios view stacks these timelines, no second simulation.
            m.result = std::make_shared<const planner::SimulationResult>(planner::simulate(s.plan));
            const auto& r = *m.result;
            m.ok = true;
            m.throughput = r.throughput_samples_per_s;
            m.iteration = r.iteration_time_s;
            m.bubble = r.bubble_fraction;
            const auto worst = planner::worstMemory(r);
            m.peak = worst.peak_bytes;
            m.capacity = worst.capacity_bytes;
        } catch (const planner::InputError& e) {
            m.error = QString::fromStdString(planner::formatInputError(e));
        }
        m_metrics.push_back(std::move(m));
    }
    m_checked.intersect(names);
    if (m_checked.isEmpty()) // first look: the first two side by side
        for (int i = 0; i < std::min<int>(2, static_cast<int>(m_project.project().scenarios.size())); ++i)
            m_checked.insert(QString::fromStdString(m_project.project().scenarios[i].name));
    endResetModel();
    emit checkedChanged();
}

int ScenarioModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_metrics.size());
}

int ScenarioModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

Qt::ItemFlags ScenarioModel::flags(const QModelIndex& index) const
{
    // Views and the model tester ask the root's flags: no item, and no checkIndex() warning either.
    if (!index.isValid() || !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (index.column() == Name)
        f |= Qt::ItemIsUserCheckable;
    return f;
}

QVariant ScenarioModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const auto& s = m_project.project().scenarios[index.row()];
    const Metrics& m = m_metrics[index.row()];
    const QString name = QString::fromStdString(s.name);
    if (role == Qt::CheckStateRole && index.column() == Name)
        return m_checked.contains(name) ? Qt::Checked : Qt::Unchecked;
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Name:
            return name;
        case Config:
            return QString::fromStdString(s.plan.configString());
        case Algorithm:
            return QString::fromStdString(s.plan.algorithm);
        case Schedule:
            return QString::fromStdString(s.plan.schedule.kind)
                + (s.plan.schedule.chunks > 1 ? QStringLiteral(" ×%1").arg(s.plan.schedule.chunks) : QString());
        case Throughput:
            return m.ok ? QString::number(m.throughput, 'f', 1) : QString();
        case Iteration:
            return m.ok ? secondsText(m.iteration) : QString();
        case Bubble:
            return m.ok ? percentText(m.bubble) : QString();
        case Memory:
            return m.ok ? tr("%1 / %2").arg(bytesText(m.peak), bytesText(m.capacity)) : QString();
        case Note:
            return m.ok ? QString::fromStdString(s.note) : m.error;
        }
    } else if (role == ValueRole) {
        switch (index.column()) {
        case Throughput:
            return m.throughput;
        case Iteration:
            return m.iteration;
        case Bubble:
            return m.bubble;
        case Memory:
            return m.peak;
        default:
            return data(index, Qt::DisplayRole);
        }
    } else if (role == Qt::ForegroundRole) {
        if ((index.column() == Memory && m.peak > m.capacity) || (index.column() == Note && !m.ok))
            return QBrush(QColor(198, 40, 40));
    } else if (role == Qt::TextAlignmentRole && index.column() >= Throughput && index.column() <= Memory) {
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    }
    return {};
}

bool ScenarioModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (role != Qt::CheckStateRole || !checkIndex(index, CheckIndexOption::IndexIsValid) || index.column() != Name)
        return false;
    setChecked(QString::fromStdString(m_project.project().scenarios[index.row()].name),
        value.value<Qt::CheckState>() == Qt::Checked);
    return true;
}

void ScenarioModel::setChecked(const QString& name, bool checked)
{
    const int row = m_project.project().findScenario(name.toStdString());
    if (row < 0 || m_checked.contains(name) == checked)
        return;
    if (checked)
        m_checked.insert(name);
    else
        m_checked.remove(name);
    emit dataChanged(index(row, Name), index(row, Name), {Qt::CheckStateRole});
    emit checkedChanged();
}

const std::shared_ptr<const planner::SimulationResult>& ScenarioModel::simulation(int row) const
{
    return m_metrics.at(row).result;
}

QString ScenarioModel::simulationError(int row) const
{
    return m_metrics.at(row).error;
}

QStringList ScenarioModel::checkedNames() const
{
    QStringList names;
    for (const auto& s : m_project.project().scenarios)
        if (m_checked.contains(QString::fromStdString(s.name)))
            names << QString::fromStdString(s.name);
    return names;
}

QVariant ScenarioModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount)
        return {};
    static const char* names[] = {
        "Scenario", "Config", "Algorithm", "Schedule", "Samples/s", "Iteration", "Bubble", "Memory / capacity", "Note"};
    return tr(names[section]);
}

} // namespace pw::ui
