// SPDX-License-Identifier: MIT
// The partition panel's table: the current plan next to what a partitioner run (its plan and the candidates it
// compared) or a comparison of every algorithm produced. Rows with a plan can be applied.
#pragma once

#include <QAbstractTableModel>
#include <memory>
#include <optional>
#include <vector>

#include "planner/analysis/compare.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

namespace pw::ui {

/// @brief One row: a plan (or a candidate the algorithm only evaluated) and its predicted numbers.
struct ResultRow
{
    QString label; ///< "current plan", "pipedream", "candidate: d=2 p=4 b=2"
    QString config;
    QString schedule;
    double throughput = 0; ///< samples/s; 0 when unknown
    double iteration_s = 0;
    double bubble = -1; ///< fraction; < 0 when unknown
    double peak_bytes = 0;
    double capacity_bytes = 0;
    QString note; ///< error, reason or warning
    bool feasible = true;
    bool current = false;
    std::optional<planner::Plan> plan; ///< what "Apply" applies
};

class ResultModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    // The numbers first: in a narrow dock the names of configurations are the part that is cut, not the numbers.
    enum Column { Label, Throughput, Iteration, Bubble, Memory, Config, Schedule, Note, ColumnCount };
    static constexpr int ValueRole = Qt::UserRole + 1; ///< the raw number behind a cell

    explicit ResultModel(QObject* parent = nullptr);

    void setRows(std::vector<ResultRow> rows);
    const ResultRow& row(int r) const { return m_rows.at(r); }
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    /// The row of a plan, simulated here (an algorithm's plan).
    static ResultRow planRow(const QString& label, const planner::Plan& plan, bool current);
    /// The row of a plan simulated already (the document's current plan); no result: `error` says why.
    static ResultRow planRow(const QString& label, const planner::Plan& plan, bool current,
        const std::shared_ptr<const planner::SimulationResult>& result, const QString& error);
    /// The rows of a partitioner run: its plan (simulated), then every candidate it compared.
    static std::vector<ResultRow> runRows(const QString& algorithm, const planner::PartitionResult& result);
    static ResultRow comparisonRow(const planner::ComparisonRow& row);

private:
    std::vector<ResultRow> m_rows;
};

} // namespace pw::ui
