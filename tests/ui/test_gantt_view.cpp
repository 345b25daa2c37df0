// SPDX-License-Identifier: MIT
// The schedule view on the demo's simulated timeline, offscreen: hover text over a span and over a bubble, the
// time window (clamping, anchored zoom, keys), image and Chrome trace exports, and what it paints.
#include <catch2/catch.hpp>

#include <QFile>
#include <QFileInfo>
#include <QFontMetricsF>
#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>

#include <nlohmann/json.hpp>
#include <qcustomplot.h>

#include "app/project/demo_project.h"
#include "planner/io/chrome_trace.h"
#include "planner/sim/simulator.h"
#include "tests/planner/fixtures.h"
#include "ui/widgets/gantt_scene.h"
#include "ui/widgets/gantt_view.h"

using namespace pw;

namespace {

const app::Project& ganttViewDemo()
{
    static const app::Project project = app::demoProject();
    return project;
}

const planner::Timeline& demoTimeline()
{
    static const planner::Timeline timeline = planner::simulate(*ganttViewDemo().plan).timeline;
    return timeline;
}

std::shared_ptr<const planner::Timeline> shared(const planner::Timeline& timeline)
{
    return std::make_shared<const planner::Timeline>(timeline);
}

/// A GanttView 1200x700 on screen (offscreen platform) showing `timeline`, laid out.
struct ShownView
{
    ui::GanttView view;

    explicit ShownView(const planner::Timeline& timeline)
    {
        view.resize(1200, 700);
        view.show();
        REQUIRE(QTest::qWaitForWindowExposed(&view));
        view.setTimeline(shared(timeline));
        view.ganttPlot()->replot();
    }

    double axisWidth() const { return view.ganttPlot()->axisRect()->width(); }
    double duration() const { return view.windowEnd() - view.windowBegin(); }
};

/// Compute-lane spans of one device, by start.
std::vector<planner::Span> computeSpans(const planner::Timeline& timeline, int device)
{
    std::vector<planner::Span> spans;
    for (const auto& s : timeline.spans)
        if (s.device == device && s.lane == planner::Lane::Compute)
            spans.push_back(s);
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.t0 < b.t0; });
    return spans;
}

QString kindName(planner::ActionKind kind)
{
    return QString::fromStdString(std::string(planner::toString(kind)));
}

} // namespace

TEST_CASE("gantt scene: the batches' labels get a band above the lanes, not over the bars", "[ui]")
{
    // issue 30 item 12: "batch k" was drawn at the top of the first device's lane, over its bars.
    const auto timeline
        = std::make_shared<const planner::Timeline>(planner::simulate(pw::test::chainPlan(2, 4)).timeline);
    const ui::GanttBlockData one(ui::GanttBlock {{}, timeline, {}, {}}, 0);
    CHECK(one.headerHeight() == 0); // one batch: no labels, no band
    const ui::GanttBlockData three(ui::GanttBlock {{}, timeline, {}, {0.01, 0.02, 0.03}}, 10);
    CHECK(three.headerHeight() == ui::GanttBlockData::kBatchLabelHeight);
    CHECK(three.layout.deviceTop(0) == 10 + ui::GanttBlockData::kBatchLabelHeight);
    CHECK(three.bottom == three.layout.deviceTop(0) + three.layout.height());
    const ui::GanttBlockData titled(ui::GanttBlock {QStringLiteral("zb-h2"), timeline, {}, {0.01, 0.02}}, 0);
    CHECK(titled.headerHeight() == ui::GanttBlockData::kTitleHeight); // the title's band holds them
}

TEST_CASE("gantt view: a chart that is not the current plan's is greyed until the new one lands", "[ui]")
{
    // issue 30 item 18: the Schedule tab showed the previous project's chart for 0.2-0.4 s, not greyed, beside
    // the new plan's (greyed) metrics.
    const auto timeline = planner::simulate(pw::test::chainPlan(4, 8)).timeline;
    ShownView shown(timeline);
    const auto meanLightness = [&] {
        shown.view.ganttPlot()->replot(QCustomPlot::rpImmediateRefresh);
        const QImage image = shown.view.ganttPlot()->grab().toImage().convertToFormat(QImage::Format_RGB32);
        double sum = 0;
        for (int y = 0; y < image.height(); ++y)
            for (int x = 0; x < image.width(); ++x)
                sum += QColor(image.pixel(x, y)).lightnessF();
        return sum / (image.width() * image.height());
    };
    CHECK_FALSE(shown.view.stale());
    const double current = meanLightness();
    shown.view.setStale(true); // the plan changed; its simulation runs
    CHECK(shown.view.stale());
    const double greyed = meanLightness();
    CHECK(greyed > current + 0.02);
    // The next scene prepared in the background: still greyed while it is, then drawn as it is.
    shown.view.setStale(false);
    shown.view.setBlocksInBackground({ui::GanttBlock {{}, shared(timeline)}});
    CHECK(shown.view.stale());
    REQUIRE(shown.view.waitForPrepared());
    QCoreApplication::processEvents(); // the scene is adopted on the GUI thread
    CHECK_FALSE(shown.view.stale());
    CHECK(meanLightness() == Approx(current).margin(0.005));
}

namespace {

/// The memory plot's text item that says `what`, or null.
QCPItemText* memoryNote(QCustomPlot* plot, const char* what)
{
    for (int i = 0; i < plot->itemCount(); ++i)
        if (auto* t = qobject_cast<QCPItemText*>(plot->item(i)); t && t->text().contains(QLatin1String(what)))
            return t;
    return nullptr;
}

QRectF rectOf(const QCPItemText* t)
{
    return QRectF(t->topLeft->pixelPosition(), t->bottomRight->pixelPosition());
}

} // namespace

TEST_CASE("gantt view: the memory plot's 'hover a curve' note sits clear of every curve", "[ui]")
{
    // issue 30 item 18: "64 devices: hover a curve" was drawn bottom left, over the lowest curves.
    const auto timeline = planner::simulate(pw::test::chainPlan(64, 64)).timeline;
    ShownView shown(timeline);
    shown.view.setTimeline(shared(timeline), std::vector<double>(64, 80e9)); // 80 GB a device: above the scale
    QCustomPlot* plot = shown.view.memoryPlot();
    // Wide, then narrow (the note goes below the capacity one, still apart), then short too (a 1024 x 700 window
    // leaves the memory plot about 120 px): the top curve stays below both notes' lines.
    for (const QSize size : {QSize(1200, 700), QSize(520, 700), QSize(520, 330)}) {
        INFO(size.width() << " x " << size.height());
        shown.view.resize(size);
        plot->replot(QCustomPlot::rpImmediateRefresh);
        plot->replot(QCustomPlot::rpImmediateRefresh); // the range follows the layout: ticks at the next replot
        const QCPItemText* note = memoryNote(plot, "hover a curve");
        const QCPItemText* capacity = memoryNote(plot, "above the scale");
        REQUIRE(note); // 64 devices do not fit a legend of two rows
        REQUIRE(capacity); // 80 GB a device, far above these megabytes: both notes at the top, apart
        CHECK_FALSE(rectOf(note).intersects(rectOf(capacity)));
        const double notesBottom = std::max(rectOf(note).bottom(), rectOf(capacity).bottom());
        double topCurve = 1e9; // pixels grow downwards
        for (int g = 0; g < plot->graphCount(); ++g)
            for (auto it = plot->graph(g)->data()->constBegin(); it != plot->graph(g)->data()->constEnd(); ++it) {
                const QPointF p(plot->xAxis->coordToPixel(it->key), plot->yAxis->coordToPixel(it->value));
                CHECK_FALSE(rectOf(note).contains(p));
                topCurve = std::min(topCurve, p.y());
            }
        CHECK(topCurve > notesBottom);
    }
}

TEST_CASE("gantt view: the memory legend's entries all fit the plot's width, at every width", "[ui]")
{
    // issue 30 item 18: at 1024 x 700 the demo's legend was cut ("dgx0/gpu("): it kept the rows it was laid out
    // with for another width.
    const auto timeline = planner::simulate(pw::test::chainPlan(8, 16)).timeline;
    ShownView shown(timeline);
    QCustomPlot* plot = shown.view.memoryPlot();
    for (const int width : {1900, 1000, 700, 420, 1200}) {
        INFO("width " << width);
        shown.view.resize(width, 700);
        plot->replot(QCustomPlot::rpImmediateRefresh);
        QCPLegend* legend = plot->legend;
        if (!legend->visible()) { // gave way to the note
            CHECK(memoryNote(plot, "hover a curve"));
            continue;
        }
        CHECK_FALSE(memoryNote(plot, "hover a curve"));
        int entries = 0;
        for (int i = 0; i < legend->itemCount(); ++i) { // the grid's cells: a wrapped last row has empty ones
            const QCPAbstractLegendItem* item = legend->item(i);
            if (!item)
                continue;
            ++entries;
            CHECK(item->outerRect().left() >= 0);
            CHECK(item->outerRect().right() <= plot->width());
        }
        CHECK(entries == plot->graphCount());
    }
}

TEST_CASE("gantt view: hovering a span names its kind and microbatch, a bubble shows nothing", "[ui]")
{
    const auto& timeline = demoTimeline();
    ShownView shown(timeline);
    auto& view = shown.view;
    REQUIRE(view.blockCount() == 1);
    const double pps = shown.axisWidth() / shown.duration();
    const int devices = static_cast<int>(timeline.device_names.size());
    REQUIRE(devices == 8);

    int spansChecked = 0;
    for (int d : {0, devices - 1}) {
        const auto spans = computeSpans(timeline, d);
        REQUIRE_FALSE(spans.empty());
        // Forward and backward spans wide enough to hit (at least 12 px).
        for (const auto& s : spans) {
            if ((s.t1 - s.t0) * pps < 12
                || (s.kind != planner::ActionKind::Forward && s.kind != planner::ActionKind::Backward))
                continue;
            const QString text = view.toolTipAt(view.pointOf(d, (s.t0 + s.t1) / 2));
            INFO("device " << d << " " << text.toStdString());
            CHECK(text.contains(QStringLiteral("<b>%1</b>").arg(kindName(s.kind))));
            CHECK(text.contains(QStringLiteral("microbatch %1 ").arg(s.microbatch)));
            CHECK(text.contains(QStringLiteral("stage %1").arg(s.stage)));
            CHECK(text.contains(QString::fromStdString(timeline.device_names[d])));
            ++spansChecked;
        }

        // The widest idle gap of the compute lane (from the start of the run on).
        double gapBegin = 0, gapEnd = 0, reached = 0;
        for (const auto& s : spans) {
            if (s.t0 - reached > gapEnd - gapBegin) {
                gapBegin = reached;
                gapEnd = s.t0;
            }
            reached = std::max(reached, s.t1);
        }
        INFO("device " << d << " gap " << gapBegin << " .. " << gapEnd);
        REQUIRE((gapEnd - gapBegin) * pps > 12);
        CHECK(view.toolTipAt(view.pointOf(d, (gapBegin + gapEnd) / 2)).isEmpty());
    }
    CHECK(spansChecked >= 4);
    // An optimizer step has no microbatch: its tooltip names none (it said "microbatch -1", issue 30 item 18).
    bool stepChecked = false;
    for (const auto& s : timeline.spans)
        if (s.kind == planner::ActionKind::OptimizerStep && s.lane == planner::Lane::Compute
            && (s.t1 - s.t0) * pps >= 6) {
            const QString text = view.toolTipAt(view.pointOf(s.device, (s.t0 + s.t1) / 2));
            INFO(text.toStdString());
            CHECK(text.contains(QStringLiteral("<b>%1</b> · stage").arg(kindName(s.kind))));
            CHECK_FALSE(text.contains(QStringLiteral("microbatch")));
            stepChecked = true;
            break;
        }
    CHECK(stepChecked);
    // Outside the plot: nothing.
    CHECK(view.toolTipAt(QPoint(-5, -5)).isEmpty());
    CHECK(view.toolTipAt(QPoint(2, view.pointOf(0, 0).y())).isEmpty()); // over the device names
}

TEST_CASE("gantt view: the time window is clamped to the data and zoom keeps the time under the cursor", "[ui]")
{
    const auto& timeline = demoTimeline();
    ShownView shown(timeline);
    auto& view = shown.view;
    const double end = timeline.endTime();
    REQUIRE(end > 0);
    CHECK(view.windowBegin() == Approx(0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(end));

    QSignalSpy changed(&view, &ui::GanttView::timeWindowChanged);
    view.setTimeWindow(-end, 3 * end);
    CHECK(view.windowBegin() == Approx(0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(end));
    CHECK(changed.count() >= 1);

    // Past the end: shifted back into the data, the duration kept.
    view.setTimeWindow(end * 0.9, end * 1.1);
    CHECK(view.windowEnd() == Approx(end));
    CHECK(shown.duration() == Approx(end * 0.2));
    // Before the start.
    view.setTimeWindow(-end * 0.25, end * 0.25);
    CHECK(view.windowBegin() == Approx(0).margin(1e-12));
    CHECK(shown.duration() == Approx(end * 0.5));
    // Not below the deepest zoom (1 us).
    view.setTimeWindow(end / 2, end / 2 + 1e-9);
    CHECK(shown.duration() == Approx(1e-6));
    CHECK(view.windowBegin() <= end / 2);
    CHECK(view.windowEnd() >= end / 2);

    // Anchored zoom: the time under x stays under x.
    view.showAll();
    CHECK(shown.duration() == Approx(end));
    const double w = shown.axisWidth();
    for (double x : {w / 3, w / 2, 0.8 * w}) {
        view.showAll();
        const double under = view.windowBegin() + x / w * shown.duration();
        view.zoom(2, x);
        CHECK(shown.duration() == Approx(end / 2));
        CHECK(view.windowBegin() + x / w * shown.duration() == Approx(under));
        view.zoom(2, x);
        CHECK(shown.duration() == Approx(end / 4));
        CHECK(view.windowBegin() + x / w * shown.duration() == Approx(under));
    }
    // Zooming out past everything shows everything.
    view.zoom(0.01, w / 2);
    CHECK(view.windowBegin() == Approx(0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(end));
}

TEST_CASE("gantt view: keys zoom, pan and show everything", "[ui]")
{
    const auto& timeline = demoTimeline();
    ShownView shown(timeline);
    auto& view = shown.view;
    auto* plot = view.ganttPlot();
    const double end = timeline.endTime();
    const double begin0 = view.windowBegin(), end0 = view.windowEnd();

    QTest::keyClick(plot, Qt::Key_Plus);
    CHECK(shown.duration() == Approx(end / 1.5));
    QTest::keyClick(plot, Qt::Key_Minus);
    CHECK(view.windowBegin() == Approx(begin0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(end0));

    QTest::keyClick(plot, Qt::Key_Plus);
    QTest::keyClick(plot, Qt::Key_Plus);
    const double zoomed = shown.duration();
    CHECK(zoomed == Approx(end / 2.25));
    const double centre = (view.windowBegin() + view.windowEnd()) / 2;
    CHECK(centre == Approx(end / 2)); // zoomed about the middle
    const double before = view.windowBegin();
    QTest::keyClick(plot, Qt::Key_Left);
    CHECK(view.windowBegin() < before);
    CHECK(view.windowBegin() == Approx(before - zoomed / 8));
    CHECK(shown.duration() == Approx(zoomed));
    QTest::keyClick(plot, Qt::Key_Right);
    CHECK(view.windowBegin() == Approx(before));

    QTest::keyClick(plot, Qt::Key_Home);
    CHECK(view.windowBegin() == Approx(begin0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(end0));
    // Left at the start of the run stays there.
    QTest::keyClick(plot, Qt::Key_Left);
    CHECK(view.windowBegin() == Approx(begin0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(end0));
}

TEST_CASE("gantt view: exports images and the Chrome trace", "[ui]")
{
    const auto& timeline = demoTimeline();
    ShownView shown(timeline);
    auto& view = shown.view;
    QTemporaryDir dir;
    REQUIRE(dir.isValid());

    QString error;
    const QString png = dir.filePath(QStringLiteral("schedule.png"));
    REQUIRE(view.exportImage(png, &error));
    CHECK(error.isEmpty());
    const QImage image(png);
    REQUIRE_FALSE(image.isNull());
    const int w = std::max(view.ganttPlot()->width(), 200);
    const int legend = 24; // a legend row on top: the picture explains its colours without the window
    const int h = legend + std::max(view.ganttPlot()->height(), 200) + std::max(view.memoryPlot()->height(), 100);
    CHECK(image.size() == QSize(w, h));
    CHECK(image.pixelColor(14, 12).rgb() == ui::spanColor(planner::ActionKind::Forward, 0).rgb());
    CHECK(image.pixelColor(14, 12) != QColor(Qt::white));
    // Not blank: the spans have colour.
    int coloured = 0;
    for (int y = 0; y < image.height(); y += 7)
        for (int x = 0; x < image.width(); x += 7) {
            const QColor c = image.pixelColor(x, y);
            coloured += c.saturation() > 60;
        }
    CHECK(coloured > 50);

    const QString svg = dir.filePath(QStringLiteral("schedule.svg"));
    REQUIRE(view.exportImage(svg, &error));
    QFile svgFile(svg);
    REQUIRE(svgFile.open(QIODevice::ReadOnly));
    const QByteArray svgText = svgFile.readAll();
    CHECK(svgText.size() > 1000);
    CHECK((svgText.startsWith("<?xml") || svgText.contains("<svg")));
    CHECK(svgText.contains("hue: microbatch"));
    CHECK(svgText.contains("forward"));
    // The grid was under the spans for the picture and is back over them on screen.
    CHECK(view.ganttPlot()->xAxis->grid()->layer()->name() == QStringLiteral("overlay"));

    const QString pdf = dir.filePath(QStringLiteral("schedule.PDF"));
    REQUIRE(view.exportImage(pdf, &error));
    QFile pdfFile(pdf);
    REQUIRE(pdfFile.open(QIODevice::ReadOnly));
    CHECK(pdfFile.size() > 1000);
    CHECK(pdfFile.read(5) == QByteArray("%PDF-"));

    const QString bmp = dir.filePath(QStringLiteral("schedule.bmp"));
    CHECK_FALSE(view.exportImage(bmp, &error));
    CHECK(error.contains(QStringLiteral("bmp")));
    CHECK_FALSE(QFileInfo::exists(bmp));
    error.clear();
    CHECK_FALSE(view.exportImage(dir.filePath(QStringLiteral("no-folder/schedule.png")), &error));
    CHECK_FALSE(error.isEmpty());

    const QString trace = dir.filePath(QStringLiteral("trace.json"));
    REQUIRE(view.exportChromeTrace(trace, &error));
    QFile traceFile(trace);
    REQUIRE(traceFile.open(QIODevice::ReadOnly));
    const auto j = nlohmann::json::parse(traceFile.readAll().toStdString());
    REQUIRE(j.contains("traceEvents"));
    const auto expected = planner::chromeTrace(timeline);
    CHECK(j["traceEvents"].size() == expected["traceEvents"].size());
    CHECK(j["traceEvents"].size() > timeline.spans.size() / 2);
    error.clear();
    CHECK_FALSE(view.exportChromeTrace(dir.filePath(QStringLiteral("no-folder/trace.json")), &error));
    CHECK_FALSE(error.isEmpty());
}

TEST_CASE("gantt view: paints folded spans, an empty message, stacked blocks", "[ui]")
{
    const auto& timeline = demoTimeline();
    ShownView shown(timeline);
    auto& view = shown.view;
    view.ganttPlot()->replot();
    CHECK(view.lastPaintedItems() > 0);
    CHECK(view.lastPaintedItems() <= timeline.spans.size());
    // Zoomed in, fewer spans are in view.
    const auto whole = view.lastPaintedItems();
    view.setTimeWindow(0, timeline.endTime() / 50);
    view.ganttPlot()->replot();
    CHECK(view.lastPaintedItems() > 0);
    CHECK(view.lastPaintedItems() < whole);

    view.setEmptyMessage(QStringLiteral("no plan"));
    CHECK(view.blockCount() == 0);
    view.ganttPlot()->replot();
    CHECK(view.lastPaintedItems() == 0);
    CHECK(view.toolTipAt(QPoint(600, 200)).isEmpty());
    QTemporaryDir dir;
    QString error;
    CHECK_FALSE(view.exportChromeTrace(dir.filePath(QStringLiteral("trace.json")), &error));
    CHECK_FALSE(error.isEmpty());
    view.zoom(2, 100); // nothing to zoom: no crash
    QTest::keyClick(view.ganttPlot(), Qt::Key_Plus);

    // Two timelines on one axis: the longer one sets the window.
    const auto& scenarios = ganttViewDemo().scenarios;
    const auto gpipe = planner::simulate(scenarios[1].plan).timeline;
    view.setBlocks({ui::GanttBlock {QStringLiteral("PipeDream"), shared(timeline)},
        ui::GanttBlock {QStringLiteral("GPipe"), shared(gpipe)}});
    CHECK(view.blockCount() == 2);
    CHECK(view.windowEnd() == Approx(std::max(timeline.endTime(), gpipe.endTime())));
    view.ganttPlot()->replot();
    CHECK(view.lastPaintedItems() > 0);
    CHECK(view.lastPaintedItems() <= timeline.spans.size() + gpipe.spans.size());
    // The first block's titled hover text.
    const auto spans = computeSpans(timeline, 0);
    const auto widest = *std::max_element(
        spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.t1 - a.t0 < b.t1 - b.t0; });
    const QString text = view.toolTipAt(view.pointOf(0, (widest.t0 + widest.t1) / 2));
    CHECK(text.startsWith(QStringLiteral("PipeDream<br>")));
    CHECK(text.contains(QStringLiteral("microbatch %1 ").arg(widest.microbatch)));

    view.setTimeline(shared(timeline));
    CHECK(view.blockCount() == 1);
}

TEST_CASE("gantt view: send -> receive arrows, one per message, only on demand", "[ui]")
{
    ShownView shown(demoTimeline());
    std::size_t messages = 0;
    for (const auto& s : demoTimeline().spans)
        messages += planner::isSend(s.kind) && !planner::isWaveSync(s.kind) && s.peer >= 0;
    REQUIRE(messages > 0);
    CHECK(shown.view.lastPaintedArrows() == 0); // off by default
    shown.view.setArrowsVisible(true);
    shown.view.ganttPlot()->replot();
    // The whole run is in view: an arrow per message, from its send to the peer.
    CHECK(shown.view.lastPaintedArrows() == messages);
    // Zoomed into the first tenth, fewer arrows, still some.
    shown.view.setTimeWindow(shown.view.windowBegin(), shown.view.windowBegin() + shown.duration() / 10);
    shown.view.ganttPlot()->replot();
    CHECK(shown.view.lastPaintedArrows() > 0);
    CHECK(shown.view.lastPaintedArrows() < messages);
    shown.view.setArrowsVisible(false);
    shown.view.ganttPlot()->replot();
    CHECK(shown.view.lastPaintedArrows() == 0);
}

TEST_CASE("gantt view: hovering a memory curve names a device and its memory then", "[ui]")
{
    ShownView shown(demoTimeline());
    QCustomPlot* plot = shown.view.memoryPlot();
    REQUIRE(plot);
    plot->replot();
    // The last memory sample of device 7 before the middle of the run: its level holds at the middle.
    const double mid = (shown.view.windowBegin() + shown.view.windowEnd()) / 2;
    const planner::CounterSample* level = nullptr;
    for (const auto& m : demoTimeline().memory())
        if (m.device == 7 && m.t <= mid)
            level = &m;
    REQUIRE(level);
    const double gib = level->value / double(1ull << 30);
    const QPoint on(static_cast<int>(plot->xAxis->coordToPixel(mid)), static_cast<int>(plot->yAxis->coordToPixel(gib)));
    const QString text = shown.view.memoryToolTipAt(on);
    CHECK(text.contains(QStringLiteral("dgx0/gpu")));
    CHECK(text.contains(QString::number(gib, 'f', 2) + QStringLiteral(" GiB at")));
    // Far above every curve: nothing.
    const QPoint above(on.x(), static_cast<int>(plot->yAxis->coordToPixel(plot->yAxis->range().upper * 0.999)));
    CHECK(shown.view.memoryToolTipAt(above).isEmpty());
}

TEST_CASE("gantt view: zoomed or panned the memory curves reach both edges of the window", "[ui]")
{
    ShownView shown(demoTimeline());
    QCustomPlot* plot = shown.view.memoryPlot();
    REQUIRE(plot);
    plot->replot();
    // Each device's level at time t, from the timeline's samples directly (a step function: a sample holds until
    // the device's next one).
    const auto levelAt = [](int device, double t) {
        double gib = 0;
        for (const auto& m : demoTimeline().memory())
            if (m.device == device && m.t <= t)
                gib = m.value / double(1ull << 30);
        return gib;
    };
    const auto& names = demoTimeline().device_names;
    const double begin = shown.view.windowBegin(), whole = shown.duration();
    // Zoomed into a narrow window (a few changes per curve at most, so the curves are drawn unreduced), then
    // panned by half a window twice, then a wider window that the curves are reduced for.
    const std::vector<std::pair<double, double>> windows {{begin + 0.4003 * whole, begin + 0.4013 * whole},
        {begin + 0.4008 * whole, begin + 0.4018 * whole}, {begin + 0.4013 * whole, begin + 0.4023 * whole},
        {begin + 0.1 * whole, begin + 0.7 * whole}};
    for (const auto& [t0, t1] : windows) {
        shown.view.setTimeWindow(t0, t1);
        plot->replot();
        const double w0 = shown.view.windowBegin(), w1 = shown.view.windowEnd();
        CAPTURE(w0, w1);
        REQUIRE(plot->graphCount() == static_cast<int>(names.size()));
        for (int i = 0; i < plot->graphCount(); ++i) {
            const QCPGraph* g = plot->graph(i);
            const int device
                = static_cast<int>(std::find(names.begin(), names.end(), g->name().toStdString()) - names.begin());
            CAPTURE(g->name());
            REQUIRE(device < static_cast<int>(names.size()));
            REQUIRE(g->data()->size() >= 2);
            // The curve starts at the left edge with the level held there and ends at the right edge.
            CHECK(g->data()->constBegin()->key == Approx(w0).epsilon(1e-12));
            CHECK((g->data()->constEnd() - 1)->key == Approx(w1).epsilon(1e-12));
            if (g->data()->size() < 50) { // unreduced: the levels held at the edges
                CHECK(g->data()->constBegin()->value == Approx(levelAt(device, w0)));
                CHECK((g->data()->constEnd() - 1)->value == Approx(levelAt(device, w1)));
            } else { // reduced: the first column's peak, at least the level held at the left edge
                CHECK(g->data()->constBegin()->value >= levelAt(device, w0) - 1e-9);
            }
        }
    }
}

TEST_CASE("gantt view: the image path paints the same pixels as a fillRect per item", "[ui]")
{
    // 16 stages x 700 microbatches of 1F1B: about 45,000 spans, above the threshold where the view writes the
    // lanes into an image on several threads instead of a fillRect per item.
    const auto timeline = planner::simulate(pw::test::chainPlan(16, 700)).timeline;
    REQUIRE(timeline.spans.size() > 40000);
    ShownView shown(timeline);
    auto render = [&](bool image) {
        shown.view.setImagePainting(image);
        shown.view.ganttPlot()->replot();
        return shown.view.ganttPlot()->grab().toImage().convertToFormat(QImage::Format_RGB32);
    };
    for (double share : {1.0, 0.3, 0.05}) { // whole run (folded to about 2 items a pixel), then zoomed in
        INFO(share);
        shown.view.setTimeWindow(shown.view.windowBegin(), shown.view.windowBegin() + share * (timeline.endTime()));
        const QImage rects = render(false);
        const QImage image = render(true);
        REQUIRE(rects.size() == image.size());
        CHECK(shown.view.lastPaintedItems() > 0);
        long long different = 0;
        for (int y = 0; y < image.height(); ++y)
            for (int x = 0; x < image.width(); ++x)
                different += image.pixel(x, y) != rects.pixel(x, y);
        CHECK(different == 0);
    }
}

TEST_CASE("gantt view: a live timeline grows in place, the view indexes what is new and follows the run", "[ui]")
{
    // The demo's spans as a run reports them: each device in order of start, in batches of 20 to 40.
    auto all = demoTimeline().spans;
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.t0 < b.t0; });
    REQUIRE(all.size() > 100);
    auto live = std::make_shared<planner::Timeline>();
    live->device_names = {demoTimeline().device_names.front()}; // the other devices announce themselves
    ui::GanttView view;
    view.resize(1200, 700);
    view.show();
    REQUIRE(QTest::qWaitForWindowExposed(&view));
    view.setTimeline(live);
    std::size_t at = 0;
    auto grow = [&](std::size_t n) {
        n = std::min(n, all.size() - at);
        live->append(std::span<const planner::Span>(all).subspan(at, n));
        at += n;
        view.timelineGrew();
        view.ganttPlot()->replot();
    };
    grow(20);
    const double firstEnd = view.windowEnd();
    CHECK(firstEnd == Approx(live->endTime()));
    CHECK(view.lastPaintedItems() > 0);
    grow(30);
    // The whole run was in view: it still is, and the window grew with the run.
    CHECK(view.windowEnd() == Approx(live->endTime()));
    CHECK(view.windowEnd() > firstEnd);
    CHECK(view.windowBegin() == Approx(0).margin(1e-12));

    // Zoomed onto the live edge: the window keeps its length and follows the latest span.
    const double length = view.windowEnd() / 4;
    view.setTimeWindow(view.windowEnd() - length, view.windowEnd());
    grow(40);
    CHECK(view.windowEnd() == Approx(live->endTime()));
    CHECK(view.windowEnd() - view.windowBegin() == Approx(length));

    // Looking at the past: the window stays.
    view.setTimeWindow(0, length);
    grow(all.size());
    CHECK(at == all.size());
    CHECK(view.windowBegin() == Approx(0).margin(1e-12));
    CHECK(view.windowEnd() == Approx(length));

    // Every device arrived, with a row of its own; a span appended last is under the mouse.
    CHECK(live->device_names.size() == demoTimeline().device_names.size());
    const auto lastCompute = computeSpans(*live, 7).back();
    const double len = lastCompute.t1 - lastCompute.t0;
    view.setTimeWindow(lastCompute.t0 - len, lastCompute.t1 + len);
    view.ganttPlot()->replot();
    const QString text = view.toolTipAt(view.pointOf(7, (lastCompute.t0 + lastCompute.t1) / 2));
    CHECK(text.contains(QStringLiteral("<b>%1</b>").arg(kindName(lastCompute.kind))));
    if (lastCompute.microbatch >= 0) // the last is an optimizer step: it names no microbatch
        CHECK(text.contains(QStringLiteral("microbatch %1 ").arg(lastCompute.microbatch)));
}

TEST_CASE("gantt view: every time tick is labelled with its own value (2.5 s steps read 2.5, 5, 7.5)", "[ui]")
{
    planner::Timeline t;
    t.device_names = {"d0"};
    planner::Span s;
    s.t0 = 0;
    s.t1 = 18.7;
    t.spans.push_back(s);
    ShownView shown(t);
    for (const double end : {18.7, 1.87, 0.0187, 0.0000187}) {
        shown.view.setTimeWindow(0, end);
        shown.view.ganttPlot()->replot();
        const auto* axis = shown.view.ganttPlot()->xAxis;
        const auto ticks = axis->tickVector();
        const auto labels = axis->tickVectorLabels();
        REQUIRE(ticks.size() == labels.size());
        REQUIRE(ticks.size() >= 2);
        const double unit = end >= 1 ? 1 : end >= 1e-3 ? 1e-3 : 1e-6;
        for (int i = 0; i < ticks.size(); ++i) {
            INFO("window " << end << " s, tick " << ticks[i] << ", label " << labels[i].toStdString());
            const double shownValue = labels[i].section(QLatin1Char(' '), 0, 0).toDouble() * unit;
            CHECK(std::abs(shownValue - ticks[i]) <= 1e-9 * std::max(1.0, std::abs(ticks[i]) / unit) * unit);
        }
    }
}

TEST_CASE("gantt view: a block's title fits its band's height and width, elided, or is left out", "[ui]")
{
    // issue 30 item 18: at 1024 x 700 a stacked scenario's title ran into the bars and off the right edge.
    const QString title = QStringLiteral("PipeDream, 1F1B — 6-2, 1f1b: 1112.2 samples/s, 57.546 ms");
    QFont font;
    font.setPointSize(10);
    for (const double band : {9.0, 11.0, 14.0, 30.0}) {
        const auto fitted = ui::fitTitle(title, font, band, 200);
        INFO("band " << band << " px");
        REQUIRE_FALSE(fitted.text.isEmpty());
        CHECK(fitted.font.bold());
        CHECK(QFontMetricsF(fitted.font).height() <= band);
        CHECK(QFontMetricsF(fitted.font).horizontalAdvance(fitted.text) <= 200);
        CHECK(fitted.text.endsWith(QChar(0x2026))); // elided: the whole title is wider than 200 px
    }
    CHECK(ui::fitTitle(title, font, 30, 2000).text == title); // room for all of it
    CHECK(ui::fitTitle(title, font, 5, 200).text.isEmpty()); // too thin to read: left out
}
