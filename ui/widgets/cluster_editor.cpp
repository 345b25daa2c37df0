// SPDX-License-Identifier: MIT
#include "cluster_editor.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "planner/device_presets.h"
#include "planner/errors.h"
#include "ui/models/cluster_models.h"

namespace pw::ui {
namespace {

/// The Device type column: a combo box of the cluster's types.
class DeviceTypeDelegate : public QStyledItemDelegate
{
public:
    DeviceTypeDelegate(const DeviceTypeModel& types, QObject* parent)
        : QStyledItemDelegate(parent)
        , m_types(types)
    {
    }

    QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem&, const QModelIndex&) const override
    {
        auto* combo = new QComboBox(parent);
        combo->addItems(m_types.typeNames());
        // Choosing a type ends the edit, as a click on a cell's own combo would.
        connect(combo, &QComboBox::activated, this, [this, combo] {
            auto* self = const_cast<DeviceTypeDelegate*>(this);
            emit self->commitData(combo);
            emit self->closeEditor(combo);
        });
        return combo;
    }

    void setEditorData(QWidget* editor, const QModelIndex& index) const override
    {
        auto* combo = static_cast<QComboBox*>(editor);
        combo->setCurrentIndex(combo->findText(index.data(Qt::EditRole).toString()));
    }

    void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override
    {
        auto* combo = static_cast<QComboBox*>(editor);
        if (combo->currentIndex() >= 0) // a node naming a removed type keeps it until a type is chosen
            model->setData(index, combo->currentText(), Qt::EditRole);
    }

private:
    const DeviceTypeModel& m_types;
};

/// Integer columns (count, SSH port): a spin box over a range.
class IntDelegate : public QStyledItemDelegate
{
public:
    IntDelegate(int minimum, int maximum, QObject* parent)
        : QStyledItemDelegate(parent)
        , m_minimum(minimum)
        , m_maximum(maximum)
    {
    }

    QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem&, const QModelIndex&) const override
    {
        auto* spin = new QSpinBox(parent);
        spin->setRange(m_minimum, m_maximum);
        spin->setFrame(false);
        return spin;
    }

    void setEditorData(QWidget* editor, const QModelIndex& index) const override
    {
        static_cast<QSpinBox*>(editor)->setValue(index.data(Qt::EditRole).toInt());
    }

    void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override
    {
        auto* spin = static_cast<QSpinBox*>(editor);
        spin->interpretText();
        model->setData(index, spin->value(), Qt::EditRole);
    }

private:
    int m_minimum;
    int m_maximum;
};

QTableView* makeTable(QAbstractItemModel* model, QWidget* parent)
{
    auto* view = new QTableView(parent);
    view->setModel(model);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::SelectedClicked
        | QAbstractItemView::EditKeyPressed | QAbstractItemView::AnyKeyPressed);
    view->verticalHeader()->hide();
    view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 10);
    // Names keep their width (a narrow window scrolls the table instead of shrinking them to "…"); the last
    // column takes the spare width.
    view->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    view->horizontalHeader()->setStretchLastSection(true);
    view->setTextElideMode(Qt::ElideMiddle);
    view->horizontalHeader()->setDefaultAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    view->setAlternatingRowColors(true);
    auto resize = [view] { view->resizeColumnsToContents(); };
    QObject::connect(model, &QAbstractItemModel::modelReset, view, resize);
    QObject::connect(model, &QAbstractItemModel::rowsInserted, view, resize);
    QObject::connect(model, &QAbstractItemModel::dataChanged, view, resize);
    return view;
}

/// Removes the rows selected in `view` (or its current row), last first.
void removeSelectedRows(QTableView* view)
{
    QList<int> rows;
    for (const auto& index : view->selectionModel()->selectedRows())
        rows << index.row();
    if (rows.isEmpty() && view->currentIndex().isValid())
        rows << view->currentIndex().row();
    std::sort(rows.begin(), rows.end(), std::greater<>());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (int row : rows)
        view->model()->removeRow(row);
}

QString plural(long long n, const QString& one, const QString& many)
{
    return QString::number(n) + QLatin1Char(' ') + (n == 1 ? one : many);
}

/// A cluster field's JSON name, and its column in each model (-1: not a column there).
struct FieldColumns
{
    const char* key;
    int typeColumn;
    int nodeColumn;
};
constexpr FieldColumns kFieldColumns[] = {
    {"name", DeviceTypeModel::Name, NodeModel::Name},
    {"memory_bytes", DeviceTypeModel::Memory, -1},
    {"peak_tflops", DeviceTypeModel::PeakTflops, -1},
    {"memory_bandwidth_bytes_per_s", DeviceTypeModel::MemoryBandwidth, -1},
    {"relative_speed", DeviceTypeModel::RelativeSpeed, -1},
    {"price_per_hour", DeviceTypeModel::Price, -1},
    {"host", -1, NodeModel::Host},
    {"ssh_port", -1, NodeModel::SshPort},
    {"ssh_user", -1, NodeModel::SshUser},
    {"device_type", -1, NodeModel::DeviceType},
    {"count", -1, NodeModel::Count},
    {"intra_bandwidth_bytes_per_s", -1, NodeModel::IntraBandwidth},
    {"intra_latency_s", -1, NodeModel::IntraLatency},
};

int columnOf(const std::string& key, bool node)
{
    for (const auto& l : kFieldColumns)
        if (key == l.key)
            return node ? l.nodeColumn : l.typeColumn;
    return -1;
}

/// A cluster field's JSON name as the editor labels it.
QString fieldLabel(const std::string& key, bool node)
{
    // The models' header texts; an empty cluster is enough to ask for them.
    planner::Cluster none;
    DeviceTypeModel types(none);
    NodeModel nodes(none);
    const int column = columnOf(key, node);
    if (column >= 0)
        return (node ? static_cast<QAbstractItemModel&>(nodes) : static_cast<QAbstractItemModel&>(types))
            .headerData(column, Qt::Horizontal)
            .toString();
    return QString::fromStdString(key);
}

/// "Node 'g-node', Count: a node needs at least one device, got 0" from the error's JSON pointer.
QString describe(const planner::InputError& e, const planner::Cluster& c)
{
    const QString message = QString::fromStdString(e.message());
    const std::string& field = e.field();
    auto part = [&](std::size_t from) {
        const auto slash = field.find('/', from);
        return field.substr(from, slash == std::string::npos ? std::string::npos : slash - from);
    };
    const std::string top = field.empty() ? std::string() : part(1);
    if (top == "device_types" || top == "nodes") {
        const bool node = top == "nodes";
        const std::size_t afterTop = top.size() + 2;
        if (field.size() <= afterTop)
            return (node ? ClusterEditor::tr("Nodes: ") : ClusterEditor::tr("Device types: ")) + message;
        const int i = std::stoi(part(afterTop));
        const std::string key = part(afterTop + part(afterTop).size() + 1);
        const std::string name = node ? c.nodes.at(i).name : c.device_types.at(i).name;
        QString who = node ? ClusterEditor::tr("Node") : ClusterEditor::tr("Device type");
        who += name.empty() ? ClusterEditor::tr(" in row %1").arg(i + 1)
                            : QStringLiteral(" '%1'").arg(QString::fromStdString(name));
        return who + QStringLiteral(", ") + fieldLabel(key, node) + QStringLiteral(": ") + message;
    }
    if (top == "inter_node_bandwidth_bytes_per_s")
        return ClusterEditor::tr("Inter-node bandwidth: ") + message;
    if (top == "inter_node_latency_s")
        return ClusterEditor::tr("Inter-node latency: ") + message;
    return QString::fromStdString(planner::formatInputError(e));
}

/// What Cluster::validate() lets through but a cluster cannot mean: negative sizes, speeds and prices.
void checkNotNegative(const planner::Cluster& c)
{
    auto check = [](double v, const std::string& field) {
        if (!(v >= 0))
            throw planner::InputError({}, 0, field, "must not be negative");
    };
    for (std::size_t i = 0; i < c.device_types.size(); ++i) {
        const auto& t = c.device_types[i];
        const auto path = "/device_types/" + std::to_string(i);
        check(t.peak_tflops, path + "/peak_tflops");
        check(t.memory_bandwidth_bytes_per_s, path + "/memory_bandwidth_bytes_per_s");
        check(t.price_per_hour, path + "/price_per_hour");
    }
    for (std::size_t i = 0; i < c.nodes.size(); ++i) {
        const auto& n = c.nodes[i];
        const auto path = "/nodes/" + std::to_string(i);
        check(n.intra_bandwidth_bytes_per_s, path + "/intra_bandwidth_bytes_per_s");
        check(n.intra_latency_s, path + "/intra_latency_s");
    }
    check(c.inter_node_bandwidth_bytes_per_s, "/inter_node_bandwidth_bytes_per_s");
    check(c.inter_node_latency_s, "/inter_node_latency_s");
}

/// The table cell an error's JSON pointer names ("/nodes/3/count"): which table, row and column; none for errors
/// of the whole cluster or a field without a column.
struct BlamedCell
{
    bool node = false;
    int row = -1;
    int column = -1;
};

BlamedCell blamedCell(const planner::InputError& e)
{
    const std::string& f = e.field();
    for (const bool node : {false, true}) {
        const std::string top = node ? "/nodes/" : "/device_types/";
        if (f.rfind(top, 0) != 0)
            continue;
        const auto slash = f.find('/', top.size());
        if (slash == std::string::npos)
            return {node, -1, -1};
        try {
            return {node, std::stoi(f.substr(top.size(), slash - top.size())), columnOf(f.substr(slash + 1), node)};
        } catch (const std::exception&) {
            return {};
        }
    }
    return {};
}

QString summaryText(const planner::Cluster& c)
{
    long long devices = 0;
    double memory = 0;
    double price = 0;
    for (const auto& n : c.nodes) {
        if (n.count < 1)
            continue;
        devices += n.count;
        const int t = c.findType(n.device_type);
        if (t >= 0) {
            memory += n.count * c.device_types[t].memory_bytes;
            price += n.count * c.device_types[t].price_per_hour;
        }
    }
    const double gib = memory / kGiB;
    const QString memoryText = gib >= 10240
        ? QString::number(gib / 1024, 'f', 1) + QStringLiteral(" TiB")
        : QString::number(gib, 'f', gib == std::round(gib) ? 0 : 1) + QStringLiteral(" GiB");
    const QString sep = QStringLiteral(" \u00b7 ");
    return ClusterEditor::tr("%1 on %2")
               .arg(plural(devices, ClusterEditor::tr("device"), ClusterEditor::tr("devices")),
                   plural(
                       static_cast<long long>(c.nodes.size()), ClusterEditor::tr("node"), ClusterEditor::tr("nodes")))
        + sep
        + plural(static_cast<long long>(c.device_types.size()), ClusterEditor::tr("device type"),
            ClusterEditor::tr("device types"))
        + sep + ClusterEditor::tr("%1 total").arg(memoryText) + sep
        + QStringLiteral("$%1/h").arg(QString::number(price, 'f', 2));
}

} // namespace

ClusterEditor::ClusterEditor(QWidget* parent)
    : QWidget(parent)
    , m_types(new DeviceTypeModel(m_cluster, this))
    , m_nodes(new NodeModel(m_cluster, this))
{
    connect(m_types, &DeviceTypeModel::typesChanged, m_nodes, &NodeModel::deviceTypesChanged);
    for (QAbstractItemModel* model :
        {static_cast<QAbstractItemModel*>(m_types), static_cast<QAbstractItemModel*>(m_nodes)}) {
        connect(model, &QAbstractItemModel::dataChanged, this, &ClusterEditor::edited);
        connect(model, &QAbstractItemModel::rowsInserted, this, &ClusterEditor::edited);
        connect(model, &QAbstractItemModel::rowsRemoved, this, &ClusterEditor::edited);
    }

    m_name = new QLineEdit(this);
    m_name->setObjectName(QStringLiteral("clusterName"));
    m_name->setPlaceholderText(tr("cluster name"));
    connect(m_name, &QLineEdit::textEdited, this, [this](const QString& text) {
        m_cluster.name = text.toStdString();
        edited();
    });
    auto* nameRow = new QFormLayout;
    nameRow->addRow(tr("Cluster &name:"), m_name);

    m_summary = new QLabel(this);
    m_summary->setObjectName(QStringLiteral("summary"));
    m_summary->setWordWrap(true);
    m_validation = new QLabel(this);
    m_validation->setObjectName(QStringLiteral("validation"));
    m_validation->setWordWrap(true);
    m_validation->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_validation->setStyleSheet(QStringLiteral("color: rgb(200, 30, 30);"));

    m_revert = new QPushButton(tr("&Revert"), this);
    m_revert->setObjectName(QStringLiteral("revert"));
    m_revert->setToolTip(tr("Back to the cluster last applied or loaded"));
    connect(m_revert, &QPushButton::clicked, this, [this] { setCluster(m_original); });
    m_apply = new QPushButton(tr("&Apply to project"), this);
    m_apply->setObjectName(QStringLiteral("apply"));
    m_apply->setDefault(true);
    connect(m_apply, &QPushButton::clicked, this, &ClusterEditor::apply);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_validation, 1);
    buttons->addWidget(m_revert);
    buttons->addWidget(m_apply);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(nameRow);
    layout->addWidget(buildTypesBox(), 1);
    layout->addWidget(buildNodesBox(), 1);
    layout->addWidget(buildLinkRow());
    layout->addWidget(m_summary);
    layout->addLayout(buttons);

    setCluster({});
}

QWidget* ClusterEditor::buildTypesBox()
{
    auto* box = new QGroupBox(tr("Device types"), this);
    m_typeView = makeTable(m_types, box);
    m_typeView->setObjectName(QStringLiteral("deviceTypes"));

    m_presets = new QComboBox(box);
    m_presets->setObjectName(QStringLiteral("presets"));
    for (const auto& t : planner::devicePresets())
        m_presets->addItem(QString::fromStdString(t.name));
    m_presets->addItem(tr("Empty (custom)"));
    // Long preset names do not widen the editor (the popup shows them whole).
    m_presets->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_presets->setMinimumContentsLength(10);
    m_presets->setToolTip(tr("Known devices: memory, peak TFLOPS, memory bandwidth and an hourly price"));
    auto* presetLabel = new QLabel(tr("&Preset:"), box);
    presetLabel->setBuddy(m_presets);
    auto* add = new QPushButton(tr("Add"), box);
    add->setObjectName(QStringLiteral("addType"));
    connect(add, &QPushButton::clicked, this, &ClusterEditor::addType);
    auto* remove = new QPushButton(tr("Remove"), box);
    remove->setObjectName(QStringLiteral("removeType"));
    remove->setToolTip(tr("Remove the selected device types (nodes using them must then change type)"));
    connect(remove, &QPushButton::clicked, this, [this] { removeSelectedRows(m_typeView); });

    auto* row = new QHBoxLayout;
    row->addWidget(presetLabel);
    row->addWidget(m_presets);
    row->addWidget(add);
    row->addWidget(remove);
    row->addStretch(1);
    auto* layout = new QVBoxLayout(box);
    layout->addWidget(m_typeView);
    layout->addLayout(row);
    return box;
}

QWidget* ClusterEditor::buildNodesBox()
{
    auto* box = new QGroupBox(tr("Nodes"), this);
    m_nodeView = makeTable(m_nodes, box);
    m_nodeView->setObjectName(QStringLiteral("nodes"));
    m_nodeView->setItemDelegateForColumn(NodeModel::DeviceType, new DeviceTypeDelegate(*m_types, m_nodeView));
    m_nodeView->setItemDelegateForColumn(NodeModel::Count, new IntDelegate(1, planner::kMaxDevices, m_nodeView));
    m_nodeView->setItemDelegateForColumn(NodeModel::SshPort, new IntDelegate(1, 65535, m_nodeView));

    auto* add = new QPushButton(tr("Add node"), box);
    add->setObjectName(QStringLiteral("addNode"));
    add->setToolTip(tr("Add a node like the selected one (or the last)"));
    connect(add, &QPushButton::clicked, this, &ClusterEditor::addNode);
    auto* remove = new QPushButton(tr("Remove node"), box);
    remove->setObjectName(QStringLiteral("removeNode"));
    connect(remove, &QPushButton::clicked, this, [this] { removeSelectedRows(m_nodeView); });

    auto* row = new QHBoxLayout;
    row->addWidget(add);
    row->addWidget(remove);
    row->addStretch(1);
    auto* layout = new QVBoxLayout(box);
    layout->addWidget(m_nodeView);
    layout->addLayout(row);
    return box;
}

QWidget* ClusterEditor::buildLinkRow()
{
    auto* box = new QGroupBox(tr("Between nodes"), this);
    m_interBandwidth = new QDoubleSpinBox(box);
    m_interBandwidth->setObjectName(QStringLiteral("interBandwidth"));
    m_interBandwidth->setRange(0, 1e6);
    m_interBandwidth->setDecimals(3);
    m_interBandwidth->setSuffix(tr(" GB/s"));
    m_interBandwidth->setToolTip(tr("Bandwidth of the link between two nodes (1 GB/s = 1e9 bytes/s)"));
    connect(m_interBandwidth, &QDoubleSpinBox::valueChanged, this, [this](double v) {
        m_cluster.inter_node_bandwidth_bytes_per_s = v * kGBps;
        edited();
    });
    m_interLatency = new QDoubleSpinBox(box);
    m_interLatency->setObjectName(QStringLiteral("interLatency"));
    m_interLatency->setRange(0, 1e6);
    m_interLatency->setDecimals(3);
    m_interLatency->setSuffix(tr(" µs"));
    m_interLatency->setToolTip(tr("Latency of the link between two nodes, in microseconds"));
    connect(m_interLatency, &QDoubleSpinBox::valueChanged, this, [this](double v) {
        m_cluster.inter_node_latency_s = v / kUsPerS;
        edited();
    });
    // Two rows, not one: the editor must fit beside the docks of a 1024 px window.
    auto* layout = new QFormLayout(box);
    layout->addRow(tr("Inter-node &bandwidth:"), m_interBandwidth);
    layout->addRow(tr("Inter-node &latency:"), m_interLatency);
    return box;
}

void ClusterEditor::setCluster(const planner::Cluster& cluster)
{
    m_types->beginClusterReset();
    m_nodes->beginClusterReset();
    m_original = cluster;
    m_cluster = cluster;
    m_nodes->endClusterReset();
    m_types->endClusterReset();
    showClusterFields();
    edited();
}

void ClusterEditor::setModel(const planner::ModelProfile& model)
{
    m_types->setModel(model);
}

planner::Cluster ClusterEditor::cluster() const
{
    return m_cluster;
}

QString ClusterEditor::validationError() const
{
    return m_error;
}

bool ClusterEditor::isModified() const
{
    return m_modified;
}

DeviceTypeModel* ClusterEditor::deviceTypeModel()
{
    return m_types;
}

NodeModel* ClusterEditor::nodeModel()
{
    return m_nodes;
}

void ClusterEditor::showClusterFields()
{
    const QSignalBlocker blockBandwidth(m_interBandwidth);
    const QSignalBlocker blockLatency(m_interLatency);
    m_name->setText(QString::fromStdString(m_cluster.name));
    m_interBandwidth->setValue(m_cluster.inter_node_bandwidth_bytes_per_s / kGBps);
    m_interLatency->setValue(m_cluster.inter_node_latency_s * kUsPerS);
}

void ClusterEditor::addType()
{
    const auto& presets = planner::devicePresets();
    const int choice = m_presets->currentIndex();
    const int row = choice >= 0 && choice < static_cast<int>(presets.size()) ? m_types->appendType(presets[choice])
                                                                             : m_types->appendType({});
    m_typeView->setCurrentIndex(m_types->index(row, DeviceTypeModel::Name));
}

void ClusterEditor::addNode()
{
    const QModelIndex current = m_nodeView->currentIndex();
    const int row = current.isValid() ? current.row() + 1 : m_nodes->rowCount();
    if (m_nodes->insertRow(row))
        m_nodeView->setCurrentIndex(m_nodes->index(row, NodeModel::Name));
}

void ClusterEditor::apply()
{
    if (!m_error.isEmpty() || !m_modified)
        return;
    const planner::Cluster applied = m_cluster;
    m_original = applied;
    edited();
    emit applyRequested(applied);
}

void ClusterEditor::edited()
{
    BlamedCell blamed;
    try {
        m_cluster.validate();
        checkNotNegative(m_cluster);
        m_error.clear();
        m_lastValid = m_cluster;
    } catch (const planner::InputError& e) {
        m_error = describe(e, m_cluster);
        blamed = blamedCell(e);
    }
    // The cell at fault is red with the reason; the summary stays on the last cluster that was valid (an invalid
    // value must not count: "620 GiB total" after typing -5 GiB).
    m_types->invalidCell().set(*m_types, blamed.node ? -1 : blamed.row, blamed.column, m_error);
    m_nodes->invalidCell().set(*m_nodes, blamed.node ? blamed.row : -1, blamed.column, m_error);
    m_validation->setText(m_error);
    m_summary->setText(
        m_error.isEmpty() ? summaryText(m_cluster) : tr("%1 (the last valid cluster)").arg(summaryText(m_lastValid)));

    const bool modified = planner::toJson(m_cluster) != planner::toJson(m_original);
    m_apply->setEnabled(modified && m_error.isEmpty());
    m_revert->setEnabled(modified);
    if (modified != m_modified) {
        m_modified = modified;
        emit modifiedChanged(modified);
    }
}

} // namespace pw::ui
