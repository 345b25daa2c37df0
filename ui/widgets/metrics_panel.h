// SPDX-License-Identifier: MIT
// The metrics panel: the document's predicted iteration time, throughput, bubble and memory, and the per-stage
// table (StageModel), updated live as the plan changes (also during a drag).
#pragma once

#include <QWidget>

class QLabel;
class QTableView;

namespace pw::ui {

class PlanDocument;
class StageModel;

class MetricsPanel : public QWidget
{
    Q_OBJECT

public:
    explicit MetricsPanel(PlanDocument& document, QWidget* parent = nullptr);

    /// The shown values by name ("iteration", "throughput", "bubble", "memory", "plan"), for tests.
    QString value(const QString& name) const;
    StageModel* stageModel() const { return m_stages; }

private:
    void refresh();

    PlanDocument& m_document;
    QLabel* m_plan = nullptr; ///< wraps: the plan's description is never cut
    QLabel* m_iteration = nullptr;
    QLabel* m_throughput = nullptr;
    QLabel* m_bubble = nullptr;
    QLabel* m_wait = nullptr; ///< waiting for all-reduces, apart from the bubble
    QLabel* m_memory = nullptr;
    QLabel* m_mfu = nullptr;
    QLabel* m_mfuLabel = nullptr; ///< "per device", or "per GPU" where devices share GPUs
    QLabel* m_hfuLabel = nullptr;
    QLabel* m_hfu = nullptr;
    QLabel* m_error = nullptr;
    StageModel* m_stages = nullptr;
    QTableView* m_table = nullptr;
};

} // namespace pw::ui
