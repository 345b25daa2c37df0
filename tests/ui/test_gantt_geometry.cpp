// SPDX-License-Identifier: MIT
// The Gantt's geometry without a widget: axis round trips, zoom about an anchor, pan clamping, row mapping,
// interval queries and hit tests against a linear scan, and the folding's guarantees against a brute-force
// rasterisation of the visible spans on random timelines.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "tests/planner/fixtures.h"
#include "ui/gantt/geometry.h"

using namespace pw::ui;
using pw::planner::ActionKind;
using pw::planner::Lane;
using pw::planner::Span;
using pw::planner::Timeline;

namespace {

/// Random spans on `devices` devices; `disjoint`: each lane's spans never overlap (as compute lanes).
Timeline randomTimeline(std::mt19937& rng, int devices, int perLane, bool disjoint)
{
    Timeline t;
    std::exponential_distribution<double> gap(50.0), len(20.0);
    std::uniform_int_distribution<int> kind(0, 3), mb(0, 7), coin(0, 3);
    for (int d = 0; d < devices; ++d)
        for (Lane lane : {Lane::Compute, Lane::Send, Lane::Recv, Lane::Collective}) {
            double t0 = 0;
            for (int i = 0; i < perLane; ++i) {
                // Mixed scales: long spans, slivers, zero-length spans and bursts.
                double l = coin(rng) == 0 ? len(rng) * 20 : (coin(rng) == 0 ? 0.0 : len(rng) * 0.01);
                Span s;
                s.device = d;
                s.lane = lane;
                s.kind = static_cast<ActionKind>(kind(rng));
                s.microbatch = mb(rng);
                s.t0 = t0 + (coin(rng) == 0 ? gap(rng) * 10 : gap(rng) * 0.01);
                s.t1 = s.t0 + l;
                t.spans.push_back(s);
                t0 = disjoint ? s.t1 : s.t0;
            }
        }
    std::shuffle(t.spans.begin(), t.spans.end(), rng);
    return t;
}

std::vector<std::uint32_t> linearScan(const Timeline& t, int row, double a, double b)
{
    std::vector<std::pair<std::pair<double, double>, std::uint32_t>> hits;
    for (std::uint32_t i = 0; i < t.spans.size(); ++i) {
        const auto& s = t.spans[i];
        if (RowLayout::rowIndex(s.device, laneRowOf(s.lane)) == row && s.t0 <= b && s.t1 >= a)
            hits.push_back({{s.t0, s.t1}, i});
    }
    std::sort(hits.begin(), hits.end());
    std::vector<std::uint32_t> ids;
    for (auto& h : hits)
        ids.push_back(h.second);
    return ids;
}

/// Pixel columns [k, k+1) that a closed extent [x0, x1] touches, within a view `width` columns wide.
void rasterise(double x0, double x1, int width, std::set<int>& columns)
{
    int first = std::clamp(static_cast<int>(std::floor(x0)), 0, width - 1);
    int last = std::clamp(static_cast<int>(std::floor(x1)), 0, width - 1);
    for (int k = first; k <= last; ++k)
        columns.insert(k);
}

/// Maximal idle intervals of the union of [x0, x1] extents within [0, width].
std::vector<std::pair<double, double>> gaps(std::vector<DrawItem> items, double width)
{
    std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.x0 < b.x0; });
    std::vector<std::pair<double, double>> out;
    double covered = 0;
    for (const auto& it : items) {
        if (it.x0 > covered)
            out.push_back({covered, it.x0});
        covered = std::max(covered, it.x1);
    }
    if (covered < width)
        out.push_back({covered, width});
    return out;
}

} // namespace

TEST_CASE("time axis: pixel and time round trips, whole range on construction", "[gantt]")
{
    TimeAxis axis(0.0, 12.5, 1920);
    CHECK(axis.begin() == 0.0);
    CHECK(axis.end() == 12.5);
    CHECK(axis.toPixel(12.5) == Approx(1920).epsilon(1e-15));
    CHECK(axis.toPixel(6.25) == Approx(960).epsilon(1e-15));
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < 1000; ++i) {
        axis.setWindow(u(rng) * 12, 12.5);
        axis.zoom(1 + u(rng) * 1000, u(rng) * 1920);
        double t = axis.begin() + u(rng) * axis.duration();
        CHECK(std::abs(axis.toTime(axis.toPixel(t)) - t) <= 4e-16 * 12.5);
        double x = u(rng) * 1920;
        CHECK(std::abs(axis.toPixel(axis.toTime(x)) - x) <= 1e-12 * 1920 / axis.duration() * 12.5);
    }
}

TEST_CASE("time axis: wheel zoom keeps the time under the cursor", "[gantt]")
{
    TimeAxis axis(0.0, 10.0, 1000, 1e-6);
    const double anchorPx = 300;
    const double anchorT = axis.toTime(anchorPx); // 3 s
    axis.zoom(4, anchorPx);
    CHECK(axis.duration() == Approx(2.5));
    CHECK(axis.toTime(anchorPx) == Approx(anchorT).epsilon(1e-14));
    CHECK(axis.begin() == Approx(3.0 - 0.3 * 2.5));
    for (int i = 0; i < 5; ++i)
        axis.zoom(10, anchorPx); // 2.5 s / 1e5 = 25 us: still above the 1 us minimum
    CHECK(axis.duration() == Approx(2.5e-5));
    CHECK(std::abs(axis.toTime(anchorPx) - anchorT) < 1e-12);
    axis.zoom(1000, anchorPx); // clamped to the minimum visible duration
    CHECK(axis.duration() == Approx(1e-6));
    CHECK(std::abs(axis.toTime(anchorPx) - anchorT) < 1e-12);
    axis.zoom(1e-9, anchorPx); // zooming out is clamped to the data range
    CHECK(axis.begin() == 0.0);
    CHECK(axis.end() == Approx(10.0));
}

TEST_CASE("time axis: pan moves by pixels and clamps to the data range", "[gantt]")
{
    TimeAxis axis(0.0, 10.0, 1000);
    axis.setWindow(4, 5); // 1000 px per second
    axis.pan(-250); // drag left: later times
    CHECK(axis.begin() == Approx(4.25));
    CHECK(axis.end() == Approx(5.25));
    axis.pan(1e6); // far right: clamped at the start, duration kept
    CHECK(axis.begin() == 0.0);
    CHECK(axis.duration() == Approx(1.0));
    axis.pan(-1e7);
    CHECK(axis.end() == Approx(10.0));
    CHECK(axis.duration() == Approx(1.0));
    axis.setWindow(-3, 20); // wider than the data: the data range
    CHECK(axis.begin() == 0.0);
    CHECK(axis.end() == 10.0);
    axis.setWidth(500); // resizing keeps the time window
    CHECK(axis.toPixel(10.0) == Approx(500));
}

TEST_CASE("row layout: device and lane from y, gaps and hidden rows hit nothing", "[gantt]")
{
    RowLayout layout(4, RowHeights {20, 8, 0, 4}, 10); // collectives hidden: 32 px per device from y = 10
    CHECK(layout.rows() == 12);
    CHECK(layout.height() == 128);
    CHECK(layout.rowTop(2, LaneRow::PointToPoint) == 10 + 64 + 20);
    auto hit = layout.rowAt(10 + 64 + 20 + 3);
    REQUIRE(hit);
    CHECK(hit->device == 2);
    CHECK(hit->lane == LaneRow::PointToPoint);
    CHECK(hit->row == RowLayout::rowIndex(2, LaneRow::PointToPoint));
    CHECK(layout.rowAt(10 + 32 + 0.0)->lane == LaneRow::Compute);
    CHECK(layout.rowAt(10 + 32 + 19.99)->lane == LaneRow::Compute);
    CHECK_FALSE(layout.rowAt(10 + 32 + 29)); // the gap
    CHECK_FALSE(layout.rowAt(9.9));
    CHECK_FALSE(layout.rowAt(10 + 128));
    for (int d = 0; d < 4; ++d)
        for (LaneRow lane : {LaneRow::Compute, LaneRow::PointToPoint}) {
            auto h = layout.rowAt(layout.rowTop(d, lane) + layout.laneHeight(lane) / 2);
            REQUIRE(h);
            CHECK(h->row == RowLayout::rowIndex(d, lane));
        }
    CHECK(laneRowOf(Lane::Send) == LaneRow::PointToPoint);
    CHECK(laneRowOf(Lane::Recv) == LaneRow::PointToPoint);
    CHECK(laneRowOf(Lane::Collective) == LaneRow::Collective);
}

TEST_CASE("gantt index: interval queries equal a linear scan on random timelines", "[gantt]")
{
    std::mt19937 rng(11);
    for (bool disjoint : {true, false}) {
        Timeline t = randomTimeline(rng, 3, 400, disjoint);
        GanttIndex index(t);
        CHECK(index.rows() == 9);
        std::uniform_real_distribution<double> u(0, index.dataEnd());
        for (int q = 0; q < 300; ++q) {
            double a = u(rng), b = a + u(rng) * (q % 3 == 0 ? 1 : 0.01);
            int row = q % index.rows();
            CHECK(index.spansIn(row, a, b) == linearScan(t, row, a, b));
        }
    }
}

TEST_CASE("gantt index: hit test picks the span under the time, else the nearest within tolerance", "[gantt]")
{
    Timeline t;
    t.spans = {{0, Lane::Compute, ActionKind::Forward, 0, 0, 0, 1.0, 2.0},
        {0, Lane::Compute, ActionKind::Backward, 0, 0, 1, 3.0, 5.0},
        {1, Lane::Send, ActionKind::SendActivation, 1, 0, 0, 1.5, 4.0},
        {1, Lane::Recv, ActionKind::RecvGradient, 1, 0, 1, 2.0, 2.5}};
    GanttIndex index(t);
    CHECK(index.spanAt(0, LaneRow::Compute, 1.5, 0) == 0u);
    CHECK(index.spanAt(0, LaneRow::Compute, 4.0, 0) == 1u);
    CHECK(index.spanAt(0, LaneRow::Compute, 2.4, 0.5) == 0u); // 0.4 from span 0, 0.6 from span 1
    CHECK(index.spanAt(0, LaneRow::Compute, 2.6, 0.5) == 1u);
    CHECK_FALSE(index.spanAt(0, LaneRow::Compute, 2.5, 0.1)); // a bubble
    CHECK_FALSE(index.spanAt(0, LaneRow::PointToPoint, 1.5, 1));
    CHECK(index.spanAt(1, LaneRow::PointToPoint, 2.2, 0) == 3u); // the receive inside the send is on top
    CHECK(index.spanAt(1, LaneRow::PointToPoint, 3.0, 0) == 2u);

    // Random: the answer contains the time or is the nearest span, as a linear scan says.
    std::mt19937 rng(5);
    Timeline r = randomTimeline(rng, 2, 300, false);
    GanttIndex ri(r);
    std::uniform_real_distribution<double> u(0, ri.dataEnd());
    for (int q = 0; q < 500; ++q) {
        double time = u(rng), tol = 0.02;
        int row = q % ri.rows();
        double best = INFINITY;
        for (const auto& s : r.spans)
            if (RowLayout::rowIndex(s.device, laneRowOf(s.lane)) == row)
                best = std::min(best, time < s.t0 ? s.t0 - time : std::max(0.0, time - s.t1));
        auto hit = ri.spanAt(row, time, tol);
        if (best > tol) {
            CHECK_FALSE(hit);
        } else {
            REQUIRE(hit);
            const auto& s = r.spans[*hit];
            CHECK((time < s.t0 ? s.t0 - time : std::max(0.0, time - s.t1)) == best);
        }
    }
}

TEST_CASE("folding: exact pixel coverage, bubbles kept, at most two items per column", "[gantt]")
{
    std::mt19937 rng(3);
    int checkedRows = 0, foldedItems = 0;
    for (bool disjoint : {true, false}) {
        Timeline t = randomTimeline(rng, 2, 3000, disjoint);
        GanttIndex index(t);
        for (double width : {1920.0, 333.0, 1000.5}) {
            TimeAxis axis(index.dataBegin(), index.dataEnd(), width, 1e-7);
            for (int zoom = 0; zoom < 12; ++zoom) {
                const int columns = static_cast<int>(std::ceil(width));
                for (int row = 0; row < index.rows(); ++row) {
                    std::vector<DrawItem> all, items;
                    visibleSpans(index, axis, row, all);
                    fold(index, axis, row, items);
                    std::set<int> spanColumns, itemColumns;
                    for (const auto& s : all)
                        rasterise(s.x0, s.x1, columns, spanColumns);
                    for (const auto& it : items)
                        rasterise(it.x0, it.x1, columns, itemColumns);
                    CHECK(spanColumns == itemColumns);
                    // Every bubble of >= 1 px between visible spans is free of items.
                    for (auto [g0, g1] : gaps(all, width))
                        if (g1 - g0 >= 1.0)
                            for (const auto& it : items)
                                CHECK((it.x1 <= g0 || it.x0 >= g1));
                    CHECK(items.size() <= 2 * static_cast<std::size_t>(columns));
                    // Items are in order, the counts add up to the visible spans, singles are spans.
                    std::size_t counted = 0;
                    for (std::size_t k = 0; k < items.size(); ++k) {
                        counted += items[k].count;
                        foldedItems += items[k].folded();
                        if (k > 0)
                            CHECK(items[k - 1].x0 <= items[k].x0);
                        if (!items[k].folded()) {
                            const auto& s = t.spans[items[k].span];
                            CHECK(items[k].x0 == std::clamp(axis.toPixel(s.t0), 0.0, width));
                        }
                    }
                    CHECK(counted >= all.size()); // spans hidden under a longer one at the left edge count too
                    ++checkedRows;
                }
                axis.zoom(2.5, std::uniform_real_distribution<double>(0, width)(rng));
            }
        }
    }
    CHECK(checkedRows == 2 * 3 * 12 * 6);
    CHECK(foldedItems > 0);
}

TEST_CASE("folding: wide spans stay themselves, slivers in one column fold with the dominant kind", "[gantt]")
{
    Timeline t;
    auto add = [&](ActionKind k, double t0, double t1) {
        t.spans.push_back({0, Lane::Compute, k, 0, static_cast<int>(t.spans.size()), 0, t0, t1});
    };
    // 100 px over 1 s: slivers of 1 ms in column 0 (2 F, 1 B), a gap of exactly 1 px, a 30 px backward.
    add(ActionKind::Forward, 0.000, 0.001);
    add(ActionKind::Backward, 0.002, 0.003);
    add(ActionKind::Forward, 0.004, 0.005);
    add(ActionKind::Backward, 0.015, 0.315);
    add(ActionKind::Forward, 0.995, 1.0);
    GanttIndex index(t);
    TimeAxis axis(0, 1.0, 100);
    auto items = fold(index, axis, 0);
    REQUIRE(items.size() == 3);
    CHECK(items[0].count == 3);
    CHECK(items[0].kind == ActionKind::Forward);
    CHECK(items[0].x0 == 0.0);
    CHECK(items[0].x1 == Approx(0.5));
    CHECK(items[1].count == 1);
    CHECK(items[1].span == 3u);
    CHECK(items[1].x0 == Approx(1.5));
    CHECK(items[1].x1 == Approx(31.5));
    CHECK(items[2].span == 4u);
    axis.zoom(100, 0); // [0, 10 ms]: 10 px per ms, the three slivers are themselves
    items = fold(index, axis, 0);
    REQUIRE(items.size() == 3);
    CHECK(items[1].x0 == Approx(20));
    CHECK(std::none_of(items.begin(), items.end(), [](const DrawItem& i) { return i.folded(); }));
}

TEST_CASE("folding: a simulated 1F1B schedule draws at most rows x width items at every zoom", "[gantt]")
{
    using namespace pw::planner;
    auto sim = simulate(pw::test::chainPlan(8, 2000));
    GanttIndex index(sim.timeline);
    TimeAxis axis(index.dataBegin(), index.dataEnd(), 800, 1e-9);
    for (int zoom = 0; zoom < 8; ++zoom) {
        std::size_t items = 0, visible = 0;
        std::vector<DrawItem> out, all;
        for (int row = 0; row < index.rows(); ++row) {
            out.clear();
            fold(index, axis, row, out);
            items += out.size();
            visibleSpans(index, axis, row, all);
        }
        visible = all.size();
        CHECK(items <= static_cast<std::size_t>(index.rows()) * 800);
        CHECK(items <= visible);
        if (zoom == 0)
            CHECK(visible == sim.timeline.spans.size());
        axis.zoom(4, 400);
    }
}

namespace {

/// The row as the index must hold it, computed from its definition: the row's spans sorted by (t0, t1, index),
/// the running maximum of the ends, the kinds in order of first appearance and their prefix counts.
GanttIndex::Row referenceRow(const Timeline& t, int row)
{
    std::vector<std::uint32_t> ids;
    for (std::uint32_t i = 0; i < t.spans.size(); ++i)
        if (t.spans[i].device >= 0 && RowLayout::rowIndex(t.spans[i].device, laneRowOf(t.spans[i].lane)) == row)
            ids.push_back(i);
    std::sort(ids.begin(), ids.end(), [&](std::uint32_t x, std::uint32_t y) {
        const auto &a = t.spans[x], &b = t.spans[y];
        return std::tie(a.t0, a.t1, x) < std::tie(b.t0, b.t1, y);
    });
    GanttIndex::Row r;
    for (auto i : ids) {
        const auto& s = t.spans[i];
        r.t0.push_back(s.t0);
        r.t1.push_back(s.t1);
        r.max_t1.push_back(r.max_t1.empty() ? s.t1 : std::max(r.max_t1.back(), s.t1));
        r.span.push_back(i);
        r.microbatch.push_back(s.microbatch);
        r.kind.push_back(s.kind);
        if (std::find(r.kinds.begin(), r.kinds.end(), s.kind) == r.kinds.end())
            r.kinds.push_back(s.kind);
    }
    const std::size_t k = r.kinds.size();
    r.kind_prefix.assign((ids.size() + 1) * k, 0);
    for (std::size_t i = 0; i < ids.size(); ++i)
        for (std::size_t j = 0; j < k; ++j)
            r.kind_prefix[(i + 1) * k + j] = r.kind_prefix[i * k + j] + (r.kind[i] == r.kinds[j] ? 1 : 0);
    return r;
}

/// The grown index holds exactly the reference rows of the timeline, and folds as one built at once.
void checkSameIndex(const GanttIndex& grown, const Timeline& t)
{
    const GanttIndex built(t);
    REQUIRE(grown.rows() == built.rows());
    CHECK(grown.dataBegin() == built.dataBegin());
    CHECK(grown.dataEnd() == built.dataEnd());
    for (int r = 0; r < built.rows(); ++r) {
        INFO("row " << r);
        CHECK(grown.row(r) == referenceRow(t, r));
        CHECK(built.row(r) == referenceRow(t, r));
    }
    TimeAxis axis(built.dataBegin(), built.dataEnd(), 640, 1e-9);
    for (int zoom = 0; zoom < 4; ++zoom, axis.zoom(5, 200))
        for (int r = 0; r < built.rows(); ++r) {
            const auto a = fold(grown, axis, r), b = fold(built, axis, r);
            REQUIRE(a.size() == b.size());
            for (std::size_t i = 0; i < a.size(); ++i)
                CHECK((a[i].x0 == b[i].x0 && a[i].x1 == b[i].x1 && a[i].span == b[i].span && a[i].count == b[i].count
                    && a[i].kind == b[i].kind));
        }
}

/// Appends `all`'s spans to an empty timeline in random batches, extending `index` after each; checks the
/// index against one built at once on the same prefix after every batch.
void growInBatches(std::mt19937& rng, const Timeline& all, std::size_t maxBatch)
{
    Timeline live;
    GanttIndex index(live);
    std::uniform_int_distribution<std::size_t> batch(1, maxBatch);
    for (std::size_t at = 0; at < all.spans.size();) {
        const std::size_t n = std::min(batch(rng), all.spans.size() - at);
        live.append(std::span<const Span>(all.spans).subspan(at, n));
        at += n;
        index.extend(live);
        CHECK(index.indexedSpans() == live.spans.size());
        checkSameIndex(index, live);
    }
}

} // namespace

TEST_CASE("GanttIndex grows with its timeline: extended step by step it equals one built at once", "[gantt]")
{
    std::mt19937 rng(11);
    SECTION("a run's report: each device in order of start, devices interleaved at random")
    {
        using namespace pw::planner;
        const auto sim = simulate(pw::test::chainPlan(4, 24));
        // Per device in order of start; then the devices' streams merged in a random order.
        std::vector<std::vector<Span>> perDevice(4);
        for (const auto& s : sim.timeline.spans)
            perDevice[s.device].push_back(s);
        for (auto& d : perDevice)
            std::stable_sort(d.begin(), d.end(), [](const Span& a, const Span& b) { return a.t0 < b.t0; });
        Timeline arrival;
        std::vector<std::size_t> next(4, 0);
        for (std::size_t left = sim.timeline.spans.size(); left > 0; --left) {
            int d;
            do
                d = std::uniform_int_distribution<int>(0, 3)(rng);
            while (next[d] == perDevice[d].size());
            arrival.spans.push_back(perDevice[d][next[d]++]);
        }
        growInBatches(rng, arrival, 40);
    }
    SECTION("spans out of order within rows (a late report): the rows re-sort")
    {
        growInBatches(rng, randomTimeline(rng, 3, 60, false), 50);
    }
    SECTION("new devices and new kinds arrive late")
    {
        Timeline t = randomTimeline(rng, 5, 30, true);
        std::stable_sort(t.spans.begin(), t.spans.end(),
            [](const Span& a, const Span& b) { return a.device != b.device ? a.device < b.device : a.kind < b.kind; });
        growInBatches(rng, t, 25);
    }
}

TEST_CASE("peakPerPixel keeps every peak of a step curve in one point per pixel column", "[gantt]")
{
    // A sawtooth of 100,000 steps over [0, 100): value i % 97 from t = i / 1000.
    std::vector<double> t, v;
    for (int i = 0; i < 100'000; ++i) {
        t.push_back(i / 1000.0);
        v.push_back(i % 97);
    }
    const auto c = peakPerPixel(t, v, 0, 100, 200);
    REQUIRE(c.t.size() == 201);
    CHECK(c.t.front() == 0);
    CHECK(c.t.back() == 100);
    // Each column of 0.5 s holds 500 steps: its point is their highest value, 96.
    for (std::size_t p = 0; p + 1 < c.t.size(); ++p)
        CHECK(c.v[p] == 96);

    // A single spike in a long flat run lands in its column and nowhere else.
    std::vector<double> ft {0, 10, 10.001, 50}, fv {1, 7, 1, 1};
    std::vector<double> dense_t, dense_v;
    for (int i = 0; i < 5000; ++i) { // many flat steps so that the curve is reduced
        dense_t.push_back(i * 0.02);
        dense_v.push_back(i == 1234 ? 9.0 : 1.0);
    }
    const auto s = peakPerPixel(dense_t, dense_v, 0, 100, 100);
    int spikes = 0;
    for (std::size_t p = 0; p + 1 < s.t.size(); ++p)
        spikes += s.v[p] == 9.0;
    CHECK(spikes == 1);
    CHECK(s.v[static_cast<std::size_t>(1234 * 0.02)] == 9.0); // column 24 holds t = 24.68

    // Few points in the window: returned as they are, from the window's left edge (with the value in force there)
    // to its right edge (the last change holds until the next one, beyond the window).
    const auto f = peakPerPixel(ft, fv, 5, 20, 100);
    CHECK(f.t == std::vector<double> {5, 10, 10.001, 20});
    CHECK(f.v == std::vector<double> {1, 7, 1, 1});
    // A window with no change in it: the held value from edge to edge.
    const auto held = peakPerPixel(ft, fv, 20, 40, 100);
    CHECK(held.t == std::vector<double> {20, 40});
    CHECK(held.v == std::vector<double> {1, 1});
    const auto spike = peakPerPixel(ft, fv, 10.0005, 10.0008, 100);
    CHECK(spike.t == std::vector<double> {10.0005, 10.0008});
    CHECK(spike.v == std::vector<double> {7, 7});
    // A window starting before the first point: 0 until it.
    const auto early = peakPerPixel(std::vector<double> {2, 4}, std::vector<double> {3, 5}, 1, 3, 100);
    CHECK(early.t == std::vector<double> {1, 2, 3});
    CHECK(early.v == std::vector<double> {0, 3, 3});
    // Nothing to draw: an empty curve, an empty window.
    CHECK(peakPerPixel({}, {}, 0, 1, 10).t.empty());
    CHECK(peakPerPixel(ft, fv, 3, 3, 10).t.empty());
}
