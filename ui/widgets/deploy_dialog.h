// SPDX-License-Identifier: MIT
// Plan ▸ Deploy: over SSH, a cluster file (its nodes' host, ssh_port, ssh_user, ssh_identity_file, env), pre-flight
// as a live checklist (every check of every node as it completes, off the UI thread, with the fix when it failed),
// an unknown host key shown with its fingerprint for the user to trust or refuse (trusted keys are recorded in
// known_hosts and the checks run again), and Deploy once every check passed. Or, as "Slurm", a batch job on the
// cluster's scheduler (app/run/slurm.h: partition, account, time, more sbatch options, the address the nodes reach
// this machine at), its check whether the partition holds the plan (sinfo, scontrol) run off the UI thread too.
#pragma once

#include <QDialog>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/run/preflight.h"
#include "app/run/remote.h"
#include "app/run/slurm.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTreeWidget;

namespace pw::ui {

class JobRunner;

class DeployDialog : public QDialog
{
    Q_OBJECT

public:
    explicit DeployDialog(QWidget* parent = nullptr);

    void setClusterFile(const QString& path);
    void setKnownHostsFile(const QString& path); ///< empty: agents::knownHostsFile(), shown as the placeholder
    /// The known_hosts file pre-flight and the deployment check host keys against and record trusted ones in: the
    /// one given, else the account's (agents::knownHostsFile()); the unknown-key question names it.
    std::filesystem::path knownHostsFile() const;
    void setRemoteRoot(const QString& path); ///< empty: ~/.cache/pipewright on each host
    void setAgentExecutable(const std::filesystem::path& path);
    /// The plan to deploy: pre-flight checks it against the cluster file and the engine first (check "plan").
    void setPlan(std::optional<planner::Plan> plan) { m_plan = std::move(plan); }
    /// Asks the user whether to trust an unknown host key (default: a message box showing its fingerprint).
    void setConfirmer(std::function<bool(const agents::HostKey&)> confirm);

    /// Runs pre-flight on the cluster file's nodes (off the UI thread); the checklist fills as checks complete.
    void check();
    bool allPassed() const;
    const std::vector<app::PreflightCheck>& checks() const { return m_checks; }
    /// How to deploy: the SSH settings used by the checks, the remote root.
    app::RemoteOptions remoteOptions() const;
    /// The cluster file's cluster (read by the last check).
    const planner::Cluster& cluster() const { return m_cluster; }
    int steps() const;

    /// SSH (a cluster file's nodes) or Slurm (a batch job): what Deploy launches with.
    void setSlurm(bool slurm);
    bool usesSlurm() const;
    /// The Slurm fields as the launcher takes them (extra sbatch options split at spaces).
    app::SlurmOptions slurmOptions() const;
    void setSlurmOptions(const app::SlurmOptions& options);

    JobRunner* jobs() const { return m_jobs; }
    QTreeWidget* checklist() const { return m_list; }
    QLabel* summary() const { return m_summary; }
    QPushButton* deployButton() const { return m_deploy; }

signals:
    /// Deploy was pressed with every check passed.
    void deployRequested();

private:
    void addCheck(const app::PreflightCheck& c);
    void checked(std::vector<app::PreflightCheck> checks);

    /// Pre-flight for Slurm: whether the partition holds the plan, a checklist row per line.
    void checkSlurm();

    QComboBox* m_launcher = nullptr;
    QWidget* m_sshFields = nullptr;
    QWidget* m_slurmFields = nullptr;
    QLineEdit* m_partition = nullptr;
    QLineEdit* m_account = nullptr;
    QLineEdit* m_time = nullptr;
    QLineEdit* m_sbatchArgs = nullptr;
    QLineEdit* m_controllerAddress = nullptr;
    QLineEdit* m_clusterFile = nullptr;
    QLineEdit* m_knownHosts = nullptr;
    QLineEdit* m_remoteRoot = nullptr;
    QSpinBox* m_steps = nullptr;
    QTreeWidget* m_list = nullptr;
    QLabel* m_summary = nullptr;
    QPushButton* m_check = nullptr;
    QPushButton* m_deploy = nullptr;
    JobRunner* m_jobs = nullptr;
    std::filesystem::path m_agent;
    std::function<bool(const agents::HostKey&)> m_confirm;
    std::set<std::string> m_trusted; ///< fingerprints the user trusted: recorded by the next check
    std::vector<app::PreflightCheck> m_checks;
    planner::Cluster m_cluster;
    std::optional<planner::Plan> m_plan;
};

} // namespace pw::ui
