// SPDX-License-Identifier: MIT
#include "geometry.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pw::ui {

using planner::ActionKind;
using planner::Lane;

// ---- TimeAxis

TimeAxis::TimeAxis(double dataBegin, double dataEnd, double widthPx, double minDuration)
    : m_minDuration(minDuration > 0 ? minDuration : kDefaultMinDuration)
{
    m_dataBegin = dataBegin;
    m_dataEnd = std::max(dataEnd, dataBegin + m_minDuration);
    m_width = widthPx > 0 ? widthPx : 1;
    showAll();
}

void TimeAxis::setWidth(double widthPx)
{
    m_width = widthPx > 0 ? widthPx : 1;
    m_pps = m_width / (m_end - m_begin);
}

void TimeAxis::setWindow(double t0, double t1)
{
    const double dataDuration = m_dataEnd - m_dataBegin;
    double d = std::clamp(t1 - t0, std::min(m_minDuration, dataDuration), dataDuration);
    double b = std::clamp(t0, m_dataBegin, m_dataEnd - d);
    m_begin = b;
    m_end = b + d;
    m_pps = m_width / (m_end - m_begin);
}

void TimeAxis::zoom(double factor, double anchorPx)
{
    if (!(factor > 0))
        return;
    const double anchor = toTime(anchorPx);
    const double dataDuration = m_dataEnd - m_dataBegin;
    const double d = std::clamp(duration() / factor, std::min(m_minDuration, dataDuration), dataDuration);
    const double b = anchor - anchorPx / m_width * d;
    setWindow(b, b + d);
}

void TimeAxis::pan(double dxPx)
{
    const double shift = dxPx / m_pps;
    setWindow(m_begin - shift, m_end - shift);
}

// ---- RowLayout

LaneRow laneRowOf(Lane lane)
{
    switch (lane) {
    case Lane::Compute:
        return LaneRow::Compute;
    case Lane::Send:
    case Lane::Recv:
        return LaneRow::PointToPoint;
    case Lane::Collective:
        return LaneRow::Collective;
    }
    return LaneRow::Compute;
}

RowLayout::RowLayout(int devices, RowHeights heights, double top)
    : m_devices(std::max(devices, 0))
    , m_heights(heights)
    , m_top(top)
{
    m_deviceHeight = heights.compute + heights.point_to_point + heights.collective + heights.gap;
}

double RowLayout::laneHeight(LaneRow lane) const
{
    switch (lane) {
    case LaneRow::Compute:
        return m_heights.compute;
    case LaneRow::PointToPoint:
        return m_heights.point_to_point;
    case LaneRow::Collective:
        return m_heights.collective;
    }
    return 0;
}

double RowLayout::rowTop(int device, LaneRow lane) const
{
    double y = deviceTop(device);
    for (int l = 0; l < static_cast<int>(lane); ++l)
        y += laneHeight(static_cast<LaneRow>(l));
    return y;
}

std::optional<RowHit> RowLayout::rowAt(double y) const
{
    if (m_deviceHeight <= 0 || y < m_top)
        return std::nullopt;
    const int device = static_cast<int>(std::floor((y - m_top) / m_deviceHeight));
    if (device >= m_devices)
        return std::nullopt;
    double offset = y - deviceTop(device);
    for (int l = 0; l < kLaneRows; ++l) {
        auto lane = static_cast<LaneRow>(l);
        double h = laneHeight(lane);
        if (offset < h)
            return RowHit {device, lane, rowIndex(device, lane)};
        offset -= h;
    }
    return std::nullopt; // the gap below the device
}

// ---- GanttIndex

GanttIndex::GanttIndex(const planner::Timeline& timeline)
{
    extend(timeline);
}

void GanttIndex::extend(const planner::Timeline& timeline)
{
    const auto& spans = timeline.spans;
    const std::size_t from = std::min(m_indexed, spans.size());
    int devices = std::max(m_devices, static_cast<int>(timeline.device_names.size()));
    for (std::size_t i = from; i < spans.size(); ++i) {
        const auto& s = spans[i];
        devices = std::max(devices, s.device + 1);
        m_dataBegin = std::min(m_dataBegin, s.t0);
        m_dataEnd = std::max(m_dataEnd, s.t1);
    }
    m_devices = devices;
    m_rows.resize(static_cast<std::size_t>(rows()));

    // A span that starts no earlier than the last one of its row is appended; one that does not marks the row
    // for one re-sort at the end (a row's spans arrive in order of start from one device, so this is rare).
    std::vector<char> unsorted(m_rows.size(), 0);
    for (std::size_t i = from; i < spans.size(); ++i) {
        const auto& s = spans[i];
        if (s.device < 0)
            continue;
        const auto r = static_cast<std::size_t>(RowLayout::rowIndex(s.device, laneRowOf(s.lane)));
        Row& row = m_rows[r];
        const double t1 = std::max(s.t0, s.t1);
        const bool inOrder = row.t0.empty() || s.t0 > row.t0.back() || (s.t0 == row.t0.back() && t1 >= row.t1.back());
        if (!inOrder || unsorted[r]) {
            unsorted[r] = 1;
            row.t0.push_back(s.t0);
            row.t1.push_back(t1);
            row.span.push_back(static_cast<std::uint32_t>(i));
            row.microbatch.push_back(s.microbatch);
            row.kind.push_back(s.kind);
        } else {
            row.append(s.t0, t1, static_cast<std::uint32_t>(i), s.microbatch, s.kind);
        }
    }
    for (std::size_t r = 0; r < m_rows.size(); ++r)
        if (unsorted[r])
            m_rows[r].sort();
    m_indexed = spans.size();
}

void GanttIndex::Row::append(double start, double end, std::uint32_t index, std::int32_t mb, ActionKind k)
{
    t0.push_back(start);
    t1.push_back(end);
    max_t1.push_back(max_t1.empty() ? end : std::max(max_t1.back(), end));
    span.push_back(index);
    microbatch.push_back(mb);
    kind.push_back(k);
    auto slot = static_cast<std::size_t>(std::find(kinds.begin(), kinds.end(), k) - kinds.begin());
    if (slot == kinds.size()) {
        kinds.push_back(k);
        countKinds(); // a new column in the prefix counts: rare (a row has a handful of kinds)
        return;
    }
    const std::size_t n = t0.size(), w = kinds.size();
    if (kind_prefix.empty())
        kind_prefix.assign(w, 0); // the counts among the first 0 spans
    kind_prefix.insert(kind_prefix.end(), kind_prefix.end() - static_cast<std::ptrdiff_t>(w), kind_prefix.end());
    ++kind_prefix[n * w + slot];
}

void GanttIndex::Row::sort()
{
    const std::size_t n = t0.size();
    std::vector<std::uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
        return t0[x] != t0[y] ? t0[x] < t0[y] : (t1[x] != t1[y] ? t1[x] < t1[y] : span[x] < span[y]);
    });
    Row sorted;
    for (std::uint32_t o : order) {
        sorted.t0.push_back(t0[o]);
        sorted.t1.push_back(t1[o]);
        sorted.span.push_back(span[o]);
        sorted.microbatch.push_back(microbatch[o]);
        sorted.kind.push_back(kind[o]);
        if (std::find(sorted.kinds.begin(), sorted.kinds.end(), kind[o]) == sorted.kinds.end())
            sorted.kinds.push_back(kind[o]);
    }
    sorted.max_t1.resize(n);
    double runningMax = -INFINITY;
    for (std::size_t i = 0; i < n; ++i)
        sorted.max_t1[i] = runningMax = std::max(runningMax, sorted.t1[i]);
    sorted.countKinds();
    *this = std::move(sorted);
}

void GanttIndex::Row::countKinds()
{
    const std::size_t n = t0.size(), k = kinds.size();
    kind_prefix.assign((n + 1) * k, 0);
    for (std::size_t i = 0; i < n; ++i) {
        std::copy_n(&kind_prefix[i * k], k, &kind_prefix[(i + 1) * k]);
        auto slot = std::find(kinds.begin(), kinds.end(), kind[i]) - kinds.begin();
        ++kind_prefix[(i + 1) * k + static_cast<std::size_t>(slot)];
    }
}

std::pair<std::size_t, std::size_t> GanttIndex::Row::range(double a, double b) const
{
    // Spans before `first` all end before a (the running maximum does); spans from `last` on start after b.
    std::size_t first = static_cast<std::size_t>(std::lower_bound(max_t1.begin(), max_t1.end(), a) - max_t1.begin());
    std::size_t last = static_cast<std::size_t>(std::upper_bound(t0.begin(), t0.end(), b) - t0.begin());
    while (first < last && t1[first] < a)
        ++first; // hidden under an earlier, longer span that reaches into the window
    return {first, std::max(first, last)};
}

std::vector<std::uint32_t> GanttIndex::spansIn(int r, double a, double b) const
{
    std::vector<std::uint32_t> out;
    if (r < 0 || r >= rows() || a > b)
        return out;
    const Row& row = m_rows[r];
    auto [first, last] = row.range(a, b);
    for (std::size_t i = first; i < last; ++i)
        if (row.t1[i] >= a)
            out.push_back(row.span[i]);
    return out;
}

std::optional<std::uint32_t> GanttIndex::spanAt(int r, double time, double tolerance) const
{
    if (r < 0 || r >= rows())
        return std::nullopt;
    const Row& row = m_rows[r];
    tolerance = std::max(tolerance, 0.0);
    auto [first, last] = row.range(time - tolerance, time + tolerance);
    std::optional<std::uint32_t> best;
    double bestDistance = INFINITY;
    for (std::size_t i = first; i < last; ++i) {
        if (row.t1[i] < time - tolerance)
            continue;
        double distance = time < row.t0[i] ? row.t0[i] - time : (time > row.t1[i] ? time - row.t1[i] : 0.0);
        if (distance <= bestDistance) { // ties: the later start wins, it is painted on top
            bestDistance = distance;
            best = row.span[i];
        }
    }
    return best;
}

// ---- Folding

namespace {

struct Pixels
{
    double begin, pps, width;
    double lastColumn;
    double at(double t) const { return std::clamp((t - begin) * pps, 0.0, width); }
    double column(double x) const { return std::min(std::floor(x), lastColumn); }
};

DrawItem spanItem(const GanttIndex::Row& row, const Pixels& px, std::size_t i)
{
    return {px.at(row.t0[i]), px.at(row.t1[i]), row.span[i], 1, row.microbatch[i], row.kind[i]};
}

ActionKind dominantKind(const GanttIndex::Row& row, std::size_t first, std::size_t last)
{
    const std::size_t k = row.kinds.size();
    std::size_t best = 0;
    std::uint32_t bestCount = 0;
    for (std::size_t s = 0; s < k; ++s) {
        std::uint32_t c = row.kind_prefix[last * k + s] - row.kind_prefix[first * k + s];
        if (c > bestCount) {
            bestCount = c;
            best = s;
        }
    }
    return row.kinds[best];
}

/// The end of a fold of [first, last): the members' latest end. The running maximum gives it in O(1) when a
/// member holds it; otherwise an earlier span covers the whole fold and the members are scanned, up to a cap
/// beyond which the running maximum stands (it only reaches over ground that earlier span covers).
double foldEnd(const GanttIndex::Row& row, std::size_t first, std::size_t last)
{
    const double running = row.max_t1[last - 1];
    if (first == 0 || running > row.max_t1[first - 1] || last - first > 64)
        return running;
    double end = row.t1[first];
    for (std::size_t i = first + 1; i < last; ++i)
        end = std::max(end, row.t1[i]);
    return end;
}

} // namespace

void fold(const GanttIndex& index, const TimeAxis& axis, int r, std::vector<DrawItem>& out)
{
    if (r < 0 || r >= index.rows())
        return;
    const auto& row = index.row(r);
    const Pixels px {axis.begin(), axis.pixelsPerSecond(), axis.width(), std::ceil(axis.width()) - 1};
    auto [i, last] = row.range(axis.begin(), axis.end());
    while (i < last) {
        const double column = px.column(px.at(row.t0[i]));
        // j: one past the last span that starts in this column (galloping, then binary search).
        std::size_t j = last;
        if (column < px.lastColumn) {
            const double limit = column + 1;
            std::size_t lo = i + 1, step = 1;
            while (lo + step < last && px.at(row.t0[lo + step]) < limit) {
                lo += step;
                step *= 2;
            }
            std::size_t hi = std::min(lo + step, last);
            auto it = std::partition_point(row.t0.begin() + static_cast<std::ptrdiff_t>(lo),
                row.t0.begin() + static_cast<std::ptrdiff_t>(hi), [&](double t) { return px.at(t) < limit; });
            j = static_cast<std::size_t>(it - row.t0.begin());
        }
        if (j - i == 1) {
            out.push_back(spanItem(row, px, i));
            i = j;
            continue;
        }
        const std::size_t tail = j - 1;
        const bool tailWide = px.at(row.t1[tail]) - px.at(row.t0[tail]) >= 1.0;
        const std::size_t foldLast = tailWide ? tail : j;
        if (foldLast - i == 1)
            out.push_back(spanItem(row, px, i));
        else
            out.push_back({px.at(row.t0[i]), px.at(foldEnd(row, i, foldLast)), row.span[i],
                static_cast<std::uint32_t>(foldLast - i), row.microbatch[i], dominantKind(row, i, foldLast)});
        if (tailWide)
            out.push_back(spanItem(row, px, tail));
        i = j;
    }
}

std::vector<DrawItem> fold(const GanttIndex& index, const TimeAxis& axis, int row)
{
    std::vector<DrawItem> out;
    fold(index, axis, row, out);
    return out;
}

void visibleSpans(const GanttIndex& index, const TimeAxis& axis, int r, std::vector<DrawItem>& out)
{
    if (r < 0 || r >= index.rows())
        return;
    const auto& row = index.row(r);
    const Pixels px {axis.begin(), axis.pixelsPerSecond(), axis.width(), std::ceil(axis.width()) - 1};
    auto [first, last] = row.range(axis.begin(), axis.end());
    for (std::size_t i = first; i < last; ++i)
        if (row.t1[i] >= axis.begin())
            out.push_back(spanItem(row, px, i));
}

StepCurve peakPerPixel(const std::vector<double>& t, const std::vector<double>& v, double begin, double end, int pixels)
{
    StepCurve out;
    const std::size_t n = std::min(t.size(), v.size());
    if (n == 0 || !(end > begin) || pixels < 1)
        return out;
    // The sample in force at `begin`, and the first one after `end`.
    std::size_t first = static_cast<std::size_t>(std::upper_bound(t.begin(), t.begin() + n, begin) - t.begin());
    first = first > 0 ? first - 1 : 0;
    const std::size_t last = static_cast<std::size_t>(std::upper_bound(t.begin(), t.begin() + n, end) - t.begin());
    if (last - first <= static_cast<std::size_t>(pixels)) {
        // As they are, but from the window's left edge to its right one: the value in force at `begin` (0 before
        // the first point) starts there, and the last change holds to `end` (a step curve continues until the next
        // change, which lies beyond the window).
        out.t.reserve(last - first + 2);
        out.v.reserve(last - first + 2);
        std::size_t i = first;
        out.t.push_back(begin);
        out.v.push_back(t[i] <= begin ? v[i++] : 0.0);
        out.t.insert(out.t.end(), t.begin() + i, t.begin() + last);
        out.v.insert(out.v.end(), v.begin() + i, v.begin() + last);
        if (out.t.back() < end) {
            out.t.push_back(end);
            out.v.push_back(out.v.back());
        }
        return out;
    }
    const double width = (end - begin) / pixels;
    out.t.reserve(pixels + 1);
    out.v.reserve(pixels + 1);
    std::size_t i = first;
    double current = 0; // before its first point the curve is 0
    if (t[i] <= begin)
        current = v[i++];
    for (int p = 0; p < pixels; ++p) {
        const double x0 = begin + p * width, x1 = p + 1 == pixels ? end : x0 + width;
        double peak = current;
        while (i < last && t[i] < x1) {
            current = v[i++];
            peak = std::max(peak, current);
        }
        out.t.push_back(x0);
        out.v.push_back(peak);
    }
    out.t.push_back(end);
    out.v.push_back(current);
    return out;
}

} // namespace pw::ui
