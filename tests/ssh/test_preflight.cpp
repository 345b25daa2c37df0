// SPDX-License-Identifier: MIT
// Pre-flight against real sshd hosts: two good nodes pass every check (and reach each other); a node with an
// unknown host key, and one on a port nobody listens on, fail with the host, the cause and the fix, and get no
// further checks; the CLI prints the checklist and exits non-zero.
#include <catch2/catch.hpp>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "agents/protocol/frame.h"
#include "app/launch/ssh.h"
#include "app/run/preflight.h"
#include "planner/device_presets.h"
#include "tests/ssh/sshd_fixture.h"

using namespace pw;
using Catch::Contains;

namespace {

planner::Node nodeFor(const std::string& name, const test::Sshd& s, int port)
{
    planner::Node n {name, "127.0.0.1", port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
    n.ssh_identity_file = s.user_key.string();
    return n;
}

const app::PreflightCheck* find(
    const std::vector<app::PreflightCheck>& checks, const std::string& node, const std::string& check)
{
    for (const auto& c : checks)
        if (c.node == node && c.check == check)
            return &c;
    return nullptr;
}

} // namespace

TEST_CASE("pre-flight: good nodes pass every check, an unknown key and a wrong port are named with the fix", "[ssh]")
{
    test::Sshd good1, good2, stranger;
    test::TempDir dir;
    const auto knownHosts = dir.path / "known_hosts";
    std::ofstream(knownHosts) << good1.knownHostsLine() << "\n" << good2.knownHostsLine() << "\n";
    const int wrongPort = test::freePort();
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("cpu")};
    cluster.nodes.push_back(nodeFor("good1", good1, good1.port));
    cluster.nodes.push_back(nodeFor("good2", good2, good2.port));
    cluster.nodes.push_back(nodeFor("stranger", stranger, stranger.port));
    cluster.nodes.push_back(nodeFor("nobody", good1, wrongPort));
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    cluster.validate();

    app::PreflightOptions options;
    options.ssh.known_hosts = knownHosts;
    options.ssh.config = dir.path / "empty_ssh_config";
    std::ofstream(options.ssh.config).flush();
    options.ssh.timeout = std::chrono::milliseconds {3000};
    options.remote_root = (dir.path / "remote").string();
    options.agent_executable = PW_AGENT_EXE;
    int reported = 0;
    const auto checks = app::preflight(cluster, nullptr, options, [&](const app::PreflightCheck&) { ++reported; });
    CHECK(reported == static_cast<int>(checks.size()));
    for (const auto& c : checks)
        UNSCOPED_INFO(c.node << " " << c.check << " " << c.ok << " " << c.detail);

    for (const char* node : {"good1", "good2"})
        for (const char* check : {"reachable", "host key", "authenticated", "disk space", "agent", "devices"}) {
            INFO(node << " " << check);
            const auto* c = find(checks, node, check);
            REQUIRE(c);
            CHECK(c->ok);
            CHECK(c->fix.empty());
        }
    CHECK_THAT(find(checks, "good1", "host key")->detail, Contains(good1.fingerprint()));
    CHECK_THAT(
        find(checks, "good1", "agent")->detail, Contains("protocol " + std::to_string(agents::kProtocolVersion)));
    REQUIRE(find(checks, "good1", "reaches good2"));
    CHECK(find(checks, "good1", "reaches good2")->ok);
    CHECK_THAT(find(checks, "good1", "reaches good2")->detail, Contains("ephemeral port"));
    CHECK(find(checks, "good2", "reaches good1")->ok);

    const auto* key = find(checks, "stranger", "host key");
    REQUIRE(key);
    CHECK_FALSE(key->ok);
    CHECK_THAT(key->detail, Contains(stranger.fingerprint()));
    CHECK_THAT(key->fix, Contains("accept"));
    CHECK(find(checks, "stranger", "reachable")->ok);
    CHECK_FALSE(find(checks, "stranger", "agent"));

    const auto* down = find(checks, "nobody", "reachable");
    REQUIRE(down);
    CHECK_FALSE(down->ok);
    CHECK_THAT(down->detail, Contains("127.0.0.1") && Contains(std::to_string(wrongPort)));
    CHECK_THAT(down->fix, Contains("ssh_port"));
    CHECK_FALSE(find(checks, "nobody", "host key"));

    // The CLI: the checklist on stderr, JSON on stdout, exit status 1.
    const auto clusterFile = dir.path / "cluster.json";
    std::ofstream(clusterFile) << planner::toJson(cluster).dump(2);
    const std::string command = "PIPEWRIGHT_AGENT=" + agents::shellQuote(PW_AGENT_EXE) + " "
        + agents::shellQuote(PW_CLI_EXE) + " preflight " + agents::shellQuote(clusterFile.string()) + " --known-hosts "
        + agents::shellQuote(knownHosts.string()) + " --remote-root " + agents::shellQuote(options.remote_root)
        + " --json 2>/dev/null";
    FILE* p = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[4096];
    for (std::size_t n; p && (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;)
        out.append(buffer, n);
    const int status = ::pclose(p);
    CHECK(WEXITSTATUS(status) == 1);
    const auto j = nlohmann::json::parse(out);
    CHECK(j.at("ok") == false);
    CHECK(j.at("checks").size() >= 10);
}
