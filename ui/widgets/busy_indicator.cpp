// SPDX-License-Identifier: MIT
#include "busy_indicator.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QTimer>

namespace pw::ui {

BusyIndicator::BusyIndicator(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_label = new QLabel(this);
    m_bar = new QProgressBar(this);
    m_bar->setRange(0, 0); // indeterminate
    m_bar->setMaximumWidth(120);
    m_bar->setMaximumHeight(14);
    m_bar->setTextVisible(false);
    layout->addWidget(m_label);
    layout->addWidget(m_bar);
    m_delay = new QTimer(this);
    m_delay->setSingleShot(true);
    m_delay->setInterval(kDelayMs);
    connect(m_delay, &QTimer::timeout, this, [this] { setVisible(anyBusy()); });
    hide();
}

void BusyIndicator::setBusy(const QString& what, bool busy)
{
    int& count = m_busy[what];
    count = std::max(0, count + (busy ? 1 : -1));
    if (count == 0)
        m_busy.remove(what);
    refresh();
}

QString BusyIndicator::text() const
{
    return m_busy.keys().join(QStringLiteral(", "));
}

void BusyIndicator::refresh()
{
    m_label->setText(anyBusy() ? text() + QStringLiteral("…") : QString());
    if (!anyBusy()) {
        m_delay->stop();
        hide();
    } else if (!isVisible() && !m_delay->isActive()) {
        m_delay->start();
    }
}

} // namespace pw::ui
