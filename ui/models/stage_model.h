// SPDX-License-Identifier: MIT
// The metrics panel's table: one row per stage of the document's plan with its layers, devices, time per
// microbatch and peak memory against capacity (shown red when over). Follows the document as it changes.
#pragma once

#include <QAbstractTableModel>

namespace pw::ui {

class PlanDocument;

class StageModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    // The numbers first, the devices (the longest text) last.
    enum Column { Stage, Layers, Compute, Memory, Capacity, Devices, ColumnCount };
    /// Qt::UserRole + 1: the raw number behind a cell (seconds, bytes; layer count for Layers).
    static constexpr int ValueRole = Qt::UserRole + 1;

    explicit StageModel(PlanDocument& document, QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    PlanDocument& m_document;
    int m_rows = 0;
    void refresh();
};

} // namespace pw::ui
