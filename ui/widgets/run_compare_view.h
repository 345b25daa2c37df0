// SPDX-License-Identifier: MIT
// The history browser's comparison of several runs (app/run/compare_runs.h). Summary: each run's figures, the
// configuration fields that differ (only those), and per stage the measured compute and idle (bubble) time per
// step with each run's delta against the first (exports as CSV). Metrics: loss or tokens/s of every run overlaid,
// against step, wall-clock or relative time, with exponential smoothing. Timelines: the runs' measured Gantts on
// one time axis.
#pragma once

#include <QWidget>
#include <vector>

#include "app/run/compare_runs.h"

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QTableWidget;
class QTabWidget;

namespace pw::ui {

class RunCompareView : public QWidget
{
    Q_OBJECT

public:
    explicit RunCompareView(QWidget* parent = nullptr);

    void setComparison(const app::RunsComparison& comparison);
    /// The runs themselves too: their curves and timelines (setComparison for the figures).
    void setRuns(std::vector<app::RunSnapshot> runs, const app::RunsComparison& comparison);
    /// Redraws the metric overlay from the chosen metric, x axis and smoothing.
    void updateOverlay();
    const app::RunsComparison& comparison() const { return m_comparison; }
    /// @brief One table as a CSV file's text, and what its file name ends with.
    struct CsvTable
    {
        QString suffix; ///< "" for the runs, "-differences", "-stages"
        QString text;
    };
    /// The three tables, each a CSV of its own (runs, differences, stages): a header row, plain numbers, one unit
    /// per column named in its header (`iteration_s`, `run_1_compute_s`, ...; seconds for times), no unit text.
    std::vector<CsvTable> csvTables() const;
    /// Writes each table to its own file, named after `path` (with ".csv" added when it has no extension):
    /// BASE.csv (runs), BASE-differences.csv, BASE-stages.csv. Returns the paths written; empty (and lastError())
    /// when one cannot be written.
    QStringList exportCsv(const QString& path);
    QString lastError() const { return m_error; }

    QTableWidget* runsTable() const { return m_runs; }
    QTableWidget* differencesTable() const { return m_differences; }
    QTableWidget* stagesTable() const { return m_stages; }
    QCustomPlot* metricsPlot() const { return m_plot; }
    QComboBox* metricBox() const { return m_metric; }
    QComboBox* axisBox() const { return m_axis; }
    QDoubleSpinBox* smoothingBox() const { return m_smoothing; }
    class GanttView* gantt() const { return m_gantt; }
    QTabWidget* tabs() const { return m_tabs; }

signals:
    /// What an action did, for the status line (the files an export wrote).
    void message(const QString& text);

private:
    void exportAsked();

    app::RunsComparison m_comparison;
    std::vector<app::RunSnapshot> m_snapshots;
    QTabWidget* m_tabs = nullptr;
    QCustomPlot* m_plot = nullptr;
    QComboBox* m_metric = nullptr;
    QComboBox* m_axis = nullptr;
    QDoubleSpinBox* m_smoothing = nullptr;
    class GanttView* m_gantt = nullptr;
    QLabel* m_title = nullptr;
    QTableWidget* m_runs = nullptr;
    QTableWidget* m_differences = nullptr;
    QTableWidget* m_stages = nullptr;
    QString m_error;
};

} // namespace pw::ui
