// SPDX-License-Identifier: MIT
#include "gantt_scene.h"

#include <QCoreApplication>
#include <QFontMetricsF>
#include <algorithm>
#include <cmath>

#include "ui/models/format.h"

namespace pw::ui {

using planner::ActionKind;

namespace {

constexpr int kKinds = static_cast<int>(ActionKind::BackwardInput) + 1; // the last kind

int hueOf(int microbatch)
{
    return static_cast<int>(std::abs(static_cast<long long>(microbatch)) * 137508 / 1000 % 360);
}

QString tr(const char* text)
{
    return QCoreApplication::translate("pw::ui::GanttScene", text);
}

} // namespace

QColor spanColor(ActionKind kind, int microbatch)
{
    const int hue = hueOf(microbatch);
    switch (kind) {
    case ActionKind::Forward:
        return QColor::fromHsv(hue, 110, 245);
    case ActionKind::Backward:
        return QColor::fromHsv(hue, 210, 185);
    case ActionKind::BackwardInput:
        return QColor::fromHsv(hue, 255, 215); // a zero-bubble backward's first half: between F and B
    case ActionKind::BackwardWeight:
        return QColor::fromHsv(hue, 230, 120);
    case ActionKind::SendActivation:
    case ActionKind::RecvActivation:
        return QColor::fromHsv(hue, 90, 200);
    case ActionKind::SendGradient:
    case ActionKind::RecvGradient:
        return QColor::fromHsv(hue, 200, 150);
    case ActionKind::AllReduce:
        return QColor(120, 70, 160);
    case ActionKind::OptimizerStep:
        return QColor(90, 90, 90);
    case ActionKind::WavePush:
    case ActionKind::WavePull:
        return QColor(230, 140, 20);
    }
    return Qt::black;
}

FittedTitle fitTitle(const QString& title, QFont font, double bandPixels, double widthPixels)
{
    constexpr int kSmallest = 7; // pixels: below this a title is not legible
    font.setBold(true);
    if (bandPixels < kSmallest || widthPixels <= 0)
        return {font, {}};
    if (QFontMetricsF(font).height() > bandPixels) {
        int px = static_cast<int>(std::floor(bandPixels));
        font.setPixelSize(px);
        while (px > kSmallest && QFontMetricsF(font).height() > bandPixels)
            font.setPixelSize(--px);
        if (QFontMetricsF(font).height() > bandPixels)
            return {font, {}};
    }
    return {font, QFontMetricsF(font).elidedText(title, Qt::ElideRight, widthPixels)};
}

namespace {
std::shared_ptr<const planner::Timeline> orEmpty(std::shared_ptr<const planner::Timeline> t)
{
    return t ? std::move(t) : std::make_shared<const planner::Timeline>();
}

/// The band above a block's lanes: its title's, else room for its batches' labels, else none.
double headerOf(const QString& title, const std::vector<double>& batchEnds)
{
    if (!title.isEmpty())
        return GanttBlockData::kTitleHeight;
    return batchEnds.size() > 1 ? GanttBlockData::kBatchLabelHeight : 0;
}
} // namespace

GanttBlockData::GanttBlockData(GanttBlock block, double blockTop)
    : title(std::move(block.title))
    , timeline(orEmpty(std::move(block.timeline)))
    , capacity(std::move(block.memory_capacity_bytes))
    , batch_ends(std::move(block.batch_ends_s))
    , index(*timeline)
    , layout(std::max(index.devices(), static_cast<int>(timeline->device_names.size())), RowHeights {},
          blockTop + headerOf(title, batch_ends))
    , top(blockTop)
    , bottom(layout.deviceTop(0) + layout.height())
{
}

void GanttBlockData::grow(double blockTop)
{
    index.extend(*timeline);
    layout = RowLayout(std::max(index.devices(), static_cast<int>(timeline->device_names.size())), RowHeights {},
        blockTop + headerOf(title, batch_ends));
    top = blockTop;
    bottom = layout.deviceTop(0) + layout.height();
}

const std::vector<std::uint32_t>& GanttBlockData::messages() const
{
    // Pairs what arrived since the last call: a growing timeline costs only its new spans.
    const auto& spans = timeline->spans;
    for (std::size_t i = m_paired; i < spans.size(); ++i) {
        const auto& s = spans[i];
        if (s.peer >= 0 && s.peer < static_cast<int>(timeline->device_names.size()) && planner::isSend(s.kind)
            && !planner::isWaveSync(s.kind))
            m_sends.push_back(static_cast<std::uint32_t>(i));
    }
    m_paired = spans.size();
    return m_sends;
}

void GanttScene::setBlocks(std::vector<GanttBlock> blocks)
{
    m_blocks.clear();
    double top = 0;
    for (auto& b : blocks) {
        m_blocks.push_back(std::make_unique<GanttBlockData>(std::move(b), top));
        top = m_blocks.back()->bottom + 10;
    }
    int most = 0;
    for (const auto& b : m_blocks)
        for (const auto& s : b->timeline->spans)
            most = std::max(most, std::abs(s.microbatch));
    m_colorStride = 0;
    coverMicrobatches(most);
}

void GanttScene::adopt(GanttScene&& prepared)
{
    m_blocks = std::move(prepared.m_blocks);
    m_emptyMessage = std::move(prepared.m_emptyMessage);
    m_colors = std::move(prepared.m_colors);
    m_colorStride = prepared.m_colorStride;
}

void GanttScene::grow(std::size_t block)
{
    if (block >= m_blocks.size())
        return;
    auto& grown = *m_blocks[block];
    int most = m_colorStride - 1;
    const auto& spans = grown.timeline->spans;
    for (std::size_t i = grown.index.indexedSpans(); i < spans.size(); ++i)
        most = std::max(most, std::abs(spans[i].microbatch));
    double top = block == 0 ? 0 : m_blocks[block - 1]->bottom + 10;
    for (std::size_t b = block; b < m_blocks.size(); ++b) { // the blocks below move when devices were added
        m_blocks[b]->grow(top);
        top = m_blocks[b]->bottom + 10;
    }
    coverMicrobatches(most);
}

void GanttScene::coverMicrobatches(int most)
{
    // The repaint of a million spans cannot afford an HSV conversion per span: a pixel per (kind, microbatch).
    if (most < m_colorStride)
        return;
    m_colorStride = std::max(most + 1, 2 * m_colorStride); // grows geometrically with a live run
    m_colors.assign(static_cast<std::size_t>(kKinds) * m_colorStride, 0);
    for (int k = 0; k < kKinds; ++k)
        for (int m = 0; m < m_colorStride; ++m)
            m_colors[static_cast<std::size_t>(k) * m_colorStride + m] = spanColor(static_cast<ActionKind>(k), m).rgba();
}

void GanttScene::clear(const QString& message)
{
    m_blocks.clear();
    m_emptyMessage = message;
}

double GanttScene::dataBegin() const
{
    double t = 0;
    for (const auto& b : m_blocks)
        t = std::min(t, b->index.dataBegin());
    return t;
}

double GanttScene::dataEnd() const
{
    double t = 0;
    for (const auto& b : m_blocks)
        t = std::max(t, b->index.dataEnd());
    return t > dataBegin() ? t : dataBegin() + 1e-3;
}

TimeAxis GanttScene::axis(double begin, double end, double widthPx) const
{
    TimeAxis a(dataBegin(), dataEnd(), std::max(1.0, widthPx));
    a.setWindow(begin, end);
    return a;
}

QRgb GanttScene::colorOf(const DrawItem& item) const
{
    const int m = std::abs(item.microbatch);
    return m < m_colorStride ? m_colors[static_cast<std::size_t>(item.kind) * m_colorStride + m]
                             : spanColor(item.kind, m).rgba(); // not reached: the table covers the blocks
}

QString GanttScene::toolTip(double t, double y, double tolerance) const
{
    for (const auto& block : m_blocks) {
        if (y < block->top || y > block->bottom)
            continue;
        const auto hit = block->layout.rowAt(y);
        const auto found = hit ? block->index.spanAt(hit->row, t, tolerance) : std::nullopt;
        if (!found)
            return {};
        const auto& s = block->timeline->spans[*found];
        const auto name = [&](int d) {
            return d >= 0 && d < static_cast<int>(block->timeline->device_names.size())
                ? QString::fromStdString(block->timeline->device_names[d])
                : QString::number(d);
        };
        // An action of no microbatch (an optimizer step, an all-reduce) says none, not "microbatch -1".
        const QString microbatch = s.microbatch >= 0 ? QStringLiteral(" · microbatch %1").arg(s.microbatch) : QString();
        QString text = QStringLiteral("<b>%1</b>%2 · stage %3<br>%4, %5 lane<br>%6 → %7 (%8)")
                           .arg(QString::fromStdString(std::string(planner::toString(s.kind))), microbatch)
                           .arg(s.stage)
                           .arg(name(s.device), QString::fromStdString(std::string(planner::toString(s.lane))),
                               secondsText(s.t0), secondsText(s.t1), secondsText(s.t1 - s.t0));
        if (s.peer >= 0)
            text += (planner::isSend(s.kind) ? tr("<br>to %1") : tr("<br>from %1")).arg(name(s.peer));
        if (!block->title.isEmpty())
            text = block->title.toHtmlEscaped() + QStringLiteral("<br>") + text;
        return text;
    }
    return {};
}

} // namespace pw::ui
