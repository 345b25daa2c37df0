// SPDX-License-Identifier: MIT
// The open project: its file, model, cluster, scenarios and partition settings, and the PlanDocument holding the
// plan being edited. Opening, importing or applying a cluster either succeeds completely or changes nothing.
#pragma once

#include <QObject>
#include <QString>

#include "app/project/project.h"
#include "ui/document/plan_document.h"
#include "ui/jobs/job_runner.h"

namespace pw::ui {

/// What a PipeDream graph.txt does not say and an import must ask: the samples per profiled minibatch (for
/// throughput in samples/s) and the device type the times were measured on (for other devices' speed).
struct GraphImport
{
    int batch_size = 1;
    std::string profiled_device;
};

/// What a Hugging Face config.json does not say and an import must ask: the run's sequence length and microbatch,
/// and the device type to profile on (the project's cluster type of that name, else a preset).
struct HfImport
{
    int sequence = 2048;
    int microbatch = 1;
    std::string device;
    /// The blocks' products in FP8 (`profile transformer --precision fp8`): a device with FP8 tensor cores only.
    bool fp8 = false;
};

class ProjectDocument : public QObject
{
    Q_OBJECT

public:
    explicit ProjectDocument(QObject* parent = nullptr);

    PlanDocument& planDocument() { return m_plan; }
    /// The project as it would be saved: the current plan included.
    app::Project snapshot() const;
    const app::Project& project() const { return m_project; }
    const QString& filePath() const { return m_path; }
    bool isModified() const { return m_dirty || !m_plan.isClean(); }

    /// Shows `project` (from `path`, empty for an unsaved one); the plan's undo history starts anew.
    void setProject(app::Project project, const QString& path = {});
    /// Loads a project file; on error nothing changes and `error` names the file, line and field.
    bool open(const QString& path, QString* error = nullptr);
    /// Saves atomically to `path` (empty: the current file); the old file survives a failed save.
    bool save(const QString& path = {}, QString* error = nullptr);
    /// Replaces the model by a profile (JSON or PipeDream graph.txt, with `graph` for the latter). The old plan is
    /// kept as a scenario and the new model is planned with the partition settings (uniform when they fail). On
    /// error nothing changes.
    bool importProfile(const QString& path, QString* error = nullptr, const GraphImport& graph = {});
    /// The same for a Hugging Face config.json: the analytic profile of its model (`profile transformer
    /// --hf-config`) at `run`'s sequence, microbatch and device, in the element size the engine trains in there.
    bool importHfConfig(const QString& path, const HfImport& run, QString* error = nullptr);
    /// Replaces the cluster by a cluster JSON file, as setCluster(); on error (the file, line and field) nothing
    /// changes.
    bool importCluster(const QString& path, QString* error = nullptr);
    /// Replaces the cluster as one undoable step of the plan (undo brings the old cluster back). A plan whose stages
    /// still fit is kept; otherwise it becomes a scenario and the model is re-planned. On error (the cluster does
    /// not validate) nothing changes.
    bool setCluster(const planner::Cluster& cluster, QString* error = nullptr);
    void setPartitionSettings(const app::PartitionSettings& settings);

    /// Saves the current plan as scenario `name` (replacing one of that name).
    bool saveScenario(const QString& name, const QString& note = {}, QString* error = nullptr);
    bool removeScenario(const QString& name);
    /// Makes scenario `name`'s plan the current one (an undoable step) when it matches the project's model and
    /// cluster.
    bool restoreScenario(const QString& name, QString* error = nullptr);

    /// A scenario's simulation (spans and memory included), or why it could not be simulated.
    struct ScenarioPrediction
    {
        std::shared_ptr<const planner::SimulationResult> result;
        QString error;
    };
    /// The scenarios' predictions in the project's order, simulated in the background after every change of the
    /// scenarios (plans simulated before are not simulated again). Empty while they are being simulated.
    const std::vector<ScenarioPrediction>& scenarioPredictions() const { return m_scenarioPredictions; }
    bool simulatingScenarios() const { return m_scenarioRunner.busy(); }
    /// Runs the event loop until the scenarios' predictions have landed (tests, screenshots).
    bool waitForScenarios(int timeoutMs = 120'000) { return m_scenarioRunner.waitForIdle(timeoutMs); }

signals:
    /// The model, the cluster or the whole project changed (views rebuild).
    void projectChanged();
    /// Only the cluster changed (setCluster, or its undo and redo): project().cluster is the current plan's.
    void clusterChanged();
    void scenariosChanged();
    /// scenarioPredictions() changed: emptied (scenarios changed) or landed.
    void scenarioPredictionsChanged();
    void simulatingScenariosChanged(bool simulating);
    void modifiedChanged(bool modified);
    void filePathChanged(const QString& path);
    /// Something the user must know that is not an error of the call: the project could not be planned.
    void notice(const QString& text);

private:
    /// Plans the project's model on its cluster with the partition settings, or uniformly when they fail.
    std::optional<planner::Plan> planFresh(const app::Project& project, QString* note) const;
    void keepAsScenario(app::Project& project, const QString& why) const;
    /// Makes `model` (imported from `path`) the project's: the old plan becomes a scenario, the model is planned anew.
    void adoptModel(planner::ModelProfile model, const QString& path);
    /// Takes the current plan's cluster as the project's (after an undo or redo of a cluster change).
    void syncCluster();
    void markDirty();
    /// Empties scenarioPredictions() and simulates the scenarios in the background.
    void simulateScenarios();

    app::Project m_project;
    QString m_path;
    PlanDocument m_plan;
    bool m_dirty = false;
    std::vector<ScenarioPrediction> m_scenarioPredictions;
    /// Every scenario plan simulated so far with its prediction: a change of the scenarios simulates only new plans.
    std::shared_ptr<const std::vector<std::pair<planner::Plan, ScenarioPrediction>>> m_scenarioCache;
    JobRunner m_scenarioRunner {QStringLiteral("scenario simulation")}; // last: stopped and joined first
};

} // namespace pw::ui
