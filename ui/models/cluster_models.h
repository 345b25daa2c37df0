// SPDX-License-Identifier: MIT
// The cluster editor's two tables: the device types and the nodes of one planner::Cluster, edited in place.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <optional>

#include "planner/cluster.h"
#include "planner/model_profile.h"

namespace pw::ui {

/// The units the cluster's tables and editor show: memory in GiB, bandwidth in GB/s, latency in microseconds.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGBps = 1e9;
inline constexpr double kUsPerS = 1e6;

/// @brief The device types of a cluster, one row each, editable. The cluster is not owned: it belongs to the
/// editor, which shares it with a NodeModel. Cells show human units (GiB = 2^30 bytes, GB/s = 1e9 bytes/s);
/// ValueRole gives the raw SI number and setData accepts either (Qt::EditRole in the shown unit, as a number or
/// text; ValueRole in SI). Renaming a type renames it in the nodes that use it. The read-only Speed column is
/// planner::deviceSpeed of the type on the model set with setModel (1x for every type until one is set).
/// @brief The one cell the cluster editor's validation blames: painted light red, the reason as its tooltip.
class InvalidCellMark
{
public:
    /// Marks (row, column) of `model` with `why` (row -1: no cell); repaints the old and the new cell.
    void set(QAbstractItemModel& model, int row, int column, const QString& why);
    /// The background or tooltip of `index` when it is the marked cell.
    std::optional<QVariant> data(const QModelIndex& index, int role) const;
    int row() const { return m_row; }
    int column() const { return m_column; }

private:
    int m_row = -1;
    int m_column = -1;
    QString m_why;
};

class DeviceTypeModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column { Name, Memory, PeakTflops, MemoryBandwidth, RelativeSpeed, Speed, Price, ColumnCount };
    /// Qt::UserRole + 1: the raw number behind a cell (bytes, bytes/s, TFLOPS, $/h, the speed factor; an invalid
    /// QVariant for an empty relative speed), or the name.
    static constexpr int ValueRole = Qt::UserRole + 1;

    explicit DeviceTypeModel(planner::Cluster& cluster, QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    /// An empty relative speed means "the profile's times"; a value that does not parse is refused (false).
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    /// Inserts blank types with unique names ("device type", "device type 2", ...).
    bool insertRows(int row, int count, const QModelIndex& parent = {}) override;
    /// Nodes that use a removed type keep its name (the editor reports them as naming an unknown type).
    bool removeRows(int row, int count, const QModelIndex& parent = {}) override;

    /// Appends `type` (a preset, say), its name made unique with " (2)", " (3)", ...; returns its row.
    int appendType(planner::DeviceType type);
    /// The names of the cluster's types, in order.
    QStringList typeNames() const;
    /// The model whose speed on each type the Speed column shows (against its profiled device).
    void setModel(const planner::ModelProfile& model);

    /// Replacing the whole cluster: call begin, assign the cluster, call end.
    void beginClusterReset();
    void endClusterReset();
    /// The cell validation blames (row -1: none).
    InvalidCellMark& invalidCell() { return m_invalid; }

signals:
    /// A type was added, removed or renamed (nodes' Device type cells may have changed meaning or text).
    void typesChanged();

private:
    planner::Cluster& m_cluster;
    planner::ModelProfile m_model;
    InvalidCellMark m_invalid;
    std::string uniqueName(const std::string& base) const;
    void speedsChanged();
    QVariant speedCell(const planner::DeviceType& type, int role) const;
};

/// @brief The nodes of a cluster, one row each, editable, over the same cluster as a DeviceTypeModel. GB/s =
/// 1e9 bytes/s and us = 1e-6 s in the cells; ValueRole gives bytes/s and seconds. A Device type that names no
/// type of the cluster, or a count below 1, is shown red with a tooltip.
class NodeModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column { Name, Host, SshPort, SshUser, DeviceType, Count, IntraBandwidth, IntraLatency, ColumnCount };
    /// Qt::UserRole + 1: the raw value behind a cell (bytes/s, seconds, integers, strings).
    static constexpr int ValueRole = Qt::UserRole + 1;

    explicit NodeModel(planner::Cluster& cluster, QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    /// Inserts copies of the node above (or of the first node; a one-device node of the first type in an empty
    /// cluster) with unique names, each its own host.
    bool insertRows(int row, int count, const QModelIndex& parent = {}) override;
    bool removeRows(int row, int count, const QModelIndex& parent = {}) override;

    /// The device types changed (DeviceTypeModel::typesChanged): refreshes the Device type column.
    void deviceTypesChanged();

    /// Replacing the whole cluster: call begin, assign the cluster, call end.
    void beginClusterReset();
    void endClusterReset();
    /// The cell validation blames (row -1: none).
    InvalidCellMark& invalidCell() { return m_invalid; }

private:
    planner::Cluster& m_cluster;
    InvalidCellMark m_invalid;
    std::string uniqueName() const;
};

} // namespace pw::ui
