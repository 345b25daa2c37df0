// SPDX-License-Identifier: MIT
// The row-picking tables (ui/widgets/tables.h): a row selected by the program is selected alone, whatever keys the
// user holds. QTableView::selectRow read the keyboard's modifiers as a click would: with Ctrl held it toggled the row,
// with Shift it extended the selection from the last row. The app selects a run's row in History when the run ends,
// while the user may well be typing (and one UI test's Ctrl+Shift+Z left the modifiers held for the tests after it
// in the same process: the run monitor's test then found its run unselected).
#include <catch2/catch.hpp>

#include <QGuiApplication>
#include <QStandardItemModel>
#include <QTableView>
#include <QTest>
#include <QWidget>
#include <utility>

#include "ui/widgets/tables.h"

using namespace pw;

TEST_CASE("tables: a row selected by the program is selected alone, with Ctrl or Shift held", "[ui]")
{
    QStandardItemModel model(5, 1);
    for (int r = 0; r < 5; ++r)
        model.setItem(r, 0, new QStandardItem(QString::number(r)));
    QWidget parent;
    QTableView* table = ui::rowPickingTable(&model, &parent);
    table->setSelectionMode(QAbstractItemView::ExtendedSelection); // as History's, which compares several runs
    parent.show();

    ui::selectSourceRow(table, &model, 1);
    REQUIRE(ui::selectedSourceRow(table) == 1);
    for (const auto& [key, modifier] :
        {std::pair {Qt::Key_Control, Qt::ControlModifier}, std::pair {Qt::Key_Shift, Qt::ShiftModifier}}) {
        QTest::keyPress(table, key, modifier); // held while the program selects
        REQUIRE(QGuiApplication::keyboardModifiers() == modifier);
        ui::selectSourceRow(table, &model, 3);
        CHECK(table->selectionModel()->selectedRows().size() == 1);
        CHECK(ui::selectedSourceRow(table) == 3);
        ui::selectSourceRow(table, &model, 1);
        CHECK(table->selectionModel()->selectedRows().size() == 1);
        CHECK(ui::selectedSourceRow(table) == 1);
        QTest::keyRelease(table, key);
    }
}
