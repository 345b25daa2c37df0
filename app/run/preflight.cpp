// SPDX-License-Identifier: MIT
#include "preflight.h"

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agents/protocol/messages.h"
#include "app/run/remote.h"
#include "app/run/run_checks.h"
#include "planner/errors.h"

namespace pw::app {

namespace {

using agents::shellQuote;
using agents::SshFailure;

std::string gib(double bytes)
{
    std::ostringstream s;
    s.precision(1);
    s << std::fixed << bytes / double(1 << 30) << " GiB";
    return s.str();
}

/// The nodes a plan uses (all of them without a plan), by index.
std::set<int> usedNodes(const planner::Cluster& cluster, const planner::Plan* plan)
{
    std::set<int> nodes;
    if (!plan) {
        for (std::size_t i = 0; i < cluster.nodes.size(); ++i)
            nodes.insert(static_cast<int>(i));
        return nodes;
    }
    for (const auto& s : plan->stages)
        for (int d : s.devices)
            nodes.insert(cluster.device(d).node);
    return nodes;
}

/// Devices of node `index` the plan uses (every device of the node without a plan).
int devicesUsed(const planner::Cluster& cluster, const planner::Plan* plan, int index)
{
    if (!plan)
        return cluster.nodes[static_cast<std::size_t>(index)].count;
    std::set<int> devices;
    for (const auto& s : plan->stages)
        for (int d : s.devices)
            if (cluster.device(d).node == index)
                devices.insert(d);
    return static_cast<int>(devices.size());
}

} // namespace

std::vector<PreflightCheck> preflight(const planner::Cluster& cluster, const planner::Plan* plan,
    const PreflightOptions& options, const std::function<void(const PreflightCheck&)>& progress)
{
    std::vector<PreflightCheck> out;
    const auto report = [&](PreflightCheck c) {
        if (progress)
            progress(c);
        out.push_back(std::move(c));
    };
    // The plan first: a deployment that every node would pass but the plan cannot take is not ready.
    if (plan) {
        std::string problem, fix;
        if (plan->cluster->deviceCount() != cluster.deviceCount()) {
            problem = "the plan is for " + std::to_string(plan->cluster->deviceCount()) + " devices, the cluster has "
                + std::to_string(cluster.deviceCount());
            fix = "deploy a plan made for this cluster (`pipewright-cli plan --cluster` with this file), or pick the "
                  "cluster file the plan was made for";
        } else {
            planner::Plan onCluster = *plan;
            onCluster.cluster = cluster;
            try {
                onCluster.validate();
                checkTrainable(onCluster);
            } catch (const planner::InputError& e) {
                problem = planner::formatInputError(e);
                fix = "change the plan as the message says, and check again";
            }
        }
        report({"plan", "this machine", "plan", problem.empty(),
            problem.empty() ? std::to_string(cluster.deviceCount()) + " devices, trainable by the engine as planned"
                            : problem,
            fix});
        if (!problem.empty())
            plan = nullptr; // the nodes are still checked, every one of them
    }
    std::optional<AgentBuild> build;
    struct Reached
    {
        std::unique_ptr<agents::SshSession> session;
        std::string agent;
    };
    std::map<int, Reached> reached;
    for (int index : usedNodes(cluster, plan)) {
        const auto& node = cluster.nodes[static_cast<std::size_t>(index)];
        const auto endpoint = endpointOf(node);
        PreflightCheck c {node.name, endpoint.host + (node.ssh_port == 22 ? "" : ":" + std::to_string(node.ssh_port))};
        std::unique_ptr<agents::SshSession> session;
        std::optional<agents::HostKey> offered; // an unknown key, as the server offered it
        agents::SshSettings ssh = options.ssh;
        ssh.confirm_new_host_key = [&](const agents::HostKey& key) {
            offered = key;
            return options.ssh.confirm_new_host_key && options.ssh.confirm_new_host_key(key);
        };
        try {
            session = agents::SshSession::open(endpoint, ssh);
        } catch (const agents::SshError& e) {
            const auto failed = e.failure();
            const bool connected = failed != SshFailure::Unreachable;
            const bool trusted
                = connected && failed != SshFailure::HostKeyUnknown && failed != SshFailure::HostKeyChanged;
            report({c.node, c.where, "reachable", connected, connected ? "sshd answered" : e.what(),
                connected ? "" : "check the node's host and ssh_port in the cluster file, and that sshd runs there"});
            if (connected)
                report({c.node, c.where, "host key", trusted, trusted ? "known" : e.what(),
                    trusted ? ""
                        : failed == SshFailure::HostKeyChanged
                        ? "if the host was reinstalled, remove its old key (ssh-keygen -R) and check the new one"
                        : "check the fingerprint with the host's administrator, then accept it (the deploy dialog, "
                          "or --accept-new-host-keys)",
                    failed == SshFailure::HostKeyUnknown ? offered : std::nullopt});
            if (trusted)
                report({c.node, c.where, "authenticated", false, e.what(),
                    "put your public key in the user's ~/.ssh/authorized_keys there, or set ssh_user / "
                    "ssh_identity_file for the node"});
            continue;
        }
        c.where = session->name();
        report({c.node, c.where, "reachable", true, "sshd answered", ""});
        report({c.node, c.where, "host key", true, session->hostKey().type + " " + session->hostKey().fingerprint, "",
            session->hostKey()});
        report({c.node, c.where, "authenticated", true, "as " + c.where.substr(0, c.where.find('@')), ""});
        try {
            if (!build)
                build = AgentBuild::load(options.agent_executable);
            const std::string root = remoteRoot(*session, options.remote_root);
            const auto df
                = session->run("mkdir -p " + shellQuote(root) + " && df -Pk " + shellQuote(root) + " | tail -n 1");
            std::istringstream fields(df.out);
            std::string fs, blocks, used, available;
            fields >> fs >> blocks >> used >> available;
            const double free = std::atof(available.c_str()) * 1024.0;
            const double need = static_cast<double>(build->bytes.size()) + static_cast<double>(options.min_free_bytes);
            report({c.node, c.where, "disk space", df.exit_status == 0 && free >= need,
                df.exit_status == 0 ? gib(free) + " free in " + root : "df failed: " + df.err,
                free >= need ? "" : "free " + gib(need - free) + " or more in " + root});

            const auto [agentPath, uploaded] = installAgent(*session, root, *build, "preflight");
            const auto caps = session->run(shellQuote(agentPath) + " --capabilities");
            agents::Hello hello;
            std::string problem;
            if (caps.exit_status != 0)
                problem = "the agent does not start: "
                    + (caps.err.empty() ? "exit status " + std::to_string(caps.exit_status) : caps.err);
            else
                try {
                    hello = agents::Hello::fromJson(nlohmann::json::parse(caps.out));
                    if (hello.protocol_version != agents::kProtocolVersion)
                        problem = "the agent speaks protocol version " + std::to_string(hello.protocol_version)
                            + ", this controller " + std::to_string(agents::kProtocolVersion);
                } catch (const std::exception& e) {
                    problem = std::string("the agent's capabilities are unreadable: ") + e.what();
                }
            report({c.node, c.where, "agent", problem.empty(),
                problem.empty()
                    ? "pipewright-agent " + hello.agent_version + " (protocol " + std::to_string(hello.protocol_version)
                        + ", " + std::to_string(hello.cores) + " cores" + (uploaded ? ", uploaded" : ", cached") + ")"
                    : problem,
                problem.empty() ? ""
                                : "install the libraries the agent links (run `ldd " + agentPath
                        + "` there), or build the agent for that host"});
            if (problem.empty()) {
                const int need = devicesUsed(cluster, plan, index);
                const int typeIndex = cluster.findType(cluster.nodes[static_cast<std::size_t>(index)].device_type);
                const std::string type
                    = typeIndex >= 0 ? cluster.device_types[static_cast<std::size_t>(typeIndex)].name : "?";
                const bool gpu = type != "cpu";
                const int have = gpu ? static_cast<int>(hello.gpus.size()) : hello.cores;
                report({c.node, c.where, "devices", have >= need,
                    std::to_string(need) + (gpu ? " GPU(s) of type " + type : " CPU device(s)") + " needed, "
                        + std::to_string(have) + (gpu ? " GPU(s) found" : " cores found"),
                    have >= need ? ""
                        : gpu    ? "check CUDA_VISIBLE_DEVICES in the node's env, the driver, and that the agent "
                                   "was built with CUDA"
                                 : "give the node fewer devices in the cluster file"});
                reached[index] = {std::move(session), agentPath};
            }
        } catch (const std::exception& e) {
            report({c.node, c.where, "agent", false, e.what(), "check the run directory's permissions and disk"});
        }
    }
    // Every node reaches every other one on the transport's ports: the target node listens on an ephemeral port
    // of its address (as Gloo does), the source node connects to it, both run by the agent on the nodes themselves.
    for (auto& [from, r] : reached)
        for (auto& [to, target] : reached) {
            if (from == to)
                continue;
            const auto& a = cluster.nodes[static_cast<std::size_t>(from)];
            const auto& b = cluster.nodes[static_cast<std::size_t>(to)];
            const std::string host = target.session->hostKey().host.front() == '['
                ? target.session->hostKey().host.substr(1, target.session->hostKey().host.find(']') - 1)
                : target.session->hostKey().host;
            std::string detail, port;
            bool ok = false;
            try {
                auto listener = target.session->start(shellQuote(target.agent) + " --listen-probe " + shellQuote(host));
                std::array<char, 64> buffer {};
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                while (port.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
                    const long n
                        = listener->read(std::span<char>(buffer.data(), buffer.size()), std::chrono::milliseconds(200));
                    if (n < 0)
                        break;
                    port.append(buffer.data(), static_cast<std::size_t>(n));
                }
                while (!port.empty() && (port.back() == '\n' || port.back() == '\r'))
                    port.pop_back();
                if (port.empty()) {
                    detail = "the listener on " + b.name + " did not start: " + listener->stderrText();
                } else {
                    const auto probe
                        = r.session->run(shellQuote(r.agent) + " --probe " + shellQuote(host) + " " + port);
                    ok = probe.exit_status == 0;
                    detail
                        = ok ? "TCP to " + host + ":" + port + " (an ephemeral port, as the transport's)" : probe.err;
                }
                listener->close();
            } catch (const std::exception& e) {
                detail = e.what();
            }
            report({a.name, r.session->name(), "reaches " + b.name, ok, detail,
                ok ? ""
                   : "the nodes must reach each other on ephemeral TCP ports (firewall? set GLOO_SOCKET_IFNAME in the "
                     "nodes' env to the interface they share)"});
        }
    return out;
}

} // namespace pw::app
