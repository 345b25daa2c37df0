// SPDX-License-Identifier: MIT
#include "history_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

#include "app/history/history.h"
#include "app/run/compare_runs.h"
#include "ui/jobs/job_runner.h"
#include "ui/models/run_list_model.h"
#include "ui/widgets/elided_label.h"
#include "ui/widgets/run_compare_view.h"
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
    m_tagFilter = new QLineEdit(this);
    m_tagFilter->setPlaceholderText(tr("Tag"));
    m_tagFilter->setClearButtonEnabled(true);
    m_tagFilter->setToolTip(tr("Only runs with a tag that contains this text (any case)"));
    m_tagFilter->setMaximumWidth(m_tagFilter->fontMetrics().horizontalAdvance(QStringLiteral("baseline-tag")) + 40);
    m_status = new QComboBox(this);
    m_status->addItem(tr("All statuses"), QString());
    for (auto s : {app::RunStatus::Running, app::RunStatus::Succeeded, app::RunStatus::Failed, app::RunStatus::Stopped,
             app::RunStatus::Interrupted})
        m_status->addItem(QString::fromUtf8(app::toString(s).data()), QString::fromUtf8(app::toString(s).data()));
    auto* refresh = new QPushButton(tr("Refresh"), this);
    m_open = new QPushButton(tr("Open"), this);
    m_open->setToolTip(tr("Show the run in the Run tab: its timeline over the prediction, curves and log"));
    m_delete = new QPushButton(tr("Delete…"), this);
    auto* tag = new QPushButton(tr("Tags…"), this);
    tag->setToolTip(tr("Tag the selected run (comma-separated tags), to find it again with the tag filter"));
    m_compareButton = new QPushButton(tr("Compare"), this);
    m_compareButton->setToolTip(tr("Select two runs or more (Ctrl+click): what differs, per-stage time and bubbles"));
    m_compareButton->setEnabled(false);
    m_jobs = new JobRunner(QStringLiteral("compare runs"), this);
    m_compare = new RunCompareView(this);
    m_compare->hide();
    connect(m_compare, &RunCompareView::message, this, [this](const QString& text) { m_summary->setFullText(text); });
    // Filters above the table, actions on the selected run below it: two short rows keep narrow windows narrow.
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_filter, 1);
    bar->addWidget(m_tagFilter);
    bar->addWidget(m_status);
    bar->addWidget(refresh);
    m_table = rowPickingTable(m_model, this);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection); // several runs compare
    // One line whatever the window's width: shortened with "…", the whole text in its tooltip.
    m_summary = new ElidedLabel(this);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* actions = new QHBoxLayout; // under the summary, which has the list's whole width to itself
    actions->addStretch(1);
    actions->addWidget(m_open);
    actions->addWidget(m_compareButton);
    actions->addWidget(tag);
    actions->addWidget(m_delete);
    auto* list = new QWidget(this);
    auto* listLayout = new QVBoxLayout(list);
    listLayout->setContentsMargins(0, 0, 0, 0);
    listLayout->addLayout(bar);
    listLayout->addWidget(m_table, 1);
    listLayout->addWidget(m_summary);
    listLayout->addLayout(actions);
    m_split = new QSplitter(Qt::Vertical, this);
    m_split->addWidget(list);
    m_split->addWidget(m_compare);
    m_split->setStretchFactor(0, 1);
    m_split->setStretchFactor(1, 2);
    m_split->setChildrenCollapsible(false);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_split);

    connect(refresh, &QPushButton::clicked, this, &HistoryView::refresh);
    connect(m_filter, &QLineEdit::textChanged, this, &HistoryView::refresh);
    connect(m_status, &QComboBox::currentIndexChanged, this, &HistoryView::refresh);
    connect(m_tagFilter, &QLineEdit::textChanged, this, &HistoryView::refresh);
    connect(tag, &QPushButton::clicked, this, &HistoryView::tagSelected);
    connect(m_open, &QPushButton::clicked, this, &HistoryView::openSelected);
    connect(m_table, &QTableView::doubleClicked, this, &HistoryView::openSelected);
    connect(m_table, &QTableView::activated, this, &HistoryView::openSelected);
    connect(m_delete, &QPushButton::clicked, this, &HistoryView::deleteSelected);
    connect(m_compareButton, &QPushButton::clicked, this, &HistoryView::compareSelected);
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this,
        [this] { m_compareButton->setEnabled(selectedRuns().size() >= 2); });
    connect(m_jobs, &JobRunner::failed, this,
        [this](const QString& message) { m_summary->setFullText(tr("Cannot compare: %1").arg(message)); });
}

std::vector<std::string> HistoryView::selectedRuns() const
{
    std::vector<std::pair<int, std::string>> rows;
    for (const auto& index : m_table->selectionModel()->selectedRows())
        rows.emplace_back(index.row(), m_model->run(sourceRow(m_table, index)).id);
    std::sort(rows.begin(), rows.end());
    std::vector<std::string> out;
    for (auto& [row, id] : rows)
        out.push_back(std::move(id));
    return out;
}

void HistoryView::compareSelected()
{
    const auto ids = selectedRuns();
    if (ids.size() < 2 || m_path.empty())
        return;
    m_summary->setFullText(tr("Comparing %1 runs…").arg(ids.size()));
    // Reading timelines and comparing them may take a while on long runs: a job of its own, with its own store.
    m_jobs->submit(
        [path = m_path, ids](std::stop_token) {
            auto store = app::HistoryStore::open(path, app::HistoryStore::Access::ReadOnly);
            std::vector<app::RunSnapshot> snapshots;
            for (const auto& id : ids)
                snapshots.push_back(app::loadRunSnapshot(store, id));
            auto comparison = app::compareRuns(snapshots);
            return std::make_pair(std::move(snapshots), std::move(comparison));
        },
        [this](std::pair<std::vector<app::RunSnapshot>, app::RunsComparison> result) {
            const auto& c = result.second;
            m_compare->setRuns(std::move(result.first), result.second);
            if (!m_compare->isVisible()) { // the list keeps a third, the comparison takes the rest
                m_compare->show();
                const int h = std::max(300, m_split->height());
                m_split->setSizes({h / 3, h - h / 3});
            }
            m_summary->setFullText(tr("%1 runs compared").arg(c.runs.size()));
        });
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
        m_summary->setFullText(
            tr("No runs yet: Plan ▸ Run locally (F6) records one in %1").arg(QString::fromStdString(m_path.string())));
        return;
    }
    try {
        auto store = app::HistoryStore::open(m_path, app::HistoryStore::Access::ReadOnly); // writes nothing
        app::RunFilter f;
        f.text = m_filter->text().toStdString();
        f.tag = m_tagFilter->text().trimmed().toStdString();
        if (const QString s = m_status->currentData().toString(); !s.isEmpty())
            f.status = app::runStatusFromString(s.toStdString());
        m_model->setRuns(store.listRuns(f));
        const int n = m_model->rowCount();
        const QString file = QString::fromStdString(m_path.string());
        m_summary->setFullText(n == 1 ? tr("1 run in %1").arg(file) : tr("%1 runs in %2").arg(n).arg(file));
    } catch (const std::exception& e) {
        m_model->setRuns({});
        m_summary->setFullText(tr("Cannot read the history: %1").arg(QString::fromUtf8(e.what())));
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

bool HistoryView::setTags(const std::string& id, const std::vector<std::string>& tags)
{
    try {
        auto store = app::HistoryStore::open(m_path);
        const auto record = store.run(id);
        if (!record)
            throw std::runtime_error("no run " + id);
        for (const auto& old : record->tags)
            if (std::find(tags.begin(), tags.end(), old) == tags.end())
                store.removeTag(id, old);
        for (const auto& t : tags)
            if (std::find(record->tags.begin(), record->tags.end(), t) == record->tags.end())
                store.addTag(id, t);
    } catch (const std::exception& e) {
        m_summary->setFullText(tr("Cannot tag the run: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
    refresh();
    return true;
}

void HistoryView::tagSelected()
{
    const std::string id = selectedRun();
    if (id.empty())
        return;
    const int row = m_model->rowOf(id);
    QStringList current;
    for (const auto& t : m_model->run(row).tags)
        current << QString::fromStdString(t);
    bool ok = false;
    const QString text = QInputDialog::getText(this, tr("Tags"),
        tr("Tags of run %1 (comma-separated):").arg(QString::fromStdString(id)), QLineEdit::Normal,
        current.join(QStringLiteral(", ")), &ok);
    if (!ok)
        return;
    std::vector<std::string> tags;
    for (const QString& t : text.split(QLatin1Char(','), Qt::SkipEmptyParts))
        if (const QString trimmed = t.trimmed(); !trimmed.isEmpty())
            tags.push_back(trimmed.toStdString());
    setTags(id, tags);
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
