// SPDX-License-Identifier: MIT
#include "model_view.h"

#include <QDialog>
#include <QDialogButtonBox>
#include <QKeyEvent>
#include <QLabel>
#include <QListWidget>
#include <QMenu>
#include <QMouseEvent>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include <qcustomplot.h>

#include "planner/costs.h"
#include "planner/edit.h"
#include "planner/errors.h"
#include "ui/document/plan_document.h"
#include "ui/models/format.h"

namespace pw::ui {

namespace {

constexpr int kGrabPixels = 6;

/// Opaque tints (blending a band over the whole plot height on every drag step costs more than it shows).
QColor stageColor(int stage, bool over)
{
    if (over)
        return QColor(250, 214, 211);
    static const QColor palette[] = {QColor(226, 236, 253), QColor(224, 242, 228), QColor(254, 243, 212),
        QColor(240, 226, 243), QColor(217, 241, 245), QColor(255, 231, 224)};
    return palette[stage % 6];
}

/// A stage's devices in a few words: "dgx0/gpu0", or "6 x H100 (dgx0/gpu0-5)" for replicas.
QString deviceList(const planner::Plan& plan, const std::vector<int>& devices)
{
    if (devices.size() == 1)
        return QString::fromStdString(plan.cluster->deviceName(devices.front()));
    QString types;
    for (int d : devices) {
        const QString t = QString::fromStdString(plan.cluster->typeOf(d).name);
        if (!types.split(QStringLiteral("/")).contains(t))
            types += (types.isEmpty() ? QString() : QStringLiteral("/")) + t;
    }
    return QObject::tr("%1 × %2").arg(devices.size()).arg(types);
}

} // namespace

ModelView::ModelView(PlanDocument& document, QWidget* parent)
    : QWidget(parent)
    , m_document(document)
{
    auto* layout = new QVBoxLayout(this);
    m_caption = new QLabel(this);
    m_caption->setWordWrap(true);
    layout->addWidget(m_caption);
    m_plot = new QCustomPlot(this);
    m_plot->setMinimumSize(200, 150); // QCustomPlot cannot paint into an empty buffer
    m_plot->setAttribute(Qt::WA_OpaquePaintEvent); // it paints every pixel: nothing to clear beneath it
    m_plot->setMouseTracking(true);
    m_plot->setFocusPolicy(Qt::StrongFocus);
    m_plot->installEventFilter(this);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->axisRect()->setRangeDrag(Qt::Horizontal);
    m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
    m_plot->yAxis->setLabel(tr("time per microbatch (ms)"));
    m_plot->yAxis2->setVisible(true);
    m_plot->yAxis2->setLabel(tr("memory per layer (MiB)"));
    m_plot->xAxis->setLabel(tr("layer"));
    m_plot->legend->setVisible(true);
    // The legend sits in a row above the plot, so that it hides no stage label.
    m_plot->plotLayout()->insertRow(0);
    m_plot->plotLayout()->addElement(0, 0, m_plot->legend);
    m_plot->plotLayout()->setRowStretchFactor(0, 0.001);
    m_plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m_plot->legend->setWrap(4);
    m_plot->legend->setBorderPen(Qt::NoPen);
    layout->addWidget(m_plot, 1);
    connect(&m_document, &PlanDocument::planChanged, this, &ModelView::rebuild);
    // Which labels fit and how thick the handles are depend on the pixels per layer: zoom and size change them.
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, &ModelView::rebuildLater);
    connect(&m_document, &PlanDocument::predictionChanged, this, &ModelView::rebuild);
    // Undo, redo or a new plan in the middle of a drag end it: the dragged boundary may not exist any more.
    connect(&m_document, &PlanDocument::previewAborted, this, [this] { m_drag = -1; });
    rebuild();
}

void ModelView::rebuild()
{
    m_plot->clearItems();
    if (!m_document.hasPlan()) {
        m_plot->clearPlottables();
        m_series.clear();
        m_caption->setText(tr("No plan: open a project or import a profile (File menu, or drop a file here)."));
        m_plot->replot();
        return;
    }
    const planner::Plan& plan = m_document.plan();
    // Peak memory per stage only from a prediction of this very plan (a drag's newest result may be a step behind).
    const auto prediction = m_document.isPredictionCurrent() ? m_document.prediction() : nullptr;
    const int layers = plan.model->layerCount();
    const double scale = planner::microbatchScale(plan);

    QVector<double> keys, forward, backward, weights, stashed;
    for (const auto& stage : plan.stages) {
        const auto& type = plan.cluster->typeOf(stage.devices.front());
        const double speed = planner::deviceSpeed(type, plan.model, plan.cluster->device_types).factor;
        for (int p = stage.first_layer; p <= stage.last_layer; ++p) {
            const auto& layer = plan.model->layers[plan.layerAt(p)];
            const auto times = planner::layerTimesOn(layer, type, speed);
            keys << p + 0.5;
            forward << times.forward_ms * scale;
            backward << times.backward_ms * scale;
            weights << layer.weight_bytes / (1 << 20);
            stashed << plan.model->stashedBytes(plan.layerAt(p)) * scale / (1 << 20);
        }
    }
    // The series change only when layers move to a stage of another device type: a drag on one type keeps them
    // (rebuilding the plottables on every step of a drag costs more than the re-simulation).
    std::vector<QVector<double>> series {keys, forward, backward, weights, stashed};
    if (series != m_series || m_plot->plottableCount() == 0) {
        m_plot->clearPlottables();
        m_series = series;
        auto* fwd = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        fwd->setName(tr("forward"));
        fwd->setWidth(0.8);
        fwd->setPen(Qt::NoPen);
        fwd->setBrush(QColor(100, 150, 220));
        fwd->setAntialiased(false); // axis-aligned boxes
        fwd->setAntialiasedFill(false);
        fwd->setData(keys, forward, true);
        auto* bwd = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        bwd->setName(tr("backward"));
        bwd->setWidth(0.8);
        bwd->setPen(Qt::NoPen);
        bwd->setBrush(QColor(30, 70, 140));
        bwd->setAntialiased(false);
        bwd->setAntialiasedFill(false);
        bwd->setData(keys, backward, true);
        bwd->moveAbove(fwd);
        auto* w = new QCPGraph(m_plot->xAxis, m_plot->yAxis2);
        w->setName(tr("weights"));
        w->setPen(QPen(QColor(200, 90, 30), 2));
        const bool markers = layers <= 64; // markers on hundreds of layers are noise, and slow to draw
        if (markers)
            w->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        w->setData(keys, weights, true);
        auto* a = new QCPGraph(m_plot->xAxis, m_plot->yAxis2);
        a->setName(tr("stashed activations / microbatch"));
        a->setPen(QPen(QColor(40, 150, 70), 2, Qt::DashLine));
        if (markers)
            a->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, 5));
        a->setData(keys, stashed, true);

        double top = 0, memTop = 0;
        for (int i = 0; i < keys.size(); ++i) {
            top = std::max(top, forward[i] + backward[i]);
            memTop = std::max({memTop, weights[i], stashed[i]});
        }
        m_plot->yAxis->setRange(0, std::max(top, 1e-6) * 1.35); // headroom for the stage labels
        m_plot->yAxis2->setRange(0, std::max(memTop, 1e-6) * 1.35);
        auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
        ticker->setTickStep(layers > 60 ? 10 : layers > 30 ? 5 : 1);
        ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
        m_plot->xAxis->setTicker(ticker);
    }
    // The zoom stays while the model does (a new model shows all its layers).
    if (layers != m_shownLayers) {
        m_shownLayers = layers;
        m_plot->xAxis->setRange(0, layers);
    }

    // Stages as bands, labelled with their devices; red when over memory.
    const QFontMetrics labelMetrics(m_plot->font());
    const double axisLeft = m_plot->axisRect()->left(), axisRight = m_plot->axisRect()->right();
    m_labelsShown = 0;
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& st = plan.stages[s];
        const bool over = prediction && s < static_cast<int>(prediction->stages.size())
            && prediction->stages[s].peak_memory_bytes > prediction->stages[s].memory_capacity_bytes;
        auto* band = new QCPItemRect(m_plot);
        band->setLayer(QStringLiteral("background"));
        band->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
        band->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
        band->topLeft->setCoords(st.first_layer, 0);
        band->bottomRight->setCoords(st.last_layer + 1, 1);
        band->setPen(Qt::NoPen);
        band->setBrush(stageColor(s, over));
        // A label only where it fits between the stage's edges: at 64 stages most would smear into each other
        // (hovering a layer names its stage either way).
        QString text = tr("stage %1\n%2").arg(s).arg(deviceList(plan, st.devices));
        if (prediction && s < static_cast<int>(prediction->stages.size()))
            text += QStringLiteral("\n") + bytesText(prediction->stages[s].peak_memory_bytes)
                + (over ? tr(" > capacity") : QString());
        const double x0 = m_plot->xAxis->coordToPixel(st.first_layer);
        const double x1 = m_plot->xAxis->coordToPixel(st.last_layer + 1);
        QRect need = labelMetrics.boundingRect(QRect(0, 0, 1000, 1000), Qt::AlignLeft, text);
        if (x1 - x0 < need.width() + 6 || x1 < axisLeft || x0 > axisRight)
            continue;
        ++m_labelsShown;
        auto* label = new QCPItemText(m_plot);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords((st.first_layer + st.last_layer + 1) / 2.0, 0.02);
        label->setPositionAlignment(Qt::AlignTop | Qt::AlignHCenter);
        label->setText(text);
        label->setColor(over ? QColor(190, 20, 20) : QColor(40, 40, 40));
        label->setClipToAxisRect(true);
    }
    // Boundaries as draggable handles.
    const auto bounds = planner::edit::boundaries(plan);
    const bool editable = planner::edit::whyNotEditable(plan).empty();
    // Dense handles (many stages, zoomed out) are thin lines, the grip only on the one hovered or dragged: wide ones
    // would merge into one bar. Zooming in (wheel) spreads them.
    double spacing = std::numeric_limits<double>::infinity();
    for (std::size_t b = 1; b < bounds.size(); ++b)
        spacing = std::min(
            spacing, m_plot->xAxis->coordToPixel(bounds[b] + 1) - m_plot->xAxis->coordToPixel(bounds[b - 1] + 1));
    m_denseHandles = spacing < 24;
    for (int b = 0; b < static_cast<int>(bounds.size()); ++b) {
        const double x = bounds[b] + 1;
        const bool active = b == m_drag || b == m_hover;
        const QColor color = !editable ? QColor(150, 150, 150)
            : b == m_drag              ? QColor(230, 120, 20)
            : b == m_hover             ? QColor(240, 150, 40)
                                       : QColor(50, 50, 50);
        auto* line = new QCPItemLine(m_plot);
        line->start->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->end->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->start->setCoords(x, 0);
        line->end->setCoords(x, 1);
        line->setPen(QPen(color, active ? 4 : m_denseHandles ? 1 : 3));
        if (m_denseHandles && !active)
            continue;
        auto* grip = new QCPItemText(m_plot);
        grip->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        grip->position->setCoords(x, 0.5);
        grip->setText(QStringLiteral("◀▶"));
        grip->setColor(Qt::white);
        grip->setBrush(color);
        grip->setPadding(QMargins(2, 2, 2, 2));
        grip->setClipToAxisRect(true);
    }
    const auto& type = plan.cluster->typeOf(plan.stages.front().devices.front());
    QString caption
        = tr("<b>%1</b>: %2 layers, %3 stages (%4) on %5. Bars: time per microbatch of %6 on the device "
             "type of the layer's stage (%7 for stage 0).")
              .arg(QString::fromStdString(plan.model->name).toHtmlEscaped())
              .arg(layers)
              .arg(plan.stageCount())
              .arg(configText(QString::fromStdString(plan.configString())))
              .arg(QString::fromStdString(plan.cluster->name).toHtmlEscaped())
              .arg(plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size)
              .arg(QString::fromStdString(type.name));
    if (plan.tensor_parallel > 1)
        caption += tr(" Tensor parallel t=%1: the bars are whole layers; each of a stage's %1 tensor-parallel devices "
                      "computes 1/%1 of them (plus the all-reduces), as the stage table and the metrics count it.")
                       .arg(plan.tensor_parallel);
    if (plan.context_parallel > 1)
        caption += tr(" Context parallel c=%1: each replica's %1 groups compute the same layers on 1/%1 of every "
                      "sequence each, passing keys and values round a ring inside every attention.")
                       .arg(plan.context_parallel);
    const std::string why = planner::edit::whyNotEditable(plan);
    caption += why.empty()
        ? tr(" Drag a dark handle to move a boundary; right-click to split, merge or assign devices.")
        : tr(" <i>Not editable by hand: %1</i>").arg(QString::fromStdString(why).toHtmlEscaped());
    m_caption->setText(caption);
    m_plot->replot(QCustomPlot::rpQueuedReplot); // never paint inside the document's signals
}

void ModelView::rebuildLater()
{
    if (m_rebuildQueued)
        return;
    m_rebuildQueued = true;
    QMetaObject::invokeMethod(
        this,
        [this] {
            m_rebuildQueued = false;
            rebuild();
        },
        Qt::QueuedConnection);
}

void ModelView::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    // Two or four legend entries a row, whichever fits; then labels and handles for the new width.
    const int wrap = m_plot->width() < 620 ? 2 : 4;
    if (m_plot->legend->wrap() != wrap) {
        m_plot->legend->setWrap(wrap);
        m_plot->legend->setFillOrder(m_plot->legend->fillOrder(), true); // rearranges the entries
    }
    rebuildLater();
}

QString ModelView::layerToolTip(double layerPosition) const
{
    if (!m_document.hasPlan())
        return {};
    const auto& plan = m_document.plan();
    const int p = static_cast<int>(std::floor(layerPosition));
    if (p < 0 || p >= plan.model->layerCount())
        return {};
    const int s = stageAt(p + 0.5);
    const auto& st = plan.stages[s];
    const auto& layer = plan.model->layers[plan.layerAt(p)];
    const auto& type = plan.cluster->typeOf(st.devices.front());
    const auto times
        = planner::layerTimesOn(layer, type, planner::deviceSpeed(type, plan.model, plan.cluster->device_types).factor);
    const double scale = planner::microbatchScale(plan);
    return tr("layer %1: %2 (%3)\nstage %4 on %5\nforward %6, backward %7 per microbatch of %8 on %9\nweights %10, "
              "stashed activations %11 per microbatch")
        .arg(p)
        .arg(QString::fromStdString(layer.name), QString::fromStdString(layer.kind))
        .arg(s)
        .arg(deviceList(plan, st.devices))
        .arg(secondsText(times.forward_ms * scale * 1e-3), secondsText(times.backward_ms * scale * 1e-3))
        .arg(plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size)
        .arg(QString::fromStdString(type.name))
        .arg(mebibytesText(layer.weight_bytes), mebibytesText(plan.model->stashedBytes(plan.layerAt(p)) * scale));
}

QPoint ModelView::handlePoint(int boundary) const
{
    const auto bounds = planner::edit::boundaries(m_document.plan());
    const QRect r = m_plot->axisRect()->rect();
    return QPoint(static_cast<int>(std::lround(m_plot->xAxis->coordToPixel(bounds.at(boundary) + 1))), r.center().y());
}

int ModelView::boundaryAt(QPoint pos) const
{
    if (!m_document.hasPlan() || !m_plot->axisRect()->rect().contains(pos))
        return -1;
    const auto bounds = planner::edit::boundaries(m_document.plan());
    int best = -1;
    double bestDistance = kGrabPixels + 0.5;
    for (int b = 0; b < static_cast<int>(bounds.size()); ++b) {
        const double d = std::abs(m_plot->xAxis->coordToPixel(bounds[b] + 1) - pos.x());
        if (d < bestDistance) {
            bestDistance = d;
            best = b;
        }
    }
    return best;
}

int ModelView::stageAt(double position) const
{
    const auto& plan = m_document.plan();
    for (int s = 0; s < plan.stageCount(); ++s)
        if (position < plan.stages[s].last_layer + 1)
            return s;
    return plan.stageCount() - 1;
}

bool ModelView::eventFilter(QObject* watched, QEvent* event)
{
    if (watched != m_plot || !m_document.hasPlan())
        return QWidget::eventFilter(watched, event);
    switch (event->type()) {
    case QEvent::MouseButtonPress: {
        auto* me = static_cast<QMouseEvent*>(event);
        const int b = boundaryAt(me->position().toPoint());
        if (me->button() != Qt::LeftButton || b < 0)
            break;
        const std::string why = planner::edit::whyNotEditable(m_document.plan());
        if (!why.empty()) {
            emit message(QString::fromStdString(why));
            return true;
        }
        m_drag = b;
        rebuild();
        return true; // the plot must not start panning
    }
    case QEvent::MouseMove: {
        auto* me = static_cast<QMouseEvent*>(event);
        if (m_drag < 0) {
            const int hover = boundaryAt(me->position().toPoint());
            m_plot->setCursor(hover >= 0 ? Qt::SplitHCursor : Qt::ArrowCursor);
            if (hover != m_hover) {
                m_hover = hover;
                rebuild();
            }
            // Over a layer: its name, kind, stage, times and bytes.
            const QString tip = hover < 0 && m_plot->axisRect()->rect().contains(me->position().toPoint())
                ? layerToolTip(m_plot->xAxis->pixelToCoord(me->position().x()))
                : QString();
            if (tip.isEmpty())
                QToolTip::hideText();
            else
                QToolTip::showText(me->globalPosition().toPoint(), tip, m_plot);
            break;
        }
        const auto& plan = m_document.plan();
        const double position = m_plot->xAxis->pixelToCoord(me->position().x());
        try {
            const int last = planner::edit::snapBoundary(plan, m_drag, position);
            if (last != planner::edit::boundaries(plan)[m_drag])
                m_document.preview(planner::edit::moveBoundary(plan, m_drag, last));
        } catch (const planner::InputError& e) { // no exception may leave an event handler
            emit message(QString::fromStdString(planner::formatInputError(e)));
        }
        return true;
    }
    case QEvent::MouseButtonRelease: {
        if (m_drag < 0)
            break;
        const int b = m_drag;
        m_drag = -1;
        m_document.commitPreview(tr("Move boundary %1").arg(b));
        rebuild();
        return true;
    }
    case QEvent::KeyPress:
        if (m_drag >= 0 && static_cast<QKeyEvent*>(event)->key() == Qt::Key_Escape) {
            m_drag = -1;
            m_document.cancelPreview();
            rebuild();
            return true;
        }
        break;
    case QEvent::ContextMenu:
        showContextMenu(static_cast<QContextMenuEvent*>(event)->pos());
        return true;
    default:
        break;
    }
    return QWidget::eventFilter(watched, event);
}

void ModelView::showContextMenu(QPoint pos)
{
    const double position = m_plot->xAxis->pixelToCoord(pos.x());
    const int s = stageAt(position);
    QMenu menu(this);
    const int layer = std::clamp(static_cast<int>(std::floor(position)), 0, m_document.plan().model->layerCount() - 1);
    menu.addAction(
        tr("Split stage %1 after layer %2").arg(s).arg(layer), this, [this, position] { splitStageAt(position); });
    if (s + 1 < m_document.plan().stageCount())
        menu.addAction(
            tr("Merge stage %1 with stage %2").arg(s).arg(s + 1), this, [this, position] { mergeStageAt(position); });
    menu.addAction(tr("Assign devices to stage %1…").arg(s), this, [this, position] { assignDevicesAt(position); });
    menu.exec(m_plot->mapToGlobal(pos));
}

void ModelView::splitStageAt(double position)
{
    const auto& plan = m_document.plan();
    const int s = stageAt(position);
    const auto& stage = plan.stages[s];
    int last = std::clamp(static_cast<int>(std::floor(position)), stage.first_layer, stage.last_layer);
    if (last == stage.last_layer)
        last -= 1;
    const auto free = planner::edit::freeDevices(plan);
    QString error;
    bool ok = false;
    if (!free.empty()) {
        ok = m_document.apply(
            tr("Split stage %1").arg(s),
            [&](const planner::Plan& p) { return planner::edit::splitStage(p, s, last, {free.front()}); }, &error);
    } else if (stage.replicas() > 1) {
        // No free device: the new stage takes the stage's last replica.
        ok = m_document.apply(
            tr("Split stage %1").arg(s),
            [&](const planner::Plan& p) {
                std::vector<int> keep = p.stages[s].devices;
                const int moved = keep.back();
                keep.pop_back();
                return planner::edit::splitStage(planner::edit::assignDevices(p, s, keep), s, last, {moved});
            },
            &error);
    } else {
        error = tr("No free device for a new stage: merge two stages or take a replica off a stage first.");
    }
    if (!ok)
        emit message(error);
}

void ModelView::mergeStageAt(double position)
{
    const int s = stageAt(position);
    QString error;
    if (!m_document.apply(
            tr("Merge stages %1 and %2").arg(s).arg(s + 1),
            [s](const planner::Plan& p) { return planner::edit::mergeWithNext(p, s); }, &error))
        emit message(error);
}

void ModelView::assignDevicesAt(double position)
{
    const auto& plan = m_document.plan();
    const int s = stageAt(position);
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Devices of stage %1").arg(s));
    auto* layout = new QVBoxLayout(&dialog);
    auto* intro
        = new QLabel(tr("Replicas of stage %1: its devices, the free ones, and other stages' devices, which are "
                        "swapped (untick one of this stage's devices for each you take).")
                         .arg(s),
            &dialog);
    intro->setWordWrap(true);
    layout->addWidget(intro);
    auto* list = new QListWidget(&dialog);
    std::vector<int> candidates = plan.stages[s].devices;
    const auto free = planner::edit::freeDevices(plan);
    candidates.insert(candidates.end(), free.begin(), free.end());
    std::vector<int> owner(candidates.size(), -1); // the other stage a candidate belongs to (-1: this one or free)
    for (int o = 0; o < plan.stageCount(); ++o)
        if (o != s)
            for (int d : plan.stages[o].devices) {
                candidates.push_back(d);
                owner.push_back(o);
            }
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        const QString device
            = QStringLiteral("%1 (%2)").arg(QString::fromStdString(plan.cluster->deviceName(candidates[i])),
                QString::fromStdString(plan.cluster->typeOf(candidates[i]).name));
        auto* item = new QListWidgetItem(owner[i] < 0 ? device : tr("%1, stage %2: swap").arg(device).arg(owner[i]));
        item->setData(Qt::UserRole, candidates[i]);
        item->setData(Qt::UserRole + 1, owner[i]);
        item->setCheckState(i < plan.stages[s].devices.size() ? Qt::Checked : Qt::Unchecked);
        list->addItem(item);
    }
    layout->addWidget(list);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    layout->addWidget(buttons);
    if (dialog.exec() != QDialog::Accepted)
        return;
    std::vector<int> devices, taken; // ticked; ticked from other stages
    for (int i = 0; i < list->count(); ++i)
        if (list->item(i)->checkState() == Qt::Checked) {
            devices.push_back(list->item(i)->data(Qt::UserRole).toInt());
            if (list->item(i)->data(Qt::UserRole + 1).toInt() >= 0)
                taken.push_back(devices.back());
        }
    assignDevicesTo(s, devices, taken);
}

void ModelView::assignDevicesTo(int s, const std::vector<int>& devices, const std::vector<int>& taken)
{
    QString error;
    if (!m_document.apply(
            taken.empty() ? tr("Assign devices to stage %1").arg(s) : tr("Swap devices with stage %1").arg(s),
            [&](const planner::Plan& p) {
                // Each device taken from another stage is swapped for one this stage gives up; then the rest.
                std::vector<int> released;
                for (int d : p.stages[s].devices)
                    if (std::find(devices.begin(), devices.end(), d) == devices.end())
                        released.push_back(d);
                if (taken.size() > released.size())
                    throw planner::InputError({}, 0, "devices",
                        "to take a device of another stage, untick one of stage " + std::to_string(s)
                            + "'s devices to give it in exchange");
                planner::Plan out = p;
                for (std::size_t i = 0; i < taken.size(); ++i)
                    out = planner::edit::swapDevices(out, released[i], taken[i]);
                return planner::edit::assignDevices(out, s, devices);
            },
            &error))
        emit message(error);
}

} // namespace pw::ui
