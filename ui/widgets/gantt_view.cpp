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
#include <QSplitter>
#include <QSvgGenerator>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <thread>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>
#include <qcustomplot.h>

#include "planner/errors.h"
#include "planner/io/chrome_trace.h"
#include "planner/io/json_file.h"
#include "ui/gantt/geometry.h"
#include "ui/models/format.h"

namespace pw::ui {

using planner::ActionKind;

namespace {

constexpr double kTitleHeight = 18; // layout units above a titled block
constexpr int kHues = 24;

/// Microbatches get hues a golden angle apart, so neighbours differ; the kind sets lightness.
int hueOf(int microbatch)
{
    return static_cast<int>(std::abs(static_cast<long long>(microbatch)) * 137508 / 1000 % 360);
}

QColor spanColor(ActionKind kind, int microbatch)
{
    const int hue = hueOf(microbatch);
    switch (kind) {
    case ActionKind::Forward: return QColor::fromHsv(hue, 110, 245);
    case ActionKind::Backward: return QColor::fromHsv(hue, 210, 185);
    case ActionKind::BackwardWeight: return QColor::fromHsv(hue, 230, 120);
    case ActionKind::SendActivation:
    case ActionKind::RecvActivation: return QColor::fromHsv(hue, 90, 200);
    case ActionKind::SendGradient:
    case ActionKind::RecvGradient: return QColor::fromHsv(hue, 200, 150);
    case ActionKind::AllReduce: return QColor(120, 70, 160);
    case ActionKind::OptimizerStep: return QColor(90, 90, 90);
    case ActionKind::WavePush:
    case ActionKind::WavePull: return QColor(230, 140, 20);
    }
    return Qt::black;
}

/// spanColor() as an opaque pixel, cached per (kind, hue), which is all it depends on: the repaint of a million
/// spans cannot afford an HSV conversion per span.
QRgb spanRgb(ActionKind kind, int microbatch)
{
    constexpr int kKinds = static_cast<int>(ActionKind::WavePull) + 1;
    static std::vector<QRgb> cache(kKinds * 360, 0);
    const int index = static_cast<int>(kind) * 360 + hueOf(microbatch);
    QRgb& c = cache[index];
    if (c == 0)
        c = spanColor(kind, microbatch).rgba();
    return c;
}

QString laneName(planner::Lane lane)
{
    return QString::fromStdString(std::string(planner::toString(lane)));
}

/// Tick labels in seconds, milliseconds or microseconds, chosen from the visible range.
class SecondsTicker : public QCPAxisTicker
{
protected:
    QString getTickLabel(double tick, const QLocale&, QChar, int) override
    {
        return secondsText(tick, tick == 0 ? 0 : m_decimals);
    }
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override
    {
        // Enough decimals to tell neighbouring ticks apart in the unit secondsText() will pick.
        const double unit = std::max(std::abs(range.lower), std::abs(range.upper)) >= 1 ? 1
            : std::max(std::abs(range.lower), std::abs(range.upper)) >= 1e-3             ? 1e-3
                                                                                         : 1e-6;
        m_decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(tickStep / unit) - 1e-9)), 0, 6);
        return QCPAxisTicker::createTickVector(tickStep, range);
    }

private:
    int m_decimals = 1;
};


} // namespace

/// @brief One stacked timeline: its spans indexed by row, its rows' place, its send -> receive pairs.
struct GanttBlockData
{
    QString title;
    planner::Timeline timeline;
    std::vector<double> capacity; ///< bytes per device; empty when unknown
    GanttIndex index;
    RowLayout layout;
    double top = 0;
    double bottom = 0;
    GanttBlockData(GanttBlock block, double blockTop)
        : title(std::move(block.title))
        , timeline(std::move(block.timeline))
        , capacity(std::move(block.memory_capacity_bytes))
        , index(timeline)
        , layout(static_cast<int>(timeline.device_names.size()), RowHeights {},
              blockTop + (title.isEmpty() ? 0 : kTitleHeight))
        , top(blockTop)
        , bottom(layout.deviceTop(0) + layout.height())
    {
    }

    /// The point-to-point messages, as their sends (the transfer leaves the sender at t0 and has arrived at the
    /// peer at t1; the receiver records a receive span only when it had to wait). Collected when arrows are
    /// first shown.
    const std::vector<std::uint32_t>& messages()
    {
        if (paired)
            return sends;
        paired = true;
        for (std::uint32_t i = 0; i < timeline.spans.size(); ++i) {
            const auto& s = timeline.spans[i];
            if (s.peer >= 0 && s.peer < static_cast<int>(timeline.device_names.size()) && planner::isSend(s.kind)
                && !planner::isWaveSync(s.kind))
                sends.push_back(i);
        }
        return sends;
    }

private:
    bool paired = false;
    std::vector<std::uint32_t> sends;
};

/// @brief The QCustomPlot plottable that paints the blocks: row backgrounds, folded spans, titles, arrows.
class GanttPlottable : public QCPAbstractPlottable
{
public:
    GanttPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis)
        : QCPAbstractPlottable(keyAxis, valueAxis)
    {
        setSelectable(QCP::stNone);
        setAntialiasedFill(false);
    }

    std::vector<std::unique_ptr<GanttBlockData>> blocks;
    QString emptyMessage;
    bool arrows = false;
    bool folding = true;
    bool raster = true; ///< false: a fillRect per item on screen too (the benchmark's baseline)
    std::size_t painted = 0;
    std::size_t paintedArrows = 0;

    double dataBegin() const
    {
        double t = 0;
        for (auto& b : blocks)
            t = std::min(t, b->index.dataBegin());
        return t;
    }
    double dataEnd() const
    {
        double t = 0;
        for (auto& b : blocks)
            t = std::max(t, b->index.dataEnd());
        return t > dataBegin() ? t : dataBegin() + 1e-3;
    }
    double height() const { return blocks.empty() ? 1 : blocks.back()->bottom; }

    TimeAxis axis() const
    {
        TimeAxis a(dataBegin(), dataEnd(), std::max(1, mKeyAxis->axisRect()->width()));
        a.setWindow(mKeyAxis->range().lower, mKeyAxis->range().upper);
        return a;
    }

    double selectTest(const QPointF&, bool, QVariant*) const override { return -1; }
    QCPRange getKeyRange(bool& found, QCP::SignDomain) const override
    {
        found = !blocks.empty();
        return {dataBegin(), dataEnd()};
    }
    QCPRange getValueRange(bool& found, QCP::SignDomain, const QCPRange&) const override
    {
        found = !blocks.empty();
        return {0, height()};
    }

protected:
    void drawLegendIcon(QCPPainter*, const QRectF&) const override { }

    /// A lane on screen: its block, row and pixel rows (y0 inclusive, y1 exclusive, in the plot's coordinates).
    struct RowJob
    {
        const GanttBlockData* block = nullptr;
        int row = 0;
        double y0 = 0, y1 = 0;
        QRgb background = 0;
    };

    void draw(QCPPainter* painter) override
    {
        painted = 0;
        paintedArrows = 0;
        const QRect rect = mKeyAxis->axisRect()->rect();
        if (blocks.empty()) {
            painter->setPen(QColor(90, 90, 90));
            painter->drawText(rect, Qt::AlignCenter | Qt::TextWordWrap, emptyMessage);
            return;
        }
        painter->setAntialiasing(false);
        painter->setPen(Qt::NoPen);
        const TimeAxis time = axis();
        const double left = rect.left();
        auto yOf = [this](double v) { return mValueAxis->coordToPixel(v); };
        std::vector<RowJob> jobs;
        for (const auto& block : blocks) {
            if (yOf(block->bottom) < rect.top() || yOf(block->top) > rect.bottom())
                continue;
            for (int d = 0; d < block->layout.devices(); ++d) {
                for (int l = 0; l < kLaneRows; ++l) {
                    const auto lane = static_cast<LaneRow>(l);
                    const double top = block->layout.rowTop(d, lane);
                    // Clipped to the axis rect (QCustomPlot maps the range's edge to the pixel outside it).
                    const double y0 = std::max<double>(std::round(yOf(top)), rect.top());
                    const double y1 = std::min<double>(std::round(yOf(top + block->layout.laneHeight(lane))), rect.bottom() + 1);
                    if (y1 - y0 < 1)
                        continue;
                    jobs.push_back({block.get(), RowLayout::rowIndex(d, lane), y0, y1,
                        lane == LaneRow::Compute ? qRgb(236, 236, 236) : qRgb(246, 246, 246)});
                }
            }
        }
        // Exports to SVG and PDF get real rectangles. On screen, with many spans in view, the rectangles go
        // straight into an image drawn once (a QPainter call per rectangle costs too much for a quarter of a
        // million of them), lanes spread over the cores: they write disjoint pixel rows and only read the index.
        // Few spans in view: a fillRect each is cheaper than clearing and copying a whole image (measured: 2.2 vs
        // 3.1 ms a frame at 1920x1080 with a thousand spans; 25 vs 8.5 ms with a million).
        std::size_t visible = 0;
        for (const RowJob& job : jobs) {
            const auto [first, last] = job.block->index.row(job.row).range(time.begin(), time.end());
            visible += last - first;
        }
        constexpr std::size_t kImageAbove = 20'000;
        if (painter->modes().testFlag(QCPPainter::pmVectorized) || !raster || visible < kImageAbove) {
            std::vector<DrawItem> items;
            for (const RowJob& job : jobs) {
                painter->fillRect(QRectF(left, job.y0, rect.width(), job.y1 - job.y0), QColor::fromRgb(job.background));
                rowItems(job, time, items);
                painted += items.size();
                for (const auto& it : items) {
                    const double x0 = std::floor(left + it.x0);
                    const double x1 = std::max(x0 + 1, std::ceil(left + it.x1));
                    const double gap = x1 - x0 >= 4 && !it.folded() ? 1 : 0; // neighbours stay apart
                    painter->fillRect(QRectF(x0 + gap, job.y0, x1 - x0 - gap, job.y1 - job.y0), QColor::fromRgba(colorOf(it)));
                }
            }
        } else {
            const qreal dpr = painter->device()->devicePixelRatioF();
            const QSize size(qCeil(rect.width() * dpr), qCeil(rect.height() * dpr));
            if (m_image.size() != size)
                m_image = QImage(size, QImage::Format_ARGB32_Premultiplied);
            m_image.fill(Qt::white); // opaque: the image is copied, not blended (the grid is drawn above it)
            uchar* const bits = m_image.bits();
            const int threads = jobs.size() >= 24 ? static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)) : 1;
            std::atomic<std::size_t> total {0};
            auto work = [&](int first) {
                std::vector<DrawItem> items;
                std::size_t n = 0;
                for (std::size_t i = first; i < jobs.size(); i += threads)
                    n += rasterRow(jobs[i], time, rect, dpr, bits, items);
                total += n;
            };
            {
                std::vector<std::jthread> pool;
                for (int k = 1; k < threads; ++k)
                    pool.emplace_back(work, k);
                work(0);
            }
            painted = total;
            m_image.setDevicePixelRatio(dpr);
            painter->setCompositionMode(QPainter::CompositionMode_Source);
            painter->drawImage(QPointF(rect.topLeft()), m_image);
            painter->setCompositionMode(QPainter::CompositionMode_SourceOver);
        }
        for (const auto& block : blocks) {
            if (yOf(block->bottom) < rect.top() || yOf(block->top) > rect.bottom())
                continue;
            if (!block->title.isEmpty()) {
                QFont bold = painter->font();
                bold.setBold(true);
                painter->setFont(bold);
                painter->setPen(QColor(40, 40, 40));
                painter->drawText(QRectF(left + 4, yOf(block->top), rect.width() - 8, yOf(block->top + kTitleHeight) - yOf(block->top)),
                    Qt::AlignLeft | Qt::AlignVCenter, block->title);
                painter->setPen(Qt::NoPen);
                bold.setBold(false);
                painter->setFont(bold);
            }
            if (arrows)
                drawArrows(painter, *block, time, left, yOf);
        }
    }

    void rowItems(const RowJob& job, const TimeAxis& time, std::vector<DrawItem>& items) const
    {
        items.clear();
        if (folding)
            fold(job.block->index, time, job.row, items);
        else
            visibleSpans(job.block->index, time, job.row, items);
    }

    /// Paints one lane into the image: its rectangles all span the lane's height, so they are written into the
    /// lane's first pixel row (1 or 2 pixels each when zoomed out), which is then copied to the others.
    std::size_t rasterRow(const RowJob& job, const TimeAxis& time, const QRect& rect, qreal dpr, uchar* bits,
        std::vector<DrawItem>& items) const
    {
        const int width = m_image.width();
        const qsizetype stride = m_image.bytesPerLine();
        const int iy0 = std::clamp(static_cast<int>((job.y0 - rect.top()) * dpr), 0, m_image.height());
        const int iy1 = std::clamp(static_cast<int>((job.y1 - rect.top()) * dpr), 0, m_image.height());
        if (iy1 <= iy0)
            return 0;
        rowItems(job, time, items);
        QRgb* const scan = reinterpret_cast<QRgb*>(bits + iy0 * stride);
        std::fill(scan, scan + width, job.background);
        for (const auto& it : items) {
            const double x0 = std::floor(it.x0);
            const double x1 = std::max(x0 + 1, std::ceil(it.x1));
            const double gap = x1 - x0 >= 4 && !it.folded() ? 1 : 0; // neighbours stay apart
            const int ix0 = std::clamp(static_cast<int>((x0 + gap) * dpr), 0, width);
            const int ix1 = std::clamp(static_cast<int>(x1 * dpr), 0, width);
            std::fill(scan + ix0, scan + ix1, colorOf(it));
        }
        for (int y = iy0 + 1; y < iy1; ++y)
            std::memcpy(bits + y * stride, scan, static_cast<std::size_t>(width) * sizeof(QRgb));
        return items.size();
    }

    QImage m_image; // the raster path's canvas, kept between frames
    std::vector<QRgb> m_colors; // spanRgb() by kind x microbatch for the microbatches of the blocks
    int m_colorStride = 0;

public:
    /// Fills the colour table for the blocks' microbatches (called when they change).
    void buildColors()
    {
        int most = 0;
        for (const auto& b : blocks)
            for (const auto& sp : b->timeline.spans)
                most = std::max(most, std::abs(sp.microbatch));
        m_colorStride = most + 1;
        constexpr int kKinds = static_cast<int>(ActionKind::WavePull) + 1;
        m_colors.assign(static_cast<std::size_t>(kKinds) * m_colorStride, 0);
        for (int k = 0; k < kKinds; ++k)
            for (int m = 0; m < m_colorStride; ++m)
                m_colors[static_cast<std::size_t>(k) * m_colorStride + m] = spanRgb(static_cast<ActionKind>(k), m);
    }

private:
    QRgb colorOf(const DrawItem& it) const
    {
        const int m = std::abs(it.microbatch);
        // Beyond the table (not reached: it covers the blocks' microbatches) without the cache, thread-safe.
        return m < m_colorStride ? m_colors[static_cast<std::size_t>(it.kind) * m_colorStride + m]
                                 : spanColor(it.kind, m).rgba();
    }

    template <class YOf>
    void drawArrows(QCPPainter* painter, GanttBlockData& block, const TimeAxis& time, double left, YOf yOf)
    {
        constexpr std::size_t kMaxArrows = 3000;
        std::vector<std::uint32_t> shown;
        for (std::uint32_t m : block.messages()) {
            const auto& s = block.timeline.spans[m];
            if (s.t1 >= time.begin() && s.t0 <= time.end())
                shown.push_back(m);
            if (shown.size() > kMaxArrows)
                break;
        }
        painter->setAntialiasing(true);
        if (shown.size() > kMaxArrows) {
            painter->setPen(QColor(120, 40, 40));
            painter->drawText(QPointF(left + 8, yOf(block.top) + 14), QObject::tr("zoom in to see send → receive arrows"));
            return;
        }
        paintedArrows += shown.size();
        painter->setPen(QPen(QColor(40, 40, 40, 170), 1));
        painter->setBrush(QColor(40, 40, 40, 170));
        const double h = block.layout.laneHeight(LaneRow::PointToPoint) / 2;
        for (std::uint32_t m : shown) {
            const auto& s = block.timeline.spans[m];
            const QPointF from(left + time.toPixel(s.t0), yOf(block.layout.rowTop(s.device, LaneRow::PointToPoint) + h));
            const QPointF to(left + time.toPixel(s.t1), yOf(block.layout.rowTop(s.peer, LaneRow::PointToPoint) + h));
            painter->drawLine(from, to);
            const QLineF line(to, from);
            const double angle = std::atan2(-line.dy(), line.dx());
            const QPointF p1 = to + QPointF(std::sin(angle + M_PI / 3) * 6, std::cos(angle + M_PI / 3) * 6);
            const QPointF p2 = to + QPointF(std::sin(angle + M_PI - M_PI / 3) * 6, std::cos(angle + M_PI - M_PI / 3) * 6);
            painter->drawPolygon(QPolygonF({to, p1, p2}));
        }
        painter->setBrush(Qt::NoBrush);
        painter->setAntialiasing(false);
    }
};

GanttView::GanttView(QWidget* parent, bool withMemory)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(6, 2, 6, 0);
    m_legend = new QLabel(this);
    m_legend->setTextFormat(Qt::RichText);
    m_legend->setWordWrap(true);
    auto swatch = [](QColor c, const QString& text) {
        return QStringLiteral("<span style='background-color:%1'>&nbsp;&nbsp;&nbsp;&nbsp;</span>&nbsp;%2&nbsp;&nbsp;&nbsp;")
            .arg(c.name(), text);
    };
    m_legend->setText(swatch(spanColor(ActionKind::Forward, 0), tr("forward"))
        + swatch(spanColor(ActionKind::Backward, 0), tr("backward"))
        + swatch(spanColor(ActionKind::BackwardWeight, 0), tr("weight gradient"))
        + swatch(spanColor(ActionKind::AllReduce, 0), tr("all-reduce"))
        + swatch(spanColor(ActionKind::OptimizerStep, 0), tr("optimizer"))
        + swatch(spanColor(ActionKind::WavePush, 0), tr("wave push/pull"))
        + tr("· hue: microbatch · thin rows: send/receive, collectives · grey: idle (bubbles)"));
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
    m_plottable = new GanttPlottable(m_gantt->xAxis, m_gantt->yAxis);
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

    QSplitter* splitter = nullptr;
    if (withMemory) {
        splitter = new QSplitter(Qt::Vertical, this);
        splitter->addWidget(m_gantt);
        m_memory = new QCustomPlot(this);
        m_memory->setMinimumSize(200, 100);
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

void GanttView::setBlocks(std::vector<GanttBlock> blocks)
{
    m_plottable->blocks.clear();
    double top = 0;
    for (auto& b : blocks) {
        auto data = std::make_unique<GanttBlockData>(std::move(b), top);
        top = data->bottom + 10;
        m_plottable->blocks.push_back(std::move(data));
    }
    m_plottable->buildColors();
    rebuild();
}

void GanttView::setEmptyMessage(const QString& message)
{
    m_plottable->emptyMessage = message;
    m_plottable->blocks.clear();
    rebuild();
}

int GanttView::blockCount() const
{
    return static_cast<int>(m_plottable->blocks.size());
}

void GanttView::rebuild()
{
    auto ticker = qSharedPointerCast<QCPAxisTickerText>(m_gantt->yAxis->ticker());
    ticker->clear();
    int devices = 0;
    for (const auto& b : m_plottable->blocks)
        devices += b->layout.devices();
    // Label every device while they fit, else every k-th.
    const int every = std::max(1, devices / 40 + 1);
    for (const auto& b : m_plottable->blocks)
        for (int d = 0; d < b->layout.devices(); d += every)
            ticker->addTick(b->layout.rowTop(d, LaneRow::Compute) + b->layout.laneHeight(LaneRow::Compute) / 2,
                QString::fromStdString(b->timeline.device_names[d]));
    m_gantt->yAxis->setRange(0, m_plottable->height());
    const bool empty = m_plottable->blocks.empty(); // the message alone, no axes
    m_gantt->yAxis->setVisible(!empty);
    m_gantt->xAxis->setVisible(!empty);
    m_adjusting = true;
    m_gantt->xAxis->setRange(m_plottable->dataBegin(), m_plottable->dataEnd());
    m_adjusting = false;
    rebuildMemory();
    updateMargins();
    onRangeChanged();
    m_gantt->replot(QCustomPlot::rpQueuedReplot); // never paint inside the caller's signal handlers
}

void GanttView::updateMargins()
{
    QFontMetrics fm(m_gantt->yAxis->tickLabelFont());
    int width = 0;
    for (const auto& b : m_plottable->blocks)
        for (const auto& n : b->timeline.device_names)
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
    m_memory->clearItems();
    m_memory->legend->setVisible(false);
    if (m_plottable->blocks.empty()) {
        m_memory->replot();
        return;
    }
    const auto& tl = m_plottable->blocks.front()->timeline;
    const int devices = static_cast<int>(tl.device_names.size());
    std::vector<QVector<double>> keys(devices), values(devices);
    double peak = 0;
    for (const auto& m : tl.memory) {
        if (m.device < 0 || m.device >= devices)
            continue;
        keys[m.device].push_back(m.t);
        values[m.device].push_back(m.bytes / double(1ull << 30));
        peak = std::max(peak, values[m.device].back());
    }
    const double end = m_plottable->dataEnd();
    for (int d = 0; d < devices; ++d) {
        if (keys[d].isEmpty())
            continue;
        keys[d].push_back(end);
        values[d].push_back(values[d].back());
        QCPGraph* g = m_memory->addGraph();
        g->setName(QString::fromStdString(tl.device_names[d]));
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setPen(QPen(QColor::fromHsv((d * 360 / std::max(1, devices) + d % 2 * 20) % 360, 200, 190), 1.5));
        g->setData(keys[d], values[d], true);
    }
    // Each distinct capacity as a limit line, so that over-memory devices show as curves crossing it. Limits far
    // above every curve (80 GiB against 20 used) would squash the curves: they are named at the top instead.
    std::vector<double> limits;
    for (double c : m_plottable->blocks.front()->capacity)
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
    }
    if (!above.isEmpty()) {
        auto* label = new QCPItemText(m_memory);
        label->position->setType(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(0.995, 0.02);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        label->setText(tr("capacity %1 (above the scale)").arg(above.join(QStringLiteral(", "))));
        label->setColor(QColor(160, 30, 30));
    }
    m_memory->yAxis->setRange(0, std::max(top * 1.1, 0.01));
    fitMemoryLegend();
    m_memory->replot();
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
    if (!m_plottable->blocks.empty()) {
        const TimeAxis axis = m_plottable->axis(); // clamped to the data and the deepest zoom
        m_gantt->xAxis->setRange(axis.begin(), axis.end());
    }
    if (m_memory) {
        m_memory->xAxis->setRange(m_gantt->xAxis->range());
        m_memory->replot(QCustomPlot::rpQueuedReplot);
    }
    m_adjusting = false;
    m_gantt->replot(QCustomPlot::rpQueuedReplot);
    emit timeWindowChanged(windowBegin(), windowEnd());
}

void GanttView::zoom(double factor, double anchorPx)
{
    if (m_plottable->blocks.empty())
        return;
    TimeAxis axis = m_plottable->axis();
    axis.zoom(factor, anchorPx);
    setTimeWindow(axis.begin(), axis.end());
}

void GanttView::showAll()
{
    setTimeWindow(m_plottable->dataBegin(), m_plottable->dataEnd());
}

void GanttView::setArrowsVisible(bool visible)
{
    if (m_arrows->isChecked() != visible)
        m_arrows->setChecked(visible);
    m_plottable->arrows = visible;
    m_gantt->replot(QCustomPlot::rpQueuedReplot);
}

void GanttView::setMemoryShare(double share)
{
    if (!m_splitter)
        return;
    const int total = std::max(400, m_splitter->height());
    const int memory = static_cast<int>(total * std::clamp(share, 0.1, 0.9));
    m_splitter->setSizes({total - memory, memory});
}

void GanttView::setFolding(bool enabled)
{
    m_plottable->folding = enabled;
}

void GanttView::setImagePainting(bool enabled)
{
    m_plottable->raster = enabled;
}

std::size_t GanttView::lastPaintedItems() const
{
    return m_plottable->painted;
}

std::size_t GanttView::lastPaintedArrows() const
{
    return m_plottable->paintedArrows;
}

QPoint GanttView::pointOf(int device, double t) const
{
    if (m_plottable->blocks.empty())
        return {};
    const auto& layout = m_plottable->blocks.front()->layout;
    const double y = layout.rowTop(device, LaneRow::Compute) + layout.laneHeight(LaneRow::Compute) / 2;
    return QPoint(static_cast<int>(std::lround(m_gantt->xAxis->coordToPixel(t))),
        static_cast<int>(std::lround(m_gantt->yAxis->coordToPixel(y))));
}

QString GanttView::toolTipAt(QPoint pos) const
{
    if (!m_gantt->axisRect()->rect().contains(pos))
        return {};
    const double t = m_gantt->xAxis->pixelToCoord(pos.x());
    const double v = m_gantt->yAxis->pixelToCoord(pos.y());
    const double pps = m_gantt->axisRect()->width() / std::max(1e-12, m_gantt->xAxis->range().size());
    for (const auto& block : m_plottable->blocks) {
        if (v < block->top || v > block->bottom)
            continue;
        const auto hit = block->layout.rowAt(v);
        if (!hit)
            return {};
        const auto found = block->index.spanAt(hit->row, t, 3 / pps);
        if (!found)
            return {};
        const auto& s = block->timeline.spans[*found];
        const auto name = [&](int d) {
            return d >= 0 && d < static_cast<int>(block->timeline.device_names.size())
                ? QString::fromStdString(block->timeline.device_names[d])
                : QString::number(d);
        };
        QString text = QStringLiteral("<b>%1</b> · microbatch %2 · stage %3<br>%4, %5 lane<br>%6 → %7 (%8)")
                           .arg(QString::fromStdString(std::string(planner::toString(s.kind))))
                           .arg(s.microbatch)
                           .arg(s.stage)
                           .arg(name(s.device), laneName(s.lane), secondsText(s.t0), secondsText(s.t1),
                               secondsText(s.t1 - s.t0));
        if (s.peer >= 0)
            text += (planner::isSend(s.kind) ? tr("<br>to %1") : tr("<br>from %1")).arg(name(s.peer));
        if (!block->title.isEmpty())
            text = block->title.toHtmlEscaped() + QStringLiteral("<br>") + text;
        return text;
    }
    return {};
}

void GanttView::fitMemoryLegend()
{
    // One row of entries while they fit; beyond 8 devices the legend would be cut off, and hovering a curve
    // names its device instead (memoryToolTipAt).
    m_memory->legend->setWrap(std::max(1, m_memory->graphCount()));
    m_memory->legend->setVisible(m_memory->graphCount() > 0 && m_memory->graphCount() <= 8);
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
        case Qt::Key_Equal: zoom(1.5, w / 2); return true;
        case Qt::Key_Minus: zoom(1 / 1.5, w / 2); return true;
        case Qt::Key_Left: {
            TimeAxis axis = m_plottable->axis();
            axis.pan(w / 8);
            setTimeWindow(axis.begin(), axis.end());
            return true;
        }
        case Qt::Key_Right: {
            TimeAxis axis = m_plottable->axis();
            axis.pan(-w / 8);
            setTimeWindow(axis.begin(), axis.end());
            return true;
        }
        case Qt::Key_Home:
        case Qt::Key_0: showAll(); return true;
        default: break;
        }
    }
    return QWidget::eventFilter(watched, event);
}

bool GanttView::exportImage(const QString& path, QString* error)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    const int w = std::max(m_gantt->width(), 200);
    const int hg = std::max(m_gantt->height(), 200);
    const int hm = m_memory ? std::max(m_memory->height(), 100) : 0;
    auto paint = [&](QCPPainter& painter) {
        m_gantt->toPainter(&painter, w, hg);
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
        QImage image(w, hg + hm, QImage::Format_ARGB32_Premultiplied);
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
        svg.setSize(QSize(w, hg + hm));
        svg.setViewBox(QRect(0, 0, w, hg + hm));
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
        pdf.setPageSize(QPageSize(QSizeF(w, hg + hm), QPageSize::Point));
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
    if (m_plottable->blocks.empty()) {
        if (error)
            *error = tr("There is no schedule to export");
        return false;
    }
    try {
        planner::writeJsonFile(path.toStdString(), planner::chromeTrace(m_plottable->blocks.front()->timeline), -1);
        return true;
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromUtf8(e.what());
        return false;
    }
}

} // namespace pw::ui
