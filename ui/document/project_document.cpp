// SPDX-License-Identifier: MIT
#include "project_document.h"

#include <QFileInfo>
#include <algorithm>
#include <fstream>

#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/graph_txt.h"
#include "planner/io/hf_config.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/schedule/traits.h"

namespace pw::ui {

namespace {

/// "FILE:LINE: FIELD: message", the parts that are known, as the CLI prints it.
QString errorText(const planner::InputError& e)
{
    return QString::fromStdString(planner::formatInputError(e));
}

} // namespace

ProjectDocument::ProjectDocument(QObject* parent)
    : QObject(parent)
{
    connect(m_plan.undoStack(), &QUndoStack::cleanChanged, this, [this] { emit modifiedChanged(isModified()); });
    // The project's cluster is the current plan's: a cluster change is an undoable plan step.
    connect(&m_plan, &PlanDocument::planChanged, this, &ProjectDocument::syncCluster);
    connect(this, &ProjectDocument::scenariosChanged, this, &ProjectDocument::simulateScenarios);
    connect(&m_scenarioRunner, &JobRunner::busyChanged, this, &ProjectDocument::simulatingScenariosChanged);
}

void ProjectDocument::simulateScenarios()
{
    m_scenarioPredictions.clear();
    emit scenarioPredictionsChanged();
    std::vector<planner::Plan> plans;
    for (const auto& s : m_project.scenarios)
        plans.push_back(s.plan);
    using Cache = std::vector<std::pair<planner::Plan, ScenarioPrediction>>;
    m_scenarioRunner.submit(
        [plans = std::move(plans), cache = m_scenarioCache](std::stop_token stop) {
            auto next = std::make_shared<Cache>();
            for (const auto& plan : plans) {
                const auto known = cache
                    ? std::find_if(cache->begin(), cache->end(), [&](const auto& entry) { return entry.first == plan; })
                    : Cache::const_iterator {};
                if (cache && known != cache->end()) {
                    next->push_back(*known);
                    continue;
                }
                ScenarioPrediction p;
                planner::SimulationOptions options;
                options.stop = stop; // with spans: the scenarios view stacks these timelines
                try {
                    planner::Plan steady = plan; // its kind's steady-state batches, as the current plan's
                    steady.schedule.iterations = planner::simulatedIterations(plan);
                    p.result = std::make_shared<const planner::SimulationResult>(planner::simulate(steady, options));
                } catch (const planner::InputError& e) {
                    p.error = errorText(e);
                }
                next->push_back({plan, std::move(p)});
            }
            return std::shared_ptr<const Cache>(std::move(next));
        },
        [this](std::shared_ptr<const Cache> done) {
            m_scenarioCache = done;
            m_scenarioPredictions.clear();
            for (const auto& entry : *done)
                m_scenarioPredictions.push_back(entry.second);
            emit scenarioPredictionsChanged();
        });
}

app::Project ProjectDocument::snapshot() const
{
    app::Project p = m_project;
    p.plan.reset();
    if (m_plan.hasPlan())
        p.plan = m_plan.plan();
    return p;
}

void ProjectDocument::setProject(app::Project project, const QString& path)
{
    m_project = std::move(project);
    m_path = path;
    m_dirty = false;
    std::optional<planner::Plan> plan = std::move(m_project.plan);
    m_project.plan.reset();
    if (!plan) {
        QString note;
        plan = planFresh(m_project, &note);
        m_dirty = plan.has_value();
        if (!plan)
            emit notice(tr("No plan for %1 on %2: %3. Change the cluster or run a partitioner.")
                            .arg(QString::fromStdString(m_project.model->name),
                                QString::fromStdString(m_project.cluster->name), note));
    }
    if (plan)
        m_plan.reset(std::move(*plan));
    else
        m_plan.clear();
    m_plan.undoStack()->setClean();
    emit projectChanged();
    emit scenariosChanged();
    emit filePathChanged(m_path);
    emit modifiedChanged(isModified());
}

bool ProjectDocument::open(const QString& path, QString* error)
{
    try {
        setProject(app::loadProject(path.toStdString()), path);
        return true;
    } catch (const planner::InputError& e) {
        if (error)
            *error = errorText(e);
        return false;
    }
}

bool ProjectDocument::save(const QString& path, QString* error)
{
    const QString target = path.isEmpty() ? m_path : path;
    if (target.isEmpty()) {
        if (error)
            *error = tr("The project has no file yet: choose one with Save As");
        return false;
    }
    try {
        app::saveProject(target.toStdString(), snapshot());
    } catch (const planner::InputError& e) {
        if (error)
            *error = errorText(e);
        return false;
    }
    m_dirty = false;
    m_plan.undoStack()->setClean();
    if (target != m_path) {
        m_path = target;
        emit filePathChanged(m_path);
    }
    emit modifiedChanged(false);
    return true;
}

std::optional<planner::Plan> ProjectDocument::planFresh(const app::Project& project, QString* note) const
{
    planner::PartitionOptions options;
    options.schedule = project.partition.schedule;
    options.schedule.in_flight.clear();
    for (const std::string& kind : {project.partition.schedule.kind, std::string("1f1b")}) {
        options.schedule.kind = kind;
        const auto* traits = planner::findScheduleTraits(kind);
        if (!traits || traits->chunks == planner::ChunkRule::None)
            options.schedule.chunks = 1;
        // A stage per device, or per layer when the model has fewer layers than that (replicated stages).
        const int chunks = std::max(1, options.schedule.chunks);
        const int layers = project.model->layerCount();
        options.stages = layers < project.cluster->deviceCount() * chunks ? std::max(1, layers / chunks) : 0;
        auto result = planner::findPartitioner("uniform")->partition({project.model, project.cluster, options}, {}, {});
        if (result.ok())
            return std::move(*result.plan);
        if (note)
            *note = QString::fromStdString(result.errorText());
    }
    return std::nullopt;
}

void ProjectDocument::keepAsScenario(app::Project& project, const QString& why) const
{
    if (!project.plan)
        return;
    std::string name = why.toStdString();
    for (int k = 2; project.findScenario(name) >= 0; ++k)
        name = why.toStdString() + " (" + std::to_string(k) + ")";
    project.scenarios.push_back({name, "kept when the project changed", std::move(*project.plan)});
    project.plan.reset();
}

void ProjectDocument::markDirty()
{
    m_dirty = true;
    emit modifiedChanged(true);
}

bool ProjectDocument::importProfile(const QString& path, QString* error, const GraphImport& graph)
{
    planner::ModelProfile model;
    try {
        model = planner::loadAnyModel(path.toStdString());
        if (model.is_graph) {
            model.microbatch_size = std::max(1, graph.batch_size);
            model.profiled_device = graph.profiled_device;
        }
    } catch (const planner::InputError& e) {
        if (error)
            *error = errorText(e);
        return false;
    }
    adoptModel(std::move(model), path);
    return true;
}

bool ProjectDocument::importHfConfig(const QString& path, const HfImport& run, QString* error)
{
    planner::ModelProfile model;
    try {
        std::optional<planner::DeviceType> device;
        for (const auto& t : m_project.cluster->device_types)
            if (t.name == run.device)
                device = t;
        if (!device)
            device = planner::devicePreset(run.device);
        if (!device)
            throw planner::InputError(
                {}, 0, "device", "'" + run.device + "' is neither a device type of the cluster nor a preset");
        auto config = planner::loadHfConfig(path.toStdString(),
            planner::RunShape {run.sequence, run.microbatch, run.fp8 ? 2 : planner::defaultBytesPerElement(*device)});
        config.fp8 = run.fp8;
        model = planner::transformerProfile(config, *device);
    } catch (const planner::InputError& e) {
        if (error)
            *error = errorText(e);
        return false;
    }
    adoptModel(std::move(model), path);
    return true;
}

void ProjectDocument::adoptModel(planner::ModelProfile model, const QString& path)
{
    app::Project next = snapshot();
    keepAsScenario(next, tr("before importing %1").arg(QFileInfo(path).fileName()));
    next.model = std::move(model);
    next.plan.reset(); // setProject() plans the new model, and says so when it cannot
    const QString keepPath = m_path;
    setProject(std::move(next), keepPath);
    markDirty();
}

bool ProjectDocument::importCluster(const QString& path, QString* error)
{
    planner::Cluster cluster;
    try {
        cluster = planner::loadCluster(path.toStdString());
    } catch (const planner::InputError& e) {
        if (error)
            *error = errorText(e);
        return false;
    }
    return setCluster(cluster, error);
}

bool ProjectDocument::setCluster(const planner::Cluster& cluster, QString* error)
{
    try {
        cluster.validate();
    } catch (const planner::InputError& e) {
        if (error)
            *error = errorText(e);
        return false;
    }
    if (m_project.cluster == cluster)
        return true;
    const QString text = tr("Apply cluster %1").arg(QString::fromStdString(cluster.name));
    if (m_plan.hasPlan()) {
        // One undoable step: the plan on the new cluster (its stages kept when they still fit, else the model
        // re-planned and the old plan kept as a scenario); undo brings the old plan and its cluster back.
        planner::Plan kept = m_plan.plan();
        kept.cluster = cluster;
        kept.predicted.reset();
        std::optional<planner::Plan> next;
        try {
            kept.validate();
            next = std::move(kept);
        } catch (const planner::InputError&) {
            app::Project replanned = m_project;
            replanned.cluster = cluster;
            next = planFresh(replanned, nullptr);
            if (next) {
                app::Project withScenario = snapshot();
                keepAsScenario(withScenario, tr("before the cluster changed"));
                m_project.scenarios = std::move(withScenario.scenarios);
                markDirty();
                emit scenariosChanged();
            }
        }
        if (next) {
            m_plan.replace(text, std::move(*next)); // syncCluster() takes the plan's cluster
            return true;
        }
    }
    // No plan to carry over (or none fits the new cluster): the project starts anew on it.
    app::Project next = snapshot();
    next.cluster = cluster;
    keepAsScenario(next, tr("before the cluster changed"));
    next.plan.reset();
    const QString keepPath = m_path;
    setProject(std::move(next), keepPath);
    markDirty();
    return true;
}

void ProjectDocument::syncCluster()
{
    if (!m_plan.hasPlan() || m_project.cluster == m_plan.plan().cluster)
        return;
    m_project.cluster = m_plan.plan().cluster;
    emit clusterChanged();
}

void ProjectDocument::setPartitionSettings(const app::PartitionSettings& settings)
{
    if (settings.params == m_project.partition.params && settings.algorithm == m_project.partition.algorithm
        && settings.schedule == m_project.partition.schedule)
        return;
    m_project.partition = settings;
    markDirty();
}

bool ProjectDocument::saveScenario(const QString& name, const QString& note, QString* error)
{
    const std::string n = name.trimmed().toStdString();
    if (n.empty() || !m_plan.hasPlan()) {
        if (error)
            *error = n.empty() ? tr("A scenario needs a name") : tr("There is no plan to save");
        return false;
    }
    app::Scenario scenario {n, note.toStdString(), m_plan.plan()};
    if (m_plan.isPredictionCurrent() && m_plan.prediction())
        scenario.plan.predicted = planner::predictedMetrics(*m_plan.prediction());
    const int existing = m_project.findScenario(n);
    if (existing >= 0)
        m_project.scenarios[existing] = std::move(scenario);
    else
        m_project.scenarios.push_back(std::move(scenario));
    markDirty();
    emit scenariosChanged();
    return true;
}

bool ProjectDocument::removeScenario(const QString& name)
{
    const int i = m_project.findScenario(name.toStdString());
    if (i < 0)
        return false;
    m_project.scenarios.erase(m_project.scenarios.begin() + i);
    markDirty();
    emit scenariosChanged();
    return true;
}

bool ProjectDocument::restoreScenario(const QString& name, QString* error)
{
    const int i = m_project.findScenario(name.toStdString());
    if (i < 0) {
        if (error)
            *error = tr("No scenario named '%1'").arg(name);
        return false;
    }
    const planner::Plan& plan = m_project.scenarios[i].plan;
    if (plan.model != m_project.model || plan.cluster != m_project.cluster) {
        if (error)
            *error = tr("Scenario '%1' was made for another model or cluster; it can be compared but not edited here")
                         .arg(name);
        return false;
    }
    m_plan.replace(tr("Restore scenario %1").arg(name), plan);
    return true;
}

} // namespace pw::ui
