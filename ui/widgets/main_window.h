// SPDX-License-Identifier: MIT
// The main window: the model view, schedule (Gantt and memory), scenarios and cluster editor as tabs, the metrics
// and partition panels as docks, menus with shortcuts, recent files, drag-and-drop and remembered settings.
#pragma once

#include <QMainWindow>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "app/run/controller.h"
#include "ui/document/project_document.h"
#include "ui/jobs/job_runner.h"

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
class RunMonitor;
class RunSession;
class HistoryView;

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
    /// A profile (JSON, graph.txt) or a Hugging Face config.json; what the file does not say (graph.txt's batch size
    /// and device, config.json's sequence, microbatch and device) is asked in a dialog unless `graph` or `hf` gives it.
    bool importProfile(const QString& path, std::optional<GraphImport> graph = std::nullopt,
        std::optional<HfImport> hf = std::nullopt);
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

    /// The history file runs are recorded in (the user's data directory unless set).
    void setHistoryPath(const std::filesystem::path& path);
    const std::filesystem::path& historyPath() const { return m_historyPath; }
    /// Trains the current plan with local agents (Plan ▸ Run locally): the Run tab follows it live, the History tab
    /// lists it when it ends. False (with the reason shown) when a run is already going or there is no plan.
    bool runLocally(const app::RunRequest& settings, const planner::Cluster* deployTo = nullptr);
    /// Asks whether to start a local run this machine may not take (more agents or threads than cores, predicted
    /// memory above its RAM; the numbers in `question`); default: a Yes/No message box. For tests.
    void setRunConfirmer(std::function<bool(const QString& question)> confirm) { m_confirmRun = std::move(confirm); }
    /// The run started last (null before the first).
    RunSession* runSession() const { return m_session.get(); }
    /// Reads run `id` from the history in the background and shows it in the Run tab.
    void openRun(const QString& id);
    /// Runs the event loop until a run opened with openRun() is shown; false on timeout.
    bool waitForOpenedRun(int timeoutMs = 60'000);
    /// Writes the files with which another runtime trains the current plan (File ▸ Export plan for; `format` is a
    /// planner::PlanExporter's name) into `directory`, in the background; what the runtime cannot express is shown
    /// as an error and nothing is written.
    void exportPlanFor(const QString& format, const QString& directory);
    /// The folder an export goes to, from what a folder dialog returned (its selectedFiles()): exactly one absolute
    /// path without quotes; else empty, and `error` says why. Qt's dialog reads `"/" "tmp"` typed into its name field
    /// as two names, of which the first ("/") took the export (issue 30 item 7).
    static QString exportFolderFrom(const QStringList& selected, QString* error);
    /// Runs the event loop until an export has ended; false on timeout. For tests.
    bool waitForExport(int timeoutMs = 60'000) { return m_exporter.waitForIdle(timeoutMs); }
    /// The files the last export wrote (empty after a refused one).
    QStringList lastExportedFiles() const { return m_exported; }

    ModelView* modelView() const { return m_modelView; }
    MetricsPanel* metricsPanel() const { return m_metrics; }
    PartitionPanel* partitionPanel() const { return m_partition; }
    GanttView* ganttView() const { return m_gantt; }
    ScenariosView* scenariosView() const { return m_scenarios; }
    RunMonitor* runMonitor() const { return m_monitor; }
    HistoryView* historyView() const { return m_history; }
    ClusterEditor* clusterEditor() const { return m_cluster; }
    BusyIndicator* busyIndicator() const { return m_busy; }

signals:
    /// A run started or ended (Plan ▸ Stop the run follows it).
    void runStateChanged();

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void buildMenus();
    /// Default dock widths in proportion to the window (when no saved layout was restored, or it does not fit).
    void fitDocks();
    /// Whether every docked panel and the views have a usable width (a layout restored from a larger screen may
    /// crush them).
    bool docksFit() const;
    void showError(const QString& title, const QString& text);
    void addRecent(const QString& path);
    void rebuildRecentMenu();
    void refreshTitle();
    void refreshSchedule();
    bool saveAs();
    bool maybeSave();
    /// Quitting during a run: asks "Stop the run and quit" or Cancel; true to stop.
    bool confirmStopRun();
    /// Stops the run for quitting and waits (the event loop turning) until it is recorded as stopped.
    void stopRunForQuit();

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
    bool m_stoppingForQuit = false; ///< closeEvent waits for the run to stop
    bool m_docksPlaced = false; ///< a saved dock layout was restored: leave the user's widths alone
    QString m_lastError;
    std::function<bool(const QString&)> m_confirmRun;
    bool m_scheduleStale = true;
    RunMonitor* m_monitor = nullptr;
    HistoryView* m_history = nullptr;
    std::filesystem::path m_historyPath;
    std::unique_ptr<RunSession> m_session;
    JobRunner m_runLoader {QStringLiteral("run loader")};
    JobRunner m_exporter {QStringLiteral("plan export")};
    QStringList m_exported;
};

} // namespace pw::ui
