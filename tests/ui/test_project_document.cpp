// SPDX-License-Identifier: MIT
// The open project: a malformed project file or profile, an invalid cluster and a failed save change nothing and
// say which file is wrong; an import or a cluster change keeps the old plan as a scenario when it no longer fits;
// saves round-trip; scenarios are saved, removed and restored (one undo step, refused for another cluster).
#include <catch2/catch.hpp>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "app/project/demo_project.h"
#include "app/project/project.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "ui/document/project_document.h"

using namespace pw;

namespace {

/// The demo project, planned once for every test of this file.
const app::Project& projectDocumentDemo()
{
    static const app::Project project = app::demoProject();
    return project;
}

QString testData(const char* relative)
{
    return QDir::cleanPath(QStringLiteral(PW_DEMO_DIR "/../../tests/data/") + QString::fromLatin1(relative));
}

std::string json(const ui::ProjectDocument& doc)
{
    return app::toJson(doc.snapshot()).dump();
}

/// The project's JSON without the plans' predicted metrics (their round trip has its own test below).
nlohmann::json withoutPredictions(const ui::ProjectDocument& doc)
{
    auto j = app::toJson(doc.snapshot());
    if (j.contains("plan"))
        j["plan"].erase("predicted");
    for (auto& s : j["scenarios"])
        s["plan"].erase("predicted");
    return j;
}

/// The JSON patch from one project to another ("[]" when they are the same), for readable failures.
std::string difference(const ui::ProjectDocument& a, const ui::ProjectDocument& b, bool predictions = true)
{
    if (!predictions)
        return nlohmann::json::diff(withoutPredictions(a), withoutPredictions(b)).dump();
    return nlohmann::json::diff(app::toJson(a.snapshot()), app::toJson(b.snapshot())).dump();
}

std::string projectDocumentPlanJson(const planner::Plan& plan)
{
    return planner::toJson(plan).dump();
}

void writeFile(const QString& path, const QByteArray& text)
{
    QFile file(path);
    REQUIRE(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    REQUIRE(file.write(text) == text.size());
}

/// What must not change when an operation fails.
struct State
{
    std::string project;
    int undoCount;
    int undoIndex;
    bool modified;
    QString path;

    explicit State(ui::ProjectDocument& doc)
        : project(json(doc))
        , undoCount(doc.planDocument().undoStack()->count())
        , undoIndex(doc.planDocument().undoStack()->index())
        , modified(doc.isModified())
        , path(doc.filePath())
    {
    }

    void check(ui::ProjectDocument& doc) const
    {
        CHECK(json(doc) == project);
        CHECK(doc.planDocument().undoStack()->count() == undoCount);
        CHECK(doc.planDocument().undoStack()->index() == undoIndex);
        CHECK(doc.isModified() == modified);
        CHECK(doc.filePath() == path);
    }
};

/// A document showing the demo with one edit on its undo stack (so that "unchanged" covers the history).
void openDemoWithAnEdit(ui::ProjectDocument& doc)
{
    doc.setProject(projectDocumentDemo());
    REQUIRE(doc.planDocument().hasPlan());
    REQUIRE_FALSE(doc.isModified());
    const int restore = doc.project().findScenario("8 stages, 1F1B");
    REQUIRE(restore >= 0);
    REQUIRE(doc.restoreScenario(QStringLiteral("8 stages, 1F1B")));
    REQUIRE(doc.planDocument().undoStack()->count() == 1);
}

/// The demo's model cut to its first `layers` layers (a smaller profile to import).
planner::ModelProfile truncatedModel(int layers)
{
    auto j = planner::toJson(projectDocumentDemo().model);
    auto& list = j.at("layers");
    REQUIRE(static_cast<int>(list.size()) > layers);
    list.erase(list.begin() + layers, list.end());
    j["name"] = "gpt-demo-" + std::to_string(layers);
    return planner::modelFromJson(j);
}

} // namespace

TEST_CASE("project document: a malformed project file is refused with its file and line, nothing changes", "[ui]")
{
    ui::ProjectDocument doc;
    openDemoWithAnEdit(doc);
    const State before(doc);
    QSignalSpy changed(&doc, &ui::ProjectDocument::projectChanged);
    QTemporaryDir dir;
    REQUIRE(dir.isValid());

    SECTION("bad JSON")
    {
        const QString path = dir.filePath(QStringLiteral("broken.pwproj"));
        writeFile(path, "{\n  \"format_version\": 1,\n  \"name\": \"broken\",\n  \"model\": oops\n}\n");
        QString error;
        CHECK_FALSE(doc.open(path, &error));
        INFO(error.toStdString());
        CHECK(error.contains(path + QStringLiteral(":4:"))); // planner::formatInputError, as the CLI prints it
    }
    SECTION("a field of the wrong type")
    {
        auto j = app::toJson(projectDocumentDemo());
        j["name"] = 42;
        const QString path = dir.filePath(QStringLiteral("wrong-type.pwproj"));
        writeFile(path, QByteArray::fromStdString(j.dump(1)));
        // The line of "name" in the file as written.
        const QByteArray text = QByteArray::fromStdString(j.dump(1));
        const int line = text.left(text.indexOf("\"name\": 42")).count('\n') + 1;
        REQUIRE(line > 1);
        QString error;
        CHECK_FALSE(doc.open(path, &error));
        INFO(error.toStdString());
        CHECK(error.contains(path + QStringLiteral(":%1:").arg(line)));
        CHECK(error.contains(QStringLiteral("name")));
    }
    SECTION("a missing file")
    {
        const QString path = dir.filePath(QStringLiteral("nowhere.pwproj"));
        QString error;
        CHECK_FALSE(doc.open(path, &error));
        CHECK(error.contains(path));
    }
    before.check(doc);
    CHECK(changed.count() == 0);
}

TEST_CASE("project document: a malformed profile is refused with its file name, nothing changes", "[ui]")
{
    ui::ProjectDocument doc;
    openDemoWithAnEdit(doc);
    const State before(doc);
    QSignalSpy changed(&doc, &ui::ProjectDocument::projectChanged);
    QSignalSpy scenarios(&doc, &ui::ProjectDocument::scenariosChanged);
    for (const char* bad : {"bad/malformed-graph.txt", "bad/truncated-model.json"}) {
        const QString path = testData(bad);
        REQUIRE(QFileInfo::exists(path));
        QString error;
        CHECK_FALSE(doc.importProfile(path, &error));
        INFO(error.toStdString());
        CHECK(error.contains(QFileInfo(path).fileName()));
        before.check(doc);
    }
    QString error;
    CHECK_FALSE(doc.importProfile(testData("bad/does-not-exist.json"), &error));
    CHECK(error.contains(QStringLiteral("does-not-exist.json")));
    before.check(doc);
    CHECK(changed.count() == 0);
    CHECK(scenarios.count() == 0);
}

TEST_CASE("project document: importing a profile keeps the old plan as a scenario and plans the new model", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    const std::string oldPlan = projectDocumentPlanJson(doc.planDocument().plan());
    const auto scenariosBefore = doc.project().scenarios.size();
    QSignalSpy changed(&doc, &ui::ProjectDocument::projectChanged);
    QSignalSpy modified(&doc, &ui::ProjectDocument::modifiedChanged);

    QTemporaryDir dir;
    REQUIRE(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("gpt-12.json"));
    const auto model = truncatedModel(12);
    planner::writeJsonFile(path.toStdString(), planner::toJson(model), 1);

    QString error;
    REQUIRE(doc.importProfile(path, &error));
    CHECK(error.isEmpty());
    CHECK(changed.count() >= 1);
    CHECK(doc.isModified());
    REQUIRE(modified.count() >= 1);
    CHECK(modified.last().at(0).toBool());
    CHECK(doc.project().model->layerCount() == 12);
    CHECK(planner::toJson(doc.project().model) == planner::toJson(model));

    // The old plan is a scenario, exactly as it was.
    REQUIRE(doc.project().scenarios.size() == scenariosBefore + 1);
    const auto& kept = doc.project().scenarios.back();
    CHECK(QString::fromStdString(kept.name).contains(QStringLiteral("gpt-12.json")));
    CHECK(projectDocumentPlanJson(kept.plan) == oldPlan);

    // The new plan covers the new model on the same cluster.
    REQUIRE(doc.planDocument().hasPlan());
    const auto& plan = doc.planDocument().plan();
    CHECK(plan.model->layerCount() == 12);
    REQUIRE_FALSE(plan.stages.empty());
    CHECK(plan.stages.front().first_layer == 0);
    CHECK(plan.stages.back().last_layer == 11);
    for (std::size_t s = 1; s < plan.stages.size(); ++s)
        CHECK(plan.stages[s].first_layer == plan.stages[s - 1].last_layer + 1);
    CHECK(planner::toJson(plan.cluster) == planner::toJson(projectDocumentDemo().cluster));
    REQUIRE(doc.planDocument().waitForPrediction());
    CHECK(doc.planDocument().isPredictionCurrent());
    CHECK(doc.planDocument().prediction() != nullptr);
    CHECK_NOTHROW(doc.snapshot().validate());

    // The kept plan was made for another model: it can be compared, not restored.
    CHECK_FALSE(doc.restoreScenario(QString::fromStdString(kept.name), &error));
    CHECK(error.contains(QStringLiteral("another model")));
}

TEST_CASE("project document: importing a model with fewer layers than devices still gives a plan", "[ui]")
{
    // pipewright's golden tiny model: 5 layers, fewer than the demo's 8 GPUs.
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    QString error;
    REQUIRE(doc.importProfile(testData("golden/tiny-model.json"), &error));
    CHECK(doc.project().model->layerCount() == 5);
    REQUIRE(doc.planDocument().hasPlan());
    CHECK(doc.planDocument().plan().stages.back().last_layer == 4);
    CHECK(doc.isModified());
    CHECK_NOTHROW(doc.snapshot().validate());
}

TEST_CASE("project document: an invalid cluster is refused and nothing changes", "[ui]")
{
    ui::ProjectDocument doc;
    openDemoWithAnEdit(doc);
    const State before(doc);
    QSignalSpy changed(&doc, &ui::ProjectDocument::projectChanged);
    auto cluster = projectDocumentDemo().cluster;
    REQUIRE_FALSE(cluster->nodes.empty());
    cluster.edit().nodes[0].count = 0;
    QString error;
    CHECK_FALSE(doc.setCluster(cluster, &error));
    CHECK_FALSE(error.isEmpty());
    before.check(doc);
    CHECK(changed.count() == 0);
}

TEST_CASE("project document: a compatible cluster change keeps the stages", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    const auto stagesBefore = planner::toJson(doc.planDocument().plan()).at("stages");
    const auto scenariosBefore = doc.project().scenarios.size();
    auto cluster = projectDocumentDemo().cluster;
    cluster.edit().name = "dgx-renamed";
    cluster.edit().nodes[0].intra_bandwidth_bytes_per_s *= 0.5;
    QString error;
    REQUIRE(doc.setCluster(cluster, &error));
    CHECK(doc.isModified());
    CHECK(doc.project().cluster->name == "dgx-renamed");
    REQUIRE(doc.planDocument().hasPlan());
    CHECK(planner::toJson(doc.planDocument().plan()).at("stages") == stagesBefore);
    CHECK(doc.planDocument().plan().cluster->name == "dgx-renamed");
    CHECK(planner::toJson(doc.planDocument().plan().cluster) == planner::toJson(cluster));
    CHECK(doc.project().scenarios.size() == scenariosBefore);
    CHECK_NOTHROW(doc.snapshot().validate());
    // The re-simulated prediction sees the slower links.
    REQUIRE(doc.planDocument().waitForPrediction());
    CHECK(doc.planDocument().isPredictionCurrent());
    CHECK(doc.planDocument().prediction() != nullptr);
}

TEST_CASE("project document: a cluster too small for the plan keeps it as a scenario and re-plans", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    const std::string oldPlan = projectDocumentPlanJson(doc.planDocument().plan());
    int used = 0;
    for (const auto& s : doc.planDocument().plan().stages)
        for (int d : s.devices)
            used = std::max(used, d + 1);
    REQUIRE(used > 4);
    const auto scenariosBefore = doc.project().scenarios.size();
    auto cluster = projectDocumentDemo().cluster;
    cluster.edit().nodes[0].count = 4;
    QString error;
    REQUIRE(doc.setCluster(cluster, &error));
    CHECK(doc.isModified());
    CHECK(doc.project().cluster->deviceCount() == 4);
    REQUIRE(doc.project().scenarios.size() == scenariosBefore + 1);
    CHECK(projectDocumentPlanJson(doc.project().scenarios.back().plan) == oldPlan);
    REQUIRE(doc.planDocument().hasPlan());
    const auto& plan = doc.planDocument().plan();
    CHECK(plan.cluster->deviceCount() == 4);
    for (const auto& s : plan.stages)
        for (int d : s.devices)
            CHECK(d < 4);
    CHECK(plan.stages.back().last_layer == projectDocumentDemo().model->layerCount() - 1);
    CHECK_NOTHROW(doc.snapshot().validate());
    // The kept plan needs the old cluster: not restorable here.
    CHECK_FALSE(doc.restoreScenario(QString::fromStdString(doc.project().scenarios.back().name), &error));
    CHECK(error.contains(QStringLiteral("cluster")));
}

TEST_CASE("project document: a cluster change is one undo step that brings the old cluster and plan back", "[ui]")
{
    for (const int devices : {0, 4}) { // 0: the cluster renamed (the stages fit), 4: too small (re-planned)
        INFO("devices " << devices);
        ui::ProjectDocument doc;
        doc.setProject(projectDocumentDemo());
        openDemoWithAnEdit(doc); // an edit before: Apply must not clear the history
        const int stepsBefore = doc.planDocument().undoStack()->count();
        REQUIRE(stepsBefore > 0);
        const std::string planBefore = projectDocumentPlanJson(doc.planDocument().plan());
        const auto clusterBefore = planner::toJson(doc.project().cluster);
        auto cluster = projectDocumentDemo().cluster;
        cluster.edit().name = "dgx-renamed";
        if (devices > 0)
            cluster.edit().nodes[0].count = devices;
        QSignalSpy clusterChanged(&doc, &ui::ProjectDocument::clusterChanged);
        QString error;
        REQUIRE(doc.setCluster(cluster, &error));
        CHECK(doc.planDocument().undoStack()->count() == stepsBefore + 1);
        CHECK(doc.planDocument().undoStack()->undoText().contains(QStringLiteral("dgx-renamed")));
        CHECK(doc.project().cluster->name == "dgx-renamed");
        CHECK(doc.planDocument().plan().cluster->name == "dgx-renamed");
        CHECK(clusterChanged.count() == 1);
        doc.planDocument().undoStack()->undo();
        CHECK(planner::toJson(doc.project().cluster) == clusterBefore);
        CHECK(projectDocumentPlanJson(doc.planDocument().plan()) == planBefore);
        CHECK(clusterChanged.count() == 2);
        CHECK_NOTHROW(doc.snapshot().validate());
        doc.planDocument().undoStack()->redo();
        CHECK(doc.project().cluster->name == "dgx-renamed");
        CHECK(doc.project().cluster->deviceCount()
            == (devices > 0 ? devices : projectDocumentDemo().cluster->deviceCount()));
        CHECK_NOTHROW(doc.snapshot().validate());
        // Applying the same cluster again is no step.
        REQUIRE(doc.setCluster(cluster, &error));
        CHECK(doc.planDocument().undoStack()->count() == stepsBefore + 1);
    }
}

TEST_CASE("project document: save then open gives the same project, not modified", "[ui]")
{
    QTemporaryDir dir;
    REQUIRE(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("demo.pwproj"));
    ui::ProjectDocument doc;
    openDemoWithAnEdit(doc);
    REQUIRE(doc.saveScenario(QStringLiteral("mine"), QStringLiteral("a note")));
    REQUIRE(doc.isModified());
    QSignalSpy pathChanged(&doc, &ui::ProjectDocument::filePathChanged);

    QString error;
    CHECK_FALSE(doc.save({}, &error)); // no file yet
    CHECK_FALSE(error.isEmpty());
    CHECK(doc.isModified());

    REQUIRE(doc.save(path, &error));
    CHECK_FALSE(doc.isModified());
    CHECK(doc.filePath() == path);
    REQUIRE(pathChanged.count() == 1);
    CHECK(pathChanged.at(0).at(0).toString() == path);
    CHECK_FALSE(QFileInfo::exists(path + QStringLiteral(".saving")));

    ui::ProjectDocument other;
    REQUIRE(other.open(path, &error));
    CHECK(difference(doc, other, false) == "[]");
    CHECK_FALSE(other.isModified());
    CHECK(other.filePath() == path);
    CHECK(other.planDocument().undoStack()->count() == 0);
    CHECK(other.project().findScenario("mine") >= 0);
    CHECK(other.project().scenarios[other.project().findScenario("mine")].note == "a note");

    // Saving again to the current file (empty path) works and keeps the file name.
    REQUIRE(other.saveScenario(QStringLiteral("second")));
    CHECK(other.isModified());
    REQUIRE(other.save({}, &error));
    CHECK_FALSE(other.isModified());
    ui::ProjectDocument third;
    REQUIRE(third.open(path));
    CHECK(difference(other, third, false) == "[]");
}

// Known bug, outside the UI: planner::planFromJson() does not read a plan's "predicted" metrics back
// (docs/formats.md lists the field, toJson writes it), so every plan of a reopened project loses them.
TEST_CASE("project document: save then open keeps the plans' predicted metrics", "[ui]")
{
    QTemporaryDir dir;
    REQUIRE(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("demo.pwproj"));
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    REQUIRE(doc.snapshot().plan->predicted.has_value());
    REQUIRE(doc.save(path));
    ui::ProjectDocument other;
    REQUIRE(other.open(path));
    CHECK(difference(doc, other) == "[]");
}

TEST_CASE("project document: a failed save keeps the document modified and the old file", "[ui]")
{
    QTemporaryDir dir;
    REQUIRE(dir.isValid());
    ui::ProjectDocument doc;
    openDemoWithAnEdit(doc);
    REQUIRE(doc.isModified());
    const State before(doc);
    QString error;
    const QString unwritable = dir.filePath(QStringLiteral("no-such-folder/demo.pwproj"));
    CHECK_FALSE(doc.save(unwritable, &error));
    INFO(error.toStdString());
    CHECK(error.contains(QStringLiteral("no-such-folder")));
    CHECK_FALSE(QFileInfo::exists(unwritable));
    before.check(doc);

    // A saved file survives a failed save over it (the target is a folder: the rename fails).
    const QString good = dir.filePath(QStringLiteral("good.pwproj"));
    REQUIRE(doc.save(good));
    QFile file(good);
    REQUIRE(file.open(QIODevice::ReadOnly));
    const QByteArray content = file.readAll();
    file.close();
    REQUIRE(QDir(dir.path()).mkdir(QStringLiteral("folder.pwproj")));
    REQUIRE(doc.saveScenario(QStringLiteral("after the save")));
    REQUIRE(doc.isModified());
    CHECK_FALSE(doc.save(dir.filePath(QStringLiteral("folder.pwproj")), &error));
    CHECK(doc.isModified());
    CHECK(doc.filePath() == good);
    REQUIRE(file.open(QIODevice::ReadOnly));
    CHECK(file.readAll() == content);
}

TEST_CASE("project document: scenarios are saved, removed and restored as one undo step", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    REQUIRE_FALSE(doc.isModified());
    QSignalSpy scenarios(&doc, &ui::ProjectDocument::scenariosChanged);
    auto* undo = doc.planDocument().undoStack();
    const std::string current = projectDocumentPlanJson(doc.planDocument().plan());
    const auto count = doc.project().scenarios.size();
    REQUIRE(count == 4);

    QString error;
    CHECK_FALSE(doc.saveScenario(QStringLiteral("   "), {}, &error));
    CHECK_FALSE(error.isEmpty());
    CHECK(scenarios.count() == 0);
    CHECK_FALSE(doc.isModified());

    REQUIRE(doc.saveScenario(QStringLiteral("  mine "), QStringLiteral("note")));
    CHECK(scenarios.count() == 1);
    CHECK(doc.isModified());
    REQUIRE(doc.project().scenarios.size() == count + 1);
    const int mine = doc.project().findScenario("mine");
    REQUIRE(mine == static_cast<int>(count));
    CHECK(doc.project().scenarios[mine].plan.stages.size() == doc.planDocument().plan().stages.size());
    CHECK(doc.project().scenarios[mine].plan.predicted.has_value());
    CHECK(undo->count() == 0); // scenarios are not plan edits

    // Same name: replaced, not added.
    REQUIRE(doc.saveScenario(QStringLiteral("mine"), QStringLiteral("again")));
    CHECK(doc.project().scenarios.size() == count + 1);
    CHECK(doc.project().scenarios[mine].note == "again");

    // Restore: one undo step that brings the exact plan; undo gives the previous one back.
    const auto& target = doc.project().scenarios[doc.project().findScenario("8 stages, GPipe")];
    const std::string targetPlan = projectDocumentPlanJson(target.plan);
    REQUIRE(targetPlan != current);
    REQUIRE(doc.restoreScenario(QStringLiteral("8 stages, GPipe"), &error));
    CHECK(undo->count() == 1);
    CHECK(projectDocumentPlanJson(doc.planDocument().plan()) == targetPlan);
    CHECK(doc.planDocument().plan().schedule.kind == "gpipe");
    undo->undo();
    CHECK(projectDocumentPlanJson(doc.planDocument().plan()) == current);
    undo->redo();
    CHECK(projectDocumentPlanJson(doc.planDocument().plan()) == targetPlan);

    CHECK_FALSE(doc.restoreScenario(QStringLiteral("no such"), &error));
    CHECK(error.contains(QStringLiteral("no such")));
    CHECK(undo->count() == 1);

    // Remove.
    scenarios.clear();
    CHECK(doc.removeScenario(QStringLiteral("mine")));
    CHECK(scenarios.count() == 1);
    CHECK(doc.project().findScenario("mine") < 0);
    CHECK(doc.project().scenarios.size() == count);
    CHECK_FALSE(doc.removeScenario(QStringLiteral("mine")));
    CHECK(scenarios.count() == 1);

    // A scenario made for another cluster is refused, with a message; the plan stays.
    auto other = projectDocumentDemo().cluster;
    other.edit().nodes[0].intra_bandwidth_bytes_per_s *= 2;
    REQUIRE(doc.setCluster(other));
    const std::string afterCluster = projectDocumentPlanJson(doc.planDocument().plan());
    const int steps = undo->count();
    CHECK_FALSE(doc.restoreScenario(QStringLiteral("8 stages, 1F1B"), &error));
    CHECK(error.contains(QStringLiteral("8 stages, 1F1B")));
    CHECK(error.contains(QStringLiteral("cluster")));
    CHECK(projectDocumentPlanJson(doc.planDocument().plan()) == afterCluster);
    CHECK(undo->count() == steps);
}

TEST_CASE("project document: a graph.txt import takes the batch size and profiled device it was asked", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    const QString graph = QStringLiteral(PW_DEMO_DIR "/../profiles/pipedream/vgg16/graph.txt");
    QString error;
    REQUIRE(doc.importProfile(graph, &error, ui::GraphImport {64, "V100"}));
    CHECK(doc.project().model->microbatch_size == 64);
    CHECK(doc.project().model->profiled_device == "V100");
    REQUIRE(doc.planDocument().waitForPrediction());
    REQUIRE(doc.planDocument().prediction());
    const double at64 = doc.planDocument().prediction()->throughput_samples_per_s;
    // The same file at batch 1: the same times, a 64th of the samples per second.
    REQUIRE(doc.importProfile(graph, &error, ui::GraphImport {1, "V100"}));
    REQUIRE(doc.planDocument().waitForPrediction());
    CHECK(doc.planDocument().prediction()->throughput_samples_per_s == Approx(at64 / 64).epsilon(1e-9));
}

TEST_CASE("project document: a Hugging Face config.json imports as its analytic profile", "[ui][families]")
{
    // issue 31 item 1: File > Import profile accepts a config.json, at the sequence, microbatch and device asked.
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    const QString config = testData("hf/llama-3-8b.config.json");
    QString error;
    REQUIRE(doc.importHfConfig(config, ui::HfImport {4096, 2, "H100"}, &error));
    const auto& model = *doc.project().model;
    REQUIRE(model.architecture);
    CHECK(model.architecture->family == "llama");
    CHECK(model.architecture->sequence == 4096);
    CHECK(model.microbatch_size == 2);
    CHECK(model.profiled_device == "H100");
    CHECK(planner::transformerParameterCount(*model.architecture) == 8'030'261'248.0);
    CHECK(doc.planDocument().hasPlan());
    CHECK(doc.isModified());
    const double bf16Forward = model.layers[1].forward_ms;
    // What cannot be: a sequence past the model's positions, a device nobody knows; nothing changes.
    const auto before = planner::toJson(*doc.project().model).dump();
    CHECK_FALSE(doc.importHfConfig(config, ui::HfImport {9000, 1, "H100"}, &error));
    CHECK(error.contains(QStringLiteral("8192 positions")));
    CHECK_FALSE(doc.importHfConfig(config, ui::HfImport {1024, 1, "TPU v9"}, &error));
    CHECK(error.contains(QStringLiteral("TPU v9")));
    CHECK_FALSE(doc.importHfConfig(config, ui::HfImport {4096, 2, "A100", true}, &error)); // no FP8 on Ampere
    CHECK(error.contains(QStringLiteral("'A100' has no FP8 tensor cores")));
    CHECK(planner::toJson(*doc.project().model).dump() == before);
    // FP8 products (issue 31 item 3) where the device has them: the plan's precision follows.
    REQUIRE(doc.importHfConfig(config, ui::HfImport {4096, 2, "H100", true}, &error));
    CHECK(doc.project().model->architecture->fp8);
    CHECK(doc.project().model->layers[1].forward_ms < bf16Forward);
    REQUIRE(doc.planDocument().hasPlan());
    CHECK(planner::weightPrecision(doc.planDocument().plan().schedule, *doc.project().model) == "fp8");
    // As a profile it is refused saying what it is.
    CHECK_FALSE(doc.importProfile(config, &error));
    CHECK(error.contains(QStringLiteral("Hugging Face config.json")));
}

TEST_CASE("project document: a cluster file is imported, a malformed one refused naming it", "[ui]")
{
    ui::ProjectDocument doc;
    doc.setProject(projectDocumentDemo());
    const auto before = planner::toJson(doc.project().cluster).dump();
    QString error;
    CHECK_FALSE(doc.importCluster(testData("bad/zero-devices-cluster.json"), &error));
    CHECK(error.contains(QStringLiteral("zero-devices-cluster.json")));
    CHECK(planner::toJson(doc.project().cluster).dump() == before);
    REQUIRE(doc.importCluster(QStringLiteral(PW_DEMO_DIR "/hetpipe-cluster.json"), &error));
    CHECK(doc.project().cluster->name == "hetpipe-4x4");
    CHECK(doc.project().cluster->deviceCount() == 16);
    REQUIRE(doc.planDocument().hasPlan());
    CHECK(doc.planDocument().plan().cluster == doc.project().cluster);
}
