// SPDX-License-Identifier: MIT
#include "graph_import_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QSpinBox>
#include <QVBoxLayout>

namespace pw::ui {

GraphImportDialog::GraphImportDialog(const QString& file, int layers, const QStringList& devices, QWidget* parent)
    : QDialog(parent)
{
    setWindowTitle(tr("Import a PipeDream profile"));
    auto* layout = new QVBoxLayout(this);
    auto* text = new QLabel(tr("%1 holds %2 layers with their times and sizes, but not the batch size they were "
                               "measured at nor the device. Both decide the plan's numbers: samples/s scale with the "
                               "batch size, and other devices' times with their speed against the profiled one.")
                                .arg(file)
                                .arg(layers),
        this);
    text->setWordWrap(true);
    layout->addWidget(text);
    auto* form = new QFormLayout;
    m_batch = new QSpinBox(this);
    m_batch->setObjectName(QStringLiteral("batchSize"));
    m_batch->setRange(1, 65536);
    m_batch->setValue(1);
    m_batch->setToolTip(tr("Samples per minibatch when the profile was taken (PipeDream's --batch_size)"));
    form->addRow(tr("Samples per profiled &minibatch:"), m_batch);
    m_device = new QComboBox(this);
    m_device->setObjectName(QStringLiteral("profiledDevice"));
    m_device->setEditable(true);
    m_device->addItems(devices);
    m_device->setToolTip(tr("The device type the times were measured on"));
    form->addRow(tr("Profiled &on:"), m_device);
    layout->addLayout(form);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
}

GraphImport GraphImportDialog::settings() const
{
    return {m_batch->value(), m_device->currentText().trimmed().toStdString()};
}

void GraphImportDialog::setSettings(const GraphImport& settings)
{
    m_batch->setValue(settings.batch_size);
    m_device->setCurrentText(QString::fromStdString(settings.profiled_device));
}

} // namespace pw::ui
