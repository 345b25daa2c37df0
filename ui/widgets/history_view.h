// SPDX-License-Identifier: MIT
// The history browser's list: every run of the history file, newest first, filtered by status and label text.
// Opening a run (double click, Enter or Open) asks the main window to show it in the run monitor.
#pragma once

#include <QWidget>
#include <filesystem>

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableView;

namespace pw::ui {

class RunListModel;

class HistoryView : public QWidget
{
    Q_OBJECT

public:
    explicit HistoryView(QWidget* parent = nullptr);

    /// The history file to list (read when the view is shown or refreshed; a missing file is not created).
    void setHistoryPath(std::filesystem::path path);
    const std::filesystem::path& historyPath() const { return m_path; }
    /// Reads the runs again (quick: the runs table only; timelines are read when a run is opened).
    void refresh();
    /// Selects run `id` when listed.
    void select(const std::string& id);
    /// The selected run's id, or empty.
    std::string selectedRun() const;

    RunListModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    QLineEdit* filterEdit() const { return m_filter; }
    QComboBox* statusBox() const { return m_status; }

signals:
    void openRequested(const QString& runId);

private:
    void openSelected();
    void deleteSelected();

    std::filesystem::path m_path;
    RunListModel* m_model = nullptr;
    QTableView* m_table = nullptr;
    QLineEdit* m_filter = nullptr;
    QComboBox* m_status = nullptr;
    QLabel* m_summary = nullptr;
    QPushButton* m_open = nullptr;
    QPushButton* m_delete = nullptr;
};

} // namespace pw::ui
