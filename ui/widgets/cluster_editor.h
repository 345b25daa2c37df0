// SPDX-License-Identifier: MIT
// The cluster editor tab: device types, nodes and the links between nodes, validated as they are edited.
#pragma once

#include <QWidget>

#include "planner/cluster.h"
#include "planner/model_profile.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableView;

namespace pw::ui {

class DeviceTypeModel;
class NodeModel;

/// @brief Edits a copy of a cluster: its name, device types (blank or from planner::devicePresets()), nodes
/// and inter-node link, with a summary line and the first validation error in red. "Apply to project" (enabled
/// when the edit validates and differs from the cluster last set or applied) emits applyRequested; "Revert"
/// goes back to that cluster.
class ClusterEditor : public QWidget
{
    Q_OBJECT

public:
    explicit ClusterEditor(QWidget* parent = nullptr);

    /// Shows `cluster` for editing; the editor is then not modified.
    void setCluster(const planner::Cluster& cluster);
    /// The project's model: the device types' "speed vs profiled device" column is its speed on each type.
    void setModel(const planner::ModelProfile& model);
    /// The cluster as edited (exactly the one set while nothing was edited).
    planner::Cluster cluster() const;
    /// Empty when the edited cluster validates; otherwise one line naming the type or node and the field.
    QString validationError() const;
    /// Whether the edited cluster differs from the one last set or applied.
    bool isModified() const;
    /// The cluster last set or applied: what Revert goes back to.
    const planner::Cluster& baseCluster() const { return m_original; }

    /// The tables' models (for tests).
    DeviceTypeModel* deviceTypeModel();
    NodeModel* nodeModel();

signals:
    /// "Apply to project" was pressed on a valid edit; the editor then takes `cluster` as its unmodified state.
    void applyRequested(const pw::planner::Cluster& cluster);
    void modifiedChanged(bool modified);

private:
    planner::Cluster m_original;
    planner::Cluster m_lastValid; ///< what the summary shows while an edit is invalid
    planner::Cluster m_cluster; // shared by the two models
    DeviceTypeModel* m_types = nullptr;
    NodeModel* m_nodes = nullptr;
    bool m_modified = false;
    QString m_error;

    QLineEdit* m_name = nullptr;
    QTableView* m_typeView = nullptr;
    QComboBox* m_presets = nullptr;
    QTableView* m_nodeView = nullptr;
    QDoubleSpinBox* m_interBandwidth = nullptr;
    QDoubleSpinBox* m_interLatency = nullptr;
    QLabel* m_summary = nullptr;
    QLabel* m_validation = nullptr;
    QPushButton* m_apply = nullptr;
    QPushButton* m_revert = nullptr;

    QWidget* buildTypesBox();
    QWidget* buildNodesBox();
    QWidget* buildLinkRow();
    void addType();
    void addNode();
    void apply();
    /// Shows the cluster-level fields of m_cluster without treating them as edits.
    void showClusterFields();
    /// After any change: summary, validation, buttons, modified state.
    void edited();
};

} // namespace pw::ui
