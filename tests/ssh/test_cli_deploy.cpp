// SPDX-License-Identifier: MIT
// pipewright-cli run --cluster as a user runs it, against two real sshd hosts: an unknown host key stops the run
// with the fingerprint and the way to trust it; --accept-new-host-keys records it and the run gives the losses of
// the same plan run --local.
#include <catch2/catch.hpp>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/history/history.h"
#include "app/launch/ssh.h"
#include "planner/io/json_file.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/ssh/sshd_fixture.h"

using namespace pw;
using Catch::Contains;

namespace {

struct CliResult
{
    int code = -1;
    std::string out, err;
};

CliResult cli(const test::TempDir& dir, const std::vector<std::string>& args)
{
    std::string command = "PIPEWRIGHT_AGENT=" + agents::shellQuote(PW_AGENT_EXE) + " " + agents::shellQuote(PW_CLI_EXE);
    for (const auto& a : args)
        command += " " + agents::shellQuote(a);
    const auto errFile = dir.path / "stderr.txt";
    command += " 2>" + agents::shellQuote(errFile.string());
    CliResult r;
    FILE* p = ::popen(command.c_str(), "r");
    char buffer[4096];
    for (std::size_t n; p && (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;)
        r.out.append(buffer, n);
    const int status = p ? ::pclose(p) : -1;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = test::slurpFile(errFile);
    return r;
}

} // namespace

TEST_CASE("cli: run --cluster refuses an unknown host key, then with --accept-new-host-keys trains like --local",
    "[ssh][cli]")
{
    test::Sshd a, b;
    test::TempDir dir;
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("cpu")};
    for (const test::Sshd* s : {&a, &b}) {
        planner::Node n {
            "node" + std::to_string(s->port), "127.0.0.1", s->port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
        n.ssh_identity_file = s->user_key.string();
        n.env = {{"PW_TEST_NODE", n.name}};
        n.env_keep = {"PW_TEST_NODE"}; // not a secret: the cluster file written below keeps it
        cluster.nodes.push_back(n);
    }
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 4);
    plan.cluster = cluster;
    plan.validate();
    const auto planFile = dir.path / "plan.json";
    const auto clusterFile = dir.path / "cluster.json";
    std::ofstream(planFile) << planner::toJson(plan).dump(2);
    std::ofstream(clusterFile) << planner::toJson(cluster).dump(2);
    const auto knownHosts = dir.path / "known_hosts";
    const auto history = (dir.path / "history.sqlite").string();
    const std::vector<std::string> common {
        "--steps", "4", "--threads", "1", "--lr", "0.01", "--history", history, "--json"};

    auto args = std::vector<std::string> {
        "run", planFile.string(), "--cluster", clusterFile.string(), "--known-hosts", knownHosts.string()};
    args.insert(args.end(), common.begin(), common.end());
    const auto refused = cli(dir, args);
    INFO(refused.err);
    CHECK(refused.code != 0);
    CHECK_THAT(refused.err + refused.out, Contains(a.fingerprint()) && Contains("--accept-new-host-keys"));

    args.push_back("--accept-new-host-keys");
    const auto remote = cli(dir, args);
    INFO(remote.err);
    REQUIRE(remote.code == 0);
    const auto r = nlohmann::json::parse(remote.out);
    CHECK(r.at("status") == "succeeded");
    CHECK_THAT(test::slurpFile(knownHosts), Contains("[127.0.0.1]:" + std::to_string(a.port)));
    CHECK_THAT(remote.err, Contains("no agent process of the run is left"));
    // Where each agent landed (the controller's info lines about agents: its hello, a reconnect and resume).
    CHECK_THAT(remote.err, Contains("agent 0 on ") && Contains("agent 1 on "));

    auto localArgs = std::vector<std::string> {"run", planFile.string(), "--local"};
    localArgs.insert(localArgs.end(), common.begin(), common.end());
    const auto local = cli(dir, localArgs);
    REQUIRE(local.code == 0);
    const auto l = nlohmann::json::parse(local.out);
    REQUIRE(l.at("losses").size() == r.at("losses").size());
    for (std::size_t i = 0; i < l.at("losses").size(); ++i)
        CHECK(r.at("losses")[i].get<double>() == Approx(l.at("losses")[i].get<double>()).epsilon(1e-5));

    // A cluster file whose env value was redacted when written (a secret) is refused before anything connects,
    // naming the file and the variable, and nothing is recorded.
    auto withSecret = cluster;
    withSecret.nodes[1].env["PW_TEST_TOKEN"] = "never-written";
    const auto redactedFile = dir.path / "redacted.json";
    std::ofstream(redactedFile) << planner::toJson(withSecret).dump(2);
    CHECK(test::slurpFile(redactedFile).find("never-written") == std::string::npos);
    auto redactedArgs = args;
    redactedArgs[3] = redactedFile.string();
    const auto runsBefore = app::HistoryStore::open(history).listRuns().size();
    const auto redacted = cli(dir, redactedArgs);
    CHECK(redacted.code == 1);
    CHECK_THAT(redacted.err, Contains("redacted.json") && Contains("/nodes/1/env/PW_TEST_TOKEN"));
    CHECK(app::HistoryStore::open(history).listRuns().size() == runsBefore);

    // Deploying to a cluster of another size is refused before anything connects.
    cluster.nodes.erase(cluster.nodes.end() - 1);
    std::ofstream(clusterFile) << planner::toJson(cluster).dump(2);
    const auto mismatch = cli(dir, args);
    CHECK(mismatch.code != 0);
    CHECK_THAT(mismatch.err, Contains("cluster.json") && Contains("devices"));
}
