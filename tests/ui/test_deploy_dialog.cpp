// SPDX-License-Identifier: MIT
// The deploy dialog against two real sshd hosts (offscreen; needs root like every SSH test): pre-flight fills the
// checklist off the UI thread; each unknown host key is put to the user with its fingerprint; refused, the checks
// fail and Deploy stays off; trusted, the keys are recorded in known_hosts, the checks run again and pass, and Deploy
// is offered.
#include <catch2/catch.hpp>

#ifdef PW_AGENT_EXE

#include <QCoreApplication>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTreeWidget>

#include "planner/device_presets.h"
#include "tests/ssh/sshd_fixture.h"
#include "ui/jobs/job_runner.h"
#include "ui/widgets/deploy_dialog.h"

using namespace pw;

namespace {

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
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("cpu")};
    for (const test::Sshd* s : {&a, &b}) {
        planner::Node n {
            "node-" + std::to_string(s->port), "127.0.0.1", s->port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
        n.ssh_identity_file = s->user_key.string();
        cluster.nodes.push_back(n);
    }
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
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
        return trust;
    });
    d.show();

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

#endif
