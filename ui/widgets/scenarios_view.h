// SPDX-License-Identifier: MIT
// The scenarios view: the project's saved plans in one table of metrics, and the checked ones' Gantt charts
// stacked on one time axis.
#pragma once

#include <QWidget>

class QTableView;

namespace pw::ui {

class GanttView;
class ProjectDocument;
class ScenarioModel;

class ScenariosView : public QWidget
{
    Q_OBJECT

public:
    explicit ScenariosView(ProjectDocument& project, QWidget* parent = nullptr);

    ScenarioModel* model() const { return m_model; }
    GanttView* gantt() const { return m_gantt; }
    /// Asks for a name and saves the current plan as a scenario.
    void saveCurrentAs();
    /// Saves the current plan as scenario `name` (replacing one of that name), selects and ticks it.
    bool saveCurrent(const QString& name);
    /// The name of the selected scenario (empty: none).
    QString selectedName() const;

signals:
    void message(const QString& text);

private:
    void refreshGantt();

    ProjectDocument& m_project;
    ScenarioModel* m_model = nullptr;
    QTableView* m_table = nullptr;
    GanttView* m_gantt = nullptr;
};

} // namespace pw::ui
