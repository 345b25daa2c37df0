// SPDX-License-Identifier: MIT
#include "cluster_models.h"

#include <QBrush>
#include <QColor>
#include <cmath>

#include "planner/costs.h"

namespace pw::ui {
namespace {

/// The unit a cell shows its SI number in.
enum class Unit { Plain, GiB, GBps, Us };

double toShown(double si, Unit unit)
{
    switch (unit) {
    case Unit::GiB:
        return si / kGiB;
    case Unit::GBps:
        return si / kGBps;
    case Unit::Us:
        return si * kUsPerS;
    case Unit::Plain:
        break;
    }
    return si;
}

/// Multiplies or divides by an exactly representable factor, so that "5" us is exactly 5e-6 s.
double toSi(double shown, Unit unit)
{
    switch (unit) {
    case Unit::GiB:
        return shown * kGiB;
    case Unit::GBps:
        return shown * kGBps;
    case Unit::Us:
        return shown / kUsPerS;
    case Unit::Plain:
        break;
    }
    return shown;
}

const QColor kErrorColor(200, 30, 30);

/// A cell's text: six significant digits are plenty to read.
QString shownNumber(double v)
{
    return QString::number(v, 'g', 6);
}

/// An editor's text: 15 digits keep what was typed and hide the last-ulp noise of a unit conversion.
QString editNumber(double v)
{
    return QString::number(v, 'g', 15);
}

/// Parses a number typed in a cell (or given as one); false for text that is not a finite number.
bool parseNumber(const QVariant& value, double& out)
{
    bool ok = false;
    const double d
        = value.typeId() == QMetaType::QString ? value.toString().trimmed().toDouble(&ok) : value.toDouble(&ok);
    if (!ok || !std::isfinite(d))
        return false;
    out = d;
    return true;
}

bool parseInt(const QVariant& value, int& out)
{
    bool ok = false;
    const int i = value.typeId() == QMetaType::QString ? value.toString().trimmed().toInt(&ok) : value.toInt(&ok);
    if (!ok)
        return false;
    out = i;
    return true;
}

/// Sets `field` (SI) from an edit: EditRole is in the shown unit, ValueRole in SI. An edit
/// that leaves the shown text as it was keeps the exact SI value, so opening and closing an editor changes
/// nothing. Returns false for a value that does not parse; `changed` says whether the field changed.
bool setScaled(double& field, Unit unit, const QVariant& value, int role, bool& changed)
{
    double v = 0;
    if (!parseNumber(value, v))
        return false;
    double si = v;
    if (role == Qt::EditRole) {
        double current = 0;
        parseNumber(editNumber(toShown(field, unit)), current);
        if (v == current)
            return true;
        si = toSi(v, unit);
    }
    changed = si != field;
    field = si;
    return true;
}

QVariant numberCell(double si, Unit unit, int role)
{
    const double shown = toShown(si, unit);
    if (role == Qt::DisplayRole)
        return shownNumber(shown);
    return editNumber(shown);
}

} // namespace

// ---- DeviceTypeModel

DeviceTypeModel::DeviceTypeModel(planner::Cluster& cluster, QObject* parent)
    : QAbstractTableModel(parent)
    , m_cluster(cluster)
{
}

int DeviceTypeModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_cluster.device_types.size());
}

int DeviceTypeModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

void InvalidCellMark::set(QAbstractItemModel& model, int row, int column, const QString& why)
{
    if (row == m_row && column == m_column && why == m_why)
        return;
    const int oldRow = m_row, oldColumn = m_column;
    m_row = row;
    m_column = column;
    m_why = why;
    for (const auto& [r, c] : {std::pair {oldRow, oldColumn}, std::pair {row, column}})
        if (r >= 0 && r < model.rowCount() && c >= 0 && c < model.columnCount())
            emit model.dataChanged(model.index(r, c), model.index(r, c), {Qt::BackgroundRole, Qt::ToolTipRole});
}

std::optional<QVariant> InvalidCellMark::data(const QModelIndex& index, int role) const
{
    if (index.row() != m_row || index.column() != m_column)
        return std::nullopt;
    if (role == Qt::BackgroundRole)
        return QBrush(QColor(255, 205, 205));
    if (role == Qt::ToolTipRole)
        return m_why;
    return std::nullopt;
}

QVariant DeviceTypeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= rowCount())
        return {};
    if (auto marked = m_invalid.data(index, role))
        return *marked;
    const auto& t = m_cluster.device_types[index.row()];
    const int column = index.column();
    if (role == ValueRole) {
        switch (column) {
        case Name:
            return QString::fromStdString(t.name);
        case Memory:
            return t.memory_bytes;
        case PeakTflops:
            return t.peak_tflops;
        case MemoryBandwidth:
            return t.memory_bandwidth_bytes_per_s;
        case RelativeSpeed:
            return t.relative_speed ? QVariant(*t.relative_speed) : QVariant();
        case Speed:
            return planner::deviceSpeed(t, m_model, m_cluster.device_types).factor;
        case Price:
            return t.price_per_hour;
        }
        return {};
    }
    if (column == Speed && (role == Qt::ToolTipRole || role == Qt::ForegroundRole || role == Qt::DisplayRole))
        return speedCell(t, role);
    if (role == Qt::TextAlignmentRole && column != Name)
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole && column == RelativeSpeed && !t.relative_speed)
        return tr("Empty: the profile's times are used as they are");
    if (role == Qt::ToolTipRole && column == Name && t.streaming_execution)
        return tr("Streams its outputs while it computes (asynchronous execution)");
    if (role != Qt::DisplayRole && role != Qt::EditRole)
        return {};
    switch (column) {
    case Name:
        return QString::fromStdString(t.name);
    case Memory:
        return numberCell(t.memory_bytes, Unit::GiB, role);
    case PeakTflops:
        return numberCell(t.peak_tflops, Unit::Plain, role);
    case MemoryBandwidth:
        return numberCell(t.memory_bandwidth_bytes_per_s, Unit::GBps, role);
    case RelativeSpeed:
        return t.relative_speed ? numberCell(*t.relative_speed, Unit::Plain, role) : QVariant(QString());
    case Price:
        return role == Qt::DisplayRole ? QString::number(t.price_per_hour, 'f', 2) : editNumber(t.price_per_hour);
    }
    return {};
}

QVariant DeviceTypeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return QAbstractTableModel::headerData(section, orientation, role);
    if (role == Qt::TextAlignmentRole && section != Name)
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case Memory:
            return tr("Device memory in GiB (2^30 bytes)");
        case PeakTflops:
            return tr("Peak dense throughput, for % of peak");
        case MemoryBandwidth:
            return tr("Used for the optimizer step; 0 = free");
        case RelativeSpeed:
            return tr("Speed relative to the profile's device: times are divided by it.\n"
                      "Empty: the profile's times are used as they are.");
        case Speed:
            return tr("The speed the planners use, against the device the model was profiled on:\n"
                      "relative speed, else measured per-layer times, else the ratio of peak TFLOPS (an estimate)");
        case Price:
            return tr("Price of one device per hour");
        }
        return {};
    }
    if (role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case Name:
        return tr("Name");
    case Memory:
        return tr("Memory (GiB)");
    case PeakTflops:
        return tr("Peak TFLOPS");
    case MemoryBandwidth:
        return tr("Memory bandwidth (GB/s)");
    case RelativeSpeed:
        return tr("Relative speed");
    case Speed:
        return tr("Speed vs profiled device");
    case Price:
        return tr("Price ($/h)");
    }
    return {};
}

Qt::ItemFlags DeviceTypeModel::flags(const QModelIndex& index) const
{
    if (!index.isValid())
        return Qt::NoItemFlags;
    if (index.column() == Speed)
        return Qt::ItemIsSelectable | Qt::ItemIsEnabled;
    return Qt::ItemIsSelectable | Qt::ItemIsEnabled | Qt::ItemIsEditable;
}

bool DeviceTypeModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (!index.isValid() || index.row() >= rowCount() || (role != Qt::EditRole && role != ValueRole))
        return false;
    auto& t = m_cluster.device_types[index.row()];
    bool changed = false;
    switch (index.column()) {
    case Name: {
        const std::string name = value.toString().trimmed().toStdString();
        if (name == t.name)
            return true;
        // Nodes follow the rename unless it is ambiguous: another type has the old name, or already has the
        // new one (renaming back must then restore what was there).
        int sameOld = 0;
        int sameNew = 0;
        for (const auto& other : m_cluster.device_types) {
            sameOld += other.name == t.name;
            sameNew += other.name == name;
        }
        if (sameOld == 1 && sameNew == 0)
            for (auto& n : m_cluster.nodes)
                if (n.device_type == t.name)
                    n.device_type = name;
        t.name = name;
        changed = true;
        break;
    }
    case Memory:
        if (!setScaled(t.memory_bytes, Unit::GiB, value, role, changed))
            return false;
        break;
    case PeakTflops:
        if (!setScaled(t.peak_tflops, Unit::Plain, value, role, changed))
            return false;
        break;
    case MemoryBandwidth:
        if (!setScaled(t.memory_bandwidth_bytes_per_s, Unit::GBps, value, role, changed))
            return false;
        break;
    case RelativeSpeed: {
        if (!value.isValid() || (value.typeId() == QMetaType::QString && value.toString().trimmed().isEmpty())) {
            changed = t.relative_speed.has_value();
            t.relative_speed.reset();
            break;
        }
        double speed = t.relative_speed.value_or(0);
        if (!setScaled(speed, Unit::Plain, value, role, changed))
            return false;
        changed = changed || !t.relative_speed;
        t.relative_speed = speed;
        break;
    }
    case Price:
        if (!setScaled(t.price_per_hour, Unit::Plain, value, role, changed))
            return false;
        break;
    default:
        return false;
    }
    if (changed) {
        emit dataChanged(index, index);
        if (index.column() == Name)
            emit typesChanged();
        if (index.column() == Name || index.column() == PeakTflops || index.column() == RelativeSpeed)
            speedsChanged();
    }
    return true;
}

void DeviceTypeModel::setModel(const planner::ModelProfile& model)
{
    m_model = model;
    speedsChanged();
}

void DeviceTypeModel::speedsChanged()
{
    if (rowCount() > 0)
        emit dataChanged(index(0, Speed), index(rowCount() - 1, Speed));
}

QVariant DeviceTypeModel::speedCell(const planner::DeviceType& type, int role) const
{
    using Source = planner::DeviceSpeed::Source;
    const auto speed = planner::deviceSpeed(type, m_model, m_cluster.device_types);
    if (role == Qt::DisplayRole)
        return QString::number(speed.factor, 'g', 3) + QStringLiteral("x")
            + (speed.estimated() ? tr(" (estimate)") : QString());
    if (role == Qt::ForegroundRole)
        return speed.estimated() ? QVariant(QColor(Qt::darkYellow)) : QVariant();
    const QString device = QString::fromStdString(m_model.profiled_device);
    switch (speed.source) {
    case Source::Relative:
        return tr("From the relative speed");
    case Source::Measured:
        return tr("From the model's per-layer times measured on this type");
    case Source::Profiled:
        return tr("The model was profiled on this type (%1)").arg(device);
    case Source::PeakRatio:
        return QString::fromStdString(planner::speedNote(type, m_model, speed));
    case Source::Unknown:
        break;
    }
    return device.isEmpty()
        ? tr("Unknown: the model names no profiled device; its times are used as they are")
        : tr("Unknown: no peak TFLOPS to compare with %1; the model's times are used as they are").arg(device);
}

std::string DeviceTypeModel::uniqueName(const std::string& base) const
{
    auto used = [&](const std::string& name) { return m_cluster.findType(name) >= 0; };
    if (!used(base))
        return base;
    for (int k = 2;; ++k) {
        auto name = base + " (" + std::to_string(k) + ")";
        if (!used(name))
            return name;
    }
}

bool DeviceTypeModel::insertRows(int row, int count, const QModelIndex& parent)
{
    if (parent.isValid() || row < 0 || row > rowCount() || count < 1)
        return false;
    beginInsertRows({}, row, row + count - 1);
    for (int i = 0; i < count; ++i) {
        planner::DeviceType t;
        t.name = uniqueName("device type");
        m_cluster.device_types.insert(m_cluster.device_types.begin() + row + i, std::move(t));
    }
    endInsertRows();
    emit typesChanged();
    return true;
}

bool DeviceTypeModel::removeRows(int row, int count, const QModelIndex& parent)
{
    if (parent.isValid() || row < 0 || count < 1 || row + count > rowCount())
        return false;
    beginRemoveRows({}, row, row + count - 1);
    auto first = m_cluster.device_types.begin() + row;
    m_cluster.device_types.erase(first, first + count);
    endRemoveRows();
    emit typesChanged();
    return true;
}

int DeviceTypeModel::appendType(planner::DeviceType type)
{
    type.name = uniqueName(type.name.empty() ? std::string("device type") : type.name);
    const int row = rowCount();
    beginInsertRows({}, row, row);
    m_cluster.device_types.push_back(std::move(type));
    endInsertRows();
    emit typesChanged();
    return row;
}

QStringList DeviceTypeModel::typeNames() const
{
    QStringList names;
    for (const auto& t : m_cluster.device_types)
        names << QString::fromStdString(t.name);
    return names;
}

void DeviceTypeModel::beginClusterReset()
{
    beginResetModel();
}

void DeviceTypeModel::endClusterReset()
{
    endResetModel();
    emit typesChanged();
}

// ---- NodeModel

NodeModel::NodeModel(planner::Cluster& cluster, QObject* parent)
    : QAbstractTableModel(parent)
    , m_cluster(cluster)
{
}

int NodeModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_cluster.nodes.size());
}

int NodeModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant NodeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= rowCount())
        return {};
    if (auto marked = m_invalid.data(index, role))
        return *marked;
    const auto& n = m_cluster.nodes[index.row()];
    const int column = index.column();
    const bool unknownType = column == DeviceType && m_cluster.findType(n.device_type) < 0;
    const bool badCount = column == Count && n.count < 1;
    const bool negative = (column == IntraBandwidth && n.intra_bandwidth_bytes_per_s < 0)
        || (column == IntraLatency && n.intra_latency_s < 0);
    if (role == Qt::ForegroundRole && (unknownType || badCount || negative))
        return QBrush(kErrorColor);
    if (role == Qt::ToolTipRole) {
        if (unknownType)
            return tr("The cluster has no device type named '%1'").arg(QString::fromStdString(n.device_type));
        if (badCount)
            return tr("A node needs at least one device");
        if (negative)
            return tr("Must not be negative");
        return {};
    }
    if (role == Qt::TextAlignmentRole
        && (column == SshPort || column == Count || column == IntraBandwidth || column == IntraLatency))
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    const bool value = role == ValueRole;
    if (!value && role != Qt::DisplayRole && role != Qt::EditRole)
        return {};
    switch (column) {
    case Name:
        return QString::fromStdString(n.name);
    case Host:
        return QString::fromStdString(n.host);
    case SshPort:
        return n.ssh_port;
    case SshUser:
        return QString::fromStdString(n.ssh_user);
    case DeviceType:
        return QString::fromStdString(n.device_type);
    case Count:
        return n.count;
    case IntraBandwidth:
        return value ? QVariant(n.intra_bandwidth_bytes_per_s)
                     : numberCell(n.intra_bandwidth_bytes_per_s, Unit::GBps, role);
    case IntraLatency:
        return value ? QVariant(n.intra_latency_s) : numberCell(n.intra_latency_s, Unit::Us, role);
    }
    return {};
}

QVariant NodeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return QAbstractTableModel::headerData(section, orientation, role);
    if (role == Qt::TextAlignmentRole
        && (section == SshPort || section == Count || section == IntraBandwidth || section == IntraLatency))
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case Host:
            return tr("Host name or address used to deploy the agent");
        case DeviceType:
            return tr("One of the cluster's device types");
        case Count:
            return tr("Number of devices in the node");
        case IntraBandwidth:
            return tr("Bandwidth between two devices of the node, in GB/s (1e9 bytes/s)");
        case IntraLatency:
            return tr("Latency between two devices of the node, in microseconds");
        }
        return {};
    }
    if (role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case Name:
        return tr("Name");
    case Host:
        return tr("Host");
    case SshPort:
        return tr("SSH port");
    case SshUser:
        return tr("SSH user");
    case DeviceType:
        return tr("Device type");
    case Count:
        return tr("Count");
    case IntraBandwidth:
        return tr("Intra-node bandwidth (GB/s)");
    case IntraLatency:
        return tr("Intra-node latency (µs)");
    }
    return {};
}

Qt::ItemFlags NodeModel::flags(const QModelIndex& index) const
{
    if (!index.isValid())
        return Qt::NoItemFlags;
    return Qt::ItemIsSelectable | Qt::ItemIsEnabled | Qt::ItemIsEditable;
}

bool NodeModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (!index.isValid() || index.row() >= rowCount() || (role != Qt::EditRole && role != ValueRole))
        return false;
    auto& n = m_cluster.nodes[index.row()];
    bool changed = false;
    QModelIndex last = index;
    auto setString = [&](std::string& field) {
        const std::string s = value.toString().trimmed().toStdString();
        changed = s != field;
        field = s;
    };
    auto setInt = [&](int& field) {
        int i = 0;
        if (!parseInt(value, i))
            return false;
        changed = i != field;
        field = i;
        return true;
    };
    switch (index.column()) {
    case Name: {
        // A host left at its default (the node's name) follows the name.
        const bool hostFollows = n.host == n.name;
        setString(n.name);
        if (changed && hostFollows) {
            n.host = n.name;
            last = index.siblingAtColumn(Host);
        }
        break;
    }
    case Host:
        setString(n.host);
        break;
    case SshPort:
        if (!setInt(n.ssh_port))
            return false;
        break;
    case SshUser:
        setString(n.ssh_user);
        break;
    case DeviceType:
        setString(n.device_type);
        break;
    case Count:
        if (!setInt(n.count))
            return false;
        break;
    case IntraBandwidth:
        if (!setScaled(n.intra_bandwidth_bytes_per_s, Unit::GBps, value, role, changed))
            return false;
        break;
    case IntraLatency:
        if (!setScaled(n.intra_latency_s, Unit::Us, value, role, changed))
            return false;
        break;
    default:
        return false;
    }
    if (changed)
        emit dataChanged(index, last);
    return true;
}

std::string NodeModel::uniqueName() const
{
    for (int k = static_cast<int>(m_cluster.nodes.size());; ++k) {
        auto name = "node" + std::to_string(k);
        bool used = false;
        for (const auto& n : m_cluster.nodes)
            used = used || n.name == name;
        if (!used)
            return name;
    }
}

bool NodeModel::insertRows(int row, int count, const QModelIndex& parent)
{
    if (parent.isValid() || row < 0 || row > rowCount() || count < 1)
        return false;
    planner::Node proto;
    if (!m_cluster.nodes.empty()) {
        proto = m_cluster.nodes[row > 0 ? row - 1 : 0];
    } else {
        proto.count = 1;
        if (!m_cluster.device_types.empty())
            proto.device_type = m_cluster.device_types.front().name;
    }
    beginInsertRows({}, row, row + count - 1);
    for (int i = 0; i < count; ++i) {
        planner::Node n = proto;
        n.name = uniqueName();
        n.host = n.name;
        m_cluster.nodes.insert(m_cluster.nodes.begin() + row + i, std::move(n));
    }
    endInsertRows();
    return true;
}

bool NodeModel::removeRows(int row, int count, const QModelIndex& parent)
{
    if (parent.isValid() || row < 0 || count < 1 || row + count > rowCount())
        return false;
    beginRemoveRows({}, row, row + count - 1);
    auto first = m_cluster.nodes.begin() + row;
    m_cluster.nodes.erase(first, first + count);
    endRemoveRows();
    return true;
}

void NodeModel::deviceTypesChanged()
{
    if (rowCount() > 0)
        emit dataChanged(index(0, DeviceType), index(rowCount() - 1, DeviceType));
}

void NodeModel::beginClusterReset()
{
    beginResetModel();
}

void NodeModel::endClusterReset()
{
    endResetModel();
}

} // namespace pw::ui
