// SPDX-License-Identifier: MIT
#include "gantt_plottable.h"

#include <QFontMetricsF>
#include <QThreadPool>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <latch>
#include <thread>

#include <qcustomplot.h>

#include "ui/widgets/gantt_scene.h"

namespace pw::ui {

namespace {

/// Where an item lands, in whole pixels from the plot's left edge: at least 1 px, and wide spans keep a 1 px gap
/// at their start so that neighbours stay apart. [x0, x1).
std::pair<double, double> pixelExtent(const DrawItem& it)
{
    const double x0 = std::floor(it.x0);
    const double x1 = std::max(x0 + 1, std::ceil(it.x1));
    return {x1 - x0 >= 4 && !it.folded() ? x0 + 1 : x0, x1};
}

/// @brief Paints the scene's blocks: lane backgrounds, folded spans, titles, arrows.
class GanttPlottable : public QCPAbstractPlottable
{
public:
    GanttPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis, const GanttScene& scene)
        : QCPAbstractPlottable(keyAxis, valueAxis)
        , m_scene(scene)
    {
        setSelectable(QCP::stNone);
        setAntialiasedFill(false);
        m_pool.setMaxThreadCount(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u)) - 1);
        m_pool.setExpiryTimeout(-1); // the threads wait for the next frame instead of ending
    }

    double selectTest(const QPointF&, bool, QVariant*) const override { return -1; }
    QCPRange getKeyRange(bool& found, QCP::SignDomain) const override
    {
        found = !m_scene.empty();
        return {m_scene.dataBegin(), m_scene.dataEnd()};
    }
    QCPRange getValueRange(bool& found, QCP::SignDomain, const QCPRange&) const override
    {
        found = !m_scene.empty();
        return {0, m_scene.height()};
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
        m_scene.stats = {};
        const QRect rect = mKeyAxis->axisRect()->rect();
        if (m_scene.empty()) {
            painter->setPen(QColor(90, 90, 90));
            painter->drawText(rect, Qt::AlignCenter | Qt::TextWordWrap, m_scene.emptyMessage());
            return;
        }
        painter->setAntialiasing(false);
        painter->setPen(Qt::NoPen);
        const TimeAxis time = m_scene.axis(mKeyAxis->range().lower, mKeyAxis->range().upper, rect.width());
        const double left = rect.left();
        auto yOf = [this](double v) { return mValueAxis->coordToPixel(v); };
        std::vector<RowJob> jobs;
        for (const auto& block : m_scene.blocks()) {
            if (yOf(block->bottom) < rect.top() || yOf(block->top) > rect.bottom())
                continue;
            for (int d = 0; d < block->layout.devices(); ++d) {
                for (int l = 0; l < kLaneRows; ++l) {
                    const auto lane = static_cast<LaneRow>(l);
                    const double top = block->layout.rowTop(d, lane);
                    // Clipped to the axis rect (QCustomPlot maps the range's edge to the pixel outside it).
                    const double y0 = std::max<double>(std::round(yOf(top)), rect.top());
                    const double y1
                        = std::min<double>(std::round(yOf(top + block->layout.laneHeight(lane))), rect.bottom() + 1);
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
        if (painter->modes().testFlag(QCPPainter::pmVectorized) || !m_scene.settings.image || visible < kImageAbove) {
            std::vector<DrawItem> items;
            for (const RowJob& job : jobs) {
                painter->fillRect(QRectF(left, job.y0, rect.width(), job.y1 - job.y0), QColor::fromRgb(job.background));
                rowItems(job, time, items);
                m_scene.stats.items += items.size();
                for (const auto& it : items) {
                    const auto [x0, x1] = pixelExtent(it);
                    painter->fillRect(
                        QRectF(left + x0, job.y0, x1 - x0, job.y1 - job.y0), QColor::fromRgba(m_scene.colorOf(it)));
                }
            }
        } else {
            const qreal dpr = painter->device()->devicePixelRatioF();
            const QSize size(qCeil(rect.width() * dpr), qCeil(rect.height() * dpr));
            if (m_image.size() != size)
                m_image = QImage(size, QImage::Format_ARGB32_Premultiplied);
            m_image.fill(Qt::white); // opaque: the image is copied, not blended (the grid is drawn above it)
            uchar* const bits = m_image.bits();
            const int threads = jobs.size() >= 24 ? std::clamp(m_pool.maxThreadCount() + 1, 1, 8) : 1;
            std::atomic<std::size_t> total {0};
            auto work = [&](int first) {
                std::vector<DrawItem> items;
                std::size_t n = 0;
                for (std::size_t i = first; i < jobs.size(); i += threads)
                    n += rasterRow(jobs[i], time, rect, dpr, bits, items);
                total += n;
            };
            // The painting thread takes one share, the plottable's pool the others: its threads outlive a frame,
            // so a repaint starts none.
            std::latch helpers(threads - 1);
            for (int k = 1; k < threads; ++k)
                m_pool.start([&work, &helpers, k] {
                    work(k);
                    helpers.count_down();
                });
            work(0);
            helpers.wait();
            m_scene.stats.items = total;
            m_image.setDevicePixelRatio(dpr);
            painter->setCompositionMode(QPainter::CompositionMode_Source);
            painter->drawImage(QPointF(rect.topLeft()), m_image);
            painter->setCompositionMode(QPainter::CompositionMode_SourceOver);
        }
        for (const auto& block : m_scene.blocks()) {
            if (yOf(block->bottom) < rect.top() || yOf(block->top) > rect.bottom())
                continue;
            if (!block->title.isEmpty()) {
                // Within its band, whatever the zoom: at 1024 x 700 a stacked scenario's band is shorter than a
                // line of the default font, whose title ran into the bars and off the right edge.
                const QRectF band(left + 4, yOf(block->top), rect.width() - 8,
                    yOf(block->top + GanttBlockData::kTitleHeight) - yOf(block->top));
                const QFont font = painter->font();
                const FittedTitle fitted = fitTitle(block->title, font, band.height(), band.width());
                if (!fitted.text.isEmpty()) {
                    painter->setFont(fitted.font);
                    painter->setPen(QColor(40, 40, 40));
                    painter->drawText(band, Qt::AlignLeft | Qt::AlignVCenter, fitted.text);
                    painter->setPen(Qt::NoPen);
                    painter->setFont(font);
                }
            }
            if (m_scene.settings.arrows)
                drawArrows(painter, *block, time, left, yOf, left + time.width());
            drawBatchEnds(painter, *block, time, left, yOf);
        }
        if (m_scene.stale) // greyed: veiled in the window's background colour
            painter->fillRect(rect, QColor(255, 255, 255, 170));
    }

private:
    /// Dashed lines where the block's batches end, "batch k" beside each in the band above the lanes (the title's
    /// band, right of the title): a multi-batch simulation (2BW runs three) shows where one batch, the unit of its
    /// metrics, begins and ends.
    template <class YOf>
    void drawBatchEnds(QCPPainter* painter, const GanttBlockData& block, const TimeAxis& time, double left, YOf yOf)
    {
        if (block.batch_ends.size() < 2)
            return;
        painter->save();
        painter->setPen(QPen(QColor(120, 20, 120), 1, Qt::DashLine));
        const double lanes = yOf(block.layout.deviceTop(0)), bottom = yOf(block.bottom);
        const QRectF band(0, yOf(block.top), 0, lanes - yOf(block.top));
        double previous = left; // labels start right of the title and do not collide
        if (!block.title.isEmpty()) {
            QFont bold = painter->font();
            bold.setBold(true);
            previous += 8 + QFontMetricsF(bold).horizontalAdvance(block.title);
        }
        const QFontMetricsF metrics(painter->font());
        for (std::size_t b = 0; b < block.batch_ends.size(); ++b) {
            const double t = block.batch_ends[b];
            if (t < time.begin() || t > time.end())
                continue;
            const double x = left + time.toPixel(t);
            painter->drawLine(QPointF(x, lanes), QPointF(x, bottom));
            const QString label = QObject::tr("batch %1 ▸").arg(b + 1);
            const double width = metrics.horizontalAdvance(label) + 2;
            if (band.height() >= metrics.height() - 2 && x - width > previous + 4) {
                painter->drawText(
                    QRectF(x - width, band.top(), width, band.height()), Qt::AlignRight | Qt::AlignVCenter, label);
                previous = x;
            }
        }
        painter->restore();
    }

    void rowItems(const RowJob& job, const TimeAxis& time, std::vector<DrawItem>& items) const
    {
        items.clear();
        if (m_scene.settings.folding)
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
            const auto [x0, x1] = pixelExtent(it);
            const int ix0 = std::clamp(static_cast<int>(x0 * dpr), 0, width);
            const int ix1 = std::clamp(static_cast<int>(x1 * dpr), 0, width);
            std::fill(scan + ix0, scan + ix1, m_scene.colorOf(it));
        }
        for (int y = iy0 + 1; y < iy1; ++y)
            std::memcpy(bits + y * stride, scan, static_cast<std::size_t>(width) * sizeof(QRgb));
        return items.size();
    }

    template <class YOf>
    void drawArrows(
        QCPPainter* painter, const GanttBlockData& block, const TimeAxis& time, double left, YOf yOf, double right)
    {
        constexpr std::size_t kMaxArrows = 3000;
        std::vector<std::uint32_t> shown;
        for (std::uint32_t m : block.messages()) {
            const auto& s = block.timeline->spans[m];
            if (s.t1 >= time.begin() && s.t0 <= time.end())
                shown.push_back(m);
            if (shown.size() > kMaxArrows)
                break;
        }
        painter->setAntialiasing(true);
        if (shown.size() > kMaxArrows) {
            // A note on a white box at the block's top right: readable over dense lanes, clear of the lane labels.
            const QString note = QObject::tr("zoom in to see send → receive arrows");
            const QFontMetrics fm(painter->font());
            const QRectF box(right - fm.horizontalAdvance(note) - 16, yOf(block.top) + 2,
                fm.horizontalAdvance(note) + 12, fm.height() + 4);
            painter->fillRect(box, QColor(255, 255, 255, 230));
            painter->setPen(QColor(120, 40, 40));
            painter->drawText(box, Qt::AlignCenter, note);
            return;
        }
        m_scene.stats.arrows += shown.size();
        painter->setPen(QPen(QColor(40, 40, 40, 170), 1));
        painter->setBrush(QColor(40, 40, 40, 170));
        const double h = block.layout.laneHeight(LaneRow::PointToPoint) / 2;
        for (std::uint32_t m : shown) {
            const auto& s = block.timeline->spans[m];
            const QPointF from(
                left + time.toPixel(s.t0), yOf(block.layout.rowTop(s.device, LaneRow::PointToPoint) + h));
            const QPointF to(left + time.toPixel(s.t1), yOf(block.layout.rowTop(s.peer, LaneRow::PointToPoint) + h));
            painter->drawLine(from, to);
            const QLineF line(to, from);
            const double angle = std::atan2(-line.dy(), line.dx());
            const QPointF p1 = to + QPointF(std::sin(angle + M_PI / 3) * 6, std::cos(angle + M_PI / 3) * 6);
            const QPointF p2
                = to + QPointF(std::sin(angle + M_PI - M_PI / 3) * 6, std::cos(angle + M_PI - M_PI / 3) * 6);
            painter->drawPolygon(QPolygonF({to, p1, p2}));
        }
        painter->setBrush(Qt::NoBrush);
        painter->setAntialiasing(false);
    }

    const GanttScene& m_scene;
    QImage m_image; // the image path's canvas, kept between frames
    QThreadPool m_pool; // rasterises lanes beside the painting thread
};

} // namespace

QCPAbstractPlottable* addGanttPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis, const GanttScene& scene)
{
    return new GanttPlottable(keyAxis, valueAxis, scene); // owned by the axes' plot
}

} // namespace pw::ui
