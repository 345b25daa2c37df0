// SPDX-License-Identifier: MIT
#include "preflight.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agents/protocol/messages.h"
#include "app/run/controller.h"
#include "app/run/remote.h"
#include "app/run/run_checks.h"
#include "gpu_devices.h"
#include "planner/errors.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"

namespace pw::app {

namespace {

/// "4 devices", or "2 of the cluster's 4 devices" for a plan that leaves some idle (those get no agent).
std::string devicesInUse(const planner::Plan& plan, const planner::Cluster& cluster)
{
    const std::size_t used = plan.devicesUsed().size();
    const int all = cluster.deviceCount();
    if (static_cast<int>(used) == all)
        return std::to_string(all) + (all == 1 ? " device" : " devices");
    return std::to_string(used) + " of the cluster's " + std::to_string(all) + " devices";
}

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

/// Devices of node `index` the plan uses (every device of the node without a plan), global indices in order.
std::vector<int> devicesUsed(const planner::Cluster& cluster, const planner::Plan* plan, int index)
{
    std::set<int> devices;
    if (!plan) {
        const auto first = static_cast<int>(cluster.nodes.firstDevice(static_cast<std::size_t>(index)));
        for (int k = 0; k < cluster.nodes[static_cast<std::size_t>(index)].count; ++k)
            devices.insert(first + k);
    } else
        for (const auto& s : plan->stages)
            for (int d : s.devices)
                if (cluster.device(d).node == index)
                    devices.insert(d);
    return {devices.begin(), devices.end()};
}

std::string listed(const std::vector<int>& values)
{
    std::string out;
    for (int v : values)
        out += (out.empty() ? "" : ", ") + std::to_string(v);
    return out;
}

std::string architectures(const agents::CudaCapability& cuda)
{
    std::string out;
    for (int a : cuda.architectures)
        out += (out.empty() ? "sm_" : ", sm_") + std::to_string(a);
    return out.empty() ? "no architecture" : out;
}

} // namespace

PredictedMemory predictedMemory(const planner::Plan& plan)
{
    PredictedMemory out;
    planner::Plan p = plan;
    p.schedule.iterations = std::min(std::max(1, p.schedule.iterations), kPredictedSteps);
    planner::SimulationOptions options;
    options.record_spans = false;
    try {
        const auto result = planner::simulate(p, options);
        for (const auto& d : result.devices)
            out.peak_bytes.push_back(d.peak_memory_bytes);
    } catch (const std::exception& e) {
        out.why = e.what();
    }
    return out;
}

std::vector<PreflightCheck> deviceChecks(const planner::Cluster& cluster, const planner::Plan* plan, int node,
    const PredictedMemory& predicted, const agents::Hello& hello, const std::string& where)
{
    const auto& n = cluster.nodes[static_cast<std::size_t>(node)];
    const std::vector<int> used = devicesUsed(cluster, plan, node);
    const int need = static_cast<int>(used.size());
    if (n.gpus.empty()) { // CPU devices: one core each at least
        return {{n.name, where, "devices", hello.cores >= need,
            std::to_string(need) + " CPU device(s) needed, " + std::to_string(hello.cores) + " cores found",
            hello.cores >= need ? ""
                                : "give the node fewer devices in the cluster file (or, for GPUs, list the GPU of "
                                  "each device in its \"gpus\")"}};
    }
    std::map<int, std::vector<int>> byGpu; // CUDA index -> the plan's devices on it
    for (int d : used)
        byGpu[*cudaDeviceOf(cluster, d)].push_back(d);
    std::string seen;
    for (const auto& g : hello.gpus)
        seen += (seen.empty() ? ": " : ", ") + ("cuda:" + std::to_string(g.index) + " " + g.name);
    std::vector<PreflightCheck> out;
    std::string problem, fix;
    if (!hello.cuda.compiled_in) {
        problem = "the node's devices are GPUs (its \"gpus\" in the cluster file), and the agent was built without "
                  "CUDA";
        fix = "build the agent where nvcc is found (PW_WITH_CUDA=AUTO or ON), or drop the node's \"gpus\" to train "
              "on its CPUs";
    } else {
        std::vector<int> missing;
        for (const auto& [gpu, devices] : byGpu)
            if (gpu >= static_cast<int>(hello.gpus.size()))
                missing.push_back(gpu);
        if (!missing.empty()) {
            problem = "needs CUDA device(s) " + listed(missing) + ", the agent sees "
                + std::to_string(hello.gpus.size()) + " GPU(s)" + seen
                + (hello.cuda.error.empty() ? "" : " (" + hello.cuda.error + ")");
            fix = "make the GPUs visible to the agent there (CUDA_VISIBLE_DEVICES in the node's env, the driver: "
                  "nvidia-smi), or give the node's devices GPUs it has in the cluster file's \"gpus\"";
        }
    }
    std::string found;
    for (const auto& [gpu, devices] : byGpu)
        found += (found.empty() ? "" : "; ") + ("cuda:" + std::to_string(gpu) + " for device(s) " + listed(devices));
    out.push_back({n.name, where, "devices", problem.empty(),
        problem.empty() ? std::to_string(need) + " GPU device(s) needed: " + found + "; the agent sees "
                + std::to_string(hello.gpus.size()) + " GPU(s)" + seen + " (CUDA " + hello.cuda.runtime + ", driver "
                + hello.cuda.driver + ")"
                        : problem,
        fix});
    if (!problem.empty())
        return out;
    const auto& built = hello.cuda.architectures;
    const int lowest = built.empty() ? 0 : *std::min_element(built.begin(), built.end());
    const std::string oldest = std::to_string(lowest / 10) + "." + std::to_string(lowest % 10);
    for (const auto& [gpu, devices] : byGpu) {
        const auto& g = hello.gpus[static_cast<std::size_t>(gpu)];
        const std::string name = "GPU cuda:" + std::to_string(gpu);
        const std::string cc = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
        const bool runs = hello.cuda.runsOn(g.cc_major, g.cc_minor);
        out.push_back({n.name, where, name + " kernels", runs,
            g.name + ", compute capability " + cc + (runs ? ": runs" : ": does not run")
                + " the agent's kernels (built for " + architectures(hello.cuda) + ")",
            runs ? ""
                 : "give the node's devices a GPU of compute capability " + oldest + " or newer (its \"gpus\" in the "
                    + "cluster file), or build the agent for compute capability " + cc
                    + " (CMAKE_CUDA_ARCHITECTURES)"});
        // The memory the plan predicts for the devices on this GPU, against what is free on it now.
        double needBytes = 0;
        std::string basis;
        if (!predicted.peak_bytes.empty()) {
            for (int d : devices)
                needBytes += predicted.peak_bytes.at(static_cast<std::size_t>(d));
            basis = "predicted peak " + planner::formatBytes(needBytes);
        } else {
            for (int d : devices)
                needBytes += cluster.typeOf(d).memory_bytes;
            basis = "no predicted peak (" + (predicted.why.empty() ? std::string("no plan") : predicted.why)
                + "): the cluster's " + planner::formatBytes(needBytes) + " for its device(s), against the GPU's total";
        }
        const bool freeKnown = g.free_bytes >= 0 && !predicted.peak_bytes.empty();
        const double have = static_cast<double>(freeKnown ? g.free_bytes : g.memory_bytes);
        const bool fits = needBytes <= have;
        out.push_back({n.name, where, name + " memory", fits,
            g.name + ": " + basis + " for device(s) " + listed(devices) + ", " + planner::formatBytes(have)
                + (freeKnown ? " free" : " in all") + (g.free_bytes < 0 ? " (free memory unknown)" : ""),
            fits ? ""
                 : "free memory on that GPU (other processes there: nvidia-smi), spread the node's devices over more "
                   "GPUs (its \"gpus\"), or plan with less memory per device (more stages, smaller microbatches)"});
    }
    return out;
}

std::optional<PreflightCheck> ncclCheck(const planner::Plan& plan, const std::map<std::string, std::string>& versions)
{
    if (runTransport(plan) != agents::Transport::Nccl)
        return std::nullopt;
    std::map<std::string, std::vector<std::string>> nodesOf; // version -> nodes
    for (const auto& [node, version] : versions)
        nodesOf[version].push_back(node);
    std::string found;
    for (const auto& [version, nodes] : nodesOf) {
        std::string names;
        for (const auto& n : nodes)
            names += (names.empty() ? "" : ", ") + n;
        found += (found.empty() ? "" : "; ") + ("NCCL " + version + " on " + names);
    }
    PreflightCheck c;
    c.node = "cluster";
    c.check = "NCCL version";
    const auto missing = std::find_if(versions.begin(), versions.end(),
        [](const auto& v) { return v.second.empty() || v.second.rfind("not found", 0) == 0; });
    if (missing != versions.end()) {
        c.detail = "the run's GPUs talk NCCL (every device on a GPU of its own), and node " + missing->first
            + "'s agent found no NCCL: " + found;
        c.fix = "install NCCL (libnccl.so.2) on " + missing->first
            + ", or put its lib folder in LD_LIBRARY_PATH in the node's env in the cluster file";
    } else if (nodesOf.size() > 1) {
        c.detail = "the nodes' NCCL versions differ: " + found;
        c.fix = "install the same NCCL on every node of the run (NCCL's protocol changes between versions)";
    } else {
        c.ok = true;
        c.detail = versions.empty() ? "no node holds a device of the plan" : found;
    }
    return c;
}

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
            problem.empty() ? devicesInUse(*plan, cluster) + ", trainable by the engine as planned" : problem, fix});
        if (!problem.empty())
            plan = nullptr; // the nodes are still checked, every one of them
    }
    std::optional<AgentBuild> build;
    std::optional<PredictedMemory> predicted; // simulated once, when a GPU node is checked
    struct Reached
    {
        std::unique_ptr<agents::SshSession> session;
        std::string agent;
    };
    std::map<int, Reached> reached;
    std::map<std::string, std::string>
        ncclVersions; // node -> its agent's NCCL, for the nodes holding the plan's devices
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
        const auto at = c.where.find('@');
        report({c.node, c.where, "authenticated", true,
            at == std::string::npos ? "as this account" : "as " + c.where.substr(0, at), ""});
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
            // The GPUs the run's agents will see: the node's CUDA_VISIBLE_DEVICES applied (a device index counts
            // among the visible ones). Its value only: the node's other env values may be secrets.
            std::map<std::string, std::string> cudaEnv;
            // LD_LIBRARY_PATH too: where the node's NCCL is found (the run's agents get the node's whole env).
            for (const char* name : {"CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"})
                if (const auto value = node.env.find(name);
                    value != node.env.end() && value->second != planner::kRedactedValue)
                    cudaEnv.insert(*value);
            const auto caps = session->run(shellCommand(cudaEnv, {agentPath, "--capabilities"}));
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
                if (plan && !devicesUsed(cluster, plan, index).empty())
                    ncclVersions[node.name] = hello.cuda.nccl;
                if (!predicted && plan && !node.gpus.empty())
                    predicted = predictedMemory(*plan); // once, for the first GPU node
                for (auto& check :
                    deviceChecks(cluster, plan, index, predicted ? *predicted : PredictedMemory {}, hello, c.where))
                    report(std::move(check));
                reached[index] = {std::move(session), agentPath};
            }
        } catch (const std::exception& e) {
            report({c.node, c.where, "agent", false, e.what(), "check the run directory's permissions and disk"});
        }
    }
    // NCCL's version agrees over the nodes whose agents answered (a node that did not has failed already).
    if (plan && !ncclVersions.empty())
        if (auto c = ncclCheck(*plan, ncclVersions))
            report(std::move(*c));
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
