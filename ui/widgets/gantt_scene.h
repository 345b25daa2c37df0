// SPDX-License-Identifier: MIT
// What the schedule view shows, without the plot: the stacked timelines (each indexed, laid out in rows), their
// colours, the time range, and the hover text under a point. The plottable (gantt_plottable.h) paints it; the view
// (gantt_view.h) owns it and maps the mouse to it.
#pragma once

#include <QColor>
#include <QFont>
#include <QString>
#include <memory>
#include <vector>

#include "planner/timeline.h"
#include "ui/gantt/geometry.h"

namespace pw::ui {

/// @brief One Gantt chart stacked in the view: a timeline and the title shown above its lanes (empty: none).
/// The timeline is shared, not copied: a prediction or a run owns it; a live run's owner appends to it and then
/// tells the view (GanttView::timelineGrew).
struct GanttBlock
{
    QString title;
    std::shared_ptr<const planner::Timeline> timeline;
    /// Memory capacity per device of the timeline (bytes), drawn as limits in the memory plot; empty: unknown.
    std::vector<double> memory_capacity_bytes = {};
    /// Where each simulated batch ends (SimulationResult::batch_ends_s), marked with a dashed line; empty: one batch.
    std::vector<double> batch_ends_s = {};
};

/// The colour of a span: a hue per microbatch (a golden angle apart, so neighbours differ), the kind's lightness.
QColor spanColor(planner::ActionKind kind, int microbatch);

/// A block's title as drawn in its band (`bandPixels` high, `widthPixels` wide): bold, the font shrunk until a line
/// fits the band's height, the text elided to the width. An empty text: the band is too thin for a legible title
/// (under 7 px); the hover text still names the block.
struct FittedTitle
{
    QFont font;
    QString text;
};
FittedTitle fitTitle(const QString& title, QFont font, double bandPixels, double widthPixels);

/// @brief One stacked timeline: its spans indexed by row and its rows' place in the scene's layout units.
struct GanttBlockData
{
    static constexpr double kTitleHeight = 18; ///< layout units above a titled block
    /// Layout units above an untitled block of several batches, where their "batch k" labels go (a titled one
    /// shows them in its title's band): above the lanes, never over a bar.
    static constexpr double kBatchLabelHeight = 14;

    QString title;
    std::shared_ptr<const planner::Timeline> timeline; ///< never null
    std::vector<double> capacity; ///< bytes per device; empty when unknown
    std::vector<double> batch_ends; ///< seconds; marked when there are several batches
    GanttIndex index;
    RowLayout layout;
    double top = 0;
    double bottom = 0;

    GanttBlockData(GanttBlock block, double blockTop);

    /// Indexes the spans appended to the timeline since, and moves the block's top to `blockTop`.
    void grow(double blockTop);
    /// The band above the lanes, [top, first lane's top): the title and the batches' labels are drawn there.
    double headerHeight() const { return layout.deviceTop(0) - top; }

    /// The point-to-point messages, as their sends (the transfer leaves the sender at t0 and has arrived at the
    /// peer at t1; the receiver records a receive span only when it had to wait). Collected when first asked
    /// for (arrows shown), from the GUI thread.
    const std::vector<std::uint32_t>& messages() const;

private:
    mutable std::size_t m_paired = 0; ///< spans looked at so far
    mutable std::vector<std::uint32_t> m_sends;
};

/// @brief The blocks on one time axis, stacked top to bottom, with what painting them needs and reports.
class GanttScene
{
public:
    /// What the plottable paints: folded items (else every visible span), an image for many spans (else a
    /// fillRect each), send -> receive arrows.
    struct Settings
    {
        bool folding = true;
        bool image = true;
        bool arrows = false;
    };
    /// What the last repaint drew.
    struct Stats
    {
        std::size_t items = 0;
        std::size_t arrows = 0;
    };

    void setBlocks(std::vector<GanttBlock> blocks);
    /// Takes `prepared`'s blocks, colours and message (a scene built on another thread); keeps the settings.
    void adopt(GanttScene&& prepared);
    /// Block `block`'s timeline has grown (spans appended, devices added): extends its index, the layout and the
    /// colours, in time proportional to what was appended.
    void grow(std::size_t block);
    /// No blocks: `message` says why.
    void clear(const QString& message);

    const std::vector<std::unique_ptr<GanttBlockData>>& blocks() const { return m_blocks; }
    bool empty() const { return m_blocks.empty(); }
    const QString& emptyMessage() const { return m_emptyMessage; }
    double dataBegin() const;
    double dataEnd() const;
    /// Layout units from the top of the first block to the bottom of the last (1 when empty).
    double height() const { return m_blocks.empty() ? 1 : m_blocks.back()->bottom; }
    /// The time axis of a view `widthPx` wide showing [begin, end], clamped to the data.
    TimeAxis axis(double begin, double end, double widthPx) const;

    /// spanColor() of an item as a pixel, from a table per (kind, microbatch) of the blocks.
    QRgb colorOf(const DrawItem& item) const;
    /// The hover text at time `t` and layout coordinate `y`: the span there (or within `tolerance` seconds).
    QString toolTip(double t, double y, double tolerance) const;

    Settings settings;
    /// What is shown is not the current plan's (its simulation or its indexing is still running): drawn greyed, as
    /// the metrics panel greys its numbers, so an old chart is never read as the new plan's.
    bool stale = false;
    mutable Stats stats; ///< written by the painting

private:
    /// Covers microbatches up to `most` in the colour table.
    void coverMicrobatches(int most);

    std::vector<std::unique_ptr<GanttBlockData>> m_blocks;
    QString m_emptyMessage;
    std::vector<QRgb> m_colors; ///< [kind * m_colorStride + microbatch]
    int m_colorStride = 0;
};

} // namespace pw::ui
