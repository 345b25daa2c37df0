// SPDX-License-Identifier: MIT
#include "run_compare_view.h"

#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QTableWidget>
#include <QTextStream>
#include <QVBoxLayout>
#include <cmath>

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
    m_runs = table(this);
    m_differences = table(this);
    m_stages = table(this);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(top);
    layout->addWidget(m_runs, 2);
    layout->addWidget(new QLabel(tr("Configuration: what differs"), this));
    layout->addWidget(m_differences, 2);
    layout->addWidget(
        new QLabel(tr("Per stage and step, measured compute and idle (bubble); deltas against the first run"), this));
    layout->addWidget(m_stages, 3);
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
            QString::number(r.tokens_per_s, 'f', 0), ms(r.iteration_s)});
    }
    fill(m_runs, {tr("#"), tr("run"), tr("status"), tr("steps"), tr("final loss"), tr("tokens/s"), tr("iteration")},
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

QString RunCompareView::csv() const
{
    return QStringLiteral("# runs\n") + tableCsv(m_runs) + QStringLiteral("\n# configuration differences\n")
        + tableCsv(m_differences) + QStringLiteral("\n# per stage and step\n") + tableCsv(m_stages);
}

bool RunCompareView::exportCsv(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
        m_error = tr("%1: %2").arg(path, f.errorString());
        return false;
    }
    QTextStream(&f) << csv();
    m_error.clear();
    return true;
}

void RunCompareView::exportAsked()
{
    const QString path = QFileDialog::getSaveFileName(this, tr("Export comparison"), QString(), tr("CSV (*.csv)"));
    if (!path.isEmpty() && !exportCsv(path))
        QMessageBox::warning(this, tr("Export comparison"), m_error);
}

} // namespace pw::ui
