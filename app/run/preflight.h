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
#include <optional>
#include <string>
#include <vector>

#include "agents/launch/ssh.h"
#include "planner/plan.h"

namespace pw::app {

/// @brief One line of the checklist.
struct PreflightCheck
{
    std::string node; ///< the cluster's node name
    std::string where; ///< user@host:port once connected, else the host
    std::string
        check; ///< "plan", "reachable", "host key", "authenticated", "disk space", "agent", "devices", "reaches NODE"
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

/// Runs the checks on the nodes of `cluster` (those holding a device of `plan` when given), reporting each as it
/// completes. A node that fails to connect gets no further checks. With a plan, the first check (node "plan",
/// check "plan") is the plan itself: its devices against the cluster's, its stages on this cluster, and whether the
/// engine trains it as planned (checkTrainable); when it fails, every node of the cluster is still checked.
std::vector<PreflightCheck> preflight(const planner::Cluster& cluster, const planner::Plan* plan,
    const PreflightOptions& options, const std::function<void(const PreflightCheck&)>& progress = {});

} // namespace pw::app
