// SPDX-License-Identifier: MIT
#include "history_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

#include "app/history/history.h"
#include "ui/models/run_list_model.h"
#include "ui/widgets/tables.h"

namespace pw::ui {

HistoryView::HistoryView(QWidget* parent)
    : QWidget(parent)
    , m_model(new RunListModel(this))
{
    m_filter = new QLineEdit(this);
    m_filter->setPlaceholderText(tr("Filter by plan name"));
    m_filter->setClearButtonEnabled(true);
    m_filter->setMinimumWidth(m_filter->fontMetrics().horizontalAdvance(QStringLiteral("Filter by plan")) + 24);
    m_status = new QComboBox(this);
    m_status->addItem(tr("All statuses"), QString());
    for (auto s : {app::RunStatus::Running, app::RunStatus::Succeeded, app::RunStatus::Failed, app::RunStatus::Stopped,
             app::RunStatus::Interrupted})
        m_status->addItem(QString::fromUtf8(app::toString(s).data()), QString::fromUtf8(app::toString(s).data()));
    auto* refresh = new QPushButton(tr("Refresh"), this);
    m_open = new QPushButton(tr("Open"), this);
    m_open->setToolTip(tr("Show the run in the Run tab: its timeline over the prediction, curves and log"));
    m_delete = new QPushButton(tr("Delete…"), this);
    // Filters above the table, actions on the selected run below it: two short rows keep narrow windows narrow.
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_filter, 1);
    bar->addWidget(m_status);
    bar->addWidget(refresh);
    m_table = rowPickingTable(m_model, this);
    m_summary = new QLabel(this);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setMinimumWidth(40);
    auto* actions = new QHBoxLayout;
    actions->addWidget(m_summary, 1);
    actions->addWidget(m_open);
    actions->addWidget(m_delete);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(m_table, 1);
    layout->addLayout(actions);

    connect(refresh, &QPushButton::clicked, this, &HistoryView::refresh);
    connect(m_filter, &QLineEdit::textChanged, this, &HistoryView::refresh);
    connect(m_status, &QComboBox::currentIndexChanged, this, &HistoryView::refresh);
    connect(m_open, &QPushButton::clicked, this, &HistoryView::openSelected);
    connect(m_table, &QTableView::doubleClicked, this, &HistoryView::openSelected);
    connect(m_table, &QTableView::activated, this, &HistoryView::openSelected);
    connect(m_delete, &QPushButton::clicked, this, &HistoryView::deleteSelected);
}

void HistoryView::setHistoryPath(std::filesystem::path path)
{
    m_path = std::move(path);
    if (isVisible())
        refresh();
}

void HistoryView::refresh()
{
    const std::string selected = selectedRun();
    if (m_path.empty())
        return;
    std::error_code ec;
    if (!std::filesystem::exists(m_path, ec)) { // listing creates nothing: the first run does
        m_model->setRuns({});
        m_summary->setText(
            tr("No runs yet: Plan ▸ Run locally (F6) records one in %1").arg(QString::fromStdString(m_path.string())));
        return;
    }
    try {
        auto store = app::HistoryStore::open(m_path);
        app::RunFilter f;
        f.text = m_filter->text().toStdString();
        if (const QString s = m_status->currentData().toString(); !s.isEmpty())
            f.status = app::runStatusFromString(s.toStdString());
        m_model->setRuns(store.listRuns(f));
        const int n = m_model->rowCount();
        const QString file = QString::fromStdString(m_path.string());
        m_summary->setText(n == 1 ? tr("1 run in %1").arg(file) : tr("%1 runs in %2").arg(n).arg(file));
    } catch (const std::exception& e) {
        m_model->setRuns({});
        m_summary->setText(tr("Cannot read the history: %1").arg(QString::fromUtf8(e.what())));
    }
    if (!selected.empty())
        select(selected);
}

void HistoryView::select(const std::string& id)
{
    const int row = m_model->rowOf(id);
    if (row >= 0)
        selectSourceRow(m_table, m_model, row);
}

std::string HistoryView::selectedRun() const
{
    const int row = selectedSourceRow(m_table);
    return row < 0 ? std::string() : m_model->run(row).id;
}

void HistoryView::openSelected()
{
    const std::string id = selectedRun();
    if (!id.empty())
        emit openRequested(QString::fromStdString(id));
}

void HistoryView::deleteSelected()
{
    const std::string id = selectedRun();
    if (id.empty())
        return;
    const auto answer = QMessageBox::question(
        this, tr("Delete run"), tr("Delete run %1 and everything recorded about it?").arg(QString::fromStdString(id)));
    if (answer != QMessageBox::Yes)
        return;
    try {
        app::HistoryStore::open(m_path).deleteRun(id);
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Delete run"), QString::fromUtf8(e.what()));
    }
    refresh();
}

} // namespace pw::ui
