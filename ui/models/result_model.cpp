// SPDX-License-Identifier: MIT
#include "result_model.h"

#include <QBrush>
#include <QColor>
#include <QFont>

#include "planner/errors.h"
#include "planner/sim/simulator.h"
#include "ui/models/format.h"

namespace pw::ui {

ResultModel::ResultModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void ResultModel::setRows(std::vector<ResultRow> rows)
{
    beginResetModel();
    m_rows = std::move(rows);
    endResetModel();
}

int ResultModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int ResultModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ResultModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const ResultRow& r = m_rows[index.row()];
    const bool over = r.capacity_bytes > 0 && r.peak_bytes > r.capacity_bytes;
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Label:
            return r.label;
        case Config:
            return configText(r.config);
        case Schedule:
            return r.schedule;
        case Throughput:
            return r.throughput > 0 ? QString::number(r.throughput, 'f', 1) : QString();
        case Iteration:
            return r.iteration_s > 0 ? secondsText(r.iteration_s) : QString();
        case Bubble:
            return r.bubble >= 0 ? percentText(r.bubble) : QString();
        case Memory:
            if (r.peak_bytes <= 0)
                return QString();
            // Compact in GiB where it reads right ("62.3 / 80 GiB"); a peak under 1 GiB in the unit that fits, or
            // a tiny model read "0.0 / 16 GiB" beside the metrics' "8.53 MiB of 16.00 GiB".
            if (r.peak_bytes < double(1ull << 30))
                return tr("%1 / %2").arg(bytesText(r.peak_bytes), bytesText(r.capacity_bytes));
            return tr("%1 / %2 GiB")
                .arg(r.peak_bytes / double(1ull << 30), 0, 'f', 1)
                .arg(r.capacity_bytes / double(1ull << 30), 0, 'f', 0);
        case Note:
            return r.note;
        }
    } else if (role == ValueRole) {
        switch (index.column()) {
        case Throughput:
            return r.throughput;
        case Iteration:
            return r.iteration_s;
        case Bubble:
            return r.bubble;
        case Memory:
            return r.peak_bytes;
        case Config:
            return r.config; // whole
        default:
            return data(index, Qt::DisplayRole);
        }
    } else if (role == Qt::ForegroundRole) {
        if ((index.column() == Memory && over) || (index.column() == Note && !r.feasible))
            return QBrush(QColor(198, 40, 40));
        if (!r.plan && !r.current)
            return QBrush(QColor(110, 110, 110));
    } else if (role == Qt::FontRole && r.current) {
        QFont f;
        f.setBold(true);
        return f;
    } else if (role == Qt::ToolTipRole) {
        if (index.column() == Note && !r.note.isEmpty())
            return r.note;
        if (index.column() == Config && configText(r.config) != r.config)
            return r.config;
        const QString whole = index.column() == Label && r.label.size() > 24 ? r.label + QLatin1Char('\n') : QString();
        if (!r.plan && !r.current)
            return whole
                + tr("A configuration the algorithm evaluated with its own cost model; only its chosen plan can be "
                     "applied");
        if (!whole.isEmpty())
            return r.label;
    } else if (role == Qt::TextAlignmentRole && index.column() >= Throughput && index.column() <= Memory) {
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    }
    return {};
}

QVariant ResultModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount)
        return {};
    static const char* names[] = {"Plan", "Samples/s", "Iteration", "Bubble", "Memory", "Config", "Schedule", "Note"};
    return tr(names[section]);
}

ResultRow ResultModel::planRow(const QString& label, const planner::Plan& plan, bool current)
{
    try {
        return planRow(label, plan, current,
            std::make_shared<const planner::SimulationResult>(planner::simulate(plan, {false, true})), {});
    } catch (const planner::InputError& e) {
        return planRow(label, plan, current, nullptr, QString::fromStdString(planner::formatInputError(e)));
    }
}

ResultRow ResultModel::planRow(const QString& label, const planner::Plan& plan, bool current,
    const std::shared_ptr<const planner::SimulationResult>& result, const QString& error)
{
    ResultRow row;
    row.label = label;
    row.current = current;
    row.config = QString::fromStdString(plan.configString());
    row.schedule = QString::fromStdString(plan.schedule.kind);
    row.plan = plan;
    if (!result) {
        row.note = error;
        row.feasible = false;
        return row;
    }
    row.throughput = result->throughput_samples_per_s;
    row.iteration_s = result->iteration_time_s;
    row.bubble = result->bubble_fraction;
    const auto worst = planner::worstMemory(*result);
    row.peak_bytes = worst.peak_bytes;
    row.capacity_bytes = worst.capacity_bytes;
    if (worst.over())
        row.note = tr("over memory");
    return row;
}

std::vector<ResultRow> ResultModel::runRows(const QString& algorithm, const planner::PartitionResult& result)
{
    std::vector<ResultRow> rows;
    if (result.plan) {
        ResultRow r = planRow(algorithm, *result.plan, false);
        for (const auto& d : result.diagnostics)
            if (d.severity == planner::Diagnostic::Severity::Warning)
                r.note += (r.note.isEmpty() ? QString() : QStringLiteral("; ")) + QString::fromStdString(d.message);
        rows.push_back(std::move(r));
    } else {
        ResultRow r;
        r.label = algorithm;
        r.feasible = false;
        r.note = QString::fromStdString(result.errorText());
        rows.push_back(std::move(r));
    }
    for (const auto& c : result.candidates) {
        ResultRow r;
        r.label = tr("candidate: %1").arg(QString::fromStdString(c.description));
        r.throughput = c.throughput_samples_per_s;
        r.peak_bytes = c.peak_memory_bytes;
        r.capacity_bytes = c.memory_capacity_bytes;
        r.feasible = c.feasible;
        r.note = QString::fromStdString(c.reason);
        rows.push_back(std::move(r));
    }
    return rows;
}

ResultRow ResultModel::comparisonRow(const planner::ComparisonRow& c)
{
    ResultRow r;
    r.label = QString::fromStdString(c.algorithm);
    if (!c.ok) {
        r.feasible = false;
        r.note = QString::fromStdString(c.error);
        return r;
    }
    r.config = QString::fromStdString(c.config);
    r.schedule = QString::fromStdString(c.schedule);
    r.throughput = c.throughput_samples_per_s;
    r.iteration_s = c.iteration_time_s;
    r.bubble = c.bubble_fraction;
    r.peak_bytes = c.peak_memory_bytes;
    r.capacity_bytes = c.memory_capacity_bytes;
    if (c.memory_ratio > 1)
        r.note = tr("over memory");
    r.plan = c.plan;
    return r;
}

} // namespace pw::ui
