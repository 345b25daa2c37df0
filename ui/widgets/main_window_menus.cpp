// SPDX-License-Identifier: MIT
// MainWindow's menus and what only they start: the actions of every menu, the recent projects, Save As and
// File ▸ Export plan for (main_window.cpp builds the window and runs the rest).
#include <QAction>
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QUndoStack>

#include "app/history/history.h"
#include "app/run/run_checks.h"
#include "main_window.h"
#include "planner/edit.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/io/json_file.h"
#include "ui/document/project_document.h"
#include "ui/document/run_session.h"
#include "ui/widgets/cluster_editor.h"
#include "ui/widgets/deploy_dialog.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/graph_import_dialog.h"
#include "ui/widgets/history_view.h"
#include "ui/widgets/metrics_panel.h"
#include "ui/widgets/model_view.h"
#include "ui/widgets/partition_panel.h"
#include "ui/widgets/run_monitor.h"
#include "ui/widgets/scenarios_view.h"

namespace pw::ui {

namespace {

constexpr int kMaxRecent = 8;
const QString kRecentKey = QStringLiteral("recentFiles");
const QString kProjectFilter = QStringLiteral("Pipewright projects (*.pwproj)");

} // namespace

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open…"), QKeySequence::Open, this, [this] {
        if (!maybeSave())
            return;
        const QString path = QFileDialog::getOpenFileName(this, tr("Open project"), {}, kProjectFilter);
        if (!path.isEmpty())
            openProject(path);
    });
    m_recent = file->addMenu(tr("Open &Recent"));
    rebuildRecentMenu();
    file->addAction(tr("Open the &demo project"), this, [this] {
        if (maybeSave())
            openDemo();
    });
    file->addAction(tr("&Import profile…"), QKeySequence(tr("Ctrl+I")), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Import a model profile"), {}, tr("Profiles (*.json graph.txt *.txt);;All files (*)"));
        if (!path.isEmpty())
            importProfile(path);
    });
    file->addAction(tr("Import &cluster…"), this, [this] {
        const QString path
            = QFileDialog::getOpenFileName(this, tr("Import a cluster"), {}, tr("Clusters (*.json);;All files (*)"));
        if (!path.isEmpty())
            importCluster(path);
    });
    file->addSeparator();
    file->addAction(tr("&Save"), QKeySequence::Save, this, [this] {
        QString error;
        if (m_document->filePath().isEmpty())
            saveAs();
        else if (!m_document->save({}, &error))
            showError(tr("Not saved"), error);
    });
    file->addAction(tr("Save &As…"), QKeySequence::SaveAs, this, [this] { saveAs(); });
    file->addSeparator();
    file->addAction(tr("Export schedule &image…"), QKeySequence(tr("Ctrl+E")), this, [this] {
        refreshSchedule();
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export schedule"), QStringLiteral("schedule.png"), tr("PNG (*.png);;SVG (*.svg);;PDF (*.pdf)"));
        QString error;
        if (!path.isEmpty() && !m_gantt->exportImage(path, &error))
            showError(tr("Not exported"), error);
    });
    file->addAction(tr("Export Chrome &trace…"), this, [this] {
        refreshSchedule();
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export Chrome trace"), QStringLiteral("trace.json"), tr("Chrome trace (*.json)"));
        QString error;
        if (!path.isEmpty() && !m_gantt->exportChromeTrace(path, &error))
            showError(tr("Not exported"), error);
    });
    // One entry per runtime the planner exports to (planner/export/export.h): the files go into a directory.
    QMenu* exportFor = file->addMenu(tr("Export &plan for"));
    for (const auto* exporter : planner::planExporters()) {
        const QString name = QString::fromUtf8(exporter->name().data(), static_cast<int>(exporter->name().size()));
        QAction* action = exportFor->addAction(name + QStringLiteral("…"), this, [this, name] {
            // A dialog of folders (its New Folder button makes one, as the CLI makes a missing -o folder); what it
            // returns is checked before anything is written.
            QFileDialog dialog(this, tr("Export the plan for %1 into a folder").arg(name));
            dialog.setFileMode(QFileDialog::Directory);
            dialog.setOption(QFileDialog::ShowDirsOnly);
            dialog.setLabelText(QFileDialog::Accept, tr("Export here"));
            if (dialog.exec() != QDialog::Accepted)
                return;
            QString error;
            const QString dir = exportFolderFrom(dialog.selectedFiles(), &error);
            if (dir.isEmpty())
                showError(tr("Not exported"), error);
            else
                exportPlanFor(name, dir);
        });
        action->setStatusTip(QString::fromStdString(std::string(exporter->description())));
    }
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    QUndoStack* undo = m_document->planDocument().undoStack();
    QAction* undoAction = undo->createUndoAction(this, tr("&Undo"));
    undoAction->setShortcuts(QKeySequence::Undo);
    QAction* redoAction = undo->createRedoAction(this, tr("&Redo"));
    redoAction->setShortcuts(QKeySequence::Redo);
    edit->addAction(undoAction);
    edit->addAction(redoAction);
    // The status bar says what Undo and Redo did: a message about the step undone ("Applied the … plan") must not
    // stay beside the plan it no longer describes.
    connect(undoAction, &QAction::triggered, this,
        [this, undo] { statusBar()->showMessage(tr("Undone: %1").arg(undo->redoText())); });
    connect(redoAction, &QAction::triggered, this,
        [this, undo] { statusBar()->showMessage(tr("Redone: %1").arg(undo->undoText())); });

    QMenu* plan = menuBar()->addMenu(tr("&Plan"));
    plan->addAction(tr("&Run partitioner"), QKeySequence(Qt::Key_F5), m_partition, &PartitionPanel::run);
    plan->addAction(
        tr("&Compare all algorithms"), QKeySequence(tr("Shift+F5")), m_partition, &PartitionPanel::compareAll);
    QAction* cancelPartitioner
        = plan->addAction(tr("Ca&ncel partitioner"), QKeySequence(tr("Ctrl+.")), m_partition, &PartitionPanel::cancel);
    cancelPartitioner->setObjectName(QStringLiteral("cancelPartitionerAction"));
    plan->addSeparator();
    // The model view's context menu, by keyboard: a layer (split after it) or a stage (merge, assign) to act on.
    plan->addAction(tr("Split a stage after layer…"), QKeySequence(tr("Ctrl+K")), this, [this] {
        if (!m_document->planDocument().hasPlan())
            return;
        bool ok = false;
        const int layers = m_document->planDocument().plan().model->layerCount();
        const int layer = QInputDialog::getInt(
            this, tr("Split a stage"), tr("New boundary after layer:"), layers / 2, 0, layers - 2, 1, &ok);
        const auto bounds = planner::edit::boundaries(m_document->planDocument().plan());
        if (ok && std::find(bounds.begin(), bounds.end(), layer) != bounds.end())
            statusBar()->showMessage(tr("Layer %1 already ends a stage").arg(layer));
        else if (ok)
            m_modelView->splitStageAt(layer + 0.5);
    });
    plan->addAction(tr("Merge a stage with the next…"), QKeySequence(tr("Ctrl+J")), this, [this] {
        if (!m_document->planDocument().hasPlan() || m_document->planDocument().plan().stageCount() < 2)
            return;
        const auto& p = m_document->planDocument().plan();
        bool ok = false;
        const int stage = QInputDialog::getInt(
            this, tr("Merge stages"), tr("Merge stage (with the next one):"), 0, 0, p.stageCount() - 2, 1, &ok);
        if (ok)
            m_modelView->mergeStageAt(p.stages[stage].first_layer + 0.5);
    });
    plan->addAction(tr("Assign devices to a stage…"), this, [this] {
        if (!m_document->planDocument().hasPlan())
            return;
        const auto& p = m_document->planDocument().plan();
        bool ok = false;
        const int stage
            = QInputDialog::getInt(this, tr("Assign devices"), tr("Stage:"), 0, 0, p.stageCount() - 1, 1, &ok);
        if (ok)
            m_modelView->assignDevicesAt(p.stages[stage].first_layer + 0.5);
    });
    plan->addSeparator();
    plan->addAction(
        tr("Save as &scenario…"), QKeySequence(tr("Ctrl+Shift+N")), m_scenarios, &ScenariosView::saveCurrentAs);
    plan->addSeparator();
    plan->addAction(tr("Run &locally…"), QKeySequence(Qt::Key_F6), this, [this] {
        bool ok = false;
        app::RunRequest settings;
        settings.training.steps = QInputDialog::getInt(this, tr("Run locally"),
            tr("Train the current plan with one agent process per device on this machine.\nSteps:"), 50, 1, 10'000'000,
            10, &ok);
        if (!ok)
            return;
        settings.training.lr = QInputDialog::getDouble(
            this, tr("Run locally"), tr("Learning rate (AdamW):"), 1e-3, 1e-7, 1.0, 6, &ok, Qt::WindowFlags(), 1e-4);
        if (ok)
            runLocally(settings);
    });
    plan->addAction(tr("&Deploy (SSH or Slurm)…"), QKeySequence(Qt::SHIFT | Qt::Key_F6), this, [this] {
        DeployDialog dialog(this);
        if (m_document->planDocument().hasPlan())
            dialog.setPlan(m_document->planDocument().plan()); // pre-flight checks the plan too
        connect(&dialog, &DeployDialog::deployRequested, this, [this, &dialog] {
            app::RunRequest settings;
            settings.training.steps = dialog.steps();
            settings.training.lr = 1e-3;
            if (dialog.usesSlurm()) { // the plan's own cluster, its nodes the job's
                settings.slurm = dialog.slurmOptions();
                runLocally(settings);
                return;
            }
            settings.remote = dialog.remoteOptions();
            const planner::Cluster cluster = dialog.cluster();
            runLocally(settings, &cluster);
        });
        dialog.exec();
    });
    QAction* stopRun = plan->addAction(tr("S&top the run"), this, [this] {
        if (m_session)
            m_session->stop();
    });
    stopRun->setObjectName(QStringLiteral("stopRunAction"));
    // Enabled only when there is something to cancel or stop (issue 30 item 18), checked as the menu opens and
    // whenever a partitioner or a run starts or ends.
    const auto refreshPlanActions = [this, cancelPartitioner, stopRun] {
        cancelPartitioner->setEnabled(m_partition->isRunning());
        stopRun->setEnabled(m_session && m_session->running());
    };
    connect(plan, &QMenu::aboutToShow, this, refreshPlanActions);
    connect(m_partition, &PartitionPanel::started, this, refreshPlanActions);
    connect(m_partition, &PartitionPanel::finished, this, refreshPlanActions);
    connect(this, &MainWindow::runStateChanged, this, refreshPlanActions);
    refreshPlanActions();

    QMenu* view = menuBar()->addMenu(tr("&View"));
    const QStringList tabs = {QStringLiteral("model"), QStringLiteral("gantt"), QStringLiteral("scenarios"),
        QStringLiteral("cluster"), QStringLiteral("run"), QStringLiteral("history")};
    const QStringList titles
        = {tr("&Model"), tr("&Schedule"), tr("S&cenarios"), tr("C&luster"), tr("&Run"), tr("&History")};
    for (int i = 0; i < tabs.size(); ++i)
        view->addAction(titles[i], QKeySequence(QStringLiteral("Ctrl+%1").arg(i + 1)), this,
            [this, name = tabs[i]] { showView(name); });
    view->addSeparator();
    for (QDockWidget* dock : findChildren<QDockWidget*>())
        view->addAction(dock->toggleViewAction());
    view->addSeparator();
    view->addAction(tr("Show the whole schedule"), QKeySequence(tr("Ctrl+0")), m_gantt, &GanttView::showAll);
}

QString MainWindow::exportFolderFrom(const QStringList& selected, QString* error)
{
    const auto refuse = [&](const QString& why) {
        if (error)
            *error = why;
        return QString();
    };
    if (selected.size() != 1)
        return refuse(tr("Choose one folder to export into, not %1 (%2).")
                          .arg(selected.size())
                          .arg(selected.join(QStringLiteral(", "))));
    const QString& path = selected.front();
    if (path.isEmpty() || QDir::isRelativePath(path) || path.contains(QLatin1Char('"')))
        return refuse(tr("'%1' is not a folder's full path: choose the folder in the dialog.").arg(path));
    return QDir::cleanPath(path);
}

void MainWindow::exportPlanFor(const QString& format, const QString& directory)
{
    const planner::PlanExporter* exporter = planner::findPlanExporter(format.toStdString());
    if (!exporter || !m_document->planDocument().hasPlan()) {
        showError(
            tr("Not exported"), exporter ? tr("There is no plan to export.") : tr("No export for %1.").arg(format));
        return;
    }
    // What the export did, carried back from the worker.
    struct Outcome
    {
        std::vector<std::string> files, notes;
        std::string error;
    };
    m_exported.clear();
    m_exporter.submit(
        [exporter, plan = m_document->planDocument().plan(), dir = directory.toStdString()](std::stop_token) {
            Outcome out;
            try {
                const planner::PlanExport exported = exporter->write(plan);
                out.files = planner::writePlanExport(exported, dir);
                out.notes = exported.notes;
            } catch (const std::exception& e) {
                out.error = e.what();
            }
            return out;
        },
        [this, format, directory](Outcome out) {
            if (!out.error.empty()) {
                showError(tr("Not exported for %1").arg(format), QString::fromStdString(out.error));
                return;
            }
            QStringList names;
            for (const auto& f : out.files) {
                m_exported << QString::fromStdString(f);
                names << QString::fromStdString(std::filesystem::path(f).filename().string());
            }
            // Where the files went, named: a wrong folder shows at once.
            statusBar()->showMessage(
                tr("Exported the plan for %1 into %2: %3 (%4)")
                    .arg(format, QDir::toNativeSeparators(directory), names.join(QStringLiteral(", ")),
                        QString::fromStdString(out.notes.empty() ? "" : out.notes.front())));
        });
}

void MainWindow::addRecent(const QString& path)
{
    QSettings settings;
    QStringList recent = settings.value(kRecentKey).toStringList();
    const QString absolute = QFileInfo(path).absoluteFilePath();
    recent.removeAll(absolute);
    recent.prepend(absolute);
    while (recent.size() > kMaxRecent)
        recent.removeLast();
    settings.setValue(kRecentKey, recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    m_recent->clear();
    const QStringList recent = QSettings().value(kRecentKey).toStringList();
    for (const QString& path : recent)
        m_recent->addAction(path, this, [this, path] {
            if (maybeSave())
                openProject(path);
        });
    m_recent->setEnabled(!recent.isEmpty());
}

bool MainWindow::saveAs()
{
    QString path = QFileDialog::getSaveFileName(
        this, tr("Save project"), QString::fromStdString(m_document->project().name), kProjectFilter);
    if (path.isEmpty())
        return false;
    if (!path.endsWith(QLatin1String(app::kProjectExtension)))
        path += QLatin1String(app::kProjectExtension);
    QString error;
    if (!m_document->save(path, &error)) {
        showError(tr("Not saved"), error);
        return false;
    }
    addRecent(path);
    QSettings().setValue(QStringLiteral("lastProject"), path);
    return true;
}

} // namespace pw::ui
