// SPDX-License-Identifier: MIT
// The history's runs as a table: newest first, with status, steps, start and duration.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "app/history/history.h"

namespace pw::ui {

class RunListModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column { Id, Label, Status, Steps, Started, Duration, Tags, ColumnCount };
    static constexpr int ValueRole = Qt::UserRole + 1; ///< the raw value behind a cell (kSortRole)

    using QAbstractTableModel::QAbstractTableModel;

    void setRuns(std::vector<app::RunRecord> runs);
    const std::vector<app::RunRecord>& runs() const { return m_runs; }
    const app::RunRecord& run(int row) const { return m_runs.at(static_cast<std::size_t>(row)); }
    /// The row of run `id`, or -1.
    int rowOf(const std::string& id) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<app::RunRecord> m_runs;
};

} // namespace pw::ui
