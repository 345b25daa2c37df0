// SPDX-License-Identifier: MIT
// What importing a PipeDream graph.txt must ask: the file holds per-layer times and sizes but neither the batch
// size they were measured at nor the device.
#pragma once

#include <QDialog>
#include <QStringList>

#include "ui/document/project_document.h"

class QComboBox;
class QSpinBox;

namespace pw::ui {

class GraphImportDialog : public QDialog
{
    Q_OBJECT

public:
    /// `devices`: the device types to offer (the project's cluster's, then the presets). `layers`: for the text.
    GraphImportDialog(const QString& file, int layers, const QStringList& devices, QWidget* parent = nullptr);

    GraphImport settings() const;
    void setSettings(const GraphImport& settings);

private:
    QSpinBox* m_batch = nullptr;
    QComboBox* m_device = nullptr;
};

} // namespace pw::ui
