// SPDX-License-Identifier: MIT
// The history browser's comparison of several runs (app/run/compare_runs.h): each run's figures, the configuration
// fields that differ (only those), and per stage the measured compute and idle (bubble) time per step with each
// run's delta against the first. What is shown exports as CSV.
#pragma once

#include <QWidget>

#include "app/run/compare_runs.h"

class QLabel;
class QTableWidget;

namespace pw::ui {

class RunCompareView : public QWidget
{
    Q_OBJECT

public:
    explicit RunCompareView(QWidget* parent = nullptr);

    void setComparison(const app::RunsComparison& comparison);
    const app::RunsComparison& comparison() const { return m_comparison; }
    /// The three tables as CSV sections (runs, differences, stages), as shown.
    QString csv() const;
    /// Writes csv() to `path`; false (and lastError()) when it cannot.
    bool exportCsv(const QString& path);
    QString lastError() const { return m_error; }

    QTableWidget* runsTable() const { return m_runs; }
    QTableWidget* differencesTable() const { return m_differences; }
    QTableWidget* stagesTable() const { return m_stages; }

private:
    void exportAsked();

    app::RunsComparison m_comparison;
    QLabel* m_title = nullptr;
    QTableWidget* m_runs = nullptr;
    QTableWidget* m_differences = nullptr;
    QTableWidget* m_stages = nullptr;
    QString m_error;
};

} // namespace pw::ui
