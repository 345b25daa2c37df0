// SPDX-License-Identifier: MIT
#include "run_list_model.h"

#include <QColor>
#include <QDateTime>
#include <QStringList>

#include "ui/models/format.h"

namespace pw::ui {

void RunListModel::setRuns(std::vector<app::RunRecord> runs)
{
    beginResetModel();
    m_runs = std::move(runs);
    endResetModel();
}

int RunListModel::rowOf(const std::string& id) const
{
    for (std::size_t i = 0; i < m_runs.size(); ++i)
        if (m_runs[i].id == id)
            return static_cast<int>(i);
    return -1;
}

int RunListModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int RunListModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunListModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= rowCount())
        return {};
    const auto& r = m_runs[static_cast<std::size_t>(index.row())];
    const double duration = r.ended_unix_s > 0 ? r.ended_unix_s - r.started_unix_s : -1;
    if (role == ValueRole) {
        switch (index.column()) {
        case Id:
            return QString::fromStdString(r.id);
        case Label:
            return QString::fromStdString(r.label);
        case Status:
            return QString::fromUtf8(app::toString(r.status).data());
        case Steps: // sorts by the steps done
            return static_cast<qlonglong>(r.steps_done);
        case Started:
            return r.started_unix_s;
        case Duration:
            return duration;
        case Tags:
            return static_cast<int>(r.tags.size());
        }
        return {};
    }
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Id:
            return QString::fromStdString(r.id);
        case Label:
            return QString::fromStdString(r.label);
        case Status: {
            const auto s = app::toString(r.status);
            return QString::fromUtf8(s.data(), static_cast<int>(s.size()));
        }
        case Steps: // done of planned: a run that stopped early shows it
            return QStringLiteral("%1/%2").arg(r.steps_done).arg(r.steps_planned);
        case Started:
            return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.started_unix_s))
                .toString(QStringLiteral("yyyy-MM-dd hh:mm:ss"));
        case Duration:
            return duration < 0 ? QStringLiteral("—") : secondsText(duration, 1);
        case Tags: {
            QStringList tags;
            for (const auto& t : r.tags)
                tags << QString::fromStdString(t);
            return tags.join(QStringLiteral(", "));
        }
        }
        return {};
    }
    if (role == Qt::ToolTipRole && !r.status_message.empty())
        return QString::fromStdString(r.status_message);
    if (role == Qt::ForegroundRole && index.column() == Status
        && (r.status == app::RunStatus::Failed || r.status == app::RunStatus::Interrupted))
        return QColor(200, 30, 30);
    if (role == Qt::TextAlignmentRole && (index.column() == Steps || index.column() == Duration))
        return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant RunListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const QStringList names
        = {tr("Run"), tr("Plan"), tr("Status"), tr("Steps"), tr("Started"), tr("Duration"), tr("Tags")};
    return section >= 0 && section < names.size() ? names[section] : QVariant();
}

} // namespace pw::ui
