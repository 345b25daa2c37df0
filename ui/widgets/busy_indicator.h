// SPDX-License-Identifier: MIT
// The status bar's sign that background work is going on: shown once some work has taken longer than ~100 ms.
#pragma once

#include <QMap>
#include <QWidget>

class QLabel;
class QProgressBar;
class QTimer;

namespace pw::ui {

/// @brief An indeterminate progress bar and the names of what is running, after a short delay.
///
/// Sources report with setBusy(what, busy) (connect a JobRunner's busyChanged through a lambda naming it). The
/// indicator appears when something has been busy for `kDelayMs` and hides when nothing is, so work that ends
/// within a frame or two never flickers.
class BusyIndicator : public QWidget
{
    Q_OBJECT

public:
    static constexpr int kDelayMs = 100;

    explicit BusyIndicator(QWidget* parent = nullptr);

    void setBusy(const QString& what, bool busy);
    /// What is running now (shown or not yet), joined by ", ".
    QString text() const;
    bool anyBusy() const { return !m_busy.isEmpty(); }

private:
    void refresh();

    QMap<QString, int> m_busy; ///< what -> how many sources report it busy
    QLabel* m_label = nullptr;
    QProgressBar* m_bar = nullptr;
    QTimer* m_delay = nullptr;
};

} // namespace pw::ui
