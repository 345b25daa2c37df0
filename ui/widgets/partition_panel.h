// SPDX-License-Identifier: MIT
// The partition panel: choose an algorithm and its options, run it in the background with progress and Cancel,
// list its plan and candidates (or every algorithm's plan) next to the current plan, apply one as an undo step.
#pragma once

#include <QWidget>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "app/project/project.h"
#include "planner/analysis/compare.h"
#include "ui/jobs/job_runner.h"
#include "ui/models/result_model.h"

class QCheckBox;
class QComboBox;
class QFormLayout;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;
class QTimer;

namespace pw::ui {

class ProjectDocument;

class PartitionPanel : public QWidget
{
    Q_OBJECT

public:
    explicit PartitionPanel(ProjectDocument& project, QWidget* parent = nullptr);
    ~PartitionPanel() override;

    /// The settings as the form shows them.
    app::PartitionSettings settings() const;
    /// Shows `settings` in the form: algorithm, its options (the defaults for those not set) and schedule.
    void showSettings(const app::PartitionSettings& settings);
    void setAlgorithm(const QString& name);
    /// Sets an algorithm option's editor from a JSON value (tests, project settings).
    void setOption(const QString& name, const nlohmann::json& value);

    /// Runs the chosen algorithm in the background; finished() follows.
    void run();
    /// Runs every algorithm (pipewright-cli compare) in the background.
    void compareAll();
    /// Stops the run; its result is discarded and the plan stays as it is.
    void cancel();
    bool isRunning() const { return m_running; }
    /// How the last run ended: "done", "failed", "cancelled" (the partitioner stopped at the request) or
    /// "discarded" (it finished before seeing the request).
    QString lastOutcome() const { return m_outcome; }
    QString status() const;
    ResultModel* results() const { return m_results; }
    /// Applies row `row` of the results as one undo step: the plan, and the form showing its schedule (undo
    /// restores both); false when it has no plan.
    bool applyRow(int row);
    /// The row selected after a run: the fastest plan that fits memory (else the closest to fitting); -1 for none.
    int bestRow() const;
    /// The results table (a sorting view over results()).
    QTableView* table() const { return m_table; }

signals:
    void started(); ///< a partitioner or Compare all began (isRunning() is true)
    void finished();
    void message(const QString& text);

private:
    void rebuildOptions();
    /// Shows `schedule` in the form (kind, microbatches, microbatch size, chunks, recomputation).
    void showSchedule(const planner::ScheduleOptions& schedule);
    void showCurrent();
    /// The document's current plan as row 0 (none without a plan).
    std::vector<ResultRow> currentRows() const;
    void refreshCurrentRow();
    void start(bool compare);
    void onFinished(std::vector<ResultRow> rows, bool ok, bool sawStop, const QString& status);
    planner::PartitionOptions partitionOptions() const;

    ProjectDocument& m_project;
    QComboBox* m_algorithm = nullptr;
    QLabel* m_description = nullptr;
    QFormLayout* m_optionForm = nullptr;
    QWidget* m_optionBox = nullptr;
    std::vector<std::pair<planner::OptionSpec, QWidget*>> m_optionEditors;
    QComboBox* m_schedule = nullptr;
    QSpinBox* m_microbatches = nullptr;
    QSpinBox* m_microbatchSize = nullptr;
    QSpinBox* m_chunks = nullptr;
    QSpinBox* m_devices = nullptr;
    QComboBox* m_recompute = nullptr; ///< none | selective | full
    QCheckBox* m_sequenceParallel = nullptr;
    QCheckBox* m_tpCommOverlap = nullptr;
    QComboBox* m_zeroStage = nullptr;
    QSpinBox* m_shardGroup = nullptr;
    QCheckBox* m_overlapGradReduce = nullptr;
    QCheckBox* m_overlapParamGather = nullptr;
    QCheckBox* m_memoryLimit = nullptr;
    QPushButton* m_run = nullptr;
    QPushButton* m_compare = nullptr;
    QPushButton* m_cancel = nullptr;
    QPushButton* m_apply = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_status = nullptr;
    QTableView* m_table = nullptr;
    ResultModel* m_results = nullptr;
    QTimer* m_poll = nullptr;

    // The background run. m_running is the GUI thread's: set by start(), cleared by onFinished(); the job shares
    // only its progress with the panel.
    std::shared_ptr<std::atomic<double>> m_fraction = std::make_shared<std::atomic<double>>(0.0);
    /// What a comparison runs now, written by its job, shown by the progress poll.
    struct Running
    {
        std::mutex mutex;
        QString text;
    };
    std::shared_ptr<Running> m_comparingNow = std::make_shared<Running>();
    bool m_running = false;
    bool m_cancelRequested = false;
    bool m_comparing = false;
    QString m_runAlgorithm;
    QString m_outcome;
    JobRunner m_runner {QStringLiteral("partitioner")}; // last: stopped and joined before the members above go
};

} // namespace pw::ui
