// SPDX-License-Identifier: MIT
// The history browser's list: every run of the history file, newest first, filtered by status and label text.
// Opening a run (double click, Enter or Open) asks the main window to show it in the run monitor. Several selected
// runs compare side by side (Compare: read and compared off the UI thread, shown in a RunCompareView below).
#pragma once

#include <QWidget>
#include <filesystem>
#include <string>
#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSplitter;
class QTableView;

namespace pw::ui {

class ElidedLabel;
class JobRunner;
class RunCompareView;
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
    /// The selected run's id (the first when several are), or empty.
    std::string selectedRun() const;
    /// Every selected run's id, in the list's order.
    std::vector<std::string> selectedRuns() const;
    /// Compares the selected runs (two or more) off the UI thread; the result lands in compareView().
    void compareSelected();
    /// Gives run `id` exactly `tags` (comma-separated in the Tags… dialog); false (and the reason shown) on error.
    bool setTags(const std::string& id, const std::vector<std::string>& tags);

    RunCompareView* compareView() const { return m_compare; }
    JobRunner* jobs() const { return m_jobs; }

    RunListModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    QLineEdit* filterEdit() const { return m_filter; }
    QComboBox* statusBox() const { return m_status; }
    QLineEdit* tagFilterEdit() const { return m_tagFilter; }
    /// The line under the list: how many runs, or why there are none (elided to its width, whole in its tooltip).
    ElidedLabel* summaryLabel() const { return m_summary; }

signals:
    void openRequested(const QString& runId);

private:
    void openSelected();
    void deleteSelected();
    void tagSelected();

    std::filesystem::path m_path;
    RunListModel* m_model = nullptr;
    QTableView* m_table = nullptr;
    QLineEdit* m_filter = nullptr;
    QLineEdit* m_tagFilter = nullptr;
    QComboBox* m_status = nullptr;
    ElidedLabel* m_summary = nullptr;
    QPushButton* m_open = nullptr;
    QPushButton* m_delete = nullptr;
    QPushButton* m_compareButton = nullptr;
    RunCompareView* m_compare = nullptr;
    QSplitter* m_split = nullptr;
    JobRunner* m_jobs = nullptr;
};

} // namespace pw::ui
