// SPDX-License-Identifier: MIT
#include "hf_import_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>

namespace pw::ui {

HfImportDialog::HfImportDialog(
    const QString& file, const QString& model, int maxSequence, const QStringList& devices, QWidget* parent)
    : QDialog(parent)
{
    setWindowTitle(tr("Import a Hugging Face model"));
    auto* layout = new QVBoxLayout(this);
    auto* text = new QLabel(tr("%1 describes %2, but not how it is trained: the sequence length and the microbatch "
                               "decide every layer's time and memory, and the device its speed. Pipewright profiles it "
                               "analytically from these (as `profile transformer --hf-config`).")
                                .arg(file, model),
        this);
    text->setWordWrap(true);
    layout->addWidget(text);
    auto* form = new QFormLayout;
    m_sequence = new QSpinBox(this);
    m_sequence->setObjectName(QStringLiteral("sequence"));
    m_sequence->setRange(1, std::max(1, maxSequence));
    m_sequence->setValue(std::min(std::max(1, maxSequence), 4096));
    m_sequence->setSuffix(tr(" tokens"));
    m_sequence->setToolTip(tr("Tokens per sample (at most the model's %1 positions)").arg(maxSequence));
    form->addRow(tr("&Sequence length:"), m_sequence);
    m_microbatch = new QSpinBox(this);
    m_microbatch->setObjectName(QStringLiteral("microbatch"));
    m_microbatch->setRange(1, 65536);
    m_microbatch->setValue(1);
    m_microbatch->setSuffix(tr(" samples"));
    form->addRow(tr("&Microbatch:"), m_microbatch);
    m_device = new QComboBox(this);
    m_device->setObjectName(QStringLiteral("device"));
    m_device->addItems(devices);
    m_device->setToolTip(tr("The device type whose speed times the layers (a cluster type, else a preset)"));
    form->addRow(tr("Profile &on:"), m_device);
    m_fp8 = new QCheckBox(tr("QKV, projection and MLP products in FP8"), this);
    m_fp8->setObjectName(QStringLiteral("fp8"));
    m_fp8->setToolTip(tr("As Transformer Engine runs them (Megatron's --fp8-format hybrid): 16-bit weights, FP8 "
                         "products at the device's FP8 peak, their inputs kept in 1 byte. Needs FP8 tensor cores "
                         "(H100, H200, B200, MI300X)"));
    form->addRow(tr("&Precision:"), m_fp8);
    layout->addLayout(form);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
}

HfImport HfImportDialog::settings() const
{
    return {m_sequence->value(), m_microbatch->value(), m_device->currentText().toStdString(), m_fp8->isChecked()};
}

void HfImportDialog::setSettings(const HfImport& settings)
{
    m_sequence->setValue(settings.sequence);
    m_microbatch->setValue(settings.microbatch);
    m_device->setCurrentText(QString::fromStdString(settings.device));
    m_fp8->setChecked(settings.fp8);
}

} // namespace pw::ui
