// SPDX-License-Identifier: MIT
#include "partition_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QTimer>
#include <QUndoCommand>
#include <QUndoStack>
#include <QVBoxLayout>
#include <algorithm>

#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/schedule/traits.h"
#include "ui/document/project_document.h"
#include "ui/models/result_model.h"
#include "ui/widgets/tables.h"

namespace pw::ui {

namespace {

/// The partition form's part of an Apply step: the settings it showed before and after.
class FormCommand : public QUndoCommand
{
public:
    FormCommand(PartitionPanel& panel, app::PartitionSettings before, app::PartitionSettings after)
        : m_panel(&panel)
        , m_before(std::move(before))
        , m_after(std::move(after))
    {
    }
    void redo() override
    {
        if (m_panel) // the stack may outlive the panel
            m_panel->showSettings(m_after);
    }
    void undo() override
    {
        if (m_panel)
            m_panel->showSettings(m_before);
    }

private:
    QPointer<PartitionPanel> m_panel;
    app::PartitionSettings m_before;
    app::PartitionSettings m_after;
};

} // namespace

PartitionPanel::PartitionPanel(ProjectDocument& project, QWidget* parent)
    : QWidget(parent)
    , m_project(project)
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QFormLayout;
    m_algorithm = new QComboBox(this);
    for (const auto* p : planner::partitioners())
        if (p->name() != "manual")
            m_algorithm->addItem(QString::fromUtf8(p->name().data(), static_cast<int>(p->name().size())));
    top->addRow(tr("Algorithm"), m_algorithm);
    m_description = new QLabel(this);
    m_description->setWordWrap(true);
    m_description->setStyleSheet(QStringLiteral("color: #555"));
    top->addRow(m_description);
    layout->addLayout(top);

    auto* general = new QGroupBox(tr("Schedule and devices"), this);
    auto* form = new QFormLayout(general);
    m_schedule = new QComboBox(general);
    for (const auto* g : planner::scheduleGenerators()) // every kind the planner has, in its order
        m_schedule->addItem(QString::fromUtf8(g->name().data(), static_cast<int>(g->name().size())));
    form->addRow(tr("Schedule"), m_schedule);
    m_microbatches = new QSpinBox(general);
    m_microbatches->setRange(1, 100000);
    form->addRow(tr("Microbatches"), m_microbatches);
    m_microbatches->setToolTip(tr("Microbatches per batch (per iteration)"));
    m_microbatchSize = new QSpinBox(general);
    m_microbatchSize->setRange(0, 65536);
    m_microbatchSize->setSpecialValueText(tr("the profile's"));
    form->addRow(tr("Microbatch size"), m_microbatchSize);
    m_chunks = new QSpinBox(general);
    m_chunks->setRange(1, 64);
    form->addRow(tr("Chunks per device"), m_chunks);
    m_chunks->setToolTip(tr("Model chunks (virtual stages) per device: any count for interleaved and GPipe, 2 for "
                            "zbv, dualpipev, v-half and v-min (their two chunks in a V), 1 for the other schedules"));
    m_devices = new QSpinBox(general);
    m_devices->setRange(0, planner::kMaxDevices);
    m_devices->setSpecialValueText(tr("all"));
    form->addRow(tr("Devices to use"), m_devices);
    m_recompute = new QComboBox(general);
    m_recompute->setObjectName(QStringLiteral("scheduleRecompute"));
    for (auto mode : {planner::Recompute::None, planner::Recompute::Selective, planner::Recompute::Full})
        m_recompute->addItem(QString::fromLatin1(planner::name(mode)), static_cast<int>(mode));
    m_recompute->setToolTip(tr("Activation recomputation: none keeps every activation; selective recomputes the "
                               "attention core; full keeps each block's input and runs its forward again"));
    form->addRow(tr("Recompute"), m_recompute);
    // One check box per schedule setting: its label, object name (tests find it) and what it does.
    auto check = [&](const QString& label, const char* objectName, const QString& tip) {
        auto* box = new QCheckBox(label, general);
        box->setObjectName(QString::fromLatin1(objectName));
        box->setToolTip(tip);
        form->addRow(box);
        return box;
    };
    m_sequenceParallel = check(tr("Sequence parallelism"), "sequenceParallel",
        tr("With tensor parallelism: the activations its group keeps whole (norm inputs, dropout masks, block inputs) "
           "are split over the group (Megatron's --sequence-parallel)"));
    m_tpCommOverlap = check(tr("Overlap TP communication"), "tpCommOverlap",
        tr("With sequence parallelism: the group's all-gathers and reduce-scatters pipelined with the GEMMs beside "
           "them in t chunks (Megatron's --tp-comm-overlap)"));
    m_zeroStage = new QComboBox(general);
    m_zeroStage->setObjectName(QStringLiteral("zeroStage"));
    m_zeroStage->addItem(tr("0: none"), 0);
    m_zeroStage->addItem(tr("1: distributed optimizer"), 1);
    m_zeroStage->addItem(tr("2: + gradients sharded"), 2);
    m_zeroStage->addItem(tr("3: + weights sharded (FSDP)"), 3);
    m_zeroStage->setToolTip(
        tr("What the data-parallel replicas (and context ranks) of a stage shard among them: 1 the fp32 master "
           "weights and moments (Megatron's --use-distributed-optimizer), 2 also the gradients, reduce-scattered, 3 "
           "also the weights, gathered layer by layer every microbatch (FSDP)"));
    form->addRow(tr("ZeRO stage"), m_zeroStage);
    m_shardGroup = new QSpinBox(general);
    m_shardGroup->setObjectName(QStringLiteral("shardGroup"));
    m_shardGroup->setRange(0, planner::kMaxDevices);
    m_shardGroup->setSpecialValueText(tr("all replicas"));
    m_shardGroup->setToolTip(tr("Hybrid sharding (HSDP): ZeRO shards over groups of this many replicas, each group a "
                                "whole copy, the groups summing their shards once per step (Megatron's "
                                "--num-distributed-optimizer-instances); with ZeRO stage 1 or more"));
    form->addRow(tr("ZeRO shard group"), m_shardGroup);
    m_overlapGradReduce = check(tr("Overlap gradient sum"), "overlapGradReduce",
        tr("Sum the data-parallel gradients bucket by bucket during the backward (Megatron's --overlap-grad-reduce, "
           "PyTorch DDP); off: after it"));
    m_overlapParamGather = check(tr("Overlap parameter gather"), "overlapParamGather",
        tr("With the distributed optimizer: gather the updated parameters under the next forward (Megatron's "
           "--overlap-param-gather)"));
    m_memoryLimit = new QCheckBox(tr("Reject stages over memory"), general);
    m_memoryLimit->setToolTip(tr("Reject stages that do not fit device memory (PipeDream, uniform)"));
    form->addRow(m_memoryLimit);
    layout->addWidget(general);

    m_optionBox = new QGroupBox(tr("Algorithm options"), this);
    m_optionForm = new QFormLayout(m_optionBox);
    layout->addWidget(m_optionBox);

    auto* buttons = new QHBoxLayout;
    m_run = new QPushButton(tr("Run"), this);
    m_run->setToolTip(tr("Run the algorithm in the background (F5)"));
    m_compare = new QPushButton(tr("Compare all"), this);
    m_compare->setToolTip(tr("Run every algorithm on this model and cluster and list their plans"));
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    buttons->addWidget(m_run);
    buttons->addWidget(m_compare);
    buttons->addWidget(m_cancel);
    layout->addLayout(buttons);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_progress->setTextVisible(false);
    layout->addWidget(m_progress);
    m_status = new QLabel(tr("Choose an algorithm and press Run."), this);
    m_status->setWordWrap(true);
    layout->addWidget(m_status);

    m_results = new ResultModel(this);
    m_table = rowPickingTable(m_results, this);
    layout->addWidget(m_table, 1);
    m_apply = new QPushButton(tr("Apply selected plan"), this);
    m_apply->setEnabled(false);
    layout->addWidget(m_apply);

    m_poll = new QTimer(this);
    m_poll->setInterval(50);
    connect(m_poll, &QTimer::timeout, this, [this] {
        m_progress->setValue(static_cast<int>(m_fraction->load() * 1000));
        std::lock_guard lock(m_comparingNow->mutex);
        if (m_comparing && !m_cancelRequested && !m_comparingNow->text.isEmpty())
            m_status->setText(m_comparingNow->text); // which algorithm runs now
    });
    connect(m_algorithm, &QComboBox::currentTextChanged, this, &PartitionPanel::rebuildOptions);
    // The chunks a kind runs follow it (issue 30 item 18: zbv kept 1 chunk, and its partitioners' plans failed): a V
    // has 2, a kind of one chunk per device 1; interleaving and GPipe keep what is set (at least 2 for interleaved).
    connect(m_schedule, &QComboBox::currentTextChanged, this, [this](const QString& kind) {
        const auto* generator = planner::findScheduleGenerator(kind.toStdString());
        if (!generator)
            return;
        switch (generator->traits().chunks) {
        case planner::ChunkRule::V:
            m_chunks->setValue(2);
            break;
        case planner::ChunkRule::None:
            m_chunks->setValue(1);
            break;
        case planner::ChunkRule::WholeRounds:
            m_chunks->setValue(std::max(2, m_chunks->value()));
            break;
        case planner::ChunkRule::Any:
            break;
        }
    });
    connect(m_run, &QPushButton::clicked, this, &PartitionPanel::run);
    connect(m_compare, &QPushButton::clicked, this, &PartitionPanel::compareAll);
    connect(m_cancel, &QPushButton::clicked, this, &PartitionPanel::cancel);
    connect(m_apply, &QPushButton::clicked, this, [this] {
        const int row = selectedSourceRow(m_table);
        if (row >= 0)
            applyRow(row);
    });
    connect(
        m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& i) { applyRow(sourceRow(m_table, i)); });
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        const int row = selectedSourceRow(m_table);
        m_apply->setEnabled(row >= 0 && m_results->row(row).plan && !m_results->row(row).current);
    });
    // The form follows the project's partition settings: now (a panel made on an open project) and on every change.
    const auto showProjectSettings = [this] {
        showSettings(m_project.project().partition);
        if (!isRunning()) // a new project: nothing of the last one's run stays
            m_status->setText(tr("Choose an algorithm and press Run."));
        m_progress->setValue(0);
        showCurrent();
    };
    connect(&m_project, &ProjectDocument::projectChanged, this, showProjectSettings);
    // Row 0 follows the committed plan at once (Apply, undo, redo), its numbers when its prediction lands. Not during
    // a drag: the metrics panel follows the mouse, this table the committed plan.
    for (auto signal : {&PlanDocument::planChanged, &PlanDocument::predictionChanged})
        connect(&m_project.planDocument(), signal, this, [this] {
            if (!m_project.planDocument().previewing())
                refreshCurrentRow();
        });
    connect(m_results, &QAbstractItemModel::modelReset, this, [this] { m_apply->setEnabled(false); });
    showProjectSettings();
}

void PartitionPanel::showSettings(const app::PartitionSettings& settings)
{
    showSchedule(settings.schedule);
    setAlgorithm(QString::fromStdString(settings.algorithm));
    rebuildOptions(); // the defaults, also when the algorithm stayed: options the settings do not set are reset
    for (const auto& [name, value] : settings.params.items())
        setOption(QString::fromStdString(name), value);
}

void PartitionPanel::showSchedule(const planner::ScheduleOptions& schedule)
{
    m_schedule->setCurrentText(QString::fromStdString(schedule.kind));
    m_microbatches->setValue(schedule.microbatches);
    m_microbatchSize->setValue(schedule.microbatch_size);
    m_chunks->setValue(schedule.chunks);
    m_recompute->setCurrentIndex(m_recompute->findData(static_cast<int>(schedule.recompute)));
    m_sequenceParallel->setChecked(schedule.sequence_parallel);
    m_tpCommOverlap->setChecked(schedule.tp_comm_overlap);
    m_zeroStage->setCurrentIndex(m_zeroStage->findData(planner::zeroStage(schedule)));
    m_shardGroup->setValue(schedule.shard_group);
    m_overlapGradReduce->setChecked(schedule.overlap_grad_reduce);
    m_overlapParamGather->setChecked(schedule.overlap_param_gather);
}

PartitionPanel::~PartitionPanel() = default; // the runner (last member) stops and joins its job first

QString PartitionPanel::status() const
{
    return m_status->text();
}

void PartitionPanel::setAlgorithm(const QString& name)
{
    const int i = m_algorithm->findText(name);
    if (i >= 0)
        m_algorithm->setCurrentIndex(i);
}

void PartitionPanel::rebuildOptions()
{
    while (m_optionForm->rowCount() > 0)
        m_optionForm->removeRow(0);
    m_optionEditors.clear();
    const auto* p = planner::findPartitioner(m_algorithm->currentText().toStdString());
    if (!p)
        return;
    m_description->setText(QString::fromUtf8(p->description().data(), static_cast<int>(p->description().size())));
    const auto specs = p->options();
    m_optionBox->setVisible(!specs.empty());
    for (const auto& spec : specs) {
        QWidget* editor = nullptr;
        const bool auto_ = spec.default_value.is_null();
        switch (spec.type) {
        case planner::OptionSpec::Type::Integer: {
            auto* box = new QSpinBox(m_optionBox);
            const int lo = spec.min ? static_cast<int>(*spec.min) : -1'000'000;
            box->setRange(auto_ ? lo - 1 : lo, spec.max ? static_cast<int>(*spec.max) : 1'000'000);
            if (auto_) {
                box->setSpecialValueText(tr("auto"));
                box->setValue(box->minimum());
            } else {
                box->setValue(spec.default_value.get<int>());
            }
            editor = box;
            break;
        }
        case planner::OptionSpec::Type::Number: {
            auto* box = new QDoubleSpinBox(m_optionBox);
            box->setDecimals(4);
            const double lo = spec.min.value_or(-1e9);
            box->setRange(auto_ ? lo - 1 : lo, spec.max.value_or(1e9));
            if (auto_) {
                box->setSpecialValueText(tr("auto"));
                box->setValue(box->minimum());
            } else {
                box->setValue(spec.default_value.get<double>());
            }
            editor = box;
            break;
        }
        case planner::OptionSpec::Type::Boolean: {
            auto* box = new QCheckBox(m_optionBox);
            box->setChecked(!auto_ && spec.default_value.get<bool>());
            editor = box;
            break;
        }
        case planner::OptionSpec::Type::Choice: {
            auto* box = new QComboBox(m_optionBox);
            if (auto_)
                box->addItem(tr("auto"));
            for (const auto& c : spec.choices)
                box->addItem(QString::fromStdString(c));
            if (!auto_)
                box->setCurrentText(QString::fromStdString(spec.default_value.get<std::string>()));
            editor = box;
            break;
        }
        case planner::OptionSpec::Type::IntegerList: {
            auto* edit = new QLineEdit(m_optionBox);
            edit->setPlaceholderText(
                auto_ ? tr("auto (e.g. 1,2,4)") : QString::fromStdString(spec.default_value.dump()));
            editor = edit;
            break;
        }
        }
        editor->setToolTip(QString::fromStdString(spec.description + " (" + planner::describeType(spec) + ")"));
        editor->setObjectName(QString::fromStdString(spec.name));
        m_optionForm->addRow(QString::fromStdString(spec.name), editor);
        m_optionEditors.emplace_back(spec, editor);
    }
}

void PartitionPanel::setOption(const QString& name, const nlohmann::json& value)
{
    for (auto& [spec, editor] : m_optionEditors) {
        if (QString::fromStdString(spec.name) != name)
            continue;
        if (auto* box = qobject_cast<QSpinBox*>(editor); box && value.is_number())
            box->setValue(value.get<int>());
        else if (auto* dbox = qobject_cast<QDoubleSpinBox*>(editor); dbox && value.is_number())
            dbox->setValue(value.get<double>());
        else if (auto* check = qobject_cast<QCheckBox*>(editor); check && value.is_boolean())
            check->setChecked(value.get<bool>());
        else if (auto* combo = qobject_cast<QComboBox*>(editor); combo && value.is_string())
            combo->setCurrentText(QString::fromStdString(value.get<std::string>()));
        else if (auto* edit = qobject_cast<QLineEdit*>(editor); edit && value.is_array()) {
            QStringList parts;
            for (const auto& v : value)
                parts << QString::number(v.get<int>());
            edit->setText(parts.join(QLatin1Char(',')));
        } else if (auto* text = qobject_cast<QLineEdit*>(editor); text && value.is_string())
            text->setText(QString::fromStdString(value.get<std::string>())); // as typed (settings() keeps bad text)
    }
}

app::PartitionSettings PartitionPanel::settings() const
{
    app::PartitionSettings s;
    s.algorithm = m_algorithm->currentText().toStdString();
    s.schedule.kind = m_schedule->currentText().toStdString();
    s.schedule.microbatches = m_microbatches->value();
    s.schedule.microbatch_size = m_microbatchSize->value();
    s.schedule.chunks = m_chunks->value();
    s.schedule.recompute = static_cast<planner::Recompute>(m_recompute->currentData().toInt());
    s.schedule.sequence_parallel = m_sequenceParallel->isChecked();
    s.schedule.tp_comm_overlap = m_tpCommOverlap->isChecked();
    planner::setZeroStage(s.schedule, m_zeroStage->currentData().toInt());
    s.schedule.shard_group = s.schedule.distributed_optimizer ? m_shardGroup->value() : 0;
    s.schedule.overlap_grad_reduce = m_overlapGradReduce->isChecked();
    s.schedule.overlap_param_gather = m_overlapParamGather->isChecked();
    for (const auto& [spec, editor] : m_optionEditors) {
        const std::string& name = spec.name;
        if (auto* box = qobject_cast<QSpinBox*>(editor)) {
            if (!(spec.default_value.is_null() && box->value() == box->minimum()))
                s.params[name] = box->value();
        } else if (auto* dbox = qobject_cast<QDoubleSpinBox*>(editor)) {
            if (!(spec.default_value.is_null() && dbox->value() == dbox->minimum()))
                s.params[name] = dbox->value();
        } else if (auto* check = qobject_cast<QCheckBox*>(editor)) {
            if (!spec.default_value.is_null() || check->isChecked())
                s.params[name] = check->isChecked();
        } else if (auto* combo = qobject_cast<QComboBox*>(editor)) {
            if (!(spec.default_value.is_null() && combo->currentIndex() == 0))
                s.params[name] = combo->currentText().toStdString();
        } else if (auto* edit = qobject_cast<QLineEdit*>(editor); edit && !edit->text().trimmed().isEmpty()) {
            try {
                s.params[name] = planner::parseOptionValue(spec, edit->text().trimmed().toStdString());
            } catch (const planner::InputError&) {
                s.params[name] = edit->text().trimmed().toStdString(); // the partitioner names the bad value
            }
        }
    }
    return s;
}

planner::PartitionOptions PartitionPanel::partitionOptions() const
{
    const auto s = settings();
    planner::PartitionOptions o;
    o.schedule = s.schedule;
    o.params = s.params;
    o.devices = m_devices->value();
    o.memory_limit = m_memoryLimit->isChecked();
    return o;
}

std::vector<ResultRow> PartitionPanel::currentRows() const
{
    // The document has simulated its plan already.
    auto& doc = m_project.planDocument();
    if (!doc.hasPlan())
        return {};
    if (!doc.isPredictionCurrent()) // the plan changed, its prediction is on the way: no other plan's numbers
        return {ResultModel::planRow(tr("current plan"), doc.plan(), true, nullptr, tr("simulating…"))};
    return {ResultModel::planRow(tr("current plan"), doc.plan(), true, doc.prediction(), doc.predictionError())};
}

void PartitionPanel::showCurrent()
{
    m_results->setRows(currentRows());
}

void PartitionPanel::refreshCurrentRow()
{
    // Row 0 is the current plan; the rows of the last run stay below it.
    std::vector<ResultRow> rows = currentRows();
    for (int i = 0; i < m_results->rowCount(); ++i)
        if (!m_results->row(i).current)
            rows.push_back(m_results->row(i));
    m_results->setRows(std::move(rows));
}

void PartitionPanel::run()
{
    start(false);
}

void PartitionPanel::compareAll()
{
    start(true);
}

namespace {

/// What a partitioner run (or a comparison of every algorithm) hands back to the panel: its rows, simulated on
/// the worker, and what the status line says.
struct PartitionOutcome
{
    std::vector<ResultRow> rows;
    bool ok = false;
    bool saw_stop = false; ///< the partitioner stopped at the request
    QString status;
};

} // namespace

void PartitionPanel::start(bool compare)
{
    if (isRunning())
        return;
    m_project.setPartitionSettings(settings());
    auto project = std::make_shared<const app::Project>(m_project.snapshot());
    const auto options = partitionOptions();
    m_runAlgorithm = m_algorithm->currentText();
    m_comparing = compare;
    m_cancelRequested = false;
    m_fraction = std::make_shared<std::atomic<double>>(0.0);
    m_comparingNow = std::make_shared<Running>();
    m_running = true;
    emit started();
    m_run->setEnabled(false);
    m_compare->setEnabled(false);
    m_cancel->setEnabled(true);
    m_status->setText(compare ? tr("Comparing every algorithm…") : tr("Running %1…").arg(m_runAlgorithm));
    m_poll->start();
    const std::string algorithm = m_runAlgorithm.toStdString();
    const QString label = m_runAlgorithm;
    m_runner.submit(
        [project, options, algorithm, label, compare, fraction = m_fraction, running = m_comparingNow](
            std::stop_token stop) {
            auto progress = [fraction](double f) { *fraction = std::clamp(f, 0.0, 1.0); };
            PartitionOutcome out;
            if (compare) {
                planner::ComparisonOptions c;
                c.base = options;
                c.base.params = nlohmann::json::object(); // algorithm options are not shared
                c.keep_plans = true;
                c.on_start = [running](const std::string& name, std::size_t i, std::size_t n) {
                    std::lock_guard lock(running->mutex);
                    running->text = PartitionPanel::tr("Comparing every algorithm: %1 (%2 of %3)…")
                                        .arg(QString::fromStdString(name))
                                        .arg(i + 1)
                                        .arg(n);
                };
                const auto comparison = planner::compareAlgorithms(project->model, project->cluster, c, progress, stop);
                int ok = 0;
                for (const auto& row : comparison) {
                    out.rows.push_back(ResultModel::comparisonRow(row));
                    ok += row.ok;
                }
                out.ok = true;
                out.saw_stop = stop.stop_requested();
                out.status = PartitionPanel::tr("%1 of %2 algorithms produced a plan. Select one and Apply (or "
                                                "double-click).")
                                 .arg(ok)
                                 .arg(comparison.size());
                return out;
            }
            const auto result = planner::findPartitioner(algorithm)->partition(
                {project->model, project->cluster, options}, progress, stop);
            out.saw_stop = !result.ok()
                && std::any_of(result.diagnostics.begin(), result.diagnostics.end(),
                    [](const planner::Diagnostic& d) { return d.code == "cancelled"; });
            if (!out.saw_stop)
                out.rows = ResultModel::runRows(label, result); // simulates the plan: here, not on the GUI thread
            out.ok = result.ok();
            // DP partitioners compare no candidates: no "0 candidates compared".
            const QString compared = result.candidates.empty()
                ? QString()
                : PartitionPanel::tr(" (%1 candidates compared)").arg(result.candidates.size());
            out.status = result.ok()
                ? PartitionPanel::tr("%1 found a plan%2. Apply it to edit it.").arg(label, compared)
                : PartitionPanel::tr("%1 found no plan: %2").arg(label, QString::fromStdString(result.errorText()));
            return out;
        },
        [this](PartitionOutcome out) { onFinished(std::move(out.rows), out.ok, out.saw_stop, out.status); });
}

void PartitionPanel::cancel()
{
    if (!isRunning())
        return;
    m_cancelRequested = true;
    m_runner.requestStop(); // the partitioner stops at its next check and says so
    m_cancel->setEnabled(false);
    m_status->setText(tr("Cancelling…"));
}

void PartitionPanel::onFinished(std::vector<ResultRow> found, bool ok, bool sawStop, const QString& status)
{
    m_running = false;
    m_poll->stop();
    m_run->setEnabled(true);
    m_compare->setEnabled(true);
    m_cancel->setEnabled(false);
    m_progress->setValue(m_cancelRequested ? 0 : 1000);
    if (m_cancelRequested) {
        m_outcome = sawStop || m_comparing ? QStringLiteral("cancelled") : QStringLiteral("discarded");
        m_status->setText(tr("Cancelled: the plan is unchanged."));
        showCurrent();
        emit finished();
        return;
    }
    std::vector<ResultRow> rows = currentRows();
    std::move(found.begin(), found.end(), std::back_inserter(rows));
    m_outcome = ok ? QStringLiteral("done") : QStringLiteral("failed");
    m_status->setText(status);
    m_results->setRows(std::move(rows));
    const int best = bestRow();
    if (best >= 0)
        selectSourceRow(m_table, m_results, best);
    emit finished();
}

int PartitionPanel::bestRow() const
{
    // The fastest plan that fits memory; else the one closest to fitting. Never the current plan or a candidate
    // without a plan.
    int best = -1;
    const auto better = [](const ResultRow& a, const ResultRow& b) {
        const bool aFits = a.capacity_bytes <= 0 || a.peak_bytes <= a.capacity_bytes;
        const bool bFits = b.capacity_bytes <= 0 || b.peak_bytes <= b.capacity_bytes;
        if (aFits != bFits)
            return aFits;
        if (!aFits)
            return a.peak_bytes / a.capacity_bytes < b.peak_bytes / b.capacity_bytes;
        return a.throughput > b.throughput;
    };
    for (int r = 0; r < m_results->rowCount(); ++r) {
        const ResultRow& row = m_results->row(r);
        if (!row.plan || row.current)
            continue;
        if (best < 0 || better(row, m_results->row(best)))
            best = r;
    }
    return best;
}

bool PartitionPanel::applyRow(int row)
{
    if (row < 0 || row >= m_results->rowCount() || !m_results->row(row).plan || m_results->row(row).current)
        return false;
    const ResultRow r = m_results->row(row); // a copy: replacing the plan refreshes the rows
    m_table->setFocus(); // not into an option field when Apply disables itself
    // One step: the plan, and the form saying what the plan does (its schedule, microbatches, chunks); undo
    // brings back both the plan and the form as it was.
    const app::PartitionSettings before = settings();
    app::PartitionSettings after = before;
    after.schedule = r.plan->schedule;
    if (planner::findPartitioner(r.plan->algorithm)) // the algorithm that made it ("megatron" for a search's row)
        after.algorithm = r.plan->algorithm;
    const QString text = tr("Apply %1 plan").arg(r.label);
    QUndoStack* undo = m_project.planDocument().undoStack();
    undo->beginMacro(text);
    m_project.planDocument().replace(text, *r.plan);
    undo->push(new FormCommand(*this, before, after));
    undo->endMacro();
    emit message(tr("Applied the %1 plan (%2). Undo with Ctrl+Z.").arg(r.label, r.config));
    return true;
}

} // namespace pw::ui
