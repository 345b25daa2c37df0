// SPDX-License-Identifier: MIT
// What importing a Hugging Face config.json must ask: the file describes the model, not the run (its sequence
// length and microbatch) nor the device to profile it on.
#pragma once

#include <QDialog>
#include <QStringList>

#include "ui/document/project_document.h"

class QCheckBox;
class QComboBox;
class QSpinBox;

namespace pw::ui {

class HfImportDialog : public QDialog
{
    Q_OBJECT

public:
    /// `model`: a line on what the file holds (family, layers, parameters); `maxSequence`: its positions;
    /// `devices`: the device types to offer (the project's cluster's, then the presets).
    HfImportDialog(const QString& file, const QString& model, int maxSequence, const QStringList& devices,
        QWidget* parent = nullptr);

    HfImport settings() const;
    void setSettings(const HfImport& settings);

private:
    QSpinBox* m_sequence = nullptr;
    QSpinBox* m_microbatch = nullptr;
    QComboBox* m_device = nullptr;
    QCheckBox* m_fp8 = nullptr;
};

} // namespace pw::ui
