// SPDX-License-Identifier: MIT
// The Gantt's geometry without a widget: the time axis (seconds <-> pixels, zoom and pan), the rows (device x
// lane), an index of a Timeline's spans per row, and the level-of-detail folding that turns the spans visible in
// a window into at most about one draw item per pixel column. Pure C++20: the Qt view only paints DrawItems.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/timeline.h"

namespace pw::ui {

/// @brief Maps seconds to pixels for the visible window [begin, end] of the data range over a view `width`
/// pixels wide. The window always lies inside the data range and is at least `minDuration` long.
class TimeAxis
{
public:
    static constexpr double kDefaultMinDuration = 1e-6; ///< seconds: the deepest zoom

    TimeAxis() = default;
    /// Shows the whole data range [dataBegin, dataEnd] (extended to minDuration when shorter).
    TimeAxis(double dataBegin, double dataEnd, double widthPx, double minDuration = kDefaultMinDuration);

    double begin() const { return m_begin; }
    double end() const { return m_end; }
    double duration() const { return m_end - m_begin; }
    double width() const { return m_width; }
    double dataBegin() const { return m_dataBegin; }
    double dataEnd() const { return m_dataEnd; }
    double minDuration() const { return m_minDuration; }
    double pixelsPerSecond() const { return m_pps; }

    double toPixel(double t) const { return (t - m_begin) * m_pps; }
    double toTime(double x) const { return m_begin + x / m_pps; }

    /// Resizes the view; the window's time range stays.
    void setWidth(double widthPx);
    /// Shows [t0, t1], clamped: the duration to [minDuration, data duration], then shifted into the data range.
    void setWindow(double t0, double t1);
    /// Zooms by `factor` (> 1 zooms in) about the pixel `anchorPx`: the time under the anchor stays under it
    /// unless the window had to be clamped to the data range.
    void zoom(double factor, double anchorPx);
    /// Moves the content by dxPx pixels, as when dragging it: dx > 0 shows earlier times. Clamped.
    void pan(double dxPx);
    void showAll() { setWindow(m_dataBegin, m_dataEnd); }

private:
    double m_dataBegin = 0, m_dataEnd = 1;
    double m_begin = 0, m_end = 1;
    double m_width = 1;
    double m_minDuration = kDefaultMinDuration;
    double m_pps = 1;
};

/// @brief The sub-rows of a device: compute, point-to-point (send and receive share it), collectives.
enum class LaneRow : std::uint8_t { Compute, PointToPoint, Collective };
inline constexpr int kLaneRows = 3;
LaneRow laneRowOf(planner::Lane lane);

/// @brief Heights in pixels of a device's sub-rows and the gap below each device. A zero height hides the row.
struct RowHeights
{
    double compute = 22;
    double point_to_point = 8;
    double collective = 8;
    double gap = 6;
};

struct RowHit
{
    int device = 0;
    LaneRow lane = LaneRow::Compute;
    int row = 0; ///< RowLayout::rowIndex(device, lane)
};

/// @brief Vertical layout: one block per device, its sub-rows stacked top to bottom, then the gap.
class RowLayout
{
public:
    explicit RowLayout(int devices, RowHeights heights = {}, double top = 0);

    int devices() const { return m_devices; }
    int rows() const { return m_devices * kLaneRows; }
    static int rowIndex(int device, LaneRow lane) { return device * kLaneRows + static_cast<int>(lane); }
    double laneHeight(LaneRow lane) const;
    double deviceHeight() const { return m_deviceHeight; } ///< sub-rows and gap
    double deviceTop(int device) const { return m_top + device * m_deviceHeight; }
    double rowTop(int device, LaneRow lane) const;
    double height() const { return m_devices * m_deviceHeight; }
    /// The row under y, or nothing in a gap, a hidden row or outside the devices.
    std::optional<RowHit> rowAt(double y) const;

private:
    int m_devices = 0;
    RowHeights m_heights;
    double m_top = 0;
    double m_deviceHeight = 0;
};

/// @brief A Timeline's spans grouped per row (device x LaneRow) and sorted by start. Answers "spans intersecting
/// [a, b]" by binary search on the starts and on the running maximum of the ends. Grows with its timeline: extend()
/// indexes the spans appended since, in O(1) amortised per span that starts no earlier than its row's last one
/// (a device reports its spans in order of start; devices may interleave in any order); a row that receives a span
/// out of order is re-sorted once per extend(). An index extended step by step equals one built at once.
class GanttIndex
{
public:
    GanttIndex() = default;
    explicit GanttIndex(const planner::Timeline& timeline);

    /// Indexes timeline.spans[indexedSpans()...]: the spans appended since the last call. The spans indexed
    /// already must not have changed (a Timeline only grows).
    void extend(const planner::Timeline& timeline);
    std::size_t indexedSpans() const { return m_indexed; }

    int devices() const { return m_devices; }
    int rows() const { return m_devices * kLaneRows; }
    std::size_t spanCount(int row) const { return m_rows[row].t0.size(); }
    double dataBegin() const { return m_dataBegin; }
    double dataEnd() const { return m_dataEnd; }

    /// Indices into the timeline's spans of the spans of `row` with t0 <= b and t1 >= a, in order of start.
    std::vector<std::uint32_t> spansIn(int row, double a, double b) const;
    /// The span of the row under `time`: the latest-starting one containing it (it is painted on top), else the
    /// nearest within `tolerance` seconds; nothing when none is that close.
    std::optional<std::uint32_t> spanAt(int row, double time, double tolerance) const;
    std::optional<std::uint32_t> spanAt(int device, LaneRow lane, double time, double tolerance) const
    {
        return spanAt(RowLayout::rowIndex(device, lane), time, tolerance);
    }

    /// @brief One row's spans in order of (t0, t1), as parallel arrays.
    struct Row
    {
        std::vector<double> t0, t1;
        std::vector<double> max_t1; ///< running maximum of t1: non-decreasing, so binary-searchable
        std::vector<std::uint32_t> span; ///< index into Timeline::spans
        std::vector<std::int32_t> microbatch;
        std::vector<planner::ActionKind> kind;
        std::vector<planner::ActionKind> kinds; ///< the distinct kinds of the row
        std::vector<std::uint32_t> kind_prefix; ///< [(i) * kinds.size() + k]: spans of kind k among the first i
        /// Appends a span that sorts after every span of the row.
        void append(double start, double end, std::uint32_t index, std::int32_t mb, planner::ActionKind k);
        /// Sorts the row by (t0, t1, span) and recomputes what depends on the order.
        void sort();
        void countKinds();

        bool operator==(const Row&) const = default;
        /// First index of the spans with t0 <= b and t1 >= a, skipping those hidden under an earlier, longer one
        /// at the left edge; `last` is one past the last.
        std::pair<std::size_t, std::size_t> range(double a, double b) const;
    };
    const Row& row(int r) const { return m_rows[r]; }

private:
    int m_devices = 0;
    double m_dataBegin = 0, m_dataEnd = 0;
    std::size_t m_indexed = 0; ///< timeline spans indexed so far
    std::vector<Row> m_rows;
};

/// @brief What the view paints for one row: a span (count == 1) or a fold of `count` spans that start in one
/// pixel column. Pixels are clipped to [0, width].
struct DrawItem
{
    double x0 = 0;
    double x1 = 0;
    std::uint32_t span = 0; ///< the span, or the first span of the fold (index into Timeline::spans)
    std::uint32_t count = 1;
    std::int32_t microbatch = 0; ///< colour key: the span's microbatch (a fold's first span's)
    planner::ActionKind kind = planner::ActionKind::Forward; ///< a fold's most frequent kind
    bool folded() const { return count > 1; }
};

/// Level-of-detail folding of the row's spans visible in the axis' window, in order of x0. The spans starting
/// in one pixel column fold into one item spanning them, except that a span is drawn as itself when it is the
/// only one starting in its column, or the last one to start there and at least 1 px wide. Guarantees:
/// (1) every pixel column touched by a visible span is touched by an item and conversely; (2) an idle gap of
/// 1 px or more between the visible spans is never covered by an item; (3) at most 2 items per pixel column.
/// Cost O(items x log n), independent of the number of spans folded. Appends to `out`.
void fold(const GanttIndex& index, const TimeAxis& axis, int row, std::vector<DrawItem>& out);
std::vector<DrawItem> fold(const GanttIndex& index, const TimeAxis& axis, int row);

/// Every visible span of the row as its own item, unfolded: the reference for tests and benchmarks.
void visibleSpans(const GanttIndex& index, const TimeAxis& axis, int row, std::vector<DrawItem>& out);

/// @brief A step curve (value v[i] from t[i] until t[i + 1]; t ascending) reduced for a window [begin, end] drawn
/// `pixels` wide: one point per pixel column holding the highest value the curve takes in that column, then the
/// value at `end`. Peaks survive (a memory plot must show every peak), the points are at most pixels + 2, and the
/// cost is O(log n + samples in the window + pixels). A curve with no more points in the window than pixels is
/// returned as it is, clipped to the window. Either way the result spans the whole window, as a step curve holds
/// its value until the next change: its first point is at `begin` with the value in force there, its last at `end`.
/// Before its first point the curve is 0. The memory plot of a 4 M-action run draws this instead of millions of
/// points.
struct StepCurve
{
    std::vector<double> t;
    std::vector<double> v;
};
StepCurve peakPerPixel(
    const std::vector<double>& t, const std::vector<double>& v, double begin, double end, int pixels);

} // namespace pw::ui
