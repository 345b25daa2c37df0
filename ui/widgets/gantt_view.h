// SPDX-License-Identifier: MIT
// The schedule view: a Gantt chart of one or more Timelines on one time axis (a lane per device, compute and
// communication on separate sub-lanes) and, underneath, memory over time per device, sharing the time window.
#pragma once

#include <QString>
#include <QWidget>
#include <memory>
#include <utility>
#include <vector>

#include "planner/timeline.h"
#include "ui/jobs/job_runner.h"
#include "ui/widgets/gantt_scene.h"

class QCPGraph;
class QCustomPlot;
class QCPItemText;
class QCheckBox;
class QLabel;
class QPainter;
class QSplitter;

namespace pw::ui {

/// @brief Gantt chart (a QCustomPlot custom plottable painting the level-of-detail folded spans of
/// ui/gantt/geometry.h) with the memory plot underneath. Zoom with the wheel, +/- or Ctrl+wheel, pan by dragging
/// or with the arrow keys, Home shows everything. Hovering a span shows its details.
class GanttView : public QWidget
{
    Q_OBJECT

public:
    explicit GanttView(QWidget* parent = nullptr, bool withMemory = true);
    ~GanttView() override;

    /// Shows these timelines stacked on one time axis (the first one's memory in the plot underneath), the
    /// whole run in view.
    void setBlocks(std::vector<GanttBlock> blocks);
    /// setBlocks() with the indexing done off the GUI thread: the chart shown stays until the new one is ready, then
    /// prepared() is emitted. A later setBlocks(), setBlocksInBackground() or setEmptyMessage() supersedes it.
    void setBlocksInBackground(std::vector<GanttBlock> blocks);
    bool preparing() const;
    /// Runs the event loop until a setBlocksInBackground() has landed (tests, screenshots).
    bool waitForPrepared(int timeoutMs = 120'000);
    void setTimeline(std::shared_ptr<const planner::Timeline> timeline, std::vector<double> capacityBytes = {})
    {
        setBlocks({GanttBlock {{}, std::move(timeline), std::move(capacityBytes)}});
    }
    /// Block `block`'s timeline has grown (a live run appended spans, samples or devices): indexes what is new and
    /// repaints. A window that showed the whole run keeps showing it; one that ended at the latest span follows
    /// the run; any other window stays where it is.
    void timelineGrew(int block = 0);
    /// Shows `message` instead of a chart (why there is no schedule).
    void setEmptyMessage(const QString& message);
    /// Whether what is shown is not the current plan's (a simulation is still running): drawn greyed. Also greyed
    /// while setBlocksInBackground() prepares the next scene.
    void setStale(bool stale);
    bool stale() const;
    int blockCount() const;

    double windowBegin() const;
    double windowEnd() const;
    /// Shows [t0, t1] (clamped to the data and to the deepest zoom).
    void setTimeWindow(double t0, double t1);
    void zoom(double factor, double anchorPx);
    void showAll();
    void setArrowsVisible(bool visible);
    /// The share of the height the memory plot gets (0.25 by default).
    void setMemoryShare(double share);

    /// The hover text for a position in the Gantt plot's coordinates; empty over no span.
    QString toolTipAt(QPoint pos) const;
    /// The memory plot's hover text at a position in its coordinates: the device whose curve is under it and its
    /// memory then; empty when no curve is within a few pixels.
    QString memoryToolTipAt(QPoint pos) const;
    /// The Gantt plot's pixel x of time t and the y of a device's compute lane (block 0), for tests.
    QPoint pointOf(int device, double t) const;

    /// Writes the chart (and the memory plot) as PNG, SVG or PDF, chosen by the suffix.
    bool exportImage(const QString& path, QString* error = nullptr);
    /// Writes the first block's timeline as Chrome trace JSON (opens in Perfetto).
    bool exportChromeTrace(const QString& path, QString* error = nullptr);

    QCustomPlot* ganttPlot() const { return m_gantt; }
    QCustomPlot* memoryPlot() const { return m_memory; }
    /// Rectangles the last repaint drew (after folding), for the benchmark.
    std::size_t lastPaintedItems() const;
    /// Send -> receive arrows the last repaint drew (0 when they are off or too many to show).
    std::size_t lastPaintedArrows() const;
    /// Paints only with folding off (every visible span its own rectangle): the benchmark's baseline.
    void setFolding(bool enabled);
    /// On screen, with many spans in view, the items are written into an image drawn once; off, each is always a
    /// QPainter::fillRect (the benchmark's other baseline; exports to SVG and PDF always paint rectangles).
    void setImagePainting(bool enabled);

signals:
    void timeWindowChanged(double begin, double end);
    /// A setBlocksInBackground() landed and is shown.
    void prepared();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void rebuild();
    /// The device labels and the plot's height, from the blocks' layouts.
    void layoutRows();
    /// The device (or node) labels on the y axis, as many as the plot's height fits; true when they changed.
    bool labelLanes();
    void updateMargins();
    void rebuildMemory();
    /// Sets each memory curve's points for the window shown (peakPerPixel()).
    void updateMemoryCurves();
    /// Lays the legend out for the plot's width; returns whether it gave way to a note ("N devices: hover a curve").
    /// Sets m_memoryNoteLines.
    bool fitMemoryLegend();
    /// Sets the memory axis' range: the top curve below the notes' lines (m_memoryNoteLines) at the plot's height;
    /// true when it changed.
    bool fitMemoryHeadroom();
    /// Shows the capacity lines' labels that have room, lowest first: devices sharing a GPU each have their own
    /// capacity (what the others leave), and close lines on a short plot would write over each other.
    void spaceCapacityLabels();
    static constexpr int kExportLegendHeight = 24;
    /// The legend an exported picture carries on top (the window's legend is a widget, not part of the plots).
    void paintExportLegend(QPainter& painter, int width) const;
    void onRangeChanged();
    /// The plot's visible window as a TimeAxis (clamped to the data and the deepest zoom).
    TimeAxis timeAxis() const;

    /// Every memory sample of the first block's timeline per device (seconds, GiB), collected once.
    struct MemorySeries
    {
        struct Curve
        {
            QString name;
            std::vector<double> t;
            std::vector<double> v;
            /// The curve's peak per 1/kCoarseColumns of the run: what zoomed-out windows reduce (a window wider
            /// than that many pixels' worth reads this instead of every sample).
            StepCurve coarse;
        };
        static constexpr int kCoarseColumns = 16384;
        double begin = 0;
        double end = 0;
        std::vector<Curve> curves;
        double peak_gib = 0;
    };
    static MemorySeries memorySeries(const planner::Timeline& timeline, double end);
    /// What setBlocksInBackground() builds off the GUI thread.
    struct Prepared
    {
        GanttScene scene;
        std::shared_ptr<const MemorySeries> memory;
    };

    QCustomPlot* m_gantt = nullptr;
    QCustomPlot* m_memory = nullptr;
    QCPItemText* m_aboveNote = nullptr; ///< the memory plot's "capacity … (above the scale)", when shown
    std::vector<std::pair<double, QCPItemText*>> m_capacityLabels; ///< each capacity line's label at its GiB, ascending
    QCPItemText* m_hoverNote = nullptr; ///< the memory plot's "N devices: hover a curve", when shown
    double m_memoryTop = 0; ///< GiB: the highest curve or capacity line the memory plot must show
    int m_memoryNoteLines = 0; ///< lines of notes at the top of the memory plot (0, 1 or 2)
    /// A device's memory curve: its graph and its samples; the graph shows a reduction of them (peakPerPixel).
    struct MemoryCurve
    {
        QCPGraph* graph = nullptr;
        const MemorySeries::Curve* samples = nullptr;
    };
    std::shared_ptr<const MemorySeries> m_preparedMemory; ///< the memory curves' samples; rebuilt when empty
    std::vector<MemoryCurve> m_memoryCurves;
    QLabel* m_legend = nullptr;
    QCheckBox* m_arrows = nullptr;
    QSplitter* m_splitter = nullptr;
    std::unique_ptr<GanttScene> m_scene; ///< what the plot shows; the plottable paints it
    bool m_adjusting = false;
    bool m_stale = false; ///< setStale(): the caller's word
    bool m_waiting = false; ///< a scene is being prepared in the background
    JobRunner m_preparing {QStringLiteral("schedule view")}; // last: stopped and joined first
};

} // namespace pw::ui
