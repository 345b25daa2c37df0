// SPDX-License-Identifier: MIT
// The cluster editor tab: its two models pass QAbstractItemModelTester through loads, edits, inserts and
// removals; presets, validation, Revert and Apply work; the demo clusters round-trip exactly; nothing is clipped.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QBrush>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <optional>

#include <nlohmann/json.hpp>

#include "planner/io/json_file.h"
#include "ui/models/cluster_models.h"
#include "ui/widgets/cluster_editor.h"

using namespace pw;
using ui::DeviceTypeModel;
using ui::NodeModel;

namespace {

constexpr auto kFatal = QAbstractItemModelTester::FailureReportingMode::Fatal;

planner::Cluster demo(const std::string& file)
{
    return planner::loadCluster(std::string(PW_DEMO_DIR) + "/" + file);
}

std::string json(const planner::Cluster& c)
{
    return planner::toJson(c).dump();
}

template <class W> W* child(ui::ClusterEditor& editor, const char* name)
{
    auto* w = editor.findChild<W*>(QString::fromLatin1(name));
    REQUIRE(w != nullptr);
    return w;
}

void addPreset(ui::ClusterEditor& editor, const char* name)
{
    auto* presets = child<QComboBox>(editor, "presets");
    const int i = presets->findText(QString::fromLatin1(name));
    REQUIRE(i >= 0);
    presets->setCurrentIndex(i);
    child<QPushButton>(editor, "addType")->click();
}

} // namespace

TEST_CASE("cluster editor: both models pass the model tester through loads, edits, inserts and removals", "[ui]")
{
    ui::ClusterEditor editor;
    auto* types = editor.deviceTypeModel();
    auto* nodes = editor.nodeModel();
    QAbstractItemModelTester typeTester(types, kFatal);
    QAbstractItemModelTester nodeTester(nodes, kFatal);

    editor.setCluster(demo("hetpipe-cluster.json"));
    REQUIRE(types->rowCount() == 4);
    REQUIRE(nodes->rowCount() == 4);
    CHECK(types->columnCount() == DeviceTypeModel::ColumnCount);
    CHECK(nodes->columnCount() == NodeModel::ColumnCount);
    CHECK(types->headerData(DeviceTypeModel::Memory, Qt::Horizontal).toString() == "Memory (GiB)");
    CHECK(nodes->headerData(NodeModel::IntraLatency, Qt::Horizontal).toString() == "Intra-node latency (µs)");

    // Cells in GiB, GB/s and us; ValueRole in bytes, bytes/s and seconds.
    CHECK(types->index(0, DeviceTypeModel::Memory).data().toString() == "12");
    CHECK(types->index(0, DeviceTypeModel::Memory).data(DeviceTypeModel::ValueRole).toDouble() == 12 * ui::kGiB);
    CHECK(types->index(0, DeviceTypeModel::MemoryBandwidth).data().toString() == "653");
    CHECK(types->index(0, DeviceTypeModel::RelativeSpeed).data().toString() == "0.111");
    CHECK(nodes->index(0, NodeModel::IntraBandwidth).data().toString() == "15.75");
    CHECK(nodes->index(0, NodeModel::IntraBandwidth).data(NodeModel::ValueRole).toDouble() == 1.575e10);
    CHECK(nodes->index(0, NodeModel::IntraLatency).data().toString() == "10");
    CHECK(nodes->index(0, NodeModel::IntraLatency).data(NodeModel::ValueRole).toDouble() == 1e-5);
    CHECK(nodes->index(0, NodeModel::Host).data().toString() == "v-node"); // the default host is the name

    // Writing back every editable cell's own edit text changes nothing (an editor opened and closed).
    for (QAbstractItemModel* model : {static_cast<QAbstractItemModel*>(types), static_cast<QAbstractItemModel*>(nodes)})
        for (int r = 0; r < model->rowCount(); ++r)
            for (int c = 0; c < model->columnCount(); ++c)
                if (model->flags(model->index(r, c)) & Qt::ItemIsEditable)
                    REQUIRE(model->setData(model->index(r, c), model->index(r, c).data(Qt::EditRole)));
    CHECK(json(editor.cluster()) == json(demo("hetpipe-cluster.json")));
    CHECK_FALSE(editor.isModified());

    // Edits in the shown units land in SI units.
    REQUIRE(types->setData(types->index(1, DeviceTypeModel::Memory), 48));
    CHECK(editor.cluster().device_types[1].memory_bytes == 48 * ui::kGiB);
    REQUIRE(nodes->setData(nodes->index(0, NodeModel::IntraLatency), QStringLiteral("2.5")));
    CHECK(editor.cluster().nodes[0].intra_latency_s == 2.5e-6);
    REQUIRE(nodes->setData(nodes->index(0, NodeModel::IntraBandwidth), 25));
    CHECK(editor.cluster().nodes[0].intra_bandwidth_bytes_per_s == 25e9);
    REQUIRE(types->setData(types->index(2, DeviceTypeModel::MemoryBandwidth), 1e12, DeviceTypeModel::ValueRole));
    CHECK(types->index(2, DeviceTypeModel::MemoryBandwidth).data().toString() == "1000");
    CHECK_FALSE(types->setData(types->index(0, DeviceTypeModel::PeakTflops), QStringLiteral("fast")));
    CHECK(editor.cluster().device_types[0].peak_tflops == 110);
    CHECK(editor.isModified());

    // An empty relative speed means the profile's times.
    REQUIRE(types->setData(types->index(0, DeviceTypeModel::RelativeSpeed), QString()));
    CHECK_FALSE(editor.cluster().device_types[0].relative_speed.has_value());
    CHECK_FALSE(types->index(0, DeviceTypeModel::RelativeSpeed).data(DeviceTypeModel::ValueRole).isValid());
    REQUIRE(types->setData(types->index(0, DeviceTypeModel::RelativeSpeed), QStringLiteral("0.5")));
    CHECK(editor.cluster().device_types[0].relative_speed == 0.5);

    // Renaming a type renames it in the nodes that use it.
    REQUIRE(types->setData(types->index(0, DeviceTypeModel::Name), QStringLiteral("TITAN V 12GB")));
    CHECK(nodes->index(0, NodeModel::DeviceType).data().toString() == "TITAN V 12GB");
    CHECK(nodes->index(1, NodeModel::DeviceType).data().toString() == "TITAN RTX");
    // Renaming a node whose host is its name moves the host along.
    REQUIRE(nodes->setData(nodes->index(0, NodeModel::Name), QStringLiteral("volta")));
    CHECK(editor.cluster().nodes[0].host == "volta");

    // Inserted types get unique names; inserted nodes copy the node above under a new name.
    REQUIRE(types->insertRows(1, 2));
    REQUIRE(types->rowCount() == 6);
    CHECK(types->index(1, DeviceTypeModel::Name).data().toString() == "device type");
    CHECK(types->index(2, DeviceTypeModel::Name).data().toString() == "device type (2)");
    REQUIRE(types->removeRows(1, 2));
    CHECK(types->index(1, DeviceTypeModel::Name).data().toString() == "TITAN RTX");
    REQUIRE(nodes->insertRows(4, 1));
    REQUIRE(nodes->rowCount() == 5);
    const auto added = editor.cluster().nodes[4];
    CHECK(added.name == "node4");
    CHECK(added.host == "node4");
    CHECK(added.device_type == "Quadro P4000");
    CHECK(added.count == 4);
    REQUIRE(nodes->removeRows(0, 2));
    CHECK(nodes->rowCount() == 3);
    CHECK(nodes->index(0, NodeModel::Name).data().toString() == "g-node");
    CHECK_FALSE(nodes->removeRows(2, 5));
    CHECK_FALSE(types->insertRows(-1, 1));

    // Another cluster replaces both tables.
    editor.setCluster(demo("dgx-h100.json"));
    CHECK(types->rowCount() == 1);
    CHECK(nodes->rowCount() == 1);
    CHECK(nodes->index(0, NodeModel::Count).data(NodeModel::ValueRole).toInt() == 8);
    CHECK_FALSE(editor.isModified());
}

TEST_CASE("cluster editor: setCluster then cluster() round-trips the demo clusters exactly", "[ui]")
{
    for (const char* file : {"dgx-h100.json", "hetpipe-cluster.json"}) {
        INFO(file);
        const auto original = demo(file);
        ui::ClusterEditor editor;
        editor.setCluster(original);
        CHECK(json(editor.cluster()) == json(original));
        CHECK_FALSE(editor.isModified());
        CHECK(editor.validationError().isEmpty());
        CHECK_FALSE(child<QPushButton>(editor, "apply")->isEnabled());
        CHECK_FALSE(child<QPushButton>(editor, "revert")->isEnabled());
        CHECK(child<QLineEdit>(editor, "clusterName")->text() == QString::fromStdString(original.name));
    }

    // A field without a column (streaming execution) survives edits of the others.
    auto streaming = demo("dgx-h100.json");
    streaming.device_types[0].streaming_execution = true;
    ui::ClusterEditor editor;
    editor.setCluster(streaming);
    REQUIRE(editor.deviceTypeModel()->setData(editor.deviceTypeModel()->index(0, DeviceTypeModel::Price), 2));
    CHECK(editor.cluster().device_types[0].streaming_execution);
}

TEST_CASE("cluster editor: a preset adds its device type with its numbers", "[ui]")
{
    ui::ClusterEditor editor;
    editor.setCluster(demo("hetpipe-cluster.json"));
    auto* types = editor.deviceTypeModel();
    CHECK(child<QLabel>(editor, "summary")->text()
        == QString::fromUtf8("16 devices on 4 nodes \u00b7 4 device types \u00b7 200 GiB total \u00b7 $0.00/h"));

    addPreset(editor, "H100");
    REQUIRE(types->rowCount() == 5);
    CHECK(types->index(4, DeviceTypeModel::Name).data().toString() == "H100");
    CHECK(types->index(4, DeviceTypeModel::Memory).data().toString() == "80");
    CHECK(types->index(4, DeviceTypeModel::Memory).data(DeviceTypeModel::ValueRole).toDouble() == 80 * ui::kGiB);
    CHECK(types->index(4, DeviceTypeModel::PeakTflops).data().toString() == "989");
    CHECK(editor.isModified());
    CHECK(editor.validationError().isEmpty());
    CHECK(child<QPushButton>(editor, "apply")->isEnabled());
    CHECK(child<QLabel>(editor, "summary")->text().contains(QStringLiteral("5 device types")));

    // The same preset twice gets a name of its own.
    addPreset(editor, "H100");
    CHECK(types->index(5, DeviceTypeModel::Name).data().toString() == "H100 (2)");
    CHECK(editor.validationError().isEmpty());

    editor.setCluster(demo("dgx-h100.json"));
    CHECK(child<QLabel>(editor, "summary")->text()
        == QString::fromUtf8("8 devices on 1 node \u00b7 1 device type \u00b7 640 GiB total \u00b7 $32.00/h"));
}

TEST_CASE("cluster editor: invalid edits are reported naming the node or type and the field, and block Apply", "[ui]")
{
    ui::ClusterEditor editor;
    editor.setCluster(demo("hetpipe-cluster.json"));
    auto* types = editor.deviceTypeModel();
    auto* nodes = editor.nodeModel();
    auto* apply = child<QPushButton>(editor, "apply");
    auto* label = child<QLabel>(editor, "validation");

    SECTION("a count of 0")
    {
        REQUIRE(nodes->setData(nodes->index(2, NodeModel::Count), 0));
        const QString error = editor.validationError();
        CHECK(error.contains(QStringLiteral("g-node")));
        CHECK(error.contains(QStringLiteral("Count")));
        CHECK(label->text() == error);
        CHECK(editor.isModified());
        CHECK_FALSE(apply->isEnabled());
        CHECK(nodes->index(2, NodeModel::Count).data(Qt::ForegroundRole).value<QBrush>().color().red() > 150);

        REQUIRE(nodes->setData(nodes->index(2, NodeModel::Count), 2));
        CHECK(editor.validationError().isEmpty());
        CHECK(label->text().isEmpty());
        CHECK(apply->isEnabled());
    }
    SECTION("a node naming a removed device type")
    {
        auto* view = child<QTableView>(editor, "deviceTypes");
        view->selectRow(1); // TITAN RTX, used by r-node
        child<QPushButton>(editor, "removeType")->click();
        REQUIRE(types->rowCount() == 3);
        const QString error = editor.validationError();
        CHECK(error.contains(QStringLiteral("r-node")));
        CHECK(error.contains(QStringLiteral("Device type")));
        CHECK(error.contains(QStringLiteral("TITAN RTX")));
        CHECK_FALSE(apply->isEnabled());
        CHECK(nodes->index(1, NodeModel::DeviceType).data(Qt::ToolTipRole).toString().contains("TITAN RTX"));

        REQUIRE(nodes->setData(nodes->index(1, NodeModel::DeviceType), QStringLiteral("TITAN V")));
        CHECK(editor.validationError().isEmpty());
        CHECK(apply->isEnabled());
    }
    SECTION("negative numbers, duplicate names and missing bandwidth")
    {
        REQUIRE(types->setData(types->index(3, DeviceTypeModel::Price), -1));
        CHECK(editor.validationError() == "Device type 'Quadro P4000', Price ($/h): must not be negative");
        CHECK_FALSE(apply->isEnabled());
        REQUIRE(types->setData(types->index(3, DeviceTypeModel::Price), 0));

        REQUIRE(nodes->setData(nodes->index(0, NodeModel::Count), 1));
        REQUIRE(nodes->setData(nodes->index(0, NodeModel::IntraBandwidth), -5));
        CHECK(editor.validationError() == "Node 'v-node', Intra-node bandwidth (GB/s): must not be negative");
        REQUIRE(nodes->setData(nodes->index(0, NodeModel::Count), 4));
        CHECK(editor.validationError().contains(QStringLiteral("Intra-node bandwidth (GB/s): must be > 0")));
        REQUIRE(nodes->setData(nodes->index(0, NodeModel::IntraBandwidth), 10));

        REQUIRE(nodes->setData(nodes->index(3, NodeModel::Name), QStringLiteral("g-node")));
        CHECK(editor.validationError().contains(QStringLiteral("Node 'g-node', Name: node 'g-node' is defined twice")));
        REQUIRE(nodes->setData(nodes->index(3, NodeModel::Name), QStringLiteral("q-node")));

        child<QDoubleSpinBox>(editor, "interBandwidth")->setValue(0);
        CHECK(editor.validationError().startsWith(QStringLiteral("Inter-node bandwidth")));
        CHECK_FALSE(apply->isEnabled());
    }
}

TEST_CASE("cluster editor: Revert restores the cluster last set", "[ui]")
{
    const auto original = demo("dgx-h100.json");
    ui::ClusterEditor editor;
    editor.setCluster(original);
    QSignalSpy modified(&editor, &ui::ClusterEditor::modifiedChanged);

    QTest::keyClicks(child<QLineEdit>(editor, "clusterName"), QStringLiteral("-b"));
    CHECK(editor.cluster().name == "dgx-h100-b");
    REQUIRE(editor.deviceTypeModel()->setData(editor.deviceTypeModel()->index(0, DeviceTypeModel::Price), 5));
    child<QDoubleSpinBox>(editor, "interBandwidth")->setValue(100);
    CHECK(editor.cluster().inter_node_bandwidth_bytes_per_s == 100e9);
    REQUIRE(editor.nodeModel()->insertRow(1));
    CHECK(editor.isModified());
    REQUIRE(modified.count() == 1);
    CHECK(modified.at(0).at(0).toBool());

    auto* revert = child<QPushButton>(editor, "revert");
    REQUIRE(revert->isEnabled());
    revert->click();
    CHECK(json(editor.cluster()) == json(original));
    CHECK_FALSE(editor.isModified());
    REQUIRE(modified.count() == 2);
    CHECK_FALSE(modified.at(1).at(0).toBool());
    CHECK(editor.nodeModel()->rowCount() == 1);
    CHECK(child<QLineEdit>(editor, "clusterName")->text() == "dgx-h100");
    CHECK(child<QDoubleSpinBox>(editor, "interBandwidth")->value() == 50);
    CHECK_FALSE(revert->isEnabled());
}

TEST_CASE("cluster editor: Apply emits the edited cluster and makes it the unmodified state", "[ui]")
{
    const auto original = demo("hetpipe-cluster.json");
    ui::ClusterEditor editor;
    editor.setCluster(original);
    auto* types = editor.deviceTypeModel();
    auto* nodes = editor.nodeModel();

    auto expected = original;
    REQUIRE(types->setData(types->index(1, DeviceTypeModel::Memory), 32));
    expected.device_types[1].memory_bytes = 32 * ui::kGiB;
    REQUIRE(types->setData(types->index(2, DeviceTypeModel::Name), QStringLiteral("RTX 2060")));
    expected.device_types[2].name = "RTX 2060";
    expected.nodes[2].device_type = "RTX 2060";
    REQUIRE(nodes->setData(nodes->index(3, NodeModel::Count), 2));
    expected.nodes[3].count = 2;
    REQUIRE(nodes->setData(nodes->index(0, NodeModel::IntraLatency), QStringLiteral("5")));
    expected.nodes[0].intra_latency_s = 5e-6;
    REQUIRE(nodes->setData(nodes->index(1, NodeModel::SshUser), QStringLiteral("train")));
    expected.nodes[1].ssh_user = "train";
    child<QDoubleSpinBox>(editor, "interLatency")->setValue(2);
    expected.inter_node_latency_s = 2e-6;

    std::optional<planner::Cluster> applied;
    QObject::connect(&editor, &ui::ClusterEditor::applyRequested, [&](const planner::Cluster& c) { applied = c; });
    auto* apply = child<QPushButton>(editor, "apply");
    REQUIRE(apply->isEnabled());
    apply->click();
    REQUIRE(applied.has_value());
    CHECK(json(*applied) == json(expected));
    CHECK_FALSE(editor.isModified());
    CHECK_FALSE(apply->isEnabled());

    // Revert now goes back to the applied cluster, not the first one.
    REQUIRE(nodes->setData(nodes->index(3, NodeModel::Count), 3));
    child<QPushButton>(editor, "revert")->click();
    CHECK(json(editor.cluster()) == json(expected));
}

TEST_CASE("cluster editor: renders at 1200x700 with nothing clipped", "[ui]")
{
    ui::ClusterEditor editor;
    editor.setCluster(demo("hetpipe-cluster.json"));
    addPreset(editor, "H100");
    REQUIRE(editor.nodeModel()->setData(editor.nodeModel()->index(3, NodeModel::Count), 0)); // show an error
    editor.resize(1200, 700);
    editor.show();
    QApplication::processEvents();

    CHECK(editor.minimumSizeHint().width() <= 1200);
    CHECK(editor.minimumSizeHint().height() <= 700);
    for (auto* view : editor.findChildren<QTableView*>()) {
        INFO(view->objectName().toStdString());
        const auto* header = view->horizontalHeader();
        for (int c = 0; c < header->count(); ++c)
            CHECK(header->sectionSize(c) >= header->sectionSizeHint(c));
        CHECK_FALSE(view->horizontalScrollBar()->isVisible());
        CHECK_FALSE(view->verticalScrollBar()->isVisible()); // every row of the demo is in view
    }
    for (auto* button : editor.findChildren<QPushButton*>())
        CHECK(button->width() >= button->sizeHint().width());
    for (auto* label : editor.findChildren<QLabel*>())
        if (!label->wordWrap() && label->isVisible())
            CHECK(label->width() >= label->sizeHint().width());

    const QPixmap shot = editor.grab();
    CHECK(shot.width() == 1200);
    QTemporaryDir dir;
    CHECK(shot.save(dir.filePath(QStringLiteral("cluster-editor.png"))));
}

TEST_CASE("cluster editor: the speed vs profiled device column follows the model and the type's numbers", "[ui]")
{
    // issue 10 item 1: a type without relative_speed or measured times runs at its peak ratio, and says so.
    ui::ClusterEditor editor;
    editor.setCluster(demo("dgx-h100.json"));
    auto* types = editor.deviceTypeModel();
    QAbstractItemModelTester tester(types, kFatal);
    addPreset(editor, "A100");
    REQUIRE(types->rowCount() == 2);
    const auto speed
        = [&](int row, int role = Qt::DisplayRole) { return types->index(row, DeviceTypeModel::Speed).data(role); };
    CHECK(types->headerData(DeviceTypeModel::Speed, Qt::Horizontal).toString() == "Speed vs profiled device");
    CHECK_FALSE(types->flags(types->index(0, DeviceTypeModel::Speed)) & Qt::ItemIsEditable);
    // No model yet: nothing to compare with.
    CHECK(speed(1).toString() == "1x");

    QSignalSpy changed(types, &QAbstractItemModel::dataChanged);
    editor.setModel(planner::loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json")); // profiled on H100
    CHECK(changed.count() == 1);
    CHECK(speed(0).toString() == "1x");
    CHECK(speed(0, Qt::ToolTipRole).toString().contains("profiled on this type"));
    CHECK(speed(1, DeviceTypeModel::ValueRole).toDouble() == Approx(312.0 / 989.0));
    CHECK(speed(1).toString() == "0.315x (estimate)");
    CHECK(speed(1, Qt::ToolTipRole).toString().contains("estimated"));

    // A relative speed replaces the estimate; the peak of the profiled type moves every estimate.
    REQUIRE(types->setData(types->index(1, DeviceTypeModel::RelativeSpeed), "0.5"));
    CHECK(speed(1).toString() == "0.5x");
    REQUIRE(types->setData(types->index(1, DeviceTypeModel::RelativeSpeed), ""));
    REQUIRE(types->setData(types->index(0, DeviceTypeModel::PeakTflops), "624"));
    CHECK(speed(1).toString() == "0.5x (estimate)");
}

TEST_CASE("cluster editor: the cell at fault is red with the reason, the summary keeps the last valid cluster", "[ui]")
{
    ui::ClusterEditor editor;
    editor.setCluster(demo("hetpipe-cluster.json"));
    auto* types = editor.deviceTypeModel();
    auto* nodes = editor.nodeModel();
    auto* summary = child<QLabel>(editor, "summary");
    const QString valid = summary->text();
    auto red = [](const QModelIndex& i) {
        const auto v = i.data(Qt::BackgroundRole);
        return v.isValid() && v.value<QBrush>().color().red() > 200 && v.value<QBrush>().color().green() < 220;
    };

    // Memory -5 GiB: Cluster::validate refuses it; the summary must not count it ("620 GiB total").
    REQUIRE(types->setData(types->index(0, DeviceTypeModel::Memory), -5));
    REQUIRE_FALSE(editor.validationError().isEmpty());
    CHECK(red(types->index(0, DeviceTypeModel::Memory)));
    CHECK(types->index(0, DeviceTypeModel::Memory).data(Qt::ToolTipRole).toString() == editor.validationError());
    CHECK_FALSE(red(types->index(0, DeviceTypeModel::Name)));
    CHECK(summary->text() == valid + QStringLiteral(" (the last valid cluster)"));

    // Fixed: the mark goes, the summary follows the cluster again. Then a node's count: its cell is marked.
    REQUIRE(types->setData(types->index(0, DeviceTypeModel::Memory), 12));
    CHECK(editor.validationError().isEmpty());
    CHECK_FALSE(red(types->index(0, DeviceTypeModel::Memory)));
    CHECK_FALSE(summary->text().contains(QStringLiteral("last valid")));
    const QString twelve = summary->text();
    REQUIRE(nodes->setData(nodes->index(2, NodeModel::Count), 0));
    CHECK(red(nodes->index(2, NodeModel::Count)));
    CHECK_FALSE(red(types->index(0, DeviceTypeModel::Memory)));
    CHECK(summary->text() == twelve + QStringLiteral(" (the last valid cluster)"));
}
