// SPDX-License-Identifier: MIT
// Gantt repaint cost: the level-of-detail folding of every row of a one-million-action schedule (a simulated
// 1F1B plan) on a 1920 px view, from the whole run down to a ~1 ms window (target: under 16 ms a frame at any
// zoom). The baseline, measured in the same run, emits every visible span as its own item without folding.
#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "ui/gantt/geometry.h"

using namespace pw::planner;
using namespace pw::ui;

int main()
{
    const double width = 1920;
    Schedule schedule;
    Plan plan = pw::test::chainPlan(64, 2900);
    SimulationResult sim;
    double tSim = pw::bench::bestOf(1, [&] { sim = simulate(plan); });
    double tIndex = 0;
    GanttIndex* index = nullptr;
    tIndex = pw::bench::bestOf(1, [&] { index = new GanttIndex(sim.timeline); });
    std::printf("1F1B, 64 stages x 2900 microbatches: %zu spans, simulated in %.2f s, indexed in %.0f ms, run %.3f s\n",
        sim.timeline.spans.size(), tSim, tIndex * 1e3, index->dataEnd());
    std::printf("fold of all %d rows, 1920 px, best of 7 (target < 16 ms)\n", index->rows());
    std::printf(
        "%-12s %10s %10s %12s %12s %9s\n", "window", "visible", "items", "unfolded ms", "folded ms", "speed-up");

    TimeAxis axis(index->dataBegin(), index->dataEnd(), width, 1e-9);
    const double whole = axis.duration();
    std::vector<DrawItem> out;
    out.reserve(sim.timeline.spans.size());
    for (double window : {whole, whole / 10, whole / 100, whole / 1000, 1e-3}) {
        const double mid = (index->dataBegin() + index->dataEnd()) / 2;
        axis.setWindow(mid - window / 2, mid + window / 2);
        std::size_t visible = 0, items = 0;
        double tAll = pw::bench::bestOf(7, [&] {
            out.clear();
            for (int r = 0; r < index->rows(); ++r)
                visibleSpans(*index, axis, r, out);
            visible = out.size();
        });
        double tFold = pw::bench::bestOf(7, [&] {
            out.clear();
            for (int r = 0; r < index->rows(); ++r)
                fold(*index, axis, r, out);
            items = out.size();
        });
        std::printf("%9.4f s  %10zu %10zu %12.3f %12.3f %8.1fx\n", axis.duration(), visible, items, tAll * 1e3,
            tFold * 1e3, tAll / tFold);
    }
    delete index;
    return 0;
}
