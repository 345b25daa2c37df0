// SPDX-License-Identifier: MIT
// Gantt repaint, for real: the GanttView (QCustomPlot + the folding plottable) of a one-million-action schedule
// replotted offscreen at 1920x1080, from the whole run down to a ~1 ms window (target: under 16 ms a frame at any
// zoom). Baselines measured in the same run: every visible span as its own rectangle (folding off), and the folded
// items painted with one QPainter::fillRect each instead of written into the image.
#include <QApplication>
#include <cstdio>

#include <qcustomplot.h>

#include "bench_common.h"
#include "planner/sim/simulator.h"
#include "ui/widgets/gantt_view.h"

using namespace pw::planner;

int main(int argc, char** argv)
{
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const auto sim = std::make_shared<const SimulationResult>(simulate(pw::test::chainPlan(64, 2900)));
    const std::size_t spans = sim->timeline.spans.size();
    pw::ui::GanttView view(nullptr, false);
    view.resize(1920, 1080);
    view.show();
    const double tSet = pw::bench::bestOf(1, [&] { view.setTimeline({sim, &sim->timeline}); });
    QApplication::processEvents();
    QCustomPlot* plot = view.ganttPlot();
    std::printf("1F1B, 64 stages x 2900 microbatches: %zu spans; view %dx%d px (plot %dx%d), set up in %.0f ms\n",
        spans, view.width(), view.height(), plot->axisRect()->width(), plot->axisRect()->height(), tSet * 1e3);
    std::printf("replot (QPainter, raster, offscreen), best of 5 (target < 16 ms)\n");
    std::printf("%-12s %10s %12s %12s %14s %12s %9s\n", "window", "rects", "unfolded ms", "rects", "fillRect ms",
        "folded ms", "speed-up");
    const double begin = view.windowBegin(), end = view.windowEnd(), whole = end - begin, mid = (begin + end) / 2;
    double worst = 0;
    for (double window : {whole, whole / 10, whole / 100, whole / 1000, 1e-3}) {
        view.setTimeWindow(mid - window / 2, mid + window / 2);
        view.setFolding(false);
        const double tAll = pw::bench::bestOf(5, [&] { plot->replot(QCustomPlot::rpImmediateRefresh); });
        const std::size_t rectsAll = view.lastPaintedItems();
        view.setFolding(true);
        view.setImagePainting(false); // a QPainter::fillRect per folded item
        const double tRects = pw::bench::bestOf(3, [&] { plot->replot(QCustomPlot::rpImmediateRefresh); });
        view.setImagePainting(true);
        const double tFold = pw::bench::bestOf(5, [&] { plot->replot(QCustomPlot::rpImmediateRefresh); });
        const std::size_t rectsFold = view.lastPaintedItems();
        worst = std::max(worst, tFold);
        char label[32];
        std::snprintf(label, sizeof label, "%.4g s", view.windowEnd() - view.windowBegin());
        std::printf("%-12s %10zu %12.2f %12zu %14.2f %12.2f %8.1fx\n", label, rectsAll, tAll * 1e3, rectsFold,
            tRects * 1e3, tFold * 1e3, std::min(tAll, tRects) / tFold);
    }
    std::printf("worst folded frame: %.2f ms (%s the 16 ms budget)\n", worst * 1e3, worst < 0.016 ? "within" : "OVER");
    return 0;
}
