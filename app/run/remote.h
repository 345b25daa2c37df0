// SPDX-License-Identifier: MIT
// The SSH launcher: a run's agents on the nodes of its cluster. One SSH session per node (app/launch/ssh.h),
// a run directory per node (~/.cache/pipewright/runs/RUN), the agent binary uploaded once per build
// (~/.cache/pipewright/agents/SHA256/pipewright-agent) and the plan beside the run. Each agent is a served agent
// (agents/agent/serve.h) reached through a channel running `pipewright-agent --session`: a dropped connection
// leaves it training, and the controller reattaches (`--attach`) and resumes its telemetry. Teardown stops
// whatever of the run is still alive on every host (and says so) and removes the run directories. Two runs on
// the same hosts share nothing but the cached agent binary.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/launch/ssh.h"
#include "app/run/agent_connection.h"
#include "planner/cluster.h"

namespace pw::app {

/// @brief How a run is deployed over SSH.
struct RemoteOptions
{
    agents::SshSettings ssh;
    /// An agent whose controller is away this long stops its run (the served agents' --linger). Long enough for the
    /// outages of real networks (a switch rebooting, a route flapping): a controller that died leaves its agents
    /// this long, and their directories until the next contact (removeLeftoverRuns).
    std::chrono::seconds linger {120};
    /// How long the controller tries to reach a lost agent again (a dropped link, or one silent for the heartbeat
    /// timeout) before it fails the run; less than linger, so that the agent is still there when the link is back.
    std::chrono::seconds reconnect_for {90};
    bool keep_run_dir = false; ///< leave the run directories on the hosts (logs, journals) for a post-mortem
    /// Where runs and agent builds live on every host; empty: ~/.cache/pipewright of the SSH user.
    std::string remote_root;
};

/// The SSH endpoint of a cluster node: its host, and its port, user and identity file when the cluster file sets
/// them (ssh_port 22, the default, leaves the port to ~/.ssh/config).
agents::SshEndpoint endpointOf(const planner::Node& node);

/// @brief The agent build that goes to the hosts: its bytes and their SHA-256 (its name in the hosts' cache).
struct AgentBuild
{
    std::string bytes;
    std::string sha256;
    /// Reads the agent executable; throws std::runtime_error naming it.
    static AgentBuild load(const std::filesystem::path& executable);
};

/// Where runs and agent builds live on the session's host: `configured`, or ~/.cache/pipewright of its user.
std::string remoteRoot(agents::SshSession& session, const std::string& configured);

/// Makes sure ROOT/agents/SHA256/pipewright-agent is on the session's host, uploading it when it is not (beside,
/// then renamed: two runs uploading the same build at once never run a partial file). Returns its path and
/// whether it was uploaded. Throws agents::SshError.
std::pair<std::string, bool> installAgent(
    agents::SshSession& session, const std::string& root, const AgentBuild& build, const std::string& upload_tag);

/// @brief What removeLeftoverRuns() did on one host.
struct LeftoverRuns
{
    std::vector<std::string> removed; ///< run ids whose directories it removed
    std::vector<std::string> in_use; ///< run ids kept: an agent process of theirs runs, or they are being deployed
    std::vector<std::string> kept; ///< run ids kept on purpose (--keep-run-dir) and left so (include_kept false)

    bool operator==(const LeftoverRuns&) const = default;
};

/// Removes the run directories under ROOT/runs on the session's host that no agent process uses any more: those
/// of runs that ended while the host was out of reach, or whose controller died (their agents stop themselves after
/// the linger time). Kept are `keep` (the run being deployed), directories of runs still being deployed (a
/// `.preparing` marker younger than 10 minutes: prepare() makes it, the served agent removes it once it listens)
/// and, unless `include_kept`, those a teardown kept for a post-mortem (`.kept`). Throws agents::SshError.
LeftoverRuns removeLeftoverRuns(
    agents::SshSession& session, const std::string& root, const std::string& keep = {}, bool include_kept = false);

/// A command line for a POSIX shell: `env NAME=VALUE ...` for `env` (each word quoted), then `words` quoted.
std::string shellCommand(const std::map<std::string, std::string>& env, const std::vector<std::string>& words);

/// Throws planner::InputError (field /nodes/N/env/NAME) when a node of `nodes` (all when empty) has an `env`
/// value that was redacted when its file was written (planner::kRedactedValue): a deployment would set the
/// placeholder instead of the secret.
void requireEnvValues(const planner::Cluster& cluster, const std::vector<int>& nodes = {});

class RemoteDeployment
{
public:
    RemoteDeployment(const planner::Cluster& cluster, std::string run_id, RemoteOptions options,
        std::filesystem::path agent_executable);
    ~RemoteDeployment();
    RemoteDeployment(const RemoteDeployment&) = delete;
    RemoteDeployment& operator=(const RemoteDeployment&) = delete;

    /// Connects to every node holding one of `devices` (host key verified, authenticated), removes the leftover
    /// directories of earlier runs there (removeLeftoverRuns, said in `log`), makes the run directory there,
    /// uploads the agent when that build is not there yet, and the plan. Throws agents::SshError or
    /// std::runtime_error naming the host.
    void prepare(const std::vector<int>& devices, const std::string& plan_json,
        const std::function<void(const std::string&)>& log = {});
    /// Starts the served agent of `device` on its node and returns the connection to it.
    std::unique_ptr<AgentConnection> startAgent(int device);
    /// The agent's telemetry journal on its host (RunSpec::journal_path).
    std::string journalPath(int device) const;
    /// The address the agent's Gloo transport listens on: its node's host.
    std::string glooHost(int device) const;
    /// Stops every process of this run still alive on its hosts (SIGTERM, then SIGKILL), checks none is left, and
    /// removes the run directories unless kept. One line per host: what it found and did.
    std::vector<std::string> teardown();

    struct Node;

private:
    Node& nodeOf(int device);
    const Node& nodeOf(int device) const;

    planner::Cluster m_cluster;
    std::string m_runId;
    RemoteOptions m_options;
    std::filesystem::path m_agent;
    std::vector<std::unique_ptr<Node>> m_nodes; ///< by the cluster's node index (null: no device of the run)
};

} // namespace pw::app
