// SPDX-License-Identifier: MIT
#include "deploy_dialog.h"

#include <QComboBox>
#include <QCoreApplication>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPointer>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "app/launch/ssh.h"
#include "app/run/controller.h"
#include "planner/io/json_file.h"
#include "ui/jobs/job_runner.h"

namespace pw::ui {

DeployDialog::DeployDialog(QWidget* parent)
    : QDialog(parent)
    , m_jobs(new JobRunner(QStringLiteral("pre-flight"), this))
    , m_agent(app::defaultAgentExecutable(QCoreApplication::applicationFilePath().toStdString()))
{
    setWindowTitle(tr("Deploy over SSH"));
    m_clusterFile = new QLineEdit(this);
    m_clusterFile->setPlaceholderText(tr("cluster JSON with each node's host, ssh_port, ssh_user"));
    auto* browse = new QPushButton(tr("Browse…"), this);
    auto* fileRow = new QHBoxLayout;
    fileRow->addWidget(m_clusterFile, 1);
    fileRow->addWidget(browse);
    m_knownHosts = new QLineEdit(this);
    // The file SSH sessions check and record keys in when this is left empty: the path libssh is given, shown whole.
    const QString defaultKnownHosts = QString::fromStdString(agents::knownHostsFile().string());
    m_knownHosts->setPlaceholderText(defaultKnownHosts);
    m_knownHosts->setToolTip(tr("The known_hosts file host keys are checked against and trusted keys are recorded "
                                "in. Empty: %1 (the account's home directory, as ssh takes it)")
                                 .arg(defaultKnownHosts));
    m_remoteRoot = new QLineEdit(this);
    m_remoteRoot->setPlaceholderText(tr("~/.cache/pipewright on each host"));
    m_steps = new QSpinBox(this);
    m_steps->setRange(1, 10'000'000);
    m_steps->setValue(50);
    m_launcher = new QComboBox(this);
    m_launcher->addItem(tr("SSH to the cluster file's nodes"));
    m_launcher->addItem(tr("Slurm batch job"));
    m_sshFields = new QWidget(this);
    auto* sshForm = new QFormLayout(m_sshFields);
    sshForm->setContentsMargins(0, 0, 0, 0);
    sshForm->addRow(tr("Cluster file:"), fileRow);
    sshForm->addRow(tr("known_hosts:"), m_knownHosts);
    sshForm->addRow(tr("Remote root:"), m_remoteRoot);
    m_slurmFields = new QWidget(this);
    auto* slurmForm = new QFormLayout(m_slurmFields);
    slurmForm->setContentsMargins(0, 0, 0, 0);
    m_partition = new QLineEdit(this);
    m_partition->setPlaceholderText(tr("Slurm's default partition"));
    m_account = new QLineEdit(this);
    m_account->setPlaceholderText(tr("your default account"));
    m_time = new QLineEdit(this);
    m_time->setPlaceholderText(tr("the partition's default (as sbatch --time takes it: 30, 2:00:00, 1-0)"));
    m_sbatchArgs = new QLineEdit(this);
    m_sbatchArgs->setPlaceholderText(tr("more sbatch options, separated by spaces (--qos=high --exclusive)"));
    m_controllerAddress = new QLineEdit(this);
    m_controllerAddress->setPlaceholderText(tr("this machine's hostname"));
    m_controllerAddress->setToolTip(tr("The address the compute nodes reach this machine at: the agents connect "
                                       "back to it."));
    slurmForm->addRow(tr("Partition:"), m_partition);
    slurmForm->addRow(tr("Account:"), m_account);
    slurmForm->addRow(tr("Time limit:"), m_time);
    slurmForm->addRow(tr("sbatch options:"), m_sbatchArgs);
    slurmForm->addRow(tr("Controller address:"), m_controllerAddress);
    m_slurmFields->setVisible(false);
    auto* form = new QFormLayout;
    form->addRow(tr("Launch with:"), m_launcher);
    form->addRow(m_sshFields);
    form->addRow(m_slurmFields);
    form->addRow(tr("Steps:"), m_steps);
    m_list = new QTreeWidget(this);
    m_list->setColumnCount(4);
    m_list->setHeaderLabels({tr("node"), tr("check"), tr("result"), tr("found / fix")});
    m_list->setRootIsDecorated(false);
    m_list->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_list->header()->setStretchLastSection(true);
    m_list->setWordWrap(true);
    m_summary = new QLabel(tr("Pre-flight checks every node before anything starts."), this);
    m_summary->setWordWrap(true);
    m_check = new QPushButton(tr("Check"), this);
    m_deploy = new QPushButton(tr("Deploy"), this);
    m_deploy->setEnabled(false);
    auto* buttons = new QDialogButtonBox(this);
    buttons->addButton(m_check, QDialogButtonBox::ActionRole);
    buttons->addButton(m_deploy, QDialogButtonBox::AcceptRole);
    buttons->addButton(QDialogButtonBox::Cancel);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_list, 1);
    layout->addWidget(m_summary);
    layout->addWidget(buttons);
    resize(900, 560);

    m_confirm = [this](const agents::HostKey& key) {
        return QMessageBox::question(this, tr("Unknown host key"),
                   tr("%1 is not in %4. It offers this %2 key:\n\n%3\n\nTrust it only if its administrator "
                      "confirms this fingerprint. Trust it and record it in %4?")
                       .arg(QString::fromStdString(key.host), QString::fromStdString(key.type),
                           QString::fromStdString(key.fingerprint),
                           QString::fromStdString(key.known_hosts_file.string())))
            == QMessageBox::Yes;
    };
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Cluster file"), QString(), tr("JSON (*.json)"));
        if (!path.isEmpty())
            setClusterFile(path);
    });
    connect(m_launcher, &QComboBox::currentIndexChanged, this, [this](int index) {
        m_sshFields->setVisible(index == 0);
        m_slurmFields->setVisible(index == 1);
        setWindowTitle(index == 0 ? tr("Deploy over SSH") : tr("Deploy with Slurm"));
        // The other launcher's checks say nothing of this one.
        m_list->clear();
        m_checks.clear();
        m_deploy->setEnabled(false);
        m_summary->setText(index == 0 ? tr("Pre-flight checks every node before anything starts.")
                                      : tr("Pre-flight checks that the partition holds the plan before anything is "
                                           "submitted."));
    });
    connect(m_check, &QPushButton::clicked, this, &DeployDialog::check);
    connect(m_deploy, &QPushButton::clicked, this, [this] {
        if (allPassed()) {
            emit deployRequested();
            accept();
        }
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_jobs, &JobRunner::failed, this, [this](const QString& message) {
        // The runner names its job ("pre-flight: why"): said once.
        QString why = message;
        if (const QString named = QStringLiteral("pre-flight: "); why.startsWith(named))
            why.remove(0, named.size());
        m_summary->setText(tr("Pre-flight could not run: %1").arg(why));
        m_check->setEnabled(true);
    });
}

void DeployDialog::setClusterFile(const QString& path)
{
    m_clusterFile->setText(path);
}

void DeployDialog::setKnownHostsFile(const QString& path)
{
    m_knownHosts->setText(path);
}

void DeployDialog::setRemoteRoot(const QString& path)
{
    m_remoteRoot->setText(path);
}

void DeployDialog::setAgentExecutable(const std::filesystem::path& path)
{
    m_agent = path;
}

void DeployDialog::setConfirmer(std::function<bool(const agents::HostKey&)> confirm)
{
    m_confirm = std::move(confirm);
}

int DeployDialog::steps() const
{
    return m_steps->value();
}

void DeployDialog::setSlurm(bool slurm)
{
    m_launcher->setCurrentIndex(slurm ? 1 : 0);
}

bool DeployDialog::usesSlurm() const
{
    return m_launcher->currentIndex() == 1;
}

app::SlurmOptions DeployDialog::slurmOptions() const
{
    app::SlurmOptions o;
    o.partition = m_partition->text().trimmed().toStdString();
    o.account = m_account->text().trimmed().toStdString();
    o.time = m_time->text().trimmed().toStdString();
    for (const QString& word : m_sbatchArgs->text().split(QLatin1Char(' '), Qt::SkipEmptyParts))
        o.sbatch_args.push_back(word.toStdString());
    o.controller_address = m_controllerAddress->text().trimmed().toStdString();
    return o;
}

void DeployDialog::setSlurmOptions(const app::SlurmOptions& o)
{
    m_partition->setText(QString::fromStdString(o.partition));
    m_account->setText(QString::fromStdString(o.account));
    m_time->setText(QString::fromStdString(o.time));
    QStringList words;
    for (const auto& a : o.sbatch_args)
        words << QString::fromStdString(a);
    m_sbatchArgs->setText(words.join(QLatin1Char(' ')));
    m_controllerAddress->setText(QString::fromStdString(o.controller_address));
}

void DeployDialog::checkSlurm()
{
    if (!m_plan) {
        m_summary->setText(tr("There is no plan to check against the partition."));
        m_check->setEnabled(true);
        return;
    }
    // sinfo and scontrol may take a while on a busy cluster: off the UI thread, as the SSH checks.
    m_jobs->submit(
        [plan = *m_plan, options = slurmOptions()](std::stop_token) { return app::checkSlurmFit(plan, options); },
        [this](app::SlurmFit fit) {
            std::vector<app::PreflightCheck> checks;
            for (const auto& line : fit.lines)
                checks.push_back({"slurm", fit.partition, "partition", true, line, "", std::nullopt});
            if (!fit.refusal.empty())
                checks.push_back({"slurm", fit.partition, "plan fits", false, fit.refusal,
                    "choose another partition, or a plan made for this one", std::nullopt});
            for (const auto& c : checks)
                addCheck(c);
            checked(std::move(checks));
        });
}

std::filesystem::path DeployDialog::knownHostsFile() const
{
    return agents::knownHostsFile(m_knownHosts->text().trimmed().toStdString());
}

app::RemoteOptions DeployDialog::remoteOptions() const
{
    app::RemoteOptions o;
    // Empty: the sessions resolve it with the same agents::knownHostsFile() the dialog shows (and read the
    // system-wide file too).
    o.ssh.known_hosts = m_knownHosts->text().trimmed().toStdString();
    o.remote_root = m_remoteRoot->text().toStdString();
    return o;
}

bool DeployDialog::allPassed() const
{
    return !m_checks.empty() && std::all_of(m_checks.begin(), m_checks.end(), [](const auto& c) { return c.ok; });
}

void DeployDialog::addCheck(const app::PreflightCheck& c)
{
    auto* item = new QTreeWidgetItem(m_list);
    item->setText(0, QString::fromStdString(c.node));
    item->setText(1, QString::fromStdString(c.check));
    item->setText(2, c.ok ? tr("ok") : tr("FAILED"));
    item->setForeground(2, c.ok ? QColor(0x1b, 0x7f, 0x3b) : QColor(0xb0, 0x20, 0x20));
    item->setText(3, QString::fromStdString(c.detail + (c.fix.empty() ? "" : "\nfix: " + c.fix)));
    item->setToolTip(3, item->text(3));
}

void DeployDialog::check()
{
    m_list->clear();
    m_checks.clear();
    m_deploy->setEnabled(false);
    m_check->setEnabled(false);
    m_summary->setText(tr("Checking…"));
    if (usesSlurm()) {
        checkSlurm();
        return;
    }
    const std::string clusterFile = m_clusterFile->text().toStdString();
    app::PreflightOptions options;
    options.ssh = remoteOptions().ssh;
    options.remote_root = m_remoteRoot->text().toStdString();
    options.agent_executable = m_agent;
    const auto trusted = m_trusted;
    options.ssh.confirm_new_host_key
        = [trusted](const agents::HostKey& key) { return trusted.count(key.fingerprint) > 0; };
    QPointer<DeployDialog> self(this);
    m_jobs->submit(
        [clusterFile, options, self, plan = m_plan](std::stop_token) {
            const planner::Cluster cluster = planner::loadCluster(clusterFile);
            auto checks
                = app::preflight(cluster, plan ? &*plan : nullptr, options, [self](const app::PreflightCheck& c) {
                      QMetaObject::invokeMethod(
                          self,
                          [self, c] {
                              if (self)
                                  self->addCheck(c);
                          },
                          Qt::QueuedConnection); // live checklist
                  });
            return std::make_pair(cluster, std::move(checks));
        },
        [this](std::pair<planner::Cluster, std::vector<app::PreflightCheck>> result) {
            m_cluster = std::move(result.first);
            checked(std::move(result.second));
        });
}

void DeployDialog::checked(std::vector<app::PreflightCheck> checks)
{
    m_checks = std::move(checks);
    m_check->setEnabled(true);
    // Unknown host keys: the user judges each by its fingerprint; trusted ones are recorded by a second check.
    bool newlyTrusted = false;
    for (const auto& c : m_checks)
        if (c.check == "host key" && !c.ok && c.host_key && c.host_key->known_fingerprint.empty()
            && !m_trusted.count(c.host_key->fingerprint) && m_confirm && m_confirm(*c.host_key)) {
            m_trusted.insert(c.host_key->fingerprint);
            newlyTrusted = true;
        }
    if (newlyTrusted) {
        m_summary->setText(tr("Recording the trusted host keys and checking again…"));
        QTimer::singleShot(0, this, &DeployDialog::check); // after this delivery has settled
        return;
    }
    const auto passed = std::count_if(m_checks.begin(), m_checks.end(), [](const auto& c) { return c.ok; });
    m_summary->setText(allPassed()
            ? tr("All %1 checks passed: ready to deploy.").arg(m_checks.size())
            : tr("%1 of %2 checks passed: fix the failed ones and check again.").arg(passed).arg(m_checks.size()));
    m_deploy->setEnabled(allPassed());
}

} // namespace pw::ui
