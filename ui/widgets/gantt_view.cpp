// SPDX-License-Identifier: MIT
#include "gantt_view.h"

#include <QCheckBox>
#include <QEvent>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPdfWriter>
#include <QResizeEvent>
#include <QSplitter>
#include <QSvgGenerator>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include <qcustomplot.h>

#include "planner/errors.h"
#include "planner/io/chrome_trace.h"
#include "planner/io/json_file.h"
#include "ui/gantt/geometry.h"
#include "ui/models/format.h"
#include "ui/widgets/gantt_plottable.h"

namespace pw::ui {

using planner::ActionKind;

namespace {

/// Tick labels in seconds, milliseconds or microseconds, chosen from the visible range.
class SecondsTicker : public QCPAxisTicker
{
protected:
    QString getTickLabel(double tick, const QLocale&, QChar, int) override
    {
        return secondsTextIn(std::abs(tick) < 1e-15 ? 0.0 : tick, m_unit, m_decimals);
    }
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override
    {
        // Enough decimals to tell neighbouring ticks apart in the unit secondsText() will pick.
        // One unit for every tick of the axis: the one of its largest value.
        const double largest = std::max(std::abs(range.lower), std::abs(range.upper));
        m_unit = largest >= 1 ? 1 : largest >= 1e-3 ? 1e-3 : 1e-6;
        // ... and enough to write the step itself (2.5 s needs one: "2.5 s, 5 s, 7.5 s", not "3 s, 5 s, 8 s").
        const double step = tickStep / m_unit;
        int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6);
        while (decimals < 6) {
            const double scaled = step * std::pow(10.0, decimals);
            if (std::abs(scaled - std::round(scaled)) <= 1e-6 * std::max(1.0, scaled))
                break;
            ++decimals;
        }
        m_decimals = decimals;
        return QCPAxisTicker::createTickVector(tickStep, range);
    }

private:
    double m_unit = 1;
    int m_decimals = 1;
};

} // namespace

GanttView::GanttView(QWidget* parent, bool withMemory)
    : QWidget(parent)
    , m_scene(std::make_unique<GanttScene>())
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(6, 2, 6, 0);
    m_legend = new QLabel(this);
    m_legend->setTextFormat(Qt::RichText);
    m_legend->setWordWrap(true);
    auto swatch = [](QColor c, const QString& text) {
        return QStringLiteral("<span style='white-space:nowrap'><span "
                              "style='background-color:%1'>&nbsp;&nbsp;&nbsp;&nbsp;</span>&nbsp;%2</span> ")
            .arg(c.name(), QString(text).replace(QLatin1Char(' '), QStringLiteral("&nbsp;")));
    };
    m_legend->setText(swatch(spanColor(ActionKind::Forward, 0), tr("forward"))
        + swatch(spanColor(ActionKind::Backward, 0), tr("backward"))
        + swatch(spanColor(ActionKind::BackwardInput, 0), tr("input gradient"))
        + swatch(spanColor(ActionKind::BackwardWeight, 0), tr("weight gradient"))
        + swatch(spanColor(ActionKind::AllReduce, 0), tr("all-reduce"))
        + swatch(spanColor(ActionKind::OptimizerStep, 0), tr("optimizer"))
        + swatch(spanColor(ActionKind::WavePush, 0), tr("wave push/pull")) + tr("· hue: microbatch · grey: idle"));
    m_legend->setToolTip(tr("Light: forward; dark: backward (zero-bubble schedules split it into the input gradient "
                            "and the later weight gradient). The hue tells the microbatch. Thin rows under a device "
                            "are its sends/receives and collectives; grey is idle time (the bubbles)."));
    // Wraps between entries (each swatch and its name stay together); never sets the window's width.
    m_legend->setMinimumWidth(120);
    bar->addWidget(m_legend, 1);
    m_arrows = new QCheckBox(tr("Send → receive arrows"), this);
    connect(m_arrows, &QCheckBox::toggled, this, &GanttView::setArrowsVisible);
    bar->addWidget(m_arrows);
    layout->addLayout(bar);

    m_gantt = new QCustomPlot(this);
    m_gantt->setMinimumSize(200, 120); // QCustomPlot cannot paint into an empty buffer
    m_gantt->setMouseTracking(true);
    m_gantt->setFocusPolicy(Qt::StrongFocus);
    m_gantt->installEventFilter(this);
    addGanttPlottable(m_gantt->xAxis, m_gantt->yAxis, *m_scene);
    m_gantt->yAxis->setRangeReversed(true);
    m_gantt->yAxis->grid()->setVisible(false);
    m_gantt->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    m_gantt->yAxis->setSubTicks(false);
    m_gantt->yAxis->setTickLength(0, 0);
    m_gantt->xAxis->setTicker(QSharedPointer<SecondsTicker>::create());
    m_gantt->xAxis->grid()->setPen(QPen(QColor(0, 0, 0, 40), 1, Qt::DotLine));
    m_gantt->xAxis->grid()->setLayer(QStringLiteral("overlay")); // the grid over the rows, faint
    m_gantt->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_gantt->axisRect()->setRangeDrag(Qt::Horizontal);
    m_gantt->axisRect()->setRangeZoom(Qt::Horizontal);
    connect(m_gantt->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { onRangeChanged(); });
    // How many lane labels fit depends on the plot's height, known once its layout is: relabel then, every replot
    // (a hidden tab's plot has no height yet when its chart is set).
    // The axis has taken its ticks before this signal: labels that change take effect at the next replot.
    connect(m_gantt, &QCustomPlot::afterLayout, this, [this] {
        if (labelLanes())
            m_gantt->replot(QCustomPlot::rpQueuedReplot);
    });

    QSplitter* splitter = nullptr;
    if (withMemory) {
        splitter = new QSplitter(Qt::Vertical, this);
        splitter->addWidget(m_gantt);
        m_memory = new QCustomPlot(this);
        m_memory->setMinimumSize(200, 150); // room for its axis labels and a legend row
        m_memory->setMouseTracking(true);
        splitter->setChildrenCollapsible(false);
        m_memory->setFocusPolicy(Qt::StrongFocus);
        m_memory->installEventFilter(this);
        m_memory->xAxis->setTicker(QSharedPointer<SecondsTicker>::create());
        m_memory->yAxis->setLabel(tr("memory (GiB)"));
        // The legend sits in a row above the plot, so that it hides no curve.
        m_memory->plotLayout()->insertRow(0);
        m_memory->plotLayout()->addElement(0, 0, m_memory->legend);
        m_memory->plotLayout()->setRowStretchFactor(0, 0.001);
        m_memory->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
        m_memory->legend->setWrap(8);
        m_memory->legend->setBorderPen(Qt::NoPen);
        m_memory->legend->setFont(QFont(font().family(), 8));
        m_memory->legend->setMargins(QMargins(8, 2, 8, 0));
        m_memory->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
        // The notes' room depends on the plot's height, known after its layout: the range follows every layout (a
        // resize). The axis took its ticks before this signal: a changed range replots once more for them.
        connect(m_memory, &QCustomPlot::afterLayout, this, [this] {
            if (m_memoryTop > 0 && fitMemoryHeadroom())
                m_memory->replot(QCustomPlot::rpQueuedReplot);
        });
        m_memory->axisRect()->setRangeDrag(Qt::Horizontal);
        m_memory->axisRect()->setRangeZoom(Qt::Horizontal);
        connect(m_memory->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this](const QCPRange& r) {
            if (!m_adjusting)
                setTimeWindow(r.lower, r.upper);
        });
        splitter->addWidget(m_memory);
        splitter->setStretchFactor(0, 3);
        splitter->setStretchFactor(1, 1);
        m_splitter = splitter;
        layout->addWidget(splitter, 1);
    } else {
        layout->addWidget(m_gantt, 1);
    }
    setEmptyMessage(tr("No schedule to show"));
}

GanttView::~GanttView() = default;

GanttView::MemorySeries GanttView::memorySeries(const planner::Timeline& tl, double end)
{
    MemorySeries series;
    const int devices = static_cast<int>(tl.device_names.size());
    series.curves.resize(devices);
    for (int d = 0; d < devices; ++d)
        series.curves[d].name = QString::fromStdString(tl.device_names[d]);
    for (const auto& m : tl.memory()) {
        if (m.device < 0 || m.device >= devices)
            continue;
        auto& c = series.curves[m.device];
        c.t.push_back(m.t);
        c.v.push_back(m.value / double(1ull << 30));
        series.peak_gib = std::max(series.peak_gib, c.v.back());
    }
    series.begin = 0;
    series.end = end;
    for (auto& c : series.curves)
        if (!c.t.empty()) { // the last value holds to the end of the run
            c.t.push_back(end);
            c.v.push_back(c.v.back());
            series.begin = std::min(series.begin, c.t.front());
        }
    for (auto& c : series.curves)
        if (!c.t.empty())
            c.coarse = peakPerPixel(c.t, c.v, series.begin, series.end, MemorySeries::kCoarseColumns);
    return series;
}

void GanttView::setBlocks(std::vector<GanttBlock> blocks)
{
    m_preparing.cancel();
    m_scene->setBlocks(std::move(blocks));
    m_preparedMemory.reset();
    rebuild();
}

void GanttView::setBlocksInBackground(std::vector<GanttBlock> blocks)
{
    // Indexing millions of spans and collecting millions of memory samples take a good part of a second: on the
    // view's own job runner. What is shown stays until the new scene lands.
    const bool memory = m_memory != nullptr;
    m_waiting = true; // what is shown now is not what is coming: greyed until it lands
    setStale(m_stale);
    m_preparing.submit(
        [blocks = std::move(blocks), memory](std::stop_token) mutable {
            auto prepared = std::make_shared<Prepared>();
            prepared->scene.setBlocks(std::move(blocks));
            if (memory && !prepared->scene.empty())
                prepared->memory = std::make_shared<MemorySeries>(
                    memorySeries(*prepared->scene.blocks().front()->timeline, prepared->scene.dataEnd()));
            return prepared;
        },
        [this](std::shared_ptr<Prepared> ready) {
            m_scene->adopt(std::move(ready->scene));
            m_preparedMemory = std::move(ready->memory);
            m_waiting = false;
            m_scene->stale = m_stale;
            rebuild();
            emit prepared();
        });
}

void GanttView::setStale(bool stale)
{
    m_stale = stale;
    const bool shown = m_stale || m_waiting;
    if (m_scene->stale == shown)
        return;
    m_scene->stale = shown;
    m_gantt->replot(QCustomPlot::rpQueuedReplot);
}

bool GanttView::stale() const
{
    return m_scene->stale;
}

bool GanttView::waitForPrepared(int timeoutMs)
{
    return m_preparing.waitForIdle(timeoutMs);
}

bool GanttView::preparing() const
{
    return m_preparing.busy();
}

void GanttView::setEmptyMessage(const QString& message)
{
    m_preparing.cancel();
    m_waiting = false;
    m_scene->stale = false; // a message, not an old chart
    m_scene->clear(message);
    m_preparedMemory.reset();
    rebuild();
}

int GanttView::blockCount() const
{
    return static_cast<int>(m_scene->blocks().size());
}

void GanttView::timelineGrew(int block)
{
    if (block < 0 || block >= blockCount())
        return;
    const double begin = windowBegin(), end = windowEnd();
    const double oldBegin = m_scene->dataBegin(), oldEnd = m_scene->dataEnd();
    const double slack = 1e-9 * std::max(1.0, std::abs(oldEnd));
    const bool all = begin <= oldBegin + slack && end >= oldEnd - slack;
    const bool following = end >= oldEnd - slack;
    m_scene->grow(static_cast<std::size_t>(block));
    layoutRows();
    m_preparedMemory.reset(); // the samples appended since
    rebuildMemory();
    if (all)
        setTimeWindow(m_scene->dataBegin(), m_scene->dataEnd());
    else if (following)
        setTimeWindow(m_scene->dataEnd() - (end - begin), m_scene->dataEnd());
    else
        setTimeWindow(begin, end);
    m_gantt->replot(QCustomPlot::rpQueuedReplot);
}

bool GanttView::labelLanes()
{
    auto ticker = qSharedPointerCast<QCPAxisTickerText>(m_gantt->yAxis->ticker());
    const QMap<double, QString> before = ticker->ticks();
    ticker->clear();
    // Every device's name while the lanes are as tall as a line of text; else one label per node ("dgx3 ×8", the
    // devices' common name before '/'), in the middle of its lanes; else every k-th node. Hovering a lane names
    // its device either way.
    const double lineHeight = QFontMetrics(m_gantt->yAxis->tickLabelFont()).height() + 2;
    // The plot's height less its time axis (the axis rect's own height is only laid out at the next replot, and a
    // hidden tab's plot may not have replotted since it was sized).
    const int plotPixels = std::max(m_gantt->axisRect()->height(), m_gantt->height() - 40);
    const double pixelsPerUnit = std::max(1, plotPixels) / std::max(1.0, m_scene->height());
    for (const auto& b : m_scene->blocks()) {
        const int devices = b->layout.devices();
        auto name = [&](int d) {
            return d < static_cast<int>(b->timeline->device_names.size())
                ? QString::fromStdString(b->timeline->device_names[d])
                : tr("device %1").arg(d);
        };
        auto middle = [&](int first, int last) {
            return (b->layout.rowTop(first, LaneRow::Compute) + b->layout.rowTop(last, LaneRow::Compute)
                       + b->layout.laneHeight(LaneRow::Compute))
                / 2;
        };
        const double devicePixels = (devices > 0 ? b->layout.height() / devices : 0) * pixelsPerUnit;
        if (devicePixels >= lineHeight || devices <= 1) {
            for (int d = 0; d < devices; ++d)
                ticker->addTick(middle(d, d), name(d));
            continue;
        }
        std::vector<std::pair<int, int>> nodes; // [first, last] device of each run of one node prefix
        for (int d = 0; d < devices; ++d) {
            const QString prefix = name(d).section(QLatin1Char('/'), 0, 0);
            if (nodes.empty() || name(nodes.back().first).section(QLatin1Char('/'), 0, 0) != prefix)
                nodes.push_back({d, d});
            else
                nodes.back().second = d;
        }
        const double nodePixels = devicePixels * devices / std::max<std::size_t>(1, nodes.size());
        const int every = std::max(1, static_cast<int>(std::ceil(lineHeight / std::max(1.0, nodePixels))));
        for (std::size_t n = 0; n < nodes.size(); n += every) {
            const auto [first, last] = nodes[n];
            const QString label = first == last
                ? name(first)
                : tr("%1 ×%2").arg(name(first).section(QLatin1Char('/'), 0, 0)).arg(last - first + 1);
            ticker->addTick(middle(first, last), label);
        }
    }
    return ticker->ticks() != before;
}

void GanttView::layoutRows()
{
    labelLanes();
    m_gantt->yAxis->setRange(0, m_scene->height());
    updateMargins();
}

void GanttView::rebuild()
{
    layoutRows();
    const bool empty = m_scene->empty(); // the message alone, no axes
    m_gantt->yAxis->setVisible(!empty);
    m_gantt->xAxis->setVisible(!empty);
    m_adjusting = true;
    m_gantt->xAxis->setRange(m_scene->dataBegin(), m_scene->dataEnd());
    m_adjusting = false;
    rebuildMemory();
    onRangeChanged();
    m_gantt->replot(QCustomPlot::rpQueuedReplot); // never paint inside the caller's signal handlers
}

void GanttView::updateMargins()
{
    QFontMetrics fm(m_gantt->yAxis->tickLabelFont());
    int width = 0;
    for (const auto& b : m_scene->blocks())
        for (const auto& n : b->timeline->device_names)
            width = std::max(width, fm.horizontalAdvance(QString::fromStdString(n)));
    const int left = std::max(width + 18, 80);
    for (QCustomPlot* plot : {m_gantt, m_memory}) {
        if (!plot)
            continue;
        plot->axisRect()->setAutoMargins(QCP::msTop | QCP::msBottom | QCP::msRight);
        plot->axisRect()->setMargins(QMargins(left, 0, 0, 0));
        plot->axisRect()->setMinimumMargins(QMargins(0, 8, 16, 0));
    }
}

void GanttView::rebuildMemory()
{
    if (!m_memory)
        return;
    m_memory->clearGraphs();
    m_memoryCurves.clear(); // their graphs are gone
    m_memory->clearItems();
    m_memoryTop = 0;
    m_memoryNoteLines = 0;
    m_aboveNote = nullptr;
    m_capacityLabels.clear();
    m_hoverNote = nullptr; // clearItems deleted both notes
    m_memory->legend->setVisible(false);
    if (m_scene->empty()) {
        m_memory->replot();
        return;
    }
    if (!m_preparedMemory)
        m_preparedMemory
            = std::make_shared<MemorySeries>(memorySeries(*m_scene->blocks().front()->timeline, m_scene->dataEnd()));
    const MemorySeries& series = *m_preparedMemory;
    const int devices = static_cast<int>(series.curves.size());
    const double peak = series.peak_gib;
    m_memoryCurves.clear();
    for (int d = 0; d < devices; ++d) {
        const auto& curve = series.curves[d];
        if (curve.t.empty())
            continue;
        QCPGraph* g = m_memory->addGraph();
        g->setName(curve.name);
        g->setLineStyle(QCPGraph::lsStepLeft);
        // Thin, not antialiased, with many devices: dozens of curves of thousands of steps stroke slowly.
        g->setPen(QPen(
            QColor::fromHsv((d * 360 / std::max(1, devices) + d % 2 * 20) % 360, 200, 190), devices > 16 ? 1 : 1.5));
        g->setAntialiased(devices <= 16);
        m_memoryCurves.push_back({g, &curve});
    }
    updateMemoryCurves();
    // Each distinct capacity as a limit line, so that over-memory devices show as curves crossing it. Limits far
    // above every curve (80 GiB against 20 used) would squash the curves: they are named at the top instead.
    std::vector<double> limits;
    for (double c : m_scene->blocks().front()->capacity)
        if (c > 0 && std::find(limits.begin(), limits.end(), c) == limits.end())
            limits.push_back(c);
    std::sort(limits.begin(), limits.end());
    double top = peak;
    for (double c : limits)
        if (c / double(1ull << 30) <= 2 * peak)
            top = std::max(top, c / double(1ull << 30));
    QStringList above;
    for (double c : limits) {
        const double gib = c / double(1ull << 30);
        if (gib > top) {
            above << bytesText(c);
            continue;
        }
        auto* line = new QCPItemStraightLine(m_memory);
        line->point1->setCoords(0, gib);
        line->point2->setCoords(1, gib);
        line->setPen(QPen(QColor(198, 40, 40, 160), 1, Qt::DashLine));
        auto* label = new QCPItemText(m_memory);
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(0.995, gib);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
        label->setText(tr("capacity %1").arg(bytesText(c)));
        label->setColor(QColor(160, 30, 30));
        label->setClipToAxisRect(true);
        m_capacityLabels.emplace_back(gib, label);
    }
    if (!above.isEmpty()) {
        auto* label = new QCPItemText(m_memory);
        label->position->setType(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(0.995, 0.02);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        label->setText(tr("capacity %1 (above the scale)").arg(above.join(QStringLiteral(", "))));
        label->setColor(QColor(160, 30, 30));
        m_aboveNote = label;
    }
    // Room above the curves for the notes at the top of the plot: "above the scale" (right), "hover a curve" (left),
    // in pixels once the plot's height is known (fitMemoryHeadroom, after every layout).
    fitMemoryLegend();
    m_memoryTop = std::max(top, 0.01 / 1.1);
    fitMemoryHeadroom();
    m_memory->replot();
}

bool GanttView::fitMemoryHeadroom()
{
    // The notes' lines (and a margin) as a share of the axis rectangle's height: a short plot (about 120 px at
    // 1024 x 700) gives them a larger share of its range than a tall one, so that the top curve never crosses them.
    double share = 0.1 / 1.1; // 10 % above the top curve without notes
    if (m_memoryNoteLines > 0) {
        const int lineHeight = QFontMetrics(m_memory->font()).height() + 2;
        const int height = std::max(1, m_memory->axisRect()->height());
        share = std::clamp(double(m_memoryNoteLines * lineHeight + 8) / height, 0.25, 0.6);
    }
    const double upper = m_memoryTop / (1 - share);
    const bool changed
        = !(std::abs(m_memory->yAxis->range().upper - upper) <= 1e-9 * upper && m_memory->yAxis->range().lower == 0);
    if (changed)
        m_memory->yAxis->setRange(0, upper);
    spaceCapacityLabels();
    return changed;
}

void GanttView::spaceCapacityLabels()
{
    const double lineHeight = QFontMetrics(m_memory->font()).height();
    double lastShown = std::numeric_limits<double>::infinity(); // pixel y of the last label shown (down is larger)
    // The "above the scale" note at the top right, where the labels end too, is room taken.
    const QRect rect = m_memory->axisRect()->rect();
    const double noteBottom = m_aboveNote ? rect.top() + 0.02 * rect.height() + lineHeight : rect.top();
    for (auto& [gib, label] : m_capacityLabels) {
        const double y = m_memory->yAxis->coordToPixel(gib);
        const bool room = lastShown - y >= lineHeight && y - lineHeight >= noteBottom;
        label->setVisible(room);
        if (room)
            lastShown = y;
    }
}

void GanttView::updateMemoryCurves()
{
    if (!m_memory)
        return;
    // Each curve reduced to its peak per pixel column of the window: a 4 M-action run has millions of memory steps,
    // which QCustomPlot would stroke one by one (a second per frame).
    const QCPRange range = m_memory->xAxis->range();
    const int pixels = std::max(16, m_memory->axisRect()->width());
    // A window whose pixel is wider than a column of the coarse curves reads those (their peaks are the samples'),
    // else the samples themselves: either way a frame touches O(pixels + kCoarseColumns) points, or the samples
    // of a narrow window.
    const double column
        = m_preparedMemory ? (m_preparedMemory->end - m_preparedMemory->begin) / MemorySeries::kCoarseColumns : 0;
    const bool coarse = column > 0 && (range.upper - range.lower) / pixels >= column;
    for (auto& c : m_memoryCurves) {
        const auto& from = c.samples;
        const StepCurve shown = coarse ? peakPerPixel(from->coarse.t, from->coarse.v, range.lower, range.upper, pixels)
                                       : peakPerPixel(from->t, from->v, range.lower, range.upper, pixels);
        c.graph->setData(
            QVector<double>(shown.t.begin(), shown.t.end()), QVector<double>(shown.v.begin(), shown.v.end()), true);
    }
}

double GanttView::windowBegin() const
{
    return m_gantt->xAxis->range().lower;
}

double GanttView::windowEnd() const
{
    return m_gantt->xAxis->range().upper;
}

void GanttView::setTimeWindow(double t0, double t1)
{
    if (!(t1 > t0)) { // an empty window: the deepest zoom about t0 (the plot refuses empty ranges)
        t1 = t0 + TimeAxis::kDefaultMinDuration / 2;
        t0 -= TimeAxis::kDefaultMinDuration / 2;
    }
    m_gantt->xAxis->setRange(t0, t1); // onRangeChanged clamps it and follows with the memory plot
}

void GanttView::onRangeChanged()
{
    if (m_adjusting)
        return;
    m_adjusting = true;
    if (!m_scene->empty()) {
        const TimeAxis axis = timeAxis(); // clamped to the data and the deepest zoom
        m_gantt->xAxis->setRange(axis.begin(), axis.end());
    }
    if (m_memory) {
        m_memory->xAxis->setRange(m_gantt->xAxis->range());
        updateMemoryCurves();
        m_memory->replot(QCustomPlot::rpQueuedReplot);
    }
    m_adjusting = false;
    m_gantt->replot(QCustomPlot::rpQueuedReplot);
    emit timeWindowChanged(windowBegin(), windowEnd());
}

void GanttView::zoom(double factor, double anchorPx)
{
    if (m_scene->empty())
        return;
    TimeAxis axis = timeAxis();
    axis.zoom(factor, anchorPx);
    setTimeWindow(axis.begin(), axis.end());
}

void GanttView::showAll()
{
    setTimeWindow(m_scene->dataBegin(), m_scene->dataEnd());
}

void GanttView::setArrowsVisible(bool visible)
{
    if (m_arrows->isChecked() != visible)
        m_arrows->setChecked(visible);
    m_scene->settings.arrows = visible;
    m_gantt->replot(QCustomPlot::rpQueuedReplot);
}

void GanttView::setMemoryShare(double share)
{
    if (!m_splitter)
        return;
    const int total = std::max(320, m_splitter->height());
    const int memory = static_cast<int>(total * std::clamp(share, 0.1, 0.9));
    m_splitter->setSizes({total - memory, memory});
}

void GanttView::setFolding(bool enabled)
{
    m_scene->settings.folding = enabled;
}

void GanttView::setImagePainting(bool enabled)
{
    m_scene->settings.image = enabled;
}

std::size_t GanttView::lastPaintedItems() const
{
    return m_scene->stats.items;
}

std::size_t GanttView::lastPaintedArrows() const
{
    return m_scene->stats.arrows;
}

QPoint GanttView::pointOf(int device, double t) const
{
    if (m_scene->empty())
        return {};
    const auto& layout = m_scene->blocks().front()->layout;
    const double y = layout.rowTop(device, LaneRow::Compute) + layout.laneHeight(LaneRow::Compute) / 2;
    return QPoint(static_cast<int>(std::lround(m_gantt->xAxis->coordToPixel(t))),
        static_cast<int>(std::lround(m_gantt->yAxis->coordToPixel(y))));
}

QString GanttView::toolTipAt(QPoint pos) const
{
    if (!m_gantt->axisRect()->rect().contains(pos))
        return {};
    const double pps = m_gantt->axisRect()->width() / std::max(1e-12, m_gantt->xAxis->range().size());
    return m_scene->toolTip(m_gantt->xAxis->pixelToCoord(pos.x()), m_gantt->yAxis->pixelToCoord(pos.y()), 3 / pps);
}

TimeAxis GanttView::timeAxis() const
{
    return m_scene->axis(m_gantt->xAxis->range().lower, m_gantt->xAxis->range().upper, m_gantt->axisRect()->width());
}

bool GanttView::fitMemoryLegend()
{
    // As many entries a row as fit the plot's width (each entry as wide as the widest one's own size hint: its icon,
    // padding, text and margins), at most two rows; with more devices than that the legend gives way to a note, and
    // hovering a curve names its device (memoryToolTipAt). Called again on every resize: a legend laid out for
    // another width clipped its last entries ("dgx0/gpu(").
    const int graphs = m_memory->graphCount();
    QCPLegend* legend = m_memory->legend;
    int widest = 0;
    for (int i = 0; i < legend->itemCount(); ++i) // the grid's cells: a wrapped last row has empty ones
        if (const QCPAbstractLegendItem* item = legend->item(i))
            widest = std::max(widest, item->minimumOuterSizeHint().width());
    const QMargins margins = legend->margins();
    const int spacing = legend->columnSpacing();
    const int available = m_memory->width() - margins.left() - margins.right();
    const int perRow = std::max(1, (available + spacing) / std::max(1, widest + spacing));
    const bool fits = graphs > 0 && graphs <= 2 * perRow;
    // Not fitting, it is hidden in a single row (a hidden legend of many rows would still take the plot's height).
    legend->setWrap(fits ? std::min(graphs, perRow) : std::max(1, graphs));
    legend->setFillOrder(legend->fillOrder(), true);
    legend->setVisible(fits);
    if (m_hoverNote) {
        m_memory->removeItem(m_hoverNote);
        m_hoverNote = nullptr;
    }
    if (!fits && graphs > 0) {
        // Top left, in the room kept above the curves (it sat bottom left, over the lowest curve); the capacity
        // note sits top right.
        auto* note = new QCPItemText(m_memory);
        note->position->setType(QCPItemPosition::ptAxisRectRatio);
        note->position->setCoords(0.005, 0.02);
        if (m_aboveNote) { // a narrow plot would run the two together: this one on the line below it
            note->position->setParentAnchorY(m_aboveNote->bottom);
            note->position->setTypeY(QCPItemPosition::ptAbsolute);
            note->position->setCoords(0.005, 2);
        }
        note->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        note->setText(tr("%1 devices: hover a curve").arg(graphs));
        note->setClipToAxisRect(true);
        note->setColor(QColor(90, 90, 90));
        m_hoverNote = note;
    }
    m_memoryNoteLines = (m_aboveNote ? 1 : 0) + (m_hoverNote ? 1 : 0);
    return m_hoverNote != nullptr;
}

QString GanttView::memoryToolTipAt(QPoint pos) const
{
    if (!m_memory || !m_memory->axisRect()->rect().contains(pos))
        return {};
    const double t = m_memory->xAxis->pixelToCoord(pos.x());
    QString best;
    double bestDistance = 6; // pixels
    for (int i = 0; i < m_memory->graphCount(); ++i) {
        const QCPGraph* g = m_memory->graph(i);
        auto it = g->data()->findEnd(t, false); // first point after t: the step before it holds at t
        if (it == g->data()->constBegin())
            continue;
        --it;
        const double distance = std::abs(m_memory->yAxis->coordToPixel(it->value) - pos.y());
        if (distance < bestDistance) {
            bestDistance = distance;
            best = tr("%1: %2 GiB at %3").arg(g->name()).arg(it->value, 0, 'f', 2).arg(secondsText(t));
        }
    }
    return best;
}

bool GanttView::eventFilter(QObject* watched, QEvent* event)
{
    auto* plot = qobject_cast<QCustomPlot*>(watched);
    if (!plot)
        return QWidget::eventFilter(watched, event);
    if (event->type() == QEvent::Resize && plot == m_memory) {
        updateMemoryCurves(); // one point per pixel column of the new width
        if (m_memory->graphCount() > 0)
            fitMemoryLegend(); // the legend's rows for the new width; the headroom follows at the next layout
    }
    if (event->type() == QEvent::Resize) {
        // About one time label per 110 px: a narrow window must not run "10.0 s12.5 s" together.
        const int width = static_cast<QResizeEvent*>(event)->size().width();
        plot->xAxis->ticker()->setTickCount(std::clamp(width / 110, 2, 10));
    }

    if (event->type() == QEvent::MouseMove && plot == m_memory) {
        auto* me = static_cast<QMouseEvent*>(event);
        const QString text = me->buttons() == Qt::NoButton ? memoryToolTipAt(me->position().toPoint()) : QString();
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(me->globalPosition().toPoint(), text, m_memory);
    }
    if (event->type() == QEvent::MouseMove && plot == m_gantt) {
        auto* me = static_cast<QMouseEvent*>(event);
        if (me->buttons() == Qt::NoButton) {
            const QString text = toolTipAt(me->position().toPoint());
            if (text.isEmpty())
                QToolTip::hideText();
            else
                QToolTip::showText(me->globalPosition().toPoint(), text, m_gantt);
        }
    } else if (event->type() == QEvent::KeyPress) {
        auto* ke = static_cast<QKeyEvent*>(event);
        const double w = plot->axisRect()->width();
        switch (ke->key()) {
        case Qt::Key_Plus:
        case Qt::Key_Equal:
            zoom(1.5, w / 2);
            return true;
        case Qt::Key_Minus:
            zoom(1 / 1.5, w / 2);
            return true;
        case Qt::Key_Left: {
            TimeAxis axis = timeAxis();
            axis.pan(w / 8);
            setTimeWindow(axis.begin(), axis.end());
            return true;
        }
        case Qt::Key_Right: {
            TimeAxis axis = timeAxis();
            axis.pan(-w / 8);
            setTimeWindow(axis.begin(), axis.end());
            return true;
        }
        case Qt::Key_Home:
        case Qt::Key_0:
            showAll();
            return true;
        default:
            break;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void GanttView::paintExportLegend(QPainter& painter, int width) const
{
    painter.save();
    painter.fillRect(QRect(0, 0, width, kExportLegendHeight), Qt::white);
    const QFontMetrics fm(painter.font());
    const std::pair<ActionKind, QString> entries[] = {{ActionKind::Forward, tr("forward")},
        {ActionKind::Backward, tr("backward")}, {ActionKind::BackwardInput, tr("input gradient")},
        {ActionKind::BackwardWeight, tr("weight gradient")}, {ActionKind::AllReduce, tr("all-reduce")},
        {ActionKind::OptimizerStep, tr("optimizer")}, {ActionKind::WavePush, tr("wave push/pull")}};
    int x = 8;
    const int y = (kExportLegendHeight - 12) / 2;
    for (const auto& [kind, text] : entries) {
        painter.fillRect(QRect(x, y, 16, 12), spanColor(kind, 0));
        x += 20;
        painter.setPen(QColor(40, 40, 40));
        painter.drawText(QPoint(x, y + 11), text);
        x += fm.horizontalAdvance(text) + 14;
    }
    painter.drawText(QPoint(x, y + 11), tr("hue: microbatch; grey: idle"));
    painter.restore();
}

bool GanttView::exportImage(const QString& path, QString* error)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    const int w = std::max(m_gantt->width(), 200);
    const int hg = std::max(m_gantt->height(), 200);
    const int hm = m_memory ? std::max(m_memory->height(), 100) : 0;
    const int hl = kExportLegendHeight;
    // A picture leaves the window behind: it carries its own legend on top, and its grid goes under the spans (on
    // screen the faint grid is drawn over them, to be seen through dense lanes).
    auto paint = [&](QCPPainter& painter) {
        paintExportLegend(painter, w);
        painter.translate(0, hl);
        QCPLayerable* grid = m_gantt->xAxis->grid();
        grid->setLayer(QStringLiteral("grid"));
        m_gantt->toPainter(&painter, w, hg);
        grid->setLayer(QStringLiteral("overlay"));
        if (m_memory) {
            painter.translate(0, hg);
            m_memory->toPainter(&painter, w, hm);
        }
    };
    auto fail = [&](const QString& message) {
        if (error)
            *error = message;
        return false;
    };
    if (suffix == QLatin1String("png")) {
        QImage image(w, hl + hg + hm, QImage::Format_ARGB32_Premultiplied);
        image.fill(Qt::white);
        {
            QCPPainter painter(&image);
            paint(painter);
        }
        if (!image.save(path, "PNG"))
            return fail(tr("Cannot write %1").arg(path));
        return true;
    }
    if (suffix == QLatin1String("svg")) {
        QSvgGenerator svg;
        svg.setFileName(path);
        svg.setSize(QSize(w, hl + hg + hm));
        svg.setViewBox(QRect(0, 0, w, hl + hg + hm));
        svg.setTitle(tr("Pipewright schedule"));
        QCPPainter painter;
        if (!painter.begin(&svg))
            return fail(tr("Cannot write %1").arg(path));
        painter.setMode(QCPPainter::pmVectorized);
        paint(painter);
        painter.end();
        return QFileInfo(path).size() > 0 ? true : fail(tr("Cannot write %1").arg(path));
    }
    if (suffix == QLatin1String("pdf")) {
        QPdfWriter pdf(path);
        pdf.setPageSize(QPageSize(QSizeF(w, hl + hg + hm), QPageSize::Point));
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        pdf.setResolution(72);
        QCPPainter painter;
        if (!painter.begin(&pdf))
            return fail(tr("Cannot write %1").arg(path));
        painter.setMode(QCPPainter::pmVectorized);
        paint(painter);
        painter.end();
        return true;
    }
    return fail(tr("Unknown image format '%1': use .png, .svg or .pdf").arg(suffix));
}

bool GanttView::exportChromeTrace(const QString& path, QString* error)
{
    if (m_scene->empty()) {
        if (error)
            *error = tr("There is no schedule to export");
        return false;
    }
    try {
        planner::writeChromeTraceFile(path.toStdString(), *m_scene->blocks().front()->timeline);
        return true;
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromUtf8(e.what());
        return false;
    }
}

} // namespace pw::ui
