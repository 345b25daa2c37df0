// SPDX-License-Identifier: MIT
// pipewright: the desktop application. Opens the last project (the bundled demo on first start), or renders one
// view to a PNG without a window: pipewright [--project P] --view NAME --screenshot FILE.png
#include <QApplication>
#include <QCommandLineParser>
#include <QEventLoop>
#include <QPixmap>
#include <QSettings>
#include <cstdio>

#include "ui/document/run_session.h"
#include "ui/models/run_list_model.h"
#include "ui/widgets/history_view.h"
#include "ui/widgets/main_window.h"
#include "ui/widgets/partition_panel.h"
#include "ui/widgets/run_monitor.h"

namespace {

int fail(const QString& text, int code = 1)
{
    std::fprintf(stderr, "pipewright: error: %s\n", qPrintable(text));
    return code;
}

QtMessageHandler g_previousHandler = nullptr;

/// The offscreen platform (screenshots) warns that it cannot pass size hints to a window system it does not
/// have; that line is noise for a person reading the output.
void quietOffscreen(QtMsgType type, const QMessageLogContext& context, const QString& message)
{
    if (message.contains(QLatin1String("does not support propagateSizeHints")))
        return;
    if (g_previousHandler)
        g_previousHandler(type, context, message);
    else
        std::fprintf(stderr, "%s\n", qPrintable(qFormatLogMessage(type, context, message)));
}

bool hasDisplay()
{
    return !qEnvironmentVariableIsEmpty("DISPLAY") || !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")
        || !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
}

} // namespace

int main(int argc, char** argv)
{
    bool screenshot = false;
    bool informational = false; // --version, --help: printed, no window
    for (int i = 1; i < argc; ++i) {
        const QByteArray arg(argv[i]);
        screenshot = screenshot || arg.startsWith("--screenshot");
        informational = informational || arg == "--version" || arg == "-v" || arg == "--help" || arg == "-h"
            || arg == "-?" || arg == "--help-all";
    }
    if ((screenshot || informational) && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen"); // screenshots, the version and the help need no display
    if (screenshot)
        g_previousHandler = qInstallMessageHandler(quietOffscreen);
    if (!hasDisplay())
        return fail(QStringLiteral("no display found. Run it under a desktop session, or `xvfb-run pipewright`; "
                                   "`pipewright --view model --screenshot model.png` renders a view without one, and "
                                   "`pipewright-cli demo` prints the demo's plans."));
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Pipewright"));
    QApplication::setApplicationName(QStringLiteral("Pipewright"));
    QApplication::setApplicationVersion(QStringLiteral(PW_VERSION));
    // The installed desktop entry (packaging/linux/): Wayland compositors match windows to it by this name.
    QGuiApplication::setDesktopFileName(QStringLiteral("io.github.pipewright.Pipewright"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Plan pipeline-parallel training: drag stage boundaries, run "
                                                    "partitioners, read the schedule."));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption project({QStringLiteral("p"), QStringLiteral("project")},
        QStringLiteral("Project file to open (default: the last one, or the bundled demo)."), QStringLiteral("FILE"));
    const QCommandLineOption demo(QStringLiteral("demo"), QStringLiteral("Open the bundled demo project."));
    const QCommandLineOption view(QStringLiteral("view"),
        QStringLiteral("View to show: %1.").arg(pw::ui::MainWindow::viewNames().join(QStringLiteral(", "))),
        QStringLiteral("NAME"));
    const QCommandLineOption shot(QStringLiteral("screenshot"),
        QStringLiteral("Render the view to a PNG file without showing a window, then exit."), QStringLiteral("FILE"));
    const QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Window size for screenshots (1920x1080)."),
        QStringLiteral("WxH"), QStringLiteral("1920x1080"));
    const QCommandLineOption history(QStringLiteral("history"),
        QStringLiteral("The run history file (default: the user's data directory)."), QStringLiteral("FILE"));
    const QCommandLineOption runLocal(QStringLiteral("run-local"),
        QStringLiteral("Train the plan with local agents for STEPS steps first (screenshots of the run view)."),
        QStringLiteral("STEPS"));
    const QCommandLineOption openRun(QStringLiteral("open-run"),
        QStringLiteral("Show run ID of the history in the run view ('latest': the newest run)."), QStringLiteral("ID"));
    const QCommandLineOption runTab(QStringLiteral("run-tab"),
        QStringLiteral("The run view's tab to show, by its title (e.g. \"Why slow\")."), QStringLiteral("TITLE"));
    parser.addOptions({project, demo, view, shot, size, history, runLocal, openRun, runTab});
    parser.addPositionalArgument(
        QStringLiteral("project"), QStringLiteral("Project file to open."), QStringLiteral("[project]"));
    parser.process(app);

    const QString viewName = parser.value(view);
    if (!viewName.isEmpty() && !pw::ui::MainWindow::viewNames().contains(viewName))
        return fail(QStringLiteral("unknown view '%1': use one of %2")
                        .arg(viewName, pw::ui::MainWindow::viewNames().join(QStringLiteral(", "))),
            2);
    QString projectPath = parser.value(project);
    if (projectPath.isEmpty() && !parser.positionalArguments().isEmpty())
        projectPath = parser.positionalArguments().front();

    pw::ui::MainWindow window;
    bool opened = false;
    if (!projectPath.isEmpty()) {
        opened = window.openProject(projectPath);
        if (!opened && screenshot)
            return fail(window.lastError());
    } else if (!screenshot && !parser.isSet(demo)) {
        const QString last = QSettings().value(QStringLiteral("lastProject")).toString();
        opened = !last.isEmpty() && window.openProject(last);
    }
    if (!opened && !window.openDemo() && screenshot)
        return fail(window.lastError());
    if (parser.isSet(history))
        window.setHistoryPath(parser.value(history).toStdString());

    if (!screenshot) {
        if (!viewName.isEmpty())
            window.showView(viewName);
        window.show();
        return QApplication::exec();
    }
    const QStringList wh = parser.value(size).split(QLatin1Char('x'));
    if (wh.size() != 2 || wh[0].toInt() < 200 || wh[1].toInt() < 200)
        return fail(QStringLiteral("--size wants WIDTHxHEIGHT, e.g. 1920x1080"), 2);
    window.resize(wh[0].toInt(), wh[1].toInt());
    window.show();
    window.waitUntilIdle(); // the predictions a screenshot shows are simulated in the background
    const QString name = viewName.isEmpty() ? QStringLiteral("model") : viewName;
    window.showView(name);
    if (parser.isSet(runLocal)) { // a run, live in the run view until it ends
        pw::app::RunRequest settings;
        settings.training.steps = parser.value(runLocal).toInt();
        settings.training.lr = 1e-3;
        if (settings.training.steps <= 0)
            return fail(QStringLiteral("--run-local wants a positive number of steps"), 2);
        if (!window.runLocally(settings) || !window.runSession()->waitForFinished(600'000))
            return fail(window.lastError().isEmpty() ? QStringLiteral("the run did not finish") : window.lastError());
        if (window.runSession()->outcome().status != pw::app::RunStatus::Succeeded)
            return fail(QStringLiteral("the run ended %1: %2")
                            .arg(QString::fromUtf8(pw::app::toString(window.runSession()->outcome().status).data()),
                                QString::fromStdString(window.runSession()->outcome().message)));
    }
    if (parser.isSet(openRun)) {
        QString id = parser.value(openRun);
        if (id == QLatin1String("latest")) {
            window.historyView()->refresh();
            if (window.historyView()->model()->rowCount() == 0)
                return fail(QStringLiteral("the history holds no run"));
            id = QString::fromStdString(window.historyView()->model()->run(0).id);
        }
        window.openRun(id);
        if (!window.waitForOpenedRun() || !window.lastError().isEmpty())
            return fail(window.lastError());
    }
    if (parser.isSet(runTab) && !window.runMonitor()->showTab(parser.value(runTab)))
        return fail(QStringLiteral("the run view has no tab '%1'").arg(parser.value(runTab)), 2);
    if (name == QLatin1String("partition")) { // show what the panel is for: every algorithm's plan
        QEventLoop loop;
        QObject::connect(window.partitionPanel(), &pw::ui::PartitionPanel::finished, &loop, &QEventLoop::quit);
        window.partitionPanel()->compareAll();
        loop.exec();
    }
    window.waitUntilIdle();
    window.replotAll();
    const QPixmap pixmap = window.screenshotWidget(name)->grab();
    if (!pixmap.save(parser.value(shot), "PNG"))
        return fail(QStringLiteral("cannot write %1").arg(parser.value(shot)));
    std::printf("wrote %s (%dx%d)\n", qPrintable(parser.value(shot)), pixmap.width(), pixmap.height());
    return 0;
}
