// SPDX-License-Identifier: MIT
// A live run's Timeline growing under the Gantt: about a million spans (1F1B, 64 stages x 2900 microbatches)
// arrive as a run reports them (each device in order of start, devices interleaved), in batches of 10,000 (a
// tenth of a second of reports at 100,000 spans/s). After each batch the index is extended and every row is
// folded for a 1920 px view of the live edge, as a repaint does. The baseline, measured in the same run, is what
// the view did before the index could grow: build the index again over everything received so far.
#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include "bench_common.h"
#include "planner/sim/simulator.h"
#include "ui/gantt/geometry.h"

using namespace pw::planner;
using namespace pw::ui;

namespace {

std::size_t foldAll(const GanttIndex& index, std::vector<DrawItem>& out)
{
    TimeAxis axis(index.dataBegin(), index.dataEnd(), 1920, 1e-9);
    axis.setWindow(index.dataEnd() - 0.25, index.dataEnd()); // the last quarter second: the live edge
    std::size_t items = 0;
    for (int r = 0; r < index.rows(); ++r) {
        out.clear();
        fold(index, axis, r, out);
        items += out.size();
    }
    return items;
}

} // namespace

int main()
{
    const SimulationResult sim = simulate(pw::test::chainPlan(64, 2900));
    // Arrival order: a device reports a span when it ends; the devices' reports interleave by time.
    std::vector<Span> arrivals = sim.timeline.spans;
    std::stable_sort(arrivals.begin(), arrivals.end(), [](const Span& a, const Span& b) { return a.t1 < b.t1; });
    const std::size_t total = arrivals.size(), batch = 10000;

    Timeline live;
    live.clock = ClockDomain::Host;
    live.device_names = sim.timeline.device_names;
    live.spans.reserve(total);
    GanttIndex index(live);
    std::vector<DrawItem> out;
    double extendTotal = 0, extendWorst = 0, foldWorst = 0, rebuildTotal = 0, rebuildWorst = 0;
    std::size_t batches = 0, items = 0;
    for (std::size_t at = 0; at < total; at += batch, ++batches) {
        const std::size_t n = std::min(batch, total - at);
        const double tExtend = pw::bench::bestOf(1, [&] {
            live.append(std::span<const Span>(arrivals).subspan(at, n));
            index.extend(live);
        });
        const double tFold = pw::bench::bestOf(1, [&] { items = foldAll(index, out); });
        extendTotal += tExtend;
        extendWorst = std::max(extendWorst, tExtend);
        foldWorst = std::max(foldWorst, tFold);
        if (batches % 10 == 9 || at + n == total) { // the baseline on every tenth batch (it is slow), scaled
            const double tRebuild = pw::bench::bestOf(1, [&] { GanttIndex again(live); });
            rebuildTotal += tRebuild * 10;
            rebuildWorst = std::max(rebuildWorst, tRebuild);
        }
    }
    const GanttIndex once(sim.timeline);
    const double foldStatic = pw::bench::bestOf(5, [&] { foldAll(once, out); });
    const double foldGrown = pw::bench::bestOf(5, [&] { foldAll(index, out); });

    std::printf("live Timeline: %zu spans in %zu batches of %zu (1F1B, 64 stages x 2900 microbatches)\n", total,
        batches, batch);
    std::printf("append + extend index: %.1f ms in all, %.2f ms worst batch -> %.1f M spans/s (need 0.1 M/s)\n",
        extendTotal * 1e3, extendWorst * 1e3, total / extendTotal / 1e6);
    std::printf("baseline, rebuild the index per batch: ~%.0f ms in all, %.1f ms worst batch -> %.3f M spans/s\n",
        rebuildTotal * 1e3, rebuildWorst * 1e3, total / rebuildTotal / 1e6);
    std::printf("speed-up of growing over rebuilding: %.0fx (worst batch %.0fx)\n", rebuildTotal / extendTotal,
        rebuildWorst / extendWorst);
    std::printf("fold of all %d rows at the live edge, 1920 px: worst while growing %.2f ms; at the end %.2f ms on the "
                "grown index vs %.2f ms on one built at once (ratio %.2f), %zu items\n",
        index.rows(), foldWorst * 1e3, foldGrown * 1e3, foldStatic * 1e3, foldGrown / foldStatic, items);
    return 0;
}
