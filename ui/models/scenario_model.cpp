// SPDX-License-Identifier: MIT
#include "scenario_model.h"

#include <QBrush>
#include <QColor>
#include <QFont>

#include "ui/document/project_document.h"
#include "ui/models/format.h"

namespace pw::ui {

ScenarioModel::ScenarioModel(ProjectDocument& project, QObject* parent)
    : QAbstractTableModel(parent)
    , m_project(project)
{
    connect(&project, &ProjectDocument::scenariosChanged, this, &ScenarioModel::refresh);
    connect(&project, &ProjectDocument::scenarioPredictionsChanged, this, &ScenarioModel::refreshMetrics);
    refresh();
}

void ScenarioModel::refresh()
{
    beginResetModel();
    m_metrics.assign(m_project.project().scenarios.size(), {});
    QSet<QString> names;
    for (const auto& s : m_project.project().scenarios)
        names.insert(QString::fromStdString(s.name));
    m_checked.intersect(names);
    if (m_checked.isEmpty()) // first look: the first two side by side
        for (int i = 0; i < std::min<int>(2, static_cast<int>(m_project.project().scenarios.size())); ++i)
            m_checked.insert(QString::fromStdString(m_project.project().scenarios[i].name));
    fillMetrics();
    endResetModel();
    emit checkedChanged();
}

void ScenarioModel::refreshMetrics()
{
    if (m_metrics.size() != m_project.project().scenarios.size())
        return; // refresh() comes next
    fillMetrics();
    if (!m_metrics.empty())
        emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
    emit checkedChanged(); // the stacked timelines landed
}

void ScenarioModel::fillMetrics()
{
    const auto& predictions = m_project.scenarioPredictions();
    const bool landed = predictions.size() == m_metrics.size();
    for (std::size_t i = 0; i < m_metrics.size(); ++i) {
        Metrics m;
        m.pending = !landed;
        if (landed) {
            m.result = predictions[i].result;
            m.error = predictions[i].error;
        }
        if (m.result) {
            const auto& r = *m.result;
            m.ok = true;
            m.throughput = r.throughput_samples_per_s;
            m.iteration = r.iteration_time_s;
            m.bubble = r.bubble_fraction;
            const auto worst = planner::worstMemory(r);
            m.peak = worst.peak_bytes;
            m.capacity = worst.capacity_bytes;
        }
        m_metrics[i] = std::move(m);
    }
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
        case Name: {
            // What differs from the project: its model, its cluster (Cluster ▸ Apply keeps the model), or both.
            if (matchesProject(index.row()))
                return name;
            const bool model = s.plan.model == m_project.project().model;
            const bool cluster = s.plan.cluster == m_project.project().cluster;
            return !model && !cluster ? tr("%1 (other model and cluster)").arg(name)
                : !model              ? tr("%1 (other model)").arg(name)
                                      : tr("%1 (other cluster)").arg(name);
        }
        case Config:
            return configText(QString::fromStdString(s.plan.configString()));
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
            return m.ok ? QString::fromStdString(s.note) : m.pending ? tr("simulating…") : m.error;
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
        case Config:
            return QString::fromStdString(s.plan.configString()); // whole
        case Name:
            return name;
        default:
            return data(index, Qt::DisplayRole);
        }
    } else if (role == Qt::ToolTipRole && index.column() == Name && !matchesProject(index.row())) {
        return tr("Made for %1 on %2, not this project's %3 on %4: compared by its numbers, not stacked below")
            .arg(QString::fromStdString(s.plan.model->name), QString::fromStdString(s.plan.cluster->name),
                QString::fromStdString(m_project.project().model->name),
                QString::fromStdString(m_project.project().cluster->name));
    } else if (role == Qt::FontRole && index.column() == Name && !matchesProject(index.row())) {
        QFont f;
        f.setItalic(true);
        return f;
    } else if (role == Qt::ToolTipRole && index.column() == Config) {
        const QString whole = QString::fromStdString(s.plan.configString());
        return configText(whole) != whole ? QVariant(whole) : QVariant();
    } else if (role == Qt::ForegroundRole) {
        if ((index.column() == Memory && m.peak > m.capacity) || (index.column() == Note && !m.ok && !m.pending))
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

bool ScenarioModel::matchesProject(int row) const
{
    const auto& plan = m_project.project().scenarios.at(row).plan;
    return plan.model == m_project.project().model && plan.cluster == m_project.project().cluster;
}

bool ScenarioModel::simulating(int row) const
{
    return m_metrics.at(row).pending;
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
        "Scenario", "Samples/s", "Iteration", "Bubble", "Memory / capacity", "Config", "Algorithm", "Schedule", "Note"};
    return tr(names[section]);
}

} // namespace pw::ui
