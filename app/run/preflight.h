// SPDX-License-Identifier: MIT
// Pre-flight: everything a deployment needs, checked on every node before anything starts, each check with what it
// found and, when it failed, the fix. Per node: reachable, host key trusted, authenticated, disk space where runs
// go, the agent starts there and speaks this controller's protocol version, the devices the plan needs are there;
// then every node reaches every other one (TCP, from the node itself). `pipewright-cli preflight`, the deploy
// dialog's checklist.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agents/protocol/messages.h"
#include "app/launch/ssh.h"
#include "planner/plan.h"

namespace pw::app {

/// @brief One line of the checklist.
struct PreflightCheck
{
    std::string node; ///< the cluster's node name
    std::string where; ///< user@host:port once connected, else the host
    std::string check; ///< "plan", "reachable", "host key", "authenticated", "disk space", "agent", "devices",
                       ///< "GPU cuda:N kernels", "GPU cuda:N memory", "reaches NODE"
    bool ok = false;
    std::string detail; ///< what was found
    std::string fix; ///< what to do, when not ok
    /// "host key": the key the server offered (an unknown one for the user to judge: its fingerprint)
    std::optional<agents::HostKey> host_key;

    bool operator==(const PreflightCheck&) const = default;
};

struct PreflightOptions
{
    agents::SshSettings ssh;
    std::string remote_root; ///< as RemoteOptions::remote_root
    std::filesystem::path agent_executable;
    std::int64_t min_free_bytes = std::int64_t {1} << 30; ///< beside the agent build, for logs and journals
};

/// @brief The plan's predicted peak memory of every device (the simulator's, as the controller stores it), or why
/// there is none.
struct PredictedMemory
{
    std::vector<double> peak_bytes; ///< per global device; empty when there is no prediction
    std::string why; ///< the simulator's error, when empty
};
/// Simulates `plan` (at most the controller's kPredictedSteps iterations) for its devices' peak memory.
PredictedMemory predictedMemory(const planner::Plan& plan);

/// The device checks of node `node` from its agent's capabilities (`hello`). A CPU node (no `gpus` in the cluster
/// file): "devices", its cores against the devices the plan puts there. A GPU node: "devices", the agent has CUDA
/// and sees every GPU the node's used devices map to; then per GPU "GPU cuda:N kernels" (its compute capability
/// runs the agent's kernels) and "GPU cuda:N memory" (its free memory holds the predicted peaks of the devices on
/// it; without a prediction, the cluster's memory for those devices against the GPU's total, saying so). Every
/// failed check names the node, the GPU and the fix.
std::vector<PreflightCheck> deviceChecks(const planner::Cluster& cluster, const planner::Plan* plan, int node,
    const PredictedMemory& predicted, const agents::Hello& hello, const std::string& where);

/// The NCCL check of a run whose agents talk NCCL (runTransport: every device on a GPU of its own), or nullopt
/// for any other run: node "cluster", check "NCCL version". `versions`: per node name holding a device of the plan,
/// the NCCL its agent reported (Hello's cuda.nccl). Fails, naming the nodes and versions, when a node has none
/// ("not found") or the nodes disagree (NCCL's wire protocol differs between versions).
std::optional<PreflightCheck> ncclCheck(const planner::Plan& plan, const std::map<std::string, std::string>& versions);

/// Runs the checks on the nodes of `cluster` (those holding a device of `plan` when given), reporting each as it
/// completes. A node that fails to connect gets no further checks. With a plan, the first check (node "plan",
/// check "plan") is the plan itself: its devices against the cluster's, its stages on this cluster, and whether the
/// engine trains it as planned (checkTrainable); when it fails, every node of the cluster is still checked.
std::vector<PreflightCheck> preflight(const planner::Cluster& cluster, const planner::Plan* plan,
    const PreflightOptions& options, const std::function<void(const PreflightCheck&)>& progress = {});

} // namespace pw::app
