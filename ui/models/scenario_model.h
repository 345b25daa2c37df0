// SPDX-License-Identifier: MIT
// The project's scenarios side by side: a row per saved plan with its predicted metrics; the checked rows are the
// ones the scenarios view stacks on one time axis.
#pragma once

#include <QAbstractTableModel>
#include <QSet>
#include <memory>
#include <optional>

#include "planner/sim/simulator.h"

namespace pw::ui {

class ProjectDocument;

class ScenarioModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    // The numbers first: in a narrow window the names are the part that is cut, not the numbers.
    enum Column { Name, Throughput, Iteration, Bubble, Memory, Config, Algorithm, Schedule, Note, ColumnCount };
    static constexpr int ValueRole = Qt::UserRole + 1; ///< the raw number behind a cell

    explicit ScenarioModel(ProjectDocument& project, QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    /// The simulation of the scenario in `row` (spans and memory included, made by the ProjectDocument in the
    /// background); empty while simulating(row), or when it failed and simulationError() says why.
    const std::shared_ptr<const planner::SimulationResult>& simulation(int row) const;
    QString simulationError(int row) const;
    bool simulating(int row) const;
    /// Whether the scenario in `row` was made for the project's model and cluster (else it can be compared by its
    /// numbers, but is not stacked on the same time axis or made the current plan).
    bool matchesProject(int row) const;
    /// Names of the checked scenarios, in the project's order.
    QStringList checkedNames() const;
    void setChecked(const QString& name, bool checked);

signals:
    void checkedChanged();

private:
    struct Metrics
    {
        bool ok = false;
        bool pending = false; ///< the document is simulating it
        QString error;
        double throughput = 0, iteration = 0, bubble = 0, peak = 0, capacity = 0;
        std::shared_ptr<const planner::SimulationResult> result;
    };
    void refresh();
    void refreshMetrics();
    void fillMetrics();

    ProjectDocument& m_project;
    std::vector<Metrics> m_metrics;
    QSet<QString> m_checked;
};

} // namespace pw::ui
