// SPDX-License-Identifier: MIT
// How the app's result tables look, sort and select: one place for the partition panel's and the scenarios' tables.
#pragma once

#include <QAbstractItemModel>
#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QTableView>

namespace pw::ui {

/// The role every app model gives the raw number (or text) behind a cell: what the tables sort by.
inline constexpr int kSortRole = Qt::UserRole + 1;

/// A table of `model` whose rows are picked one at a time and sorted by a click on a column header (by the raw
/// number behind the cells, kSortRole; unsorted until then): no row numbers, columns sized to their contents, the
/// last one taking the rest, one line per row. The view shows a proxy: sourceRow() maps its rows back to `model`'s.
inline QTableView* rowPickingTable(QAbstractItemModel* model, QWidget* parent)
{
    auto* proxy = new QSortFilterProxyModel(parent);
    proxy->setSourceModel(model);
    proxy->setSortRole(kSortRole);
    proxy->setDynamicSortFilter(true);
    auto* table = new QTableView(parent);
    table->setModel(proxy);
    table->setSortingEnabled(true);
    table->sortByColumn(-1, Qt::AscendingOrder); // the model's order until a header is clicked
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setSelectionMode(QAbstractItemView::SingleSelection);
    table->verticalHeader()->hide();
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table->horizontalHeader()->setStretchLastSection(true);
    table->setWordWrap(false);
    table->setTextElideMode(Qt::ElideMiddle);
    return table;
}

/// The source model's row of a view index of a rowPickingTable() (-1 for an invalid index).
inline int sourceRow(const QTableView* table, const QModelIndex& viewIndex)
{
    if (!viewIndex.isValid())
        return -1;
    const auto* proxy = qobject_cast<const QSortFilterProxyModel*>(table->model());
    return proxy ? proxy->mapToSource(viewIndex).row() : viewIndex.row();
}

/// The source row of the selected row of a rowPickingTable(), or -1.
inline int selectedSourceRow(const QTableView* table)
{
    const auto rows = table->selectionModel()->selectedRows();
    return rows.isEmpty() ? -1 : sourceRow(table, rows.front());
}

/// Selects source row `row` of a rowPickingTable(), and only it, and scrolls it into view. Through the selection
/// model, not QTableView::selectRow: that one reads the keyboard's modifiers as a click would, so with Ctrl or Shift
/// held (or left held by a key event the window never saw released) it toggled or extended the selection instead.
inline void selectSourceRow(QTableView* table, QAbstractItemModel* source, int row)
{
    const auto* proxy = qobject_cast<const QSortFilterProxyModel*>(table->model());
    const QModelIndex index = proxy ? proxy->mapFromSource(source->index(row, 0)) : source->index(row, 0);
    table->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    table->scrollTo(index);
}

} // namespace pw::ui
