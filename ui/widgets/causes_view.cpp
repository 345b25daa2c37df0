// SPDX-License-Identifier: MIT
#include "causes_view.h"

#include <QEvent>
#include <QFontDatabase>
#include <QFontMetrics>
#include <QLabel>
#include <QScrollArea>
#include <QSplitter>
#include <QVBoxLayout>
#include <array>
#include <map>

#include <qcustomplot.h>

namespace pw::ui {

namespace {

/// @brief One cause as drawn: its name and seconds (planner::causeFields), and its colour.
struct CauseStyle
{
    QString name;
    QColor color;
    double planner::TimeCauses::*seconds;
};

/// planner::causeFields() in their order (compute at the bottom of each bar), each with its colour.
std::vector<CauseStyle> causeStyles()
{
    static const QColor colors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(148, 103, 189),
        QColor(199, 199, 199), QColor(214, 39, 40), QColor(140, 86, 75)};
    std::vector<CauseStyle> out;
    const auto fields = planner::causeFields();
    for (std::size_t i = 0; i < fields.size(); ++i)
        out.push_back({QString::fromUtf8(fields[i].name.data(), static_cast<int>(fields[i].name.size())),
            colors[i % std::size(colors)], fields[i].seconds});
    return out;
}

const std::vector<CauseStyle>& causes()
{
    static const std::vector<CauseStyle> styles = causeStyles();
    return styles;
}

} // namespace

CausesView::CausesView(QWidget* parent)
    : QWidget(parent)
{
    m_stragglers = new QLabel(this);
    m_stragglers->setWordWrap(true);
    m_stragglers->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_plot = new QCustomPlot(this);
    m_plot->setMinimumHeight(100);
    m_plot->xAxis->setLabel(tr("device"));
    m_plot->yAxis->setLabel(tr("ms per step"));
    // The legend as a line of text above the plot, wrapped to its width (QCustomPlot's legend would squeeze the
    // bars of a small window, or cover them).
    auto* legend = new QLabel(this);
    legend->setWordWrap(true);
    QStringList keys;
    for (const auto& c : causes())
        keys << QStringLiteral("<span style='color:%1'>&#9632;</span>&nbsp;%2")
                    .arg(c.color.name(), c.name.toHtmlEscaped().replace(QLatin1Char(' '), QStringLiteral("&nbsp;")));
    legend->setText(keys.join(QStringLiteral(" &nbsp; ")));
    m_table = new QLabel(this);
    m_table->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_table->setTextFormat(Qt::RichText);
    m_table->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_table->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_table->setMargin(6);
    auto* scroll = new QScrollArea(this);
    scroll->setWidget(m_table);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(m_plot);
    split->addWidget(scroll);
    split->setSizes({300, 200});
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_stragglers);
    layout->addWidget(legend);
    layout->addWidget(split, 1);
    m_plot->installEventFilter(this);
    clear();
}

void CausesView::clear()
{
    setDiagnosis({});
}

bool CausesView::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_plot && event->type() == QEvent::Resize && m_devices > 0)
        labelDevices(); // QCustomPlot replots on its resize
    return QWidget::eventFilter(watched, event);
}

void CausesView::labelDevices()
{
    // The widest label with some room around it, against the plot's width less its axis labels and margins.
    const int labelPx = m_plot->xAxis->tickLabelFont().pointSize() > 0
        ? QFontMetrics(m_plot->xAxis->tickLabelFont()).horizontalAdvance(QString::number(std::max(0, m_devices - 1)))
            + 8
        : 24;
    const int widthPx = std::max(1, m_plot->width() - 80); // less the value axis and the margins
    int stride = 1;
    for (const int s : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000})
        if ((stride = s) * widthPx >= m_devices * labelPx)
            break;
    QVector<double> x;
    QVector<QString> labels;
    for (int device = 0; device < m_devices; device += stride) {
        x << device;
        labels << QString::number(device);
    }
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    ticker->addTicks(x, labels);
    m_plot->xAxis->setTicker(ticker);
}

void CausesView::setDiagnosis(const app::RunDiagnosis& d)
{
    const auto& t = d.causes;
    const int steps = t.stepCount(), devices = t.deviceCount();
    if (d.stragglers.empty())
        m_stragglers->setText(
            steps > 0 ? tr("No straggler.") : tr("Time by cause appears after the first complete step."));
    else {
        QStringList lines;
        for (const auto& s : d.stragglers)
            lines << tr("Straggler: %1").arg(QString::fromStdString(s.text()).toHtmlEscaped());
        m_stragglers->setText(
            QStringLiteral("<b style='color:#c62828'>%1</b>").arg(lines.join(QStringLiteral("<br>"))));
    }
    m_plot->clearPlottables();
    QVector<double> x;
    for (int device = 0; device < devices; ++device)
        x << device;
    QCPBars* below = nullptr;
    double top = 0;
    std::vector<planner::TimeCauses> perDevice;
    for (int device = 0; device < devices; ++device) {
        perDevice.push_back(t.device(device));
        top = std::max(top, perDevice.back().total() * 1e3 / std::max(1, steps));
    }
    for (const auto& c : causes()) {
        auto* bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        bars->setName(c.name);
        bars->setBrush(c.color);
        bars->setPen(QPen(c.color.darker(130)));
        bars->setWidth(0.6);
        QVector<double> y;
        for (const auto& p : perDevice)
            y << p.*c.seconds * 1e3 / std::max(1, steps);
        bars->setData(x, y, true);
        if (below)
            bars->moveAbove(below);
        below = bars;
    }
    m_devices = devices;
    labelDevices();
    m_plot->xAxis->setRange(-0.6, std::max(0, devices - 1) + 0.6);
    m_plot->yAxis->setRange(0, top > 0 ? top * 1.08 : 1);
    m_plot->replot();
    // The table: per device ms per step and share of the step for each cause, then the late peers and the overlap.
    QString html;
    if (steps > 0) {
        html = tr("<p>Time by cause per step, the mean of %1 complete steps; the plan's waits at the measured pace "
                  "(%2x the prediction).</p><table cellspacing='0' cellpadding='2'><tr><th align='left'>Device</th>"
                  "<th align='right'>Step</th>")
                   .arg(steps)
                   .arg(t.scale, 0, 'f', 2);
        for (const auto& c : causes())
            html += QStringLiteral("<th align='right'>%1</th>").arg(c.name.toHtmlEscaped());
        html += QStringLiteral("</tr>");
        for (int device = 0; device < devices; ++device) {
            const auto& c = perDevice[static_cast<std::size_t>(device)];
            const double step = c.total();
            html += QStringLiteral("<tr><td>%1</td><td align='right'>%2 ms</td>")
                        .arg(device)
                        .arg(step * 1e3 / steps, 0, 'f', 2);
            for (const auto& k : causes())
                html += QStringLiteral("<td align='right'>%1 ms (%2 %)</td>")
                            .arg(c.*k.seconds * 1e3 / steps, 0, 'f', 2)
                            .arg(step > 0 ? 100 * c.*k.seconds / step : 0.0, 0, 'f', 1);
            html += QStringLiteral("</tr>");
        }
        html += QStringLiteral("</table>");
        for (int device = 0; device < devices; ++device) {
            std::map<int, double> late;
            for (const auto& s : t.steps)
                if (s.device == device)
                    for (const auto& l : s.late_by)
                        late[l.peer] += l.seconds;
            for (const auto& [peer, seconds] : late)
                html += tr("<br>Device %1 waited %2 ms per step beyond the plan on device %3.")
                            .arg(device)
                            .arg(seconds * 1e3 / steps, 0, 'f', 2)
                            .arg(peer);
        }
        for (const auto& o : t.overlap)
            html += tr("<br>%1: %2 ms exposed, %3 ms overlapped with compute per step (%4 % overlap).")
                        .arg(QString::fromUtf8(planner::toString(o.kind).data()))
                        .arg(o.exposed_s * 1e3 / steps, 0, 'f', 2)
                        .arg(o.overlapped_s * 1e3 / steps, 0, 'f', 2)
                        .arg(o.percent(), 0, 'f', 0);
        html += tr("<br>Tensor-parallel collectives run inside F and B and count as compute.");
    }
    m_table->setText(html);
}

QString CausesView::stragglerText() const
{
    return m_stragglers->text();
}

QString CausesView::tableText() const
{
    return m_table->text();
}

} // namespace pw::ui
