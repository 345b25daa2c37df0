// SPDX-License-Identifier: MIT
// Runs deployed over SSH, end to end: three real sshd "hosts" on 127.0.0.1 (three ports, each with its own host and
// user key), the real agent uploaded by SFTP, served agents, Gloo between them, a real SQLite history. A 3-stage plan
// gives the losses of the same plan run --local and lands with every span; a dropped SSH connection is resumed with
// no span lost or stored twice; a killed agent fails the run within seconds and leaves no process on any host; an
// unreachable node stops the run before anything starts, naming the host; two runs at once on the same hosts both
// finish; no key material reaches the history, the logs or the run directory.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

#include "app/history/history.h"
#include "app/launch/ssh.h"
#include "app/run/controller.h"
#include "engine/executor.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/skip.h"
#include "tests/ssh/sshd_fixture.h"

using namespace pw;
using Catch::Contains;
using Clock = std::chrono::steady_clock;

namespace {

/// @brief Three sshd "hosts" and a cluster of one CPU device on each, all trusted in one known_hosts file.
struct ThreeHosts
{
    test::Sshd a, b, c;
    test::TempDir dir;
    std::filesystem::path known_hosts = dir.path / "known_hosts";
    std::filesystem::path ssh_config = dir.path / "ssh_config";
    std::filesystem::path remote_root = dir.path / "remote";

    ThreeHosts()
    {
        std::ofstream(known_hosts) << a.knownHostsLine() << "\n"
                                   << b.knownHostsLine() << "\n"
                                   << c.knownHostsLine() << "\n";
        std::ofstream(ssh_config).flush();
    }

    planner::Cluster cluster() const
    {
        planner::Cluster cl;
        cl.device_types = {*planner::devicePreset("cpu")};
        int i = 0;
        for (const test::Sshd* s : {&a, &b, &c}) {
            planner::Node n {
                "host" + std::to_string(i++), "127.0.0.1", s->port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
            n.ssh_identity_file = s->user_key.string();
            cl.nodes.push_back(n);
        }
        cl.inter_node_bandwidth_bytes_per_s = 1e9;
        cl.inter_node_latency_s = 1e-5;
        return cl;
    }

    app::RemoteOptions remote() const
    {
        app::RemoteOptions r;
        r.ssh.known_hosts = known_hosts;
        r.ssh.config = ssh_config;
        r.ssh.timeout = std::chrono::milliseconds {3000};
        r.linger = std::chrono::seconds {15};
        r.reconnect_for = std::chrono::seconds {10};
        r.remote_root = remote_root.string();
        return r;
    }
};

planner::Plan threeStagePlan(const planner::Cluster& cluster, const std::string& kind = "1f1b")
{
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}}, kind, 4);
    plan.cluster = cluster;
    plan.validate();
    return plan;
}

app::RunRequest sshRunRequest(const planner::Plan& plan, int steps)
{
    app::RunRequest r;
    r.plan = plan;
    r.plan_label = "ssh test";
    r.training.steps = steps;
    r.training.data = {agents::DataKind::Synthetic, "", 1234};
    r.training.lr = 1e-2;
    r.training.weight_decay = 0.1;
    r.threads = 1;
    r.agent_executable = PW_AGENT_EXE;
    r.force = true; // the local reference runs three agents, on a 2-core machine too
    return r;
}

/// Per agent, the span numbers the history stored (from its CSV export).
std::map<int, std::vector<std::int64_t>> spanNumbers(app::HistoryStore& h, const std::string& run)
{
    std::ostringstream csv;
    h.exportCsv(run, csv);
    std::istringstream in(csv.str());
    std::string line;
    std::getline(in, line);
    std::map<int, std::vector<std::int64_t>> out;
    while (std::getline(in, line)) {
        const auto last = line.rfind(',');
        const auto agentComma = line.rfind(',', last - 1);
        out[std::stoi(line.substr(agentComma + 1, last - agentComma - 1))].push_back(std::stoll(line.substr(last + 1)));
    }
    for (auto& [agent, numbers] : out)
        std::sort(numbers.begin(), numbers.end());
    return out;
}

void requireEverySpanOnce(app::HistoryStore& h, const std::string& run, std::size_t expected)
{
    const auto numbers = spanNumbers(h, run);
    std::size_t total = 0;
    for (const auto& [agent, n] : numbers) {
        INFO("agent " << agent);
        for (std::size_t i = 0; i < n.size(); ++i)
            REQUIRE(n[i] == static_cast<std::int64_t>(i) + 1); // no gap, no duplicate
        total += n.size();
    }
    CHECK(total == expected);
}

/// Agent processes (served, session or attach) of a run still alive on this machine, which plays every host.
std::vector<pid_t> runProcesses(const std::string& runId)
{
    std::vector<pid_t> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string n = entry.path().filename().string();
        if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream in(entry.path() / "cmdline");
        std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const pid_t pid = static_cast<pid_t>(std::atol(n.c_str()));
        if (cmd.find("pipewright-agent") != std::string::npos && cmd.find(runId) != std::string::npos
            && test::alive(pid))
            out.push_back(pid);
    }
    return out;
}

} // namespace

TEST_CASE(
    "a 3-stage plan deployed to three hosts gives its local losses, every span once, nothing left behind", "[ssh][run]")
{
    ThreeHosts hosts;
    // A node's env holds a secret: the agents get it, no file or log does (only its name).
    const std::string envSecret = "pw-env-secret-" + std::to_string(::getpid()) + "-7f3a9c";
    auto cluster = hosts.cluster();
    cluster.nodes[0].env = {{"PW_TEST_TOKEN", envSecret}};
    const auto plan = threeStagePlan(cluster);
    const int steps = 5;
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");

    auto local = sshRunRequest(plan, steps);
    const auto reference = app::RunController(local, history).run();
    REQUIRE(reference.status == app::RunStatus::Succeeded);

    auto remote = sshRunRequest(plan, steps);
    remote.remote = hosts.remote();
    remote.remote->keep_run_dir = true; // to look for secrets in it below
    std::vector<std::string> logs;
    app::RunObserver o;
    o.log = [&](const std::string& who, const std::string& level, const std::string& text) {
        logs.push_back(who + " " + level + " " + text);
    };
    // The agent on host0 has the node's env (these "hosts" are this machine: its /proc shows it).
    std::string agentEnv;
    o.agents = [&](const std::vector<app::AgentStatus>& agents) {
        if (agentEnv.empty() && agents[0].pid > 0 && agents[0].state == app::AgentStatus::State::Running) {
            agentEnv = test::slurpFile("/proc/" + std::to_string(agents[0].pid) + "/environ");
            std::replace(agentEnv.begin(), agentEnv.end(), '\0', '\n');
        }
    };
    const auto outcome = app::RunController(remote, history).run(o);
    CHECK_THAT(agentEnv, Contains("PW_TEST_TOKEN=" + envSecret + "\n") && Contains("OMP_WAIT_POLICY=PASSIVE"));
    INFO(outcome.message);
    for (const auto& l : logs)
        UNSCOPED_INFO(l);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(hosts.remote_root / "runs"))
        if (entry.path().extension() == ".log")
            UNSCOPED_INFO(entry.path().filename().string() << ": " << test::slurpFile(entry.path()));
    REQUIRE(outcome.status == app::RunStatus::Succeeded);
    REQUIRE(outcome.losses.size() == reference.losses.size());
    for (std::size_t i = 0; i < reference.losses.size(); ++i)
        CHECK(outcome.losses[i] == Approx(reference.losses[i]).epsilon(1e-5));
    requireEverySpanOnce(history, outcome.run_id, engine::runSchedule(plan, steps).actionCount());
    CHECK(runProcesses(outcome.run_id).empty());
    int clean = 0;
    for (const auto& l : logs)
        clean += l.find("no agent process of the run is left") != std::string::npos ? 1 : 0;
    CHECK(clean == 3);
    const auto record = history.run(outcome.run_id);
    REQUIRE(record);
    CHECK_THAT(record->hosts_json, Contains("\"launcher\":\"ssh\""));

    // No secret anywhere: neither private key's text in the history file, the logs or the run directory.
    std::vector<std::string> secrets;
    for (const test::Sshd* s : {&hosts.a, &hosts.b, &hosts.c}) {
        std::istringstream key(test::slurpFile(s->user_key));
        for (std::string line; std::getline(key, line);)
            if (line.find("-----") == std::string::npos && line.size() > 20)
                secrets.push_back(line);
    }
    REQUIRE(secrets.size() >= 3);
    secrets.push_back(envSecret);
    std::string haystack = test::slurpFile(dir.path / "history.sqlite");
    if (std::filesystem::exists(dir.path / "history.sqlite-wal"))
        haystack += test::slurpFile(dir.path / "history.sqlite-wal");
    CHECK_THAT(history.run(outcome.run_id)->cluster_json, Contains("PW_TEST_TOKEN"));
    for (const auto& l : logs)
        haystack += l;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(hosts.remote_root / "runs"))
        if (entry.is_regular_file() && entry.file_size() < (16u << 20))
            haystack += test::slurpFile(entry.path());
    for (const auto& s : secrets)
        CHECK(haystack.find(s) == std::string::npos);
}

TEST_CASE("a dropped SSH connection is resumed: no span lost, none stored twice", "[ssh][run]")
{
    ThreeHosts hosts;
    const auto plan = threeStagePlan(hosts.cluster());
    const int steps = 40;
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto req = sshRunRequest(plan, steps);
    req.remote = hosts.remote();
    std::atomic<bool> dropped {false};
    std::vector<std::string> logs;
    app::RunObserver o;
    o.progress = [&](const app::RunProgress& p) {
        if (p.step >= 5 && !dropped) {
            // The sshd child serving the middle host's connection dies: the link drops mid-run.
            const auto children = hosts.b.connections();
            REQUIRE_FALSE(children.empty());
            for (pid_t child : children)
                ::kill(child, SIGKILL);
            dropped = true;
        }
    };
    o.log = [&](const std::string& who, const std::string& level, const std::string& text) {
        logs.push_back(who + " " + level + " " + text);
    };
    const auto outcome = app::RunController(req, history).run(o);
    INFO(outcome.message);
    for (const auto& l : logs)
        UNSCOPED_INFO(l);
    REQUIRE(dropped);
    REQUIRE(outcome.status == app::RunStatus::Succeeded);
    CHECK(outcome.losses.size() == steps);
    requireEverySpanOnce(history, outcome.run_id, engine::runSchedule(plan, steps).actionCount());
    bool resumed = false;
    for (const auto& l : logs)
        resumed = resumed || l.find("reconnected to") != std::string::npos;
    CHECK(resumed);
    CHECK(runProcesses(outcome.run_id).empty());
}

TEST_CASE("a killed remote agent fails the run within 5 s and leaves no agent process on any host", "[ssh][run]")
{
    ThreeHosts hosts;
    const auto plan = threeStagePlan(hosts.cluster());
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto req = sshRunRequest(plan, 100000);
    req.remote = hosts.remote();
    std::string runId;
    std::atomic<bool> killed {false};
    Clock::time_point killedAt, noticedAt;
    app::RunObserver o;
    o.created = [&](const std::string& id) { runId = id; };
    o.progress = [&](const app::RunProgress& p) {
        if (p.step >= 3 && !killed) {
            for (pid_t pid : runProcesses(runId)) {
                std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
                std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                if (cmd.find("--serve") != std::string::npos && cmd.find("agent-1.sock") != std::string::npos) {
                    ::kill(pid, SIGKILL);
                    killed = true;
                    killedAt = Clock::now();
                }
            }
        }
    };
    o.log = [&](const std::string&, const std::string& level, const std::string&) {
        if (killed && noticedAt == Clock::time_point {} && level == "error")
            noticedAt = Clock::now(); // the first sign of the failure: the run stops from here
    };
    const auto outcome = app::RunController(req, history).run(o);
    const auto returnedAt = Clock::now();
    REQUIRE(killed);
    CHECK(outcome.status == app::RunStatus::Failed);
    CHECK_THAT(outcome.message, Contains("agent 1"));
    REQUIRE(noticedAt != Clock::time_point {});
    CHECK(noticedAt - killedAt < std::chrono::seconds(5));
    CHECK(returnedAt - killedAt < std::chrono::seconds(10)); // stopped, torn down and recorded
    CHECK(history.run(outcome.run_id)->status == app::RunStatus::Failed);
    CHECK(runProcesses(runId).empty());
}

TEST_CASE("an unreachable node stops a remote run before anything starts, naming the host", "[ssh][run]")
{
    ThreeHosts hosts;
    auto cluster = hosts.cluster();
    const int wrongPort = test::freePort();
    cluster.nodes[2].ssh_port = wrongPort;
    const auto plan = threeStagePlan(cluster);
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto req = sshRunRequest(plan, 5);
    req.remote = hosts.remote();
    std::string runId;
    app::RunObserver o;
    o.created = [&](const std::string& id) { runId = id; };
    const auto outcome = app::RunController(req, history).run(o);
    CHECK(outcome.status == app::RunStatus::Failed);
    CHECK_THAT(
        outcome.message, Contains("127.0.0.1") && Contains(std::to_string(wrongPort)) && Contains("cannot connect"));
    CHECK(runProcesses(runId).empty());
    CHECK(history.measuredTimeline(outcome.run_id).spans.empty());
}

TEST_CASE("two runs started at once on the same hosts both finish, each with all its spans", "[ssh][run]")
{
    ThreeHosts hosts;
    const auto plan = threeStagePlan(hosts.cluster());
    const int steps = 6;
    test::TempDir dir;
    const auto file = dir.path / "history.sqlite";
    app::HistoryStore::open(file); // created once, before the two writers
    std::array<app::RunOutcome, 2> outcomes;
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
        threads.emplace_back([&, i] {
            auto history = app::HistoryStore::open(file);
            auto req = sshRunRequest(plan, steps);
            req.remote = hosts.remote();
            outcomes[static_cast<std::size_t>(i)] = app::RunController(req, history).run();
        });
    for (auto& t : threads)
        t.join();
    auto history = app::HistoryStore::open(file);
    for (const auto& outcome : outcomes) {
        INFO(outcome.message);
        CHECK(outcome.status == app::RunStatus::Succeeded);
        requireEverySpanOnce(history, outcome.run_id, engine::runSchedule(plan, steps).actionCount());
        CHECK(runProcesses(outcome.run_id).empty());
    }
    CHECK(outcomes[0].run_id != outcomes[1].run_id);
}

TEST_CASE("teardown stops what of a run is left on a host, says so, and removes the run directory", "[ssh][run]")
{
    ThreeHosts hosts;
    const auto cluster = hosts.cluster();
    app::RemoteDeployment deployment(cluster, "r-teardown-test", hosts.remote(), PW_AGENT_EXE);
    deployment.prepare({0}, "{}");
    const auto socket = hosts.remote_root / "runs" / "r-teardown-test" / "agent-0.sock";
    // A served agent nobody attaches to (as one whose controller died would be), started over the node's session.
    auto session = agents::SshSession::open(app::endpointOf(cluster.nodes[0]), hosts.remote().ssh);
    const auto agent = hosts.remote_root / "agents";
    std::string path;
    for (const auto& e : std::filesystem::recursive_directory_iterator(agent))
        if (e.path().filename() == "pipewright-agent")
            path = e.path().string();
    REQUIRE_FALSE(path.empty());
    session->run("setsid " + agents::shellQuote(path) + " --serve " + agents::shellQuote(socket.string())
        + " --linger 100 </dev/null >/dev/null 2>&1 &");
    for (int i = 0; i < 100 && !std::filesystem::exists(socket); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(std::filesystem::exists(socket));
    REQUIRE(runProcesses("r-teardown-test").size() == 1);

    const auto report = deployment.teardown();
    REQUIRE(report.size() == 1);
    CHECK_THAT(report[0], Contains("had to stop agent processes left running") && Contains("none is left"));
    CHECK(runProcesses("r-teardown-test").empty());
    CHECK_FALSE(std::filesystem::exists(hosts.remote_root / "runs" / "r-teardown-test"));
}

TEST_CASE("a host whose clock is 1000 s ahead lands on the controller's clock, within the stated uncertainty",
    "[ssh][run][clock]")
{
    // issue 21 item 3: host b's sshd (and so its agent) runs in a time namespace whose monotonic clock is 1000 s
    // ahead. Unaligned, its spans would start 1000 s into the run; aligned, the timeline is as on one host.
    test::TempDir dir;
    // Time namespaces need Linux 5.6 and the right to unshare (root, and no seccomp profile refusing it).
    const auto probe = dir.path / "unshare.txt";
    if (test::runProgram({"/usr/bin/unshare", "--time", "--monotonic", "1", "--fork", "/bin/true"}, probe) != 0)
        PW_SKIP("this machine cannot make a time namespace (unshare --time: " << test::slurpFile(probe) << ")");
    test::Sshd a, b(1000);
    std::ofstream(dir.path / "known_hosts") << a.knownHostsLine() << "\n" << b.knownHostsLine() << "\n";
    std::ofstream(dir.path / "ssh_config").flush();
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("cpu")};
    int i = 0;
    for (const test::Sshd* s : {&a, &b}) {
        planner::Node n {"host" + std::to_string(i++), "127.0.0.1", s->port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
        n.ssh_identity_file = s->user_key.string();
        cluster.nodes.push_back(n);
    }
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    cluster.inter_node_latency_s = 1e-5;
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 4);
    plan.cluster = cluster;
    plan.validate();
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    auto remote = sshRunRequest(plan, 5);
    app::RemoteOptions r;
    r.ssh.known_hosts = dir.path / "known_hosts";
    r.ssh.config = dir.path / "ssh_config";
    r.ssh.timeout = std::chrono::milliseconds {3000};
    r.linger = std::chrono::seconds {15};
    r.reconnect_for = std::chrono::seconds {10};
    r.remote_root = (dir.path / "remote").string();
    remote.remote = r;
    const auto outcome = app::RunController(remote, history).run();
    INFO(outcome.message);
    REQUIRE(outcome.status == app::RunStatus::Succeeded);

    const auto clocks = history.agentClocks(outcome.run_id);
    REQUIRE(clocks.size() == 2);
    CHECK(std::abs(clocks[0].offset_s) < 0.05); // host a: this machine's clock
    CHECK(std::abs(clocks[1].offset_s - 1000.0) < 0.05); // host b: 1000 s ahead
    for (const auto& c : clocks) {
        CHECK(c.samples >= 4);
        CHECK(c.uncertainty_s >= 0);
        CHECK(c.uncertainty_s < 0.05);
    }
    const auto timeline = history.measuredTimeline(outcome.run_id);
    CHECK(timeline.clock == planner::ClockDomain::Aligned);
    REQUIRE(!timeline.spans.empty());
    // As on one host: every span inside the run, and every receive ending after its send began (causality across
    // the two clocks), within the two offsets' uncertainties.
    const double slack = clocks[0].uncertainty_s + clocks[1].uncertainty_s + 1e-3;
    double end = 0;
    for (const auto& s : timeline.spans) {
        CHECK(s.t0 >= -slack);
        CHECK(s.t1 >= s.t0);
        end = std::max(end, s.t1);
    }
    CHECK(end < 120.0);
    int pairs = 0;
    for (const auto& send : timeline.spans) {
        if (send.kind != planner::ActionKind::SendActivation && send.kind != planner::ActionKind::SendGradient)
            continue;
        for (const auto& recv : timeline.spans)
            if (recv.device == send.peer && recv.microbatch == send.microbatch && recv.stage == send.stage
                && (recv.kind == planner::ActionKind::RecvActivation || recv.kind == planner::ActionKind::RecvGradient)
                && (recv.kind == planner::ActionKind::RecvGradient)
                    == (send.kind == planner::ActionKind::SendGradient)) {
                INFO("send " << planner::toString(send.kind) << " device " << send.device << " mb " << send.microbatch
                             << " [" << send.t0 << ", " << send.t1 << "], receive on device " << recv.device << " ["
                             << recv.t0 << ", " << recv.t1 << "]");
                CHECK(recv.t1 >= send.t0 - slack);
                ++pairs;
            }
    }
    CHECK(pairs > 0);
}
