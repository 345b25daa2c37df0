// SPDX-License-Identifier: MIT
#include "run_compare_view.h"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextStream>
#include <QVBoxLayout>
#include <cmath>

#include <qcustomplot.h>

#include "ui/widgets/gantt_view.h"

namespace pw::ui {

namespace {

QTableWidget* table(QWidget* parent)
{
    auto* t = new QTableWidget(parent);
    t->verticalHeader()->hide();
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    t->horizontalHeader()->setStretchLastSection(true);
    t->setWordWrap(false);
    return t;
}

/// A time with the unit that suits it: µs below a millisecond, ms below a second, else s.
QString ms(double seconds)
{
    if (std::isnan(seconds))
        return QStringLiteral("-");
    const double a = std::abs(seconds);
    if (a < 1e-3)
        return QString::number(seconds * 1e6, 'f', 1) + QStringLiteral(" µs");
    if (a < 1.0)
        return QString::number(seconds * 1e3, 'f', 2) + QStringLiteral(" ms");
    return QString::number(seconds, 'f', 3) + QStringLiteral(" s");
}

QString signedMs(double seconds)
{
    if (std::isnan(seconds))
        return QStringLiteral("-");
    if (std::abs(seconds) < 5e-8)
        return QStringLiteral("±0");
    return (seconds > 0 ? QStringLiteral("+") : QString()) + ms(seconds);
}

void fill(QTableWidget* t, const QStringList& headers, const std::vector<QStringList>& rows)
{
    t->clear();
    t->setColumnCount(static_cast<int>(headers.size()));
    t->setHorizontalHeaderLabels(headers);
    t->setRowCount(static_cast<int>(rows.size()));
    for (int r = 0; r < static_cast<int>(rows.size()); ++r)
        for (int c = 0; c < rows[static_cast<std::size_t>(r)].size(); ++c)
            t->setItem(r, c, new QTableWidgetItem(rows[static_cast<std::size_t>(r)][c]));
}

QString csvField(QString s)
{
    if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"')))
        s = QLatin1Char('"') + s.replace(QLatin1Char('"'), QStringLiteral("\"\"")) + QLatin1Char('"');
    return s;
}

QString tableCsv(const QTableWidget* t)
{
    QString out;
    QStringList line;
    for (int c = 0; c < t->columnCount(); ++c)
        line << csvField(t->horizontalHeaderItem(c) ? t->horizontalHeaderItem(c)->text() : QString());
    out += line.join(QLatin1Char(',')) + QLatin1Char('\n');
    for (int r = 0; r < t->rowCount(); ++r) {
        line.clear();
        for (int c = 0; c < t->columnCount(); ++c)
            line << csvField(t->item(r, c) ? t->item(r, c)->text() : QString());
        out += line.join(QLatin1Char(',')) + QLatin1Char('\n');
    }
    return out;
}

} // namespace

RunCompareView::RunCompareView(QWidget* parent)
    : QWidget(parent)
{
    m_title = new QLabel(tr("Select two runs or more and press Compare"), this);
    auto* exportButton = new QPushButton(tr("Export CSV…"), this);
    auto* top = new QHBoxLayout;
    top->addWidget(m_title, 1);
    top->addWidget(exportButton);
    m_tabs = new QTabWidget(this);
    auto* summary = new QWidget(m_tabs);
    m_runs = table(summary);
    m_differences = table(summary);
    m_stages = table(summary);
    auto* summaryLayout = new QVBoxLayout(summary);
    summaryLayout->addWidget(m_runs, 2);
    summaryLayout->addWidget(new QLabel(tr("Configuration: what differs"), summary));
    summaryLayout->addWidget(m_differences, 2);
    summaryLayout->addWidget(new QLabel(
        tr("Per stage and step, measured compute and idle (bubble); deltas against the first run"), summary));
    summaryLayout->addWidget(m_stages, 3);
    m_tabs->addTab(summary, tr("Summary"));

    auto* metrics = new QWidget(m_tabs);
    m_metric = new QComboBox(metrics);
    m_metric->addItem(tr("loss"), QStringLiteral("loss"));
    m_metric->addItem(tr("throughput"), QStringLiteral("tokens_per_s"));
    m_axis = new QComboBox(metrics);
    m_axis->addItem(tr("step"), static_cast<int>(app::OverlayAxis::Step));
    m_axis->addItem(tr("wall clock"), static_cast<int>(app::OverlayAxis::WallClock));
    m_axis->addItem(tr("relative time"), static_cast<int>(app::OverlayAxis::Relative));
    m_smoothing = new QDoubleSpinBox(metrics);
    m_smoothing->setRange(0.0, 0.99);
    m_smoothing->setSingleStep(0.1);
    m_smoothing->setDecimals(2);
    m_smoothing->setValue(0.0);
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Metric:"), metrics));
    controls->addWidget(m_metric);
    controls->addWidget(new QLabel(tr("x:"), metrics));
    controls->addWidget(m_axis);
    controls->addWidget(new QLabel(tr("Smoothing:"), metrics));
    controls->addWidget(m_smoothing);
    controls->addStretch(1);
    m_plot = new QCustomPlot(metrics);
    m_plot->legend->setVisible(true);
    m_plot->setMinimumHeight(160);
    auto* metricsLayout = new QVBoxLayout(metrics);
    metricsLayout->addLayout(controls);
    metricsLayout->addWidget(m_plot, 1);
    m_tabs->addTab(metrics, tr("Metrics"));

    m_gantt = new GanttView(m_tabs, false);
    m_tabs->addTab(m_gantt, tr("Timelines"));

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(top);
    layout->addWidget(m_tabs, 1);
    connect(m_metric, &QComboBox::currentIndexChanged, this, &RunCompareView::updateOverlay);
    connect(m_axis, &QComboBox::currentIndexChanged, this, &RunCompareView::updateOverlay);
    connect(m_smoothing, &QDoubleSpinBox::valueChanged, this, &RunCompareView::updateOverlay);
    connect(exportButton, &QPushButton::clicked, this, &RunCompareView::exportAsked);
}

void RunCompareView::setComparison(const app::RunsComparison& c)
{
    m_comparison = c;
    const int n = static_cast<int>(c.runs.size());
    m_title->setText(tr("%1 runs compared (deltas against the first)").arg(n));
    std::vector<QStringList> runs;
    for (int i = 0; i < n; ++i) {
        const auto& r = c.runs[static_cast<std::size_t>(i)];
        runs.push_back({QString::number(i + 1), QString::fromStdString(r.run_id), QString::fromStdString(r.status),
            QString::number(r.steps),
            std::isnan(r.final_loss) ? QStringLiteral("-") : QString::number(r.final_loss, 'f', 4),
            QString::number(r.tokens_per_s, 'f', 0), ms(r.iteration_s),
            r.predicted_iteration_s > 0 ? ms(r.predicted_iteration_s) : QStringLiteral("-"),
            r.predicted_iteration_s > 0 ? QString::asprintf("%+.1f %%", 100.0 * r.prediction_error)
                                        : QStringLiteral("-"),
            QString::fromStdString(c.grew[static_cast<std::size_t>(i)])});
    }
    fill(m_runs,
        {tr("#"), tr("run"), tr("status"), tr("steps"), tr("final loss"), tr("tokens/s"), tr("iteration"),
            tr("predicted"), tr("iteration error"), tr("cause that grew most")},
        runs);
    QStringList headers {tr("field")};
    for (int i = 0; i < n; ++i)
        headers << tr("run %1").arg(i + 1);
    std::vector<QStringList> diffs;
    for (const auto& d : c.differences) {
        QStringList row {QString::fromStdString(d.field)};
        for (const auto& v : d.values)
            row << QString::fromStdString(v);
        diffs.push_back(row);
    }
    if (diffs.empty())
        diffs.push_back({tr("(the configurations are the same)")});
    fill(m_differences, headers, diffs);
    QStringList stageHeaders {tr("stage")};
    for (int i = 0; i < n; ++i)
        stageHeaders << tr("run %1 compute").arg(i + 1) << tr("run %1 idle").arg(i + 1);
    std::vector<QStringList> stages;
    for (std::size_t s = 0; s < c.compute_delta_s.size(); ++s) {
        QStringList row {QString::number(s)};
        for (int i = 0; i < n; ++i) {
            const auto& r = c.runs[static_cast<std::size_t>(i)];
            if (s >= r.stages.size()) {
                row << QStringLiteral("-") << QStringLiteral("-");
                continue;
            }
            QString compute = ms(r.stages[s].compute_s), idle = ms(r.stages[s].idle_s);
            if (i > 0) {
                compute += QStringLiteral(" (") + signedMs(c.compute_delta_s[s][static_cast<std::size_t>(i)])
                    + QLatin1Char(')');
                idle += QStringLiteral(" (") + signedMs(c.idle_delta_s[s][static_cast<std::size_t>(i)])
                    + QLatin1Char(')');
            }
            row << compute << idle;
        }
        stages.push_back(row);
    }
    fill(m_stages, stageHeaders, stages);
}

void RunCompareView::setRuns(std::vector<app::RunSnapshot> runs, const app::RunsComparison& comparison)
{
    m_snapshots = std::move(runs);
    setComparison(comparison);
    std::vector<GanttBlock> blocks;
    for (std::size_t i = 0; i < m_snapshots.size(); ++i)
        if (m_snapshots[i].measured)
            blocks.push_back({tr("run %1 (%2)").arg(i + 1).arg(QString::fromStdString(m_snapshots[i].record.id)),
                m_snapshots[i].measured});
    m_gantt->setBlocks(std::move(blocks));
    updateOverlay();
}

void RunCompareView::updateOverlay()
{
    m_plot->clearGraphs();
    if (m_snapshots.empty()) {
        m_plot->replot();
        return;
    }
    const auto metric = m_metric->currentData().toString().toStdString();
    const auto axis = static_cast<app::OverlayAxis>(m_axis->currentData().toInt());
    const auto series = app::overlay(m_snapshots, metric, axis, m_smoothing->value());
    static const QColor colours[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
        QColor(214, 39, 40), QColor(148, 103, 189), QColor(140, 86, 75)};
    for (std::size_t i = 0; i < series.size(); ++i) {
        auto* g = m_plot->addGraph();
        g->setName(tr("run %1").arg(i + 1));
        g->setPen(QPen(colours[i % std::size(colours)], 1.8));
        g->setData(QVector<double>(series[i].x.begin(), series[i].x.end()),
            QVector<double>(series[i].y.begin(), series[i].y.end()), true);
    }
    m_plot->xAxis->setLabel(axis == app::OverlayAxis::Step ? tr("step")
            : axis == app::OverlayAxis::WallClock          ? tr("time from the run's start (s)")
                                                           : tr("fraction of the run"));
    m_plot->yAxis->setLabel(metric == "loss" ? tr("loss (nats per token)") : tr("throughput (tokens/s)"));
    m_plot->rescaleAxes();
    m_plot->replot();
}

std::vector<RunCompareView::CsvTable> RunCompareView::csvTables() const
{
    // Numbers for a spreadsheet: one unit per column, named in its header (seconds, tokens/s, a fraction), plain
    // numbers at full precision; an empty field where a run has no value.
    const auto number = [](double v) { return std::isfinite(v) ? QString::number(v, 'g', 10) : QString(); };
    const auto& c = m_comparison;
    QString runs = QStringLiteral("run,run_id,status,steps,first_loss,final_loss,tokens_per_s,iteration_s,"
                                  "predicted_iteration_s,prediction_error_fraction\n");
    for (std::size_t i = 0; i < c.runs.size(); ++i) {
        const auto& r = c.runs[i];
        const bool predicted = r.predicted_iteration_s > 0;
        runs += QStringList {QString::number(i + 1), csvField(QString::fromStdString(r.run_id)),
                    csvField(QString::fromStdString(r.status)), QString::number(r.steps), number(r.first_loss),
                    number(r.final_loss), number(r.tokens_per_s), number(r.iteration_s),
                    predicted ? number(r.predicted_iteration_s) : QString(),
                    predicted ? number(r.prediction_error) : QString()}
                    .join(QLatin1Char(','))
            + QLatin1Char('\n');
    }
    QString stages = QStringLiteral("stage");
    for (std::size_t i = 0; i < c.runs.size(); ++i)
        stages
            += QStringLiteral(",run_%1_compute_s,run_%1_idle_s,run_%1_compute_delta_s,run_%1_idle_delta_s").arg(i + 1);
    stages += QLatin1Char('\n');
    for (std::size_t s = 0; s < c.compute_delta_s.size(); ++s) {
        QStringList row {QString::number(s)};
        for (std::size_t i = 0; i < c.runs.size(); ++i) {
            const auto& perStage = c.runs[i].stages;
            const bool has = s < perStage.size();
            row << (has ? number(perStage[s].compute_s) : QString()) << (has ? number(perStage[s].idle_s) : QString())
                << (i < c.compute_delta_s[s].size() ? number(c.compute_delta_s[s][i]) : QString())
                << (i < c.idle_delta_s[s].size() ? number(c.idle_delta_s[s][i]) : QString());
        }
        stages += row.join(QLatin1Char(',')) + QLatin1Char('\n');
    }
    // The differences' values are JSON (strings quoted within the CSV field).
    return {{QString(), runs}, {QStringLiteral("-differences"), tableCsv(m_differences)},
        {QStringLiteral("-stages"), stages}};
}

QStringList RunCompareView::exportCsv(const QString& path)
{
    QFileInfo info(path);
    const QString base
        = info.suffix().isEmpty() ? info.filePath() : info.path() + QLatin1Char('/') + info.completeBaseName();
    QStringList written;
    for (const CsvTable& t : csvTables()) {
        const QString file = base + t.suffix + QStringLiteral(".csv");
        QFile f(file);
        if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
            m_error = tr("%1: %2").arg(file, f.errorString());
            return {};
        }
        QTextStream(&f) << t.text;
        written << file;
    }
    m_error.clear();
    return written;
}

void RunCompareView::exportAsked()
{
    // A name to start from, in the folder of the last export; ".csv" is added when the name has none.
    static QString lastFolder = QDir::homePath();
    const QString path = QFileDialog::getSaveFileName(this, tr("Export comparison (three CSV files)"),
        QDir(lastFolder).filePath(QStringLiteral("run-comparison.csv")), tr("CSV (*.csv)"));
    if (path.isEmpty())
        return;
    lastFolder = QFileInfo(path).absolutePath();
    const QStringList written = exportCsv(path);
    if (written.isEmpty()) {
        QMessageBox::warning(this, tr("Export comparison"), m_error);
        return;
    }
    QStringList names;
    for (const QString& f : written)
        names << QFileInfo(f).fileName();
    emit message(tr("Exported the comparison to %1: %2").arg(lastFolder, names.join(QStringLiteral(", "))));
}

} // namespace pw::ui
