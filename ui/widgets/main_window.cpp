// SPDX-License-Identifier: MIT
#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QInputDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QUndoStack>

#include <qcustomplot.h>

#include "app/history/history.h"
#include "app/project/demo_project.h"
#include "app/run/run_checks.h"
#include "app/run/snapshot.h"
#include "planner/device_presets.h"
#include "planner/edit.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/io/graph_txt.h"
#include "planner/io/hf_config.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/units.h"
#include "ui/document/project_document.h"
#include "ui/document/run_session.h"
#include "ui/widgets/busy_indicator.h"
#include "ui/widgets/cluster_editor.h"
#include "ui/widgets/deploy_dialog.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/graph_import_dialog.h"
#include "ui/widgets/hf_import_dialog.h"
#include "ui/widgets/history_view.h"
#include "ui/widgets/metrics_panel.h"
#include "ui/widgets/model_view.h"
#include "ui/widgets/partition_panel.h"
#include "ui/widgets/run_monitor.h"
#include "ui/widgets/scenarios_view.h"

namespace pw::ui {

QStringList MainWindow::viewNames()
{
    return {QStringLiteral("model"), QStringLiteral("cluster"), QStringLiteral("partition"), QStringLiteral("gantt"),
        QStringLiteral("memory"), QStringLiteral("scenarios"), QStringLiteral("run"), QStringLiteral("history")};
}

namespace {

/// The device types an import offers to profile on: the project cluster's, then the presets not among them.
QStringList deviceChoices(const planner::Cluster& cluster)
{
    QStringList names;
    for (const auto& t : cluster.device_types)
        names << QString::fromStdString(t.name);
    for (const auto& t : planner::devicePresets())
        if (!names.contains(QString::fromStdString(t.name)))
            names << QString::fromStdString(t.name);
    return names;
}

constexpr int kMinDockWidth = 240; ///< the partition form and the metrics' numbers need about this
constexpr int kMinViewWidth = 300; ///< the central views (tabs)

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_document(new ProjectDocument(this))
{
    setAcceptDrops(true);
    m_tabs = new QTabWidget(this);
    m_modelView = new ModelView(m_document->planDocument(), m_tabs);
    m_gantt = new GanttView(m_tabs);
    m_scenarios = new ScenariosView(*m_document, m_tabs);
    m_cluster = new ClusterEditor(m_tabs);
    m_tabs->addTab(m_modelView, tr("Model"));
    m_tabs->addTab(m_gantt, tr("Schedule"));
    m_tabs->addTab(m_scenarios, tr("Scenarios"));
    m_tabs->addTab(m_cluster, tr("Cluster"));
    m_monitor = new RunMonitor(m_tabs);
    m_history = new HistoryView(m_tabs);
    m_tabs->addTab(m_monitor, tr("Run"));
    m_tabs->addTab(m_history, tr("History"));
    // An explicit minimum: the layout takes it instead of the widest tab's minimum size hint, so a view that wants
    // more (History's comparison) scrolls or clips inside the tab rather than growing the window past the screen
    // or squeezing the docks (issue 30 item 8: the window grew from 921 to 950 px, the partition panel fell to 70).
    m_tabs->setMinimumWidth(kMinViewWidth);
    setCentralWidget(m_tabs);
    connect(m_history, &HistoryView::openRequested, this, &MainWindow::openRun);
    connect(m_tabs, &QTabWidget::currentChanged, this, [this] {
        if (m_tabs->currentWidget() == m_history)
            m_history->refresh();
    });
    m_historyPath = app::defaultHistoryPath();
    m_history->setHistoryPath(m_historyPath);
    connect(&m_runLoader, &JobRunner::failed, this,
        [this](const QString& error) { showError(tr("Cannot open the run"), error); });

    m_metrics = new MetricsPanel(m_document->planDocument(), this);
    auto* metricsDock = new QDockWidget(tr("Metrics"), this);
    metricsDock->setObjectName(QStringLiteral("metricsDock"));
    metricsDock->setWidget(m_metrics);
    metricsDock->setMinimumWidth(kMinDockWidth);
    addDockWidget(Qt::RightDockWidgetArea, metricsDock);
    m_partition = new PartitionPanel(*m_document, this);
    auto* partitionDock = new QDockWidget(tr("Partition"), this);
    partitionDock->setObjectName(QStringLiteral("partitionDock"));
    // In a scroll area: an algorithm with many options (megatron, pipedream-2bw) must not raise the window's
    // minimum height; the panel scrolls instead.
    auto* partitionScroll = new QScrollArea(partitionDock);
    partitionScroll->setWidget(m_partition);
    partitionScroll->setWidgetResizable(true);
    partitionScroll->setFrameShape(QFrame::NoFrame);
    partitionDock->setWidget(partitionScroll);
    partitionDock->setMinimumWidth(kMinDockWidth); // its form, its Cancel and "Apply selected plan" stay usable
    addDockWidget(Qt::LeftDockWidgetArea, partitionDock);
    m_partitionDock = partitionDock;
    m_metricsDock = metricsDock;

    m_busy = new BusyIndicator(this);
    statusBar()->addPermanentWidget(m_busy);
    connect(&m_document->planDocument(), &PlanDocument::simulatingChanged, m_busy,
        [this](bool busy) { m_busy->setBusy(tr("Simulating the plan"), busy); });
    connect(m_document, &ProjectDocument::simulatingScenariosChanged, m_busy,
        [this](bool busy) { m_busy->setBusy(tr("Simulating scenarios"), busy); });
    const auto toStatusBar = [this](const QString& text) { statusBar()->showMessage(text); };
    connect(m_modelView, &ModelView::message, this, toStatusBar);
    connect(m_partition, &PartitionPanel::message, this, toStatusBar);
    connect(m_scenarios, &ScenariosView::message, this, toStatusBar);
    // A new simulation makes the chart shown the previous plan's: greyed at once, until its prediction lands.
    connect(&m_document->planDocument(), &PlanDocument::simulatingChanged, this, [this](bool busy) {
        if (busy)
            m_gantt->setStale(true);
    });
    connect(&m_document->planDocument(), &PlanDocument::predictionChanged, this, [this] {
        m_scheduleStale = true;
        if (m_tabs->currentWidget() == m_gantt)
            refreshSchedule();
    });
    connect(m_tabs, &QTabWidget::currentChanged, this, [this] {
        if (m_tabs->currentWidget() == m_gantt && m_scheduleStale)
            refreshSchedule();
    });
    // Unapplied edits survive changes that leave the cluster alone (an imported profile); opening another project
    // asked about them first (maybeSave). Apply, and its undo and redo, show the project's cluster as applied.
    const auto showCluster = [this] {
        const bool sameCluster
            = planner::toJson(m_cluster->baseCluster()) == planner::toJson(m_document->project().cluster);
        if (!(sameCluster && m_cluster->isModified()))
            m_cluster->setCluster(m_document->project().cluster);
    };
    connect(m_document, &ProjectDocument::projectChanged, this, [this, showCluster] {
        showCluster();
        m_cluster->setModel(m_document->project().model);
        refreshTitle();
    });
    connect(m_document, &ProjectDocument::clusterChanged, this, showCluster);
    connect(m_document, &ProjectDocument::modifiedChanged, this, &MainWindow::refreshTitle);
    connect(
        m_document, &ProjectDocument::notice, this, [this](const QString& text) { showError(tr("No plan"), text); });
    connect(m_document, &ProjectDocument::filePathChanged, this, &MainWindow::refreshTitle);
    connect(m_cluster, &ClusterEditor::applyRequested, this, [this](const planner::Cluster& cluster) {
        QString error;
        if (!m_document->setCluster(cluster, &error))
            showError(tr("Cluster not applied"), error);
        else
            statusBar()->showMessage(tr("Cluster applied; plans that no longer fit were kept as scenarios"));
    });
    buildMenus();
    QSettings settings;
    if (!restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray())) {
        // First start: most of the screen, not the widgets' size hint (about 790 x 550, where the docks and the
        // views cannot all have the width they need: the partition panel was squeezed to 70 px).
        if (const QScreen* screen = QGuiApplication::primaryScreen()) {
            const QRect available = screen->availableGeometry();
            resize(available.width() * 9 / 10, available.height() * 9 / 10);
        }
    }
    m_docksPlaced = restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    refreshTitle();
}

MainWindow::~MainWindow()
{
    // The document is a child and dies in ~QObject, after this destructor: its undo stack's last signals must
    // not reach a window that is no longer a MainWindow (UBSan saw refreshTitle() called on the bare QWidget).
    disconnect(m_document, nullptr, this, nullptr);
    disconnect(&m_document->planDocument(), nullptr, this, nullptr);
}

bool MainWindow::openProject(const QString& path)
{
    QString error;
    if (!m_document->open(path, &error)) {
        showError(tr("Cannot open the project"), error);
        return false;
    }
    addRecent(path);
    QSettings().setValue(QStringLiteral("lastProject"), path);
    statusBar()->showMessage(tr("Opened %1").arg(path));
    return true;
}

bool MainWindow::openDemo()
{
    try {
        m_document->setProject(app::demoProject());
        QSettings().remove(QStringLiteral("lastProject"));
        statusBar()->showMessage(tr("The demo project: drag a boundary in the model view, or run a partitioner (F5)"));
        return true;
    } catch (const planner::InputError& e) {
        showError(tr("Cannot open the demo"), QString::fromStdString(planner::formatInputError(e)));
        return false;
    }
}

bool MainWindow::importProfile(const QString& path, std::optional<GraphImport> graph, std::optional<HfImport> hf)
{
    QString error;
    if (!hf && !planner::isGraphTxtFile(path.toStdString())) {
        // A Hugging Face config.json describes the model, not the run: ask its sequence, microbatch and device.
        std::optional<planner::TransformerConfig> config;
        try {
            const auto j = planner::readJsonFile(path.toStdString());
            if (planner::isHfConfig(j))
                config = planner::loadHfConfig(path.toStdString(), planner::RunShape {0, 1, 2});
        } catch (const planner::InputError& e) {
            showError(tr("Cannot import the profile"), QString::fromStdString(planner::formatInputError(e)));
            return false;
        }
        if (config) {
            const QStringList devices = deviceChoices(*m_document->project().cluster);
            const QString what
                = tr("a %1 transformer of %2 layers and %3 parameters")
                      .arg(QString::fromStdString(config->family))
                      .arg(config->layers)
                      .arg(QString::fromStdString(planner::formatCount(planner::transformerParameterCount(*config))));
            HfImportDialog dialog(QFileInfo(path).fileName(), what, config->sequence, devices, this);
            if (dialog.exec() != QDialog::Accepted)
                return false;
            hf = dialog.settings();
        }
    }
    if (hf) {
        if (!m_document->importHfConfig(path, *hf, &error)) {
            showError(tr("Cannot import the profile"), error);
            return false;
        }
        if (m_document->planDocument().hasPlan())
            statusBar()->showMessage(
                tr("Imported %1 (%2) and planned it uniformly; the old plan is a scenario now. "
                   "Run a partitioner (F5) for a better plan")
                    .arg(QFileInfo(path).fileName(), QString::fromStdString(m_document->project().model->name)));
        return true;
    }
    if (!graph && planner::isGraphTxtFile(path.toStdString())) {
        // graph.txt stores neither the batch size nor the device: ask, once the file has read cleanly.
        int layers = 0;
        try {
            layers = planner::loadGraphTxt(path.toStdString()).layerCount();
        } catch (const planner::InputError& e) {
            showError(tr("Cannot import the profile"), QString::fromStdString(planner::formatInputError(e)));
            return false;
        }
        const QStringList devices = deviceChoices(*m_document->project().cluster);
        GraphImportDialog dialog(QFileInfo(path).fileName(), layers, devices, this);
        if (dialog.exec() != QDialog::Accepted)
            return false;
        graph = dialog.settings();
    }
    if (!m_document->importProfile(path, &error, graph.value_or(GraphImport {}))) {
        showError(tr("Cannot import the profile"), error);
        return false;
    }
    if (m_document->planDocument().hasPlan()) // else the document's notice said why there is no plan
        statusBar()->showMessage(tr("Imported %1 and planned it uniformly; the old plan is a scenario now. Run a "
                                    "partitioner (F5) for a better plan")
                                     .arg(QFileInfo(path).fileName()));
    return true;
}

bool MainWindow::importCluster(const QString& path)
{
    QString error;
    if (!m_document->importCluster(path, &error)) {
        showError(tr("Cannot import the cluster"), error);
        return false;
    }
    statusBar()->showMessage(tr("Imported the cluster %1; plans that no longer fit were kept as scenarios")
                                 .arg(QString::fromStdString(m_document->project().cluster->name)));
    return true;
}

void MainWindow::showError(const QString& title, const QString& text)
{
    m_lastError = text;
    statusBar()->showMessage(text);
    auto* box = new QMessageBox(QMessageBox::Warning, title, text, QMessageBox::Ok, this);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setObjectName(QStringLiteral("errorBox"));
    box->open(); // window-modal, not blocking: the caller goes on and nothing waits on the box
}

bool MainWindow::showView(const QString& name)
{
    if (name == QLatin1String("model"))
        m_tabs->setCurrentWidget(m_modelView);
    else if (name == QLatin1String("gantt") || name == QLatin1String("memory"))
        m_tabs->setCurrentWidget(m_gantt);
    else if (name == QLatin1String("scenarios"))
        m_tabs->setCurrentWidget(m_scenarios);
    else if (name == QLatin1String("cluster"))
        m_tabs->setCurrentWidget(m_cluster);
    else if (name == QLatin1String("run"))
        m_tabs->setCurrentWidget(m_monitor);
    else if (name == QLatin1String("history"))
        m_tabs->setCurrentWidget(m_history);
    else if (name == QLatin1String("partition")) { // the panel, wide enough for its results table
        auto* dock = m_partitionDock;
        dock->show();
        resizeDocks({dock}, {std::max(dock->width(), width() / 2 - 40)}, Qt::Horizontal);
    } else
        return false;
    if (m_tabs->currentWidget() == m_gantt) {
        refreshSchedule();
        m_gantt->setMemoryShare(name == QLatin1String("memory") ? 0.55 : 0.25);
    }
    return true;
}

QWidget* MainWindow::screenshotWidget(const QString&)
{
    // Every view is shot as the whole window, at the size asked ("memory" is the schedule tab with the memory
    // plot given most of its height).
    return this;
}

void MainWindow::showEvent(QShowEvent* event)
{
    QMainWindow::showEvent(event);
    if (!m_docksPlaced || !docksFit())
        fitDocks();
}

void MainWindow::resizeEvent(QResizeEvent* event)
{
    QMainWindow::resizeEvent(event);
    // Until shown once at its size, the docks follow the window; a restored layout stays as the user left it as
    // long as it fits (one saved on a larger screen may not: a 1100 px metrics dock at 1024 px left 68 px for the
    // partition panel).
    if (isVisible() && (!m_docksPlaced || !docksFit()))
        fitDocks();
}

bool MainWindow::docksFit() const
{
    for (const QDockWidget* dock : {m_partitionDock, m_metricsDock}) {
        const auto area = dockWidgetArea(const_cast<QDockWidget*>(dock));
        if (dock->isVisible() && !dock->isFloating()
            && (area == Qt::LeftDockWidgetArea || area == Qt::RightDockWidgetArea) && dock->width() < kMinDockWidth)
            return false;
    }
    return centralWidget()->width() >= kMinViewWidth;
}

void MainWindow::fitDocks()
{
    // A quarter of the window for the partition panel, a little more for the metrics, the rest for the views; never
    // below what each needs (QMainWindow clamps to the docks' minimum sizes).
    const int w = width();
    resizeDocks(
        {m_partitionDock, m_metricsDock}, {std::max(260, w * 24 / 100), std::max(300, w * 27 / 100)}, Qt::Horizontal);
}

void MainWindow::setHistoryPath(const std::filesystem::path& path)
{
    m_historyPath = path;
    m_history->setHistoryPath(path);
}

bool MainWindow::runLocally(const app::RunRequest& settings, const planner::Cluster* deployTo)
{
    if (m_session && m_session->running()) {
        showError(tr("A run is going"), tr("Stop the current run (Plan ▸ Stop the run) before starting another."));
        return false;
    }
    if (!m_document->planDocument().hasPlan()) {
        showError(tr("No plan"), tr("There is no plan to run."));
        return false;
    }
    app::RunRequest request = settings;
    request.plan = m_document->planDocument().plan();
    if (deployTo) { // over SSH: the cluster file says how to reach the nodes; the plan's devices must be its devices
        if (deployTo->deviceCount() != request.plan.cluster->deviceCount()) {
            showError(tr("Deploy over SSH"),
                tr("The cluster file has %1 devices, the plan %2: deploy a plan made for this cluster.")
                    .arg(deployTo->deviceCount())
                    .arg(request.plan.cluster->deviceCount()));
            return false;
        }
        request.plan.cluster = *deployTo;
    }
    request.plan_label = (m_document->filePath().isEmpty() ? QStringLiteral("unsaved project")
                                                           : QFileInfo(m_document->filePath()).fileName())
                             .toStdString();
    // The settings and the machine are checked as the CLI checks them (app/run/run_checks.h); the controller
    // checks the plan and the files again before the run is recorded.
    try {
        app::validateRunSettings(request);
    } catch (const planner::InputError& e) {
        showError(tr("Run locally"), QString::fromStdString(e.what()));
        return false;
    }
    if (request.local() && !request.force) {
        const auto& doc = m_document->planDocument();
        const auto machine = app::MachineResources::thisMachine();
        const auto excess = app::localRunExcess(
            app::localRunLoad(request, doc.isPredictionCurrent() ? doc.prediction().get() : nullptr, machine), machine);
        if (!excess.empty()) {
            const QString question
                = tr("This machine may not take this run: %1.\n\nStart it anyway?").arg(QString::fromStdString(excess));
            const bool yes = m_confirmRun
                ? m_confirmRun(question)
                : QMessageBox::question(this, tr("Run locally"), question) == QMessageBox::Yes;
            if (!yes) {
                statusBar()->showMessage(tr("Run not started: %1").arg(QString::fromStdString(excess)));
                return false;
            }
            request.force = true;
        }
    }
    if (request.agent_executable.empty())
        request.agent_executable = app::defaultAgentExecutable(QCoreApplication::applicationFilePath().toStdString());
    m_session = std::make_unique<RunSession>(std::move(request), m_historyPath);
    m_monitor->attach(m_session.get());
    connect(m_session.get(), &RunSession::finished, this, [this] {
        emit runStateChanged();
        m_busy->setBusy(tr("Training"), false);
        m_history->refresh();
        m_history->select(m_session->runId().toStdString());
        const auto& o = m_session->outcome();
        if (o.status == app::RunStatus::Failed)
            showError(tr("The run failed"), QString::fromStdString(o.message));
        else
            statusBar()->showMessage(
                tr("Run %1 %2").arg(m_session->runId(), QString::fromUtf8(app::toString(o.status).data())));
    });
    m_busy->setBusy(tr("Training"), true);
    m_session->start();
    emit runStateChanged();
    showView(QStringLiteral("run"));
    return true;
}

void MainWindow::openRun(const QString& id)
{
    const std::filesystem::path path = m_historyPath;
    m_runLoader.submit(
        [path, id = id.toStdString()](std::stop_token) -> std::shared_ptr<const app::RunSnapshot> {
            auto store = app::HistoryStore::open(path, app::HistoryStore::Access::ReadOnly);
            return std::make_shared<const app::RunSnapshot>(app::loadRunSnapshot(store, id));
        },
        [this, id](std::shared_ptr<const app::RunSnapshot> snapshot) {
            m_monitor->showSnapshot(std::move(snapshot));
            showView(QStringLiteral("run"));
            // An error about what was shown before (another run, a failed open) no longer applies.
            m_lastError.clear();
            statusBar()->showMessage(tr("Opened run %1").arg(id));
        });
}

bool MainWindow::waitForOpenedRun(int timeoutMs)
{
    const bool idle = m_runLoader.waitForIdle(timeoutMs);
    QApplication::processEvents();
    return idle;
}

bool MainWindow::waitUntilIdle(int timeoutMs)
{
    bool idle = m_document->planDocument().waitForPrediction(timeoutMs) && m_document->waitForScenarios(timeoutMs);
    QApplication::processEvents(); // the views' queued refreshes, which may prepare schedules in the background
    idle = m_gantt->waitForPrepared(timeoutMs) && m_scenarios->gantt()->waitForPrepared(timeoutMs) && idle;
    QApplication::processEvents();
    return idle;
}

void MainWindow::replotAll()
{
    QApplication::processEvents();
    for (QCustomPlot* plot : findChildren<QCustomPlot*>())
        if (plot->isVisible() && plot->width() > 0 && plot->height() > 0)
            plot->replot(QCustomPlot::rpImmediateRefresh);
}

void MainWindow::refreshSchedule()
{
    if (!m_scheduleStale)
        return;
    m_scheduleStale = false;
    const auto& doc = m_document->planDocument();
    if (!doc.prediction()) {
        m_gantt->setEmptyMessage(!doc.hasPlan() ? tr("No plan yet: run a partitioner (F5) or open a project")
                : !doc.isPredictionCurrent()    ? tr("Simulating the plan…")
                                                : tr("The plan cannot be simulated: %1").arg(doc.predictionError()));
        return;
    }
    std::vector<double> capacity;
    for (const auto& d : doc.prediction()->devices)
        capacity.push_back(d.memory_capacity_bytes);
    // The newest finished prediction while the current plan is simulated: greyed, as the metrics beside it.
    m_gantt->setStale(!doc.isPredictionCurrent());
    // Indexed off the GUI thread (a 4 M-action plan takes a good part of a second); the timeline shared, not copied.
    m_gantt->setBlocksInBackground({GanttBlock {
        {}, {doc.prediction(), &doc.prediction()->timeline}, std::move(capacity), doc.prediction()->batch_ends_s}});
}

void MainWindow::refreshTitle()
{
    const QString file
        = m_document->filePath().isEmpty() ? tr("unsaved") : QFileInfo(m_document->filePath()).fileName();
    // The model and cluster the project holds now (an imported profile renames it), then the file.
    const auto& project = m_document->project();
    setWindowTitle(
        tr("%1 on %2 (%3)[*] — Pipewright")
            .arg(QString::fromStdString(project.model->name), QString::fromStdString(project.cluster->name), file));
    setWindowModified(m_document->isModified());
}

bool MainWindow::maybeSave()
{
    if (m_cluster->isModified()) {
        const auto answer = QMessageBox::question(this, tr("Unapplied cluster edits"),
            tr("The cluster editor has edits that were not applied to the project. Discard them?"),
            QMessageBox::Discard | QMessageBox::Cancel);
        if (answer == QMessageBox::Cancel)
            return false;
    }
    if (!m_document->isModified())
        return true;
    const auto answer
        = QMessageBox::question(this, tr("Unsaved changes"), tr("The project has unsaved changes. Save them first?"),
            QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
    if (answer == QMessageBox::Cancel)
        return false;
    if (answer == QMessageBox::Save) {
        QString error;
        if (m_document->filePath().isEmpty())
            return saveAs();
        if (!m_document->save({}, &error)) {
            showError(tr("Not saved"), error);
            return false;
        }
    }
    return true;
}

bool MainWindow::confirmStopRun()
{
    QMessageBox box(QMessageBox::Question, tr("A run is going"),
        tr("Run %1 is still training. Quitting stops it: its agents are stopped and the run is recorded as "
           "stopped, with every step done so far.")
            .arg(m_session->runId().isEmpty() ? tr("(starting)") : m_session->runId()),
        QMessageBox::NoButton, this);
    box.setObjectName(QStringLiteral("quitDuringRunBox"));
    QPushButton* stop = box.addButton(tr("Stop the run and quit"), QMessageBox::DestructiveRole);
    box.addButton(QMessageBox::Cancel);
    box.setDefaultButton(QMessageBox::Cancel);
    box.exec();
    return box.clickedButton() == stop;
}

void MainWindow::stopRunForQuit()
{
    // The controller stops the agents and records the run as stopped on its own thread; the window stays live
    // (events are processed) while it does. One that takes longer than this is waited for by ~RunSession, which
    // joins the controller's thread before the app exits: either way the run ends stopped, never left running.
    constexpr int kStopWaitMs = 30'000;
    m_stoppingForQuit = true;
    statusBar()->showMessage(tr("Stopping the run before quitting…"));
    m_busy->setBusy(tr("Stopping the run"), true);
    m_session->stop();
    m_session->waitForFinished(kStopWaitMs);
    m_stoppingForQuit = false;
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (m_stoppingForQuit) { // closed again while the run stops: the first close goes on
        event->ignore();
        return;
    }
    const bool runGoing = m_session && m_session->running();
    if ((runGoing && !confirmStopRun()) || !maybeSave()) {
        event->ignore();
        return;
    }
    if (runGoing)
        stopRunForQuit();
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls() && event->mimeData()->urls().front().isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const QString path = event->mimeData()->urls().front().toLocalFile();
    if (path.endsWith(QLatin1String(app::kProjectExtension))) {
        if (maybeSave())
            openProject(path);
    } else {
        importProfile(path);
    }
    event->acceptProposedAction();
}

} // namespace pw::ui
