// SPDX-License-Identifier: MIT
// The deploy dialog against two real sshd hosts (offscreen; needs root like every SSH test): pre-flight fills the
// checklist off the UI thread; each unknown host key is put to the user with its fingerprint; refused, the checks
// fail and Deploy stays off; trusted, the keys are recorded in known_hosts, the checks run again and pass, and Deploy
// is offered.
#include <catch2/catch.hpp>

#ifdef PW_AGENT_EXE

#include <QApplication>
#include <QCoreApplication>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QTreeWidget>
#include <fstream>

#include <pwd.h>
#include <unistd.h>

#include "planner/device_presets.h"
#include "planner/io/json_file.h"
#include "tests/ssh/sshd_fixture.h"
#include "ui/document/run_session.h"
#include "ui/jobs/job_runner.h"
#include "ui/widgets/deploy_dialog.h"
#include "ui/widgets/main_window.h"
#include "ui/widgets/run_monitor.h"

using namespace pw;

namespace {

/// A cluster of one CPU device on each of the two sshd hosts, reached with their user keys.
planner::Cluster twoHosts(const test::Sshd& a, const test::Sshd& b)
{
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("cpu")};
    for (const test::Sshd* s : {&a, &b}) {
        planner::Node n {
            "node-" + std::to_string(s->port), "127.0.0.1", s->port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
        n.ssh_identity_file = s->user_key.string();
        cluster.nodes.push_back(n);
    }
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    return cluster;
}

/// Runs the dialog's checks (and the second round a trusted key starts) to the end.
void settle(ui::DeployDialog& d)
{
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    int idleTurns = 0;
    while (idleTurns < 3 && std::chrono::steady_clock::now() < deadline) {
        d.jobs()->waitForIdle(1000);
        QCoreApplication::processEvents(); // a second round is started from the event loop
        idleTurns = d.jobs()->busy() ? 0 : idleTurns + 1;
    }
    REQUIRE_FALSE(d.jobs()->busy());
}

} // namespace

TEST_CASE("deploy dialog: pre-flight checklist, host keys put to the user, Deploy once everything passed", "[ui][ssh]")
{
    test::Sshd a, b;
    QTemporaryDir dir;
    planner::Cluster cluster = twoHosts(a, b);
    const QString clusterFile = dir.filePath(QStringLiteral("cluster.json"));
    std::ofstream(clusterFile.toStdString()) << planner::toJson(cluster).dump(2);
    const QString knownHosts = dir.filePath(QStringLiteral("known_hosts"));

    ui::DeployDialog d;
    d.setClusterFile(clusterFile);
    d.setKnownHostsFile(knownHosts);
    d.setRemoteRoot(dir.filePath(QStringLiteral("remote")));
    d.setAgentExecutable(PW_AGENT_EXE);
    std::vector<std::string> asked;
    bool trust = false;
    d.setConfirmer([&](const agents::HostKey& key) {
        asked.push_back(key.fingerprint);
        CHECK(key.known_hosts_file == knownHosts.toStdString()); // the file the key would be recorded in
        return trust;
    });
    d.show();
    CHECK(d.knownHostsFile() == knownHosts.toStdString());

    SECTION("refused keys: the host key checks fail and Deploy stays off")
    {
        d.check();
        settle(d);
        CHECK(asked.size() == 2);
        CHECK_FALSE(d.allPassed());
        CHECK_FALSE(d.deployButton()->isEnabled());
        int failedKeys = 0;
        for (const auto& c : d.checks())
            failedKeys += c.check == "host key" && !c.ok ? 1 : 0;
        CHECK(failedKeys == 2);
        CHECK(d.checklist()->topLevelItemCount() == static_cast<int>(d.checks().size()));
        CHECK(test::slurpFile(knownHosts.toStdString()).empty());
    }
    SECTION("trusted keys: recorded, checked again, every check passes")
    {
        trust = true;
        d.check();
        settle(d);
        for (const auto& c : d.checks())
            UNSCOPED_INFO(c.node << " " << c.check << " " << c.ok << " " << c.detail);
        REQUIRE(asked.size() == 2);
        CHECK(std::find(asked.begin(), asked.end(), a.fingerprint()) != asked.end());
        CHECK(std::find(asked.begin(), asked.end(), b.fingerprint()) != asked.end());
        for (const auto& c : d.checks())
            UNSCOPED_INFO(c.node << " " << c.check << " " << c.ok << " " << c.detail);
        CHECK(d.allPassed());
        CHECK(d.deployButton()->isEnabled());
        const auto known = test::slurpFile(knownHosts.toStdString());
        CHECK(known.find("[127.0.0.1]:" + std::to_string(a.port)) != std::string::npos);
        CHECK(known.find("[127.0.0.1]:" + std::to_string(b.port)) != std::string::npos);
        // The live checklist shows every check, each reaching the other node included.
        CHECK(d.checklist()->topLevelItemCount() == static_cast<int>(d.checks().size()));
        CHECK(d.checks().size() == 2 * 6 + 2);
        CHECK(d.cluster().nodes.size() == 2);
        CHECK(d.remoteOptions().ssh.known_hosts == knownHosts.toStdString());
    }
}

TEST_CASE(
    "deploy from the app: the current plan trains on the cluster file's hosts and fills the run monitor", "[ui][ssh]")
{
    test::Sshd a, b;
    QTemporaryDir dir;
    ui::MainWindow window;
    REQUIRE(window.openProject(QStringLiteral(PW_DEMO_DIR "/gpt2-tiny-local.pwproj")));
    window.setHistoryPath((dir.path() + QStringLiteral("/history.sqlite")).toStdString());
    window.resize(1400, 900);
    window.show();
    REQUIRE(window.waitUntilIdle());
    planner::Cluster cluster = twoHosts(a, b);
    const auto knownHosts = dir.filePath(QStringLiteral("known_hosts")).toStdString();
    std::ofstream(knownHosts) << a.knownHostsLine() << "\n" << b.knownHostsLine() << "\n";
    app::RunRequest settings;
    settings.training.steps = 4;
    settings.training.lr = 1e-3;
    settings.threads = 1;
    settings.agent_executable = PW_AGENT_EXE;
    app::RemoteOptions remote;
    remote.ssh.known_hosts = knownHosts;
    remote.remote_root = dir.filePath(QStringLiteral("remote")).toStdString();
    settings.remote = remote;
    REQUIRE(window.runLocally(settings, &cluster));
    auto* session = window.runSession();
    REQUIRE(session->waitForFinished());
    INFO(session->outcome().message);
    REQUIRE(session->outcome().status == app::RunStatus::Succeeded);
    CHECK(session->outcome().losses.size() == 4);
    auto* agents = window.runMonitor()->agentTable();
    REQUIRE(agents->rowCount() == 2);
    for (int r = 0; r < 2; ++r)
        CHECK(agents->item(r, 4)->text() == QStringLiteral("done"));
    // A cluster of another size is refused before anything starts.
    cluster.nodes.erase(cluster.nodes.end() - 1);
    CHECK_FALSE(window.runLocally(settings, &cluster));
}

TEST_CASE("deploy dialog: pre-flight checks the plan against the cluster file and the engine, not only the hosts",
    "[ui][deploy]")
{
    QTemporaryDir dir;
    // One node on a port nothing listens on: the host checks fail fast; the plan is what this test is about.
    planner::Cluster one;
    one.device_types = {*planner::devicePreset("cpu")};
    one.nodes.push_back({"solo", "127.0.0.1", 1, test::currentUser(), "cpu", 1, 1e10, 1e-6});
    const auto clusterFile = dir.filePath(QStringLiteral("one.json"));
    std::ofstream(clusterFile.toStdString()) << planner::toJson(one).dump(2);
    const auto plan = planner::loadPlan(PW_DEMO_DIR "/gpt2-tiny-local.plan.json"); // two devices
    ui::DeployDialog d;
    d.setClusterFile(clusterFile);
    d.setKnownHostsFile(dir.filePath(QStringLiteral("known_hosts")));
    d.setAgentExecutable(PW_AGENT_EXE);
    d.setPlan(plan);
    d.check();
    settle(d);
    REQUIRE_FALSE(d.checks().empty());
    const auto& first = d.checks().front();
    CHECK(first.check == "plan");
    CHECK_FALSE(first.ok);
    CHECK_THAT(first.detail, Catch::Contains("the plan is for 2 devices, the cluster has 1"));
    CHECK_THAT(first.fix, Catch::Contains("deploy a plan made for this cluster"));
    CHECK_FALSE(d.deployButton()->isEnabled());
    REQUIRE(d.checklist()->topLevelItemCount() >= 1);
    CHECK(d.checklist()->topLevelItem(0)->text(2) == QStringLiteral("FAILED"));

    // A plan of the cluster's size that the engine would not train as planned (bf16 weights).
    auto bf16 = planner::loadPlan(PW_DEMO_DIR "/gpt2-tiny-local.plan.json");
    one.nodes[0].count = 2;
    std::ofstream(clusterFile.toStdString(), std::ios::trunc) << planner::toJson(one).dump(2);
    auto model = *bf16.model;
    model.architecture->bytes_per_element = 2; // `profile transformer`'s default
    bf16.model = model;
    d.setPlan(bf16);
    d.check();
    settle(d);
    REQUIRE_FALSE(d.checks().empty());
    CHECK(d.checks().front().check == "plan");
    CHECK_FALSE(d.checks().front().ok);
    CHECK_THAT(d.checks().front().detail,
        Catch::Contains("/model/architecture/bytes_per_element") && Catch::Contains("fp32 only"));

    // The plan as it is: its check passes (the unreachable host still fails the deployment).
    d.setPlan(planner::loadPlan(PW_DEMO_DIR "/gpt2-tiny-local.plan.json"));
    d.check();
    settle(d);
    REQUIRE_FALSE(d.checks().empty());
    CHECK(d.checks().front().check == "plan");
    CHECK(d.checks().front().ok);
    CHECK_FALSE(d.allPassed());
    // Every row names its node, the unreachable host's too (issue 30 item 18: the column was blank there).
    for (int i = 1; i < d.checklist()->topLevelItemCount(); ++i) {
        INFO(d.checklist()->topLevelItem(i)->text(1).toStdString());
        CHECK(d.checklist()->topLevelItem(i)->text(0) == QStringLiteral("solo"));
    }

    // A cluster file that is not there: said once, without the job's name twice ("pre-flight: pre-flight: ").
    d.setClusterFile(dir.filePath(QStringLiteral("missing.json")));
    d.check();
    settle(d);
    const QString summary = d.summary()->text();
    INFO(summary.toStdString());
    CHECK(summary.startsWith(QStringLiteral("Pre-flight could not run: ")));
    CHECK(summary.contains(QStringLiteral("missing.json")));
    CHECK_FALSE(summary.contains(QStringLiteral("pre-flight:")));
}

TEST_CASE("deploy dialog: the known_hosts file shown is the one keys are checked against and recorded in", "[ui][ssh]")
{
    // The default: the account's file as libssh and OpenSSH take it (the password database), whatever $HOME says.
    const std::string savedHome = std::getenv("HOME") ? std::getenv("HOME") : "";
    setenv("HOME", "/nonexistent-home-for-the-test", 1);
    {
        ui::DeployDialog d;
        const passwd* entry = getpwuid(getuid());
        REQUIRE(entry);
        const std::string account = (std::filesystem::path(entry->pw_dir) / ".ssh" / "known_hosts").string();
        CHECK(d.knownHostsFile() == account);
        QLineEdit* field = nullptr;
        for (auto* e : d.findChildren<QLineEdit*>())
            if (e->placeholderText().contains(QStringLiteral("known_hosts")))
                field = e;
        REQUIRE(field);
        CHECK(field->placeholderText() == QString::fromStdString(account));
        CHECK(field->toolTip().contains(QString::fromStdString(account)));
        CHECK_FALSE(field->placeholderText().contains(QStringLiteral("nonexistent-home")));
    }
    setenv("HOME", savedHome.c_str(), 1);

    // An unknown key, asked with the dialog's own question: it names the file the key would be recorded in.
    test::Sshd a, b;
    QTemporaryDir dir;
    const QString clusterFile = dir.filePath(QStringLiteral("cluster.json"));
    std::ofstream(clusterFile.toStdString()) << planner::toJson(twoHosts(a, b)).dump(2);
    const QString knownHosts = dir.filePath(QStringLiteral("known_hosts"));
    ui::DeployDialog d;
    d.setClusterFile(clusterFile);
    d.setKnownHostsFile(knownHosts);
    d.setRemoteRoot(dir.filePath(QStringLiteral("remote")));
    d.setAgentExecutable(PW_AGENT_EXE);
    d.show();
    QStringList questions;
    QTimer answer; // refuses every key the dialog asks about, keeping the question's text
    answer.setInterval(20);
    QObject::connect(&answer, &QTimer::timeout, [&] {
        for (QWidget* w : QApplication::topLevelWidgets())
            if (auto* box = qobject_cast<QMessageBox*>(w); box && box->isVisible()) {
                questions << box->text();
                box->button(QMessageBox::No)->click();
            }
    });
    answer.start();
    d.check();
    settle(d);
    answer.stop();
    REQUIRE(questions.size() == 2);
    for (const QString& q : questions) {
        CHECK(q.contains(QStringLiteral("is not in ") + knownHosts));
        CHECK(q.contains(QStringLiteral("record it in ") + knownHosts));
    }
    CHECK(test::slurpFile(knownHosts.toStdString()).empty());
}

#endif
