// SPDX-License-Identifier: MIT
#include "metrics_panel.h"

#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

#include "planner/analysis/flops.h"
#include "planner/units.h"
#include "ui/document/plan_document.h"
#include "ui/models/format.h"
#include "ui/models/stage_model.h"
#include "ui/widgets/elided_label.h"

namespace pw::ui {

MetricsPanel::MetricsPanel(PlanDocument& document, QWidget* parent)
    : QWidget(parent)
    , m_document(document)
{
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    auto big = [this] {
        auto* l = new QLabel(this);
        QFont f = l->font();
        f.setPointSizeF(f.pointSizeF() * 1.25);
        f.setBold(true);
        l->setFont(f);
        l->setTextInteractionFlags(Qt::TextSelectableByMouse);
        // New numbers on every drag step must not re-layout the window around them.
        l->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
        return l;
    };
    // Wrapped, never elided: at 1024x700 one line cut the plan's description mid-word ("(1-1),...h2").
    m_plan = new QLabel(this);
    m_plan->setWordWrap(true);
    m_iteration = big();
    m_throughput = big();
    m_bubble = big();
    m_wait = big();
    m_memory = big();
    m_mfu = big();
    m_hfu = big();
    // The numbers are never the part that is cut: each keeps room for its widest plausible text, the dock no less.
    const auto reserve = [](QLabel* l, const QString& widest) {
        l->setMinimumWidth(QFontMetrics(l->font()).horizontalAdvance(widest) + 4);
    };
    reserve(m_iteration, QStringLiteral("9999.999 ms"));
    reserve(m_throughput, tr("99999.9 samples/s"));
    reserve(m_bubble, QStringLiteral("100.0%"));
    reserve(m_wait, QStringLiteral("100.0%"));
    m_bubble->setToolTip(tr("Share of the devices' time idle waiting for the pipeline (fill, drain, slower stages)"));
    m_wait->setToolTip(tr("Share of the devices' time idle waiting for all-reduces to end (the data-parallel\n"
                          "gradient sum, tied weights): not part of the pipeline's bubble"));
    reserve(m_memory, tr("999.99 of 999.99 GiB"));
    reserve(m_mfu, tr("99.9% (999.9 TFLOP/s)"));
    reserve(m_hfu, tr("99.9% (999.9 TFLOP/s)"));
    m_mfu->setToolTip(tr("Model FLOPs utilisation: achieved useful model FLOP/s per device (per GPU where several\n"
                         "devices share one) over its peak. Useful FLOPs are forward and backward once (Megatron's\n"
                         "Eq. 4.2 without recomputation for a GPT profile, else the layers' forward FLOPs x 3): a\n"
                         "recomputed forward does not count."));
    m_hfu->setToolTip(tr("Hardware FLOPs utilisation: the FLOP/s the devices execute over their peak, the\n"
                         "recomputed forward included (x 4 instead of x 3); the same as MFU without recomputation."));
    form->addRow(tr("Plan"), m_plan);
    form->addRow(tr("Iteration time"), m_iteration);
    form->addRow(tr("Throughput"), m_throughput);
    form->addRow(tr("Bubble"), m_bubble);
    form->addRow(tr("All-reduce wait"), m_wait);
    form->addRow(tr("Peak memory"), m_memory);
    m_mfuLabel = new QLabel(tr("MFU, per device"), this);
    m_hfuLabel = new QLabel(tr("HFU, per device"), this);
    form->addRow(m_mfuLabel, m_mfu);
    form->addRow(m_hfuLabel, m_hfu);
    layout->addLayout(form);
    m_error = new QLabel(this);
    m_error->setWordWrap(true);
    m_error->setStyleSheet(QStringLiteral("color: #b71c1c"));
    layout->addWidget(m_error);
    m_stages = new StageModel(document, this);
    m_table = new QTableView(this);
    m_table->setModel(m_stages);
    m_table->verticalHeader()->hide();
    // Columns fit their contents when the stages change, not on every drag step (that re-measures every cell).
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setSelectionMode(QAbstractItemView::NoSelection);
    m_table->setWordWrap(false);
    // "Peak memory" reads "62.30 of 80.00 GiB": the capacity column would only repeat it, and cost the width the
    // numbers need in a narrow dock.
    m_table->setColumnHidden(StageModel::Capacity, true);
    connect(m_stages, &QAbstractItemModel::modelReset, m_table, &QTableView::resizeColumnsToContents);
    layout->addWidget(m_table, 1);
    connect(&document, &PlanDocument::predictionChanged, this, &MetricsPanel::refresh);
    // The memory column's text changes width when a prediction lands ("simulating…" -> "62.30 of 80.00 GiB"): fit
    // the columns then (a landing comes at most once per simulation, not on every drag step).
    connect(&document, &PlanDocument::predictionChanged, m_table, &QTableView::resizeColumnsToContents);
    connect(&document, &PlanDocument::planChanged, this, &MetricsPanel::refresh);
    refresh();
    m_table->resizeColumnsToContents();
}

QString MetricsPanel::value(const QString& name) const
{
    if (name == QLatin1String("plan"))
        return m_plan->text();
    const QLabel* l = name == QLatin1String("iteration") ? m_iteration
        : name == QLatin1String("throughput")            ? m_throughput
        : name == QLatin1String("bubble")                ? m_bubble
        : name == QLatin1String("wait")                  ? m_wait
        : name == QLatin1String("memory")                ? m_memory
        : name == QLatin1String("mfu")                   ? m_mfu
        : name == QLatin1String("hfu")                   ? m_hfu
        : name == QLatin1String("plan")                  ? m_plan
                                                         : nullptr;
    return l ? l->text() : QString();
}

void MetricsPanel::refresh()
{
    if (!m_document.hasPlan()) {
        m_plan->setText(QStringLiteral("–"));
        for (QLabel* l : {m_iteration, m_throughput, m_bubble, m_wait, m_memory, m_mfu, m_hfu})
            l->setText(QStringLiteral("–"));
        m_error->setText(tr("No plan yet: run a partitioner or open a project."));
        return;
    }
    const auto& plan = m_document.plan();
    const QString config = QString::fromStdString(plan.configString());
    // Pipeline stages as the configuration counts them (a device's chunks are one stage of it), then the chunks.
    QString stages = configText(config) != config ? configText(config)
                                                  : tr("%1 stages (%2)").arg(plan.pipelineDepth()).arg(config);
    if (plan.schedule.chunks > 1)
        stages += tr(", %1 chunks each").arg(plan.schedule.chunks);
    // A plan cut by hand (or loaded without one) names no algorithm.
    const QString by
        = plan.algorithm.empty() ? tr("cut by hand") : tr("by %1").arg(QString::fromStdString(plan.algorithm));
    m_plan->setText(
        tr("%1, %2 × %3 microbatches, %4, %5")
            .arg(stages)
            .arg(plan.schedule.microbatches)
            .arg(plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size)
            .arg(QString::fromStdString(plan.schedule.kind), by));
    // While the current plan is simulated the newest finished prediction stays, greyed: numbers follow a drag at
    // the speed of one simulation instead of blanking out.
    const bool current = m_document.isPredictionCurrent();
    for (QLabel* l : {m_iteration, m_throughput, m_bubble, m_wait, m_mfu, m_hfu})
        l->setEnabled(current);
    const auto& r = m_document.prediction();
    if (!r && !current) {
        for (QLabel* l : {m_iteration, m_throughput, m_bubble, m_wait, m_memory, m_mfu, m_hfu})
            l->setText(QStringLiteral("…"));
        m_error->setText(tr("Simulating…"));
        return;
    }
    if (!r) {
        for (QLabel* l : {m_iteration, m_throughput, m_bubble, m_wait, m_memory, m_mfu, m_hfu})
            l->setText(QStringLiteral("–"));
        m_error->setText(tr("The plan cannot be simulated: %1").arg(m_document.predictionError()));
        return;
    }
    m_iteration->setText(secondsText(r->iteration_time_s));
    m_throughput->setText(tr("%1 samples/s").arg(r->throughput_samples_per_s, 0, 'f', 1));
    m_bubble->setText(percentText(r->bubble_fraction));
    m_wait->setText(percentText(r->data_parallel_wait_fraction));
    const auto worst = planner::worstMemory(*r);
    // Each in the unit that fits, as the per-stage table writes it: "8.53 MiB of 80.00 GiB", not "0.00 of 80.00 GiB".
    m_memory->setText(tr("%1 of %2")
                          .arg(QString::fromStdString(planner::formatBytes(worst.peak_bytes)),
                              QString::fromStdString(planner::formatBytes(worst.capacity_bytes))));
    m_memory->setStyleSheet(worst.over() ? QStringLiteral("color: #c62828") : QString());
    const auto flops = planner::flopsReport(*m_document.predictedPlan(), r->throughput_samples_per_s);
    const auto rate = [](double flops) { return QString::fromStdString(planner::formatFlopRate(flops)); };
    // Devices that share GPUs: the rate and the utilisation are each card's.
    const bool perGpu = flops && flops->gpus < flops->devices;
    m_mfuLabel->setText(perGpu ? tr("MFU, per GPU") : tr("MFU, per device"));
    m_hfuLabel->setText(perGpu ? tr("HFU, per GPU") : tr("HFU, per device"));
    if (!flops) {
        m_mfu->setText(tr("– (the profile gives no FLOPs)"));
        m_hfu->setText(QStringLiteral("–"));
    } else if (flops->peak_flops_per_s_per_gpu <= 0) {
        m_mfu->setText(tr("%1 (no peak known)").arg(rate(flops->model_flops_per_s_per_gpu)));
        m_hfu->setText(tr("%1 (no peak known)").arg(rate(flops->hardware_flops_per_s_per_gpu)));
    } else {
        m_mfu->setText(tr("%1 (%2)").arg(percentText(flops->mfu), rate(flops->model_flops_per_s_per_gpu)));
        m_hfu->setText(tr("%1 (%2)").arg(percentText(flops->hfu), rate(flops->hardware_flops_per_s_per_gpu)));
    }
    m_memory->setEnabled(current);
    m_error->setText(!current ? tr("Simulating the current plan… (the numbers are the previous plan's)")
            : worst.over()    ? tr("Over memory: a device needs %1 of its capacity.").arg(percentText(worst.ratio, 0))
                              : QString());
}

} // namespace pw::ui
