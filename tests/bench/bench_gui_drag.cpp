// SPDX-License-Identifier: MIT
// A boundary drag in the real main window, offscreen: mouse events on the model view's plot, each one previewing
// the moved plan (re-simulated), the metrics panel and stage table following, and the model view repainted
// (issue 4: a 200-layer model with 64 microbatches, under 10 ms a step). The baseline, measured in the same run,
// is the planner's part alone: move the boundary and re-simulate with spans and memory.
#include <QApplication>
#include <QElapsedTimer>
#include <QMouseEvent>
#include <algorithm>
#include <cstdio>
#include <vector>

#include <qcustomplot.h>

#include "app/project/project.h"
#include "bench_common.h"
#include "planner/device_presets.h"
#include "planner/edit.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "ui/document/project_document.h"
#include "ui/widgets/gantt_view.h"
#include "ui/widgets/main_window.h"
#include "ui/widgets/model_view.h"

using namespace pw;
using namespace pw::planner;

namespace {

/// Counts the paint events of a widget: each drag step must end with the model view repainted.
struct PaintCounter : QObject
{
    int paints = 0;
    bool eventFilter(QObject*, QEvent* e) override
    {
        paints += e->type() == QEvent::Paint;
        return false;
    }
};

void mouse(QWidget* w, QEvent::Type type, QPoint pos, Qt::MouseButton button, Qt::MouseButtons buttons)
{
    QMouseEvent e(type, QPointF(pos), w->mapToGlobal(QPointF(pos)), button, buttons, Qt::NoModifier);
    QApplication::sendEvent(w, &e);
}

/// Opens `project` in `window` at 1920x1080 on the model view, its prediction landed and painted.
void showModelView(ui::MainWindow& window, const app::Project& project)
{
    window.document().setProject(project);
    window.resize(1920, 1080);
    window.show();
    window.showView(QStringLiteral("model"));
    window.waitUntilIdle();
    window.replotAll();
}

/// Part 1 (issue 4): a 200-layer model, 8 stages, 64 microbatches; each step waits for the model view's repaint.
bool smallDrag()
{
    TransformerConfig gpt {198, 2048, 16, 2048, 51200, 1, 2}; // + embedding + head = 200 layers
    const auto h100 = *devicePreset("H100");
    app::Project project = app::newProject(transformerProfile(gpt, h100), {});
    project.cluster.edit().name = "8 x H100";
    project.cluster.edit().device_types = {h100};
    project.cluster.edit().nodes.push_back({"n0", "", 22, "", "H100", 8, 4.5e11, 5e-6});
    PartitionOptions o;
    o.schedule.microbatches = 64;
    auto r = findPartitioner("uniform")->partition({project.model, project.cluster, o}, {}, {});
    if (!r.ok()) {
        std::printf("no plan: %s\n", r.errorText().c_str());
        return false;
    }
    project.plan = *r.plan;
    const Plan start = *r.plan;

    ui::MainWindow window;
    showModelView(window, project);
    QCustomPlot* plot = window.modelView()->plot();
    const QPoint handle = window.modelView()->handlePoint(3);
    auto xOf = [&](double position) { return static_cast<int>(std::lround(plot->xAxis->coordToPixel(position))); };

    // The drag: boundary 3 crosses one layer edge per step, 20 layers right and back, over and over.
    constexpr int kSteps = 200;
    const int last = start.stages[3].last_layer;
    auto position = [&](int i) {
        const int offset = (i / 20) % 2 == 0 ? i % 20 : 20 - i % 20;
        return last + offset - 10 + 1.2; // just right of the layer edge the boundary snaps to
    };
    std::vector<double> steps, events;
    PaintCounter counter;
    plot->installEventFilter(&counter);
    mouse(plot, QEvent::MouseButtonPress, handle, Qt::LeftButton, Qt::LeftButton);
    for (int i = 0; i < kSteps; ++i) {
        const QPoint p(xOf(position(i)), handle.y());
        steps.push_back(pw::bench::bestOf(1, [&] {
            const int before = counter.paints;
            events.push_back(
                pw::bench::bestOf(1, [&] { mouse(plot, QEvent::MouseMove, p, Qt::NoButton, Qt::LeftButton); }));
            // The queued replot, the panels' updates and the window's repaint: until the model view has painted.
            for (int k = 0; k < 100 && counter.paints == before; ++k)
                QApplication::processEvents();
        }));
    }
    const int paints = counter.paints;
    mouse(plot, QEvent::MouseButtonRelease, QPoint(xOf(position(kSteps)), handle.y()), Qt::LeftButton, Qt::NoButton);
    const bool moved = window.document().planDocument().undoStack()->count() == 1;

    double sink = 0;
    const double planner = pw::bench::bestOf(3, [&] {
        for (int i = 0; i < kSteps; ++i) {
            const int offset = (i / 20) % 2 == 0 ? i % 20 : 20 - i % 20;
            sink += simulate(edit::moveBoundary(start, 3, last + offset - 10)).iteration_time_s;
        }
    }) / kSteps;
    std::sort(steps.begin(), steps.end());
    std::sort(events.begin(), events.end());
    double mean = 0;
    for (double s : steps)
        mean += s / kSteps;
    std::printf(
        "boundary drag in the main window (offscreen 1920x1080): %d layers, %d stages, 64 microbatches, %d steps%s\n",
        start.model->layerCount(), start.stageCount(), kSteps, moved ? "" : " (DRAG DID NOT LAND)");
    std::printf("  model view repainted %d times in %d steps\n", paints, kSteps);
    std::printf("  planner only: move + simulate (baseline)  %7.3f ms/step\n", planner * 1e3);
    std::printf("  of which the mouse event (re-simulate, documents, models, widgets updated): median %7.3f ms\n",
        events[kSteps / 2] * 1e3);
    std::printf("  GUI step: event, re-simulate, panels, repaint  median %7.3f ms, mean %7.3f ms, max %7.3f ms (%.1fx "
                "the baseline)\n",
        steps[kSteps / 2] * 1e3, mean * 1e3, steps.back() * 1e3, mean / planner);
    return sink > 0 && moved && paints >= kSteps;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

/// Part 2 (issue 11): the bundled GPT-3 175B project, 64 stages x 10,000 microbatches (3.8 M actions). A person drags
/// boundary 10 at 60 mouse moves a second; the simulation runs in the background, so the UI thread's time per move
/// is the event alone, and the views show the newest finished prediction. Baseline in the same run: one synchronous
/// re-simulation of the moved plan (what each mouse move cost the UI thread before the background jobs).
bool largeDrag()
{
    app::Project project = app::loadProject(std::string(PW_DEMO_DIR) + "/gpt3-175b-64xh100.pwproj");
    const Plan start = *project.plan;
    ui::MainWindow window;
    showModelView(window, project);
    auto& doc = window.document().planDocument();
    QCustomPlot* plot = window.modelView()->plot();
    auto xOf = [&](double position) { return static_cast<int>(std::lround(plot->xAxis->coordToPixel(position))); };

    QElapsedTimer clock;
    clock.start();
    std::vector<double> landed; // ms since start, one per prediction delivered
    QObject::connect(&doc, &ui::PlanDocument::predictionChanged, [&] { landed.push_back(clock.nsecsElapsed() / 1e6); });

    constexpr int kMoves = 120; // two seconds of dragging at 60 moves a second
    constexpr double kFrameMs = 1000.0 / 60;
    const int boundary = 10;
    const int last = start.stages[boundary].last_layer;
    auto position = [&](int i) { // three layer edges right and back, one edge every 4 moves
        const int k = (i / 4) % 6;
        return last + (k <= 3 ? k : 6 - k) + 1.2;
    };
    const QPoint handle = window.modelView()->handlePoint(boundary);
    std::vector<double> events, edgeEvents; // every move; the moves that crossed a layer edge (a new plan)
    double longestStall = 0; // the longest the UI thread was busy at a stretch: a move, or a landing and repaint
    const double dragStart = clock.nsecsElapsed() / 1e6;
    mouse(plot, QEvent::MouseButtonPress, handle, Qt::LeftButton, Qt::LeftButton);
    for (int i = 0; i < kMoves; ++i) {
        const double due = dragStart + i * kFrameMs;
        while (clock.nsecsElapsed() / 1e6 < due) { // the rest of the frame: deliveries, repaints
            const double t0 = clock.nsecsElapsed() / 1e6;
            QApplication::processEvents(QEventLoop::AllEvents);
            longestStall = std::max(longestStall, clock.nsecsElapsed() / 1e6 - t0);
            QThread::usleep(200);
        }
        const QPoint p(xOf(position(i)), handle.y());
        const int revision = doc.undoStack()->count(); // unchanged by previews; a cheap read of the document
        const auto before = planner::edit::boundaries(doc.plan());
        const double t = pw::bench::bestOf(1, [&] { mouse(plot, QEvent::MouseMove, p, Qt::NoButton, Qt::LeftButton); });
        (void)revision;
        events.push_back(t);
        if (planner::edit::boundaries(doc.plan()) != before)
            edgeEvents.push_back(t);
        longestStall = std::max(longestStall, t * 1e3);
    }
    const double release = clock.nsecsElapsed() / 1e6;
    mouse(plot, QEvent::MouseButtonRelease, QPoint(xOf(position(kMoves)), handle.y()), Qt::LeftButton, Qt::NoButton);
    const std::size_t landedDuringDrag = landed.size();
    window.waitUntilIdle();
    const double settled = landed.empty() ? 0 : landed.back() - release;
    const bool current = doc.isPredictionCurrent() && doc.prediction();
    const std::size_t actions = current ? doc.prediction()->simulated_actions : 0;

    double sink = 0;
    const double baseline = pw::bench::bestOf(
        1, [&] { sink += simulate(edit::moveBoundary(start, boundary, last + 1)).iteration_time_s; });
    std::vector<double> gaps;
    for (std::size_t i = 1; i < landedDuringDrag; ++i)
        gaps.push_back(landed[i] - landed[i - 1]);
    std::sort(events.begin(), events.end());
    std::sort(edgeEvents.begin(), edgeEvents.end());
    std::printf(
        "\nboundary drag on a large plan (GPT-3 175B, %d stages x %d microbatches, %zu actions), %d mouse moves at "
        "60/s, offscreen 1920x1080\n",
        start.stageCount(), start.schedule.microbatches, actions, kMoves);
    std::printf("  UI thread per mouse move: median %7.3f ms, max %7.3f ms; the %zu that crossed a layer edge (a new "
                "plan to simulate): median %7.3f ms\n",
        events[kMoves / 2] * 1e3, events.back() * 1e3, edgeEvents.size(), median(edgeEvents) * 1e3);
    std::printf("  longest stretch the UI thread was busy (a move, or a prediction landing and the views repainting): "
                "%7.1f ms\n",
        longestStall);
    std::printf("  baseline: one synchronous re-simulation with spans (the UI thread's cost per move before): %7.1f ms "
                "(%.0fx the median edge-crossing move)\n",
        baseline * 1e3, baseline / std::max(1e-9, median(edgeEvents)));
    std::printf(
        "  predictions landed during the drag: %zu (one every %.0f ms, median)\n", landedDuringDrag, median(gaps));
    std::printf("  newest result landed %.0f ms after the release\n", settled);

    // The schedule view of the same plan: switching to its tab, then wheel zoom steps, each until repainted.
    auto* gantt = window.ganttView();
    const double tabSwitch = pw::bench::bestOf(1, [&] { window.showView(QStringLiteral("gantt")); });
    const double tabReady = pw::bench::bestOf(1, [&] {
        gantt->waitForPrepared();
        window.replotAll();
    });
    std::vector<double> zooms;
    QCustomPlot* ganttPlot = gantt->ganttPlot();
    PaintCounter ganttPaints, memoryPaints;
    ganttPlot->installEventFilter(&ganttPaints);
    gantt->memoryPlot()->installEventFilter(&memoryPaints);
    for (int i = 0; i < 6; ++i) {
        const QPointF at(ganttPlot->width() * 0.6, ganttPlot->height() * 0.5);
        const int g0 = ganttPaints.paints, m0 = memoryPaints.paints;
        // The wheel event, then the event loop until both plots have repainted (their replots are queued).
        zooms.push_back(pw::bench::bestOf(1, [&] {
            QWheelEvent wheel(at, ganttPlot->mapToGlobal(at), QPoint(), QPoint(0, i < 3 ? 120 : -120), Qt::NoButton,
                Qt::NoModifier, Qt::NoScrollPhase, false);
            QApplication::sendEvent(ganttPlot, &wheel);
            for (int k = 0; k < 1000 && (ganttPaints.paints == g0 || memoryPaints.paints == m0); ++k)
                QApplication::processEvents();
        }));
    }
    std::printf("  schedule tab on this plan: the switch %.1f ms on the UI thread, the chart indexed and painted %.0f "
                "ms later; "
                "wheel zoom step until both plots (Gantt, memory) have repainted: "
                "median %.1f ms, max %.1f ms\n",
        tabSwitch * 1e3, tabReady * 1e3, median(zooms) * 1e3, *std::max_element(zooms.begin(), zooms.end()) * 1e3);
    return current && actions > 0 && sink > 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication qapp(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("pipewright-bench")); // keeps the user's settings out
    const bool small = smallDrag();
    const bool large = largeDrag();
    return small && large ? 0 : 1;
}
