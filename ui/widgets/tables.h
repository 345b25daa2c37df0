// SPDX-License-Identifier: MIT
// How the app's result tables look and select: one place for the partition panel's and the scenarios' tables.
#pragma once

#include <QAbstractItemModel>
#include <QHeaderView>
#include <QTableView>

namespace pw::ui {

/// A table of `model` whose rows are picked one at a time: no row numbers, columns sized to their contents, the
/// last one taking the rest, one line per row.
inline QTableView* rowPickingTable(QAbstractItemModel* model, QWidget* parent)
{
    auto* table = new QTableView(parent);
    table->setModel(model);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setSelectionMode(QAbstractItemView::SingleSelection);
    table->verticalHeader()->hide();
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table->horizontalHeader()->setStretchLastSection(true);
    table->setWordWrap(false);
    return table;
}

} // namespace pw::ui
