// SPDX-License-Identifier: MIT
#include "stage_model.h"

#include <QBrush>
#include <QColor>

#include "planner/sim/simulator.h"
#include "ui/document/plan_document.h"
#include "ui/models/format.h"

namespace pw::ui {

StageModel::StageModel(PlanDocument& document, QObject* parent)
    : QAbstractTableModel(parent)
    , m_document(document)
{
    connect(&document, &PlanDocument::planChanged, this, &StageModel::refresh);
    connect(&document, &PlanDocument::predictionChanged, this, &StageModel::refresh);
    m_rows = m_document.hasPlan() ? m_document.plan().stageCount() : 0;
}

void StageModel::refresh()
{
    const int rows = m_document.hasPlan() ? m_document.plan().stageCount() : 0;
    if (rows != m_rows) {
        beginResetModel();
        m_rows = rows;
        endResetModel();
    } else if (rows > 0) {
        emit dataChanged(index(0, 0), index(rows - 1, ColumnCount - 1));
    }
}

int StageModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : m_rows;
}

int StageModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant StageModel::data(const QModelIndex& index, int role) const
{
    // m_rows follows the plan on planChanged; the check on the plan itself guards views painting in between.
    if (!index.isValid() || index.row() >= m_rows || !m_document.hasPlan()
        || index.row() >= m_document.plan().stageCount())
        return {};
    const auto& plan = m_document.plan();
    const int s = index.row();
    const auto& st = plan.stages[s];
    // A prediction of an earlier plan (a simulation is running) says nothing about this plan's stages.
    const auto& prediction = m_document.prediction();
    const bool have = m_document.isPredictionCurrent() && prediction && s < static_cast<int>(prediction->stages.size());
    const double peak = have ? prediction->stages[s].peak_memory_bytes : 0;
    const double capacity = have ? prediction->stages[s].memory_capacity_bytes : 0;
    const bool over = have && peak > capacity;
    // What the simulation charged one microbatch of the stage (recomputation and tensor-parallel all-reduces
    // included): the same time the schedule's spans and the iteration time are made of.
    const planner::StageCharge charge = have ? prediction->stages[s].charge : planner::StageCharge {};
    const double compute = charge.total_s();
    if (role == Qt::ForegroundRole && over && (index.column() == Memory || index.column() == Capacity))
        return QBrush(QColor(200, 30, 30));
    if (role == Qt::ToolTipRole && over)
        return tr("Stage %1 needs %2 but its smallest device has %3").arg(s).arg(bytesText(peak), bytesText(capacity));
    if (role == Qt::ToolTipRole && index.column() == Compute && have) {
        QString parts = tr("Stage %1, one microbatch on %2, as simulated: %3\nforward %4\nbackward %5")
                            .arg(s)
                            .arg(QString::fromStdString(plan.cluster->deviceName(st.devices.at(0))),
                                secondsText(compute), secondsText(charge.forward_s), secondsText(charge.backward_s));
        if (plan.schedule.recompute != planner::Recompute::None)
            parts += tr("\nrecomputed forward %1").arg(secondsText(charge.recompute_s));
        if (plan.tensor_parallel > 1)
            parts += tr("\ntensor-parallel all-reduces %1").arg(secondsText(charge.tensor_parallel_s));
        if (plan.schedule.shard_weights)
            parts += tr("\nZeRO-3 gathers not covered by the compute %1").arg(secondsText(charge.weight_gather_s));
        if (plan.context_parallel > 1)
            parts += tr("\nring-attention exchanges not covered by the attention %1")
                         .arg(secondsText(charge.context_parallel_s));
        return parts;
    }
    if (role == ValueRole) {
        switch (index.column()) {
        case Stage:
            return s;
        case Layers:
            return st.layerCount();
        case Devices:
            return st.replicas();
        case Compute:
            return have ? QVariant(compute) : QVariant();
        case Memory:
            return have ? QVariant(peak) : QVariant();
        case Capacity:
            return have ? QVariant(capacity) : QVariant();
        }
    }
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case Stage:
        return QString::number(s);
    case Layers:
        return QStringLiteral("%1-%2").arg(st.first_layer).arg(st.last_layer);
    case Devices: {
        QString text = QString::fromStdString(plan.cluster->deviceName(st.devices.at(0)));
        if (st.replicas() > 1)
            text += QStringLiteral(" +%1").arg(st.replicas() - 1);
        return text;
    }
    case Compute:
        if (have)
            return secondsText(compute);
        return !m_document.isPredictionCurrent() ? tr("simulating…") : tr("not simulated");
    case Memory:
        if (have) // against the capacity: the table needs no second column for it
            return tr("%1 of %2").arg(bytesText(peak), bytesText(capacity));
        return !m_document.isPredictionCurrent() ? tr("simulating…") : tr("not simulated");
    case Capacity:
        return have ? bytesText(capacity) : QString();
    }
    return {};
}

QVariant StageModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::ToolTipRole && section == Compute)
        return tr("What the simulation charges one microbatch on the stage's first device: forward + backward,\n"
                  "with the recomputed forward and the tensor-parallel all-reduces when the plan has them\n"
                  "(a cell's tooltip lists the parts)");
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case Stage:
        return tr("Stage");
    case Layers:
        return tr("Layers");
    case Devices:
        return tr("Devices");
    case Compute:
        return tr("Per µbatch");
    case Memory:
        return tr("Peak of capacity");
    case Capacity:
        return tr("Capacity");
    }
    return {};
}

} // namespace pw::ui
