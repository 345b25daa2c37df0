// SPDX-License-Identifier: MIT
// Why a run is slow, in the run monitor: each device's step split by cause as stacked bars (milliseconds per step:
// compute, communication exposed, the plan's bubble, waits beyond the plan, host gaps), the stragglers named above
// them, and the table of the same numbers (app/run/diagnosis.h).
#pragma once

#include <QWidget>

#include "app/run/diagnosis.h"

class QCustomPlot;
class QLabel;

namespace pw::ui {

class CausesView : public QWidget
{
    Q_OBJECT

public:
    explicit CausesView(QWidget* parent = nullptr);

    /// Shows `d` (empty: says that no complete step was measured yet).
    void setDiagnosis(const app::RunDiagnosis& d);
    void clear();

    /// The stragglers' line and the table as text (tests).
    QString stragglerText() const;
    QString tableText() const;
    QCustomPlot* plot() const { return m_plot; }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override; ///< the plot resized: its device labels again

private:
    /// Device labels under the bars: every device while they fit, else every 2nd, 5th, 10th, ... (64 devices at
    /// 1024 pixels).
    void labelDevices();

    QLabel* m_stragglers = nullptr;
    QCustomPlot* m_plot = nullptr;
    QLabel* m_table = nullptr;
    int m_devices = 0;
};

} // namespace pw::ui
