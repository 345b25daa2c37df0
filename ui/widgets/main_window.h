// SPDX-License-Identifier: MIT
// The main window: the model view, schedule (Gantt and memory), scenarios and cluster editor as tabs, the metrics
// and partition panels as docks, menus with shortcuts, recent files, drag-and-drop and remembered settings.
#pragma once

#include <QMainWindow>
#include <optional>

#include "ui/document/project_document.h"

class QDockWidget;
class QMenu;
class QTabWidget;

namespace pw::ui {

class BusyIndicator;
class ClusterEditor;
class GanttView;
class MetricsPanel;
class ModelView;
class PartitionPanel;
class ScenariosView;

class MainWindow : public QMainWindow
{
    Q_OBJECT

public:
    /// The views `showView()` and `--view` know.
    static QStringList viewNames();

    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    ProjectDocument& document() { return *m_document; }
    /// Opens a project file; on error shows it (without blocking) and leaves the open project as it was.
    bool openProject(const QString& path);
    /// Replaces the model by a profile (JSON or graph.txt); on error shows it and changes nothing. For a graph.txt
    /// without `graph`, a dialog asks the batch size and the profiled device.
    bool importProfile(const QString& path, std::optional<GraphImport> graph = std::nullopt);
    /// Replaces the cluster by a cluster JSON file (File ▸ Import cluster); on error shows it and changes nothing.
    bool importCluster(const QString& path);
    /// Opens the bundled demo project.
    bool openDemo();
    /// Brings view `name` (see viewNames()) to the front; false for an unknown name.
    bool showView(const QString& name);
    /// The widget a screenshot of view `name` shows: the whole window, so that a picture is exactly the size asked
    /// ("memory" shows the schedule tab with the memory plot given most of the height; see showView()).
    QWidget* screenshotWidget(const QString& name);
    /// Runs the event loop until the plan's and the scenarios' simulations have landed; false on timeout. For
    /// screenshots and tests.
    bool waitUntilIdle(int timeoutMs = 120'000);
    /// Replots every chart now (they repaint lazily), for screenshots.
    void replotAll();
    /// The text of the last error shown to the user (also in the status bar).
    QString lastError() const { return m_lastError; }

    ModelView* modelView() const { return m_modelView; }
    MetricsPanel* metricsPanel() const { return m_metrics; }
    PartitionPanel* partitionPanel() const { return m_partition; }
    GanttView* ganttView() const { return m_gantt; }
    ScenariosView* scenariosView() const { return m_scenarios; }
    ClusterEditor* clusterEditor() const { return m_cluster; }
    BusyIndicator* busyIndicator() const { return m_busy; }

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void buildMenus();
    /// Default dock widths in proportion to the window (when no saved layout was restored).
    void fitDocks();
    void showError(const QString& title, const QString& text);
    void addRecent(const QString& path);
    void rebuildRecentMenu();
    void refreshTitle();
    void refreshSchedule();
    bool saveAs();
    bool maybeSave();

    ProjectDocument* m_document = nullptr;
    QTabWidget* m_tabs = nullptr;
    ModelView* m_modelView = nullptr;
    GanttView* m_gantt = nullptr;
    ScenariosView* m_scenarios = nullptr;
    ClusterEditor* m_cluster = nullptr;
    MetricsPanel* m_metrics = nullptr;
    PartitionPanel* m_partition = nullptr;
    QMenu* m_recent = nullptr;
    BusyIndicator* m_busy = nullptr;
    QDockWidget* m_partitionDock = nullptr;
    QDockWidget* m_metricsDock = nullptr;
    bool m_docksPlaced = false; ///< a saved dock layout was restored: leave the user's widths alone
    QString m_lastError;
    bool m_scheduleStale = true;
};

} // namespace pw::ui
