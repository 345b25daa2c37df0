// SPDX-License-Identifier: MIT
// The local and SSH launchers behind the controller's launcher seam (launcher.h), and the choice between them and
// Slurm's (slurm.h).
#include "launcher.h"

#include "app/run/controller.h"
#include "app/run/remote.h"
#include "app/run/slurm.h"

namespace pw::app {

namespace {

/// One child process per device on this machine, on pipes.
class LocalLauncher final : public Launcher
{
public:
    explicit LocalLauncher(std::filesystem::path agent)
        : m_agent(std::move(agent))
    {
    }
    std::string kind() const override { return "local"; }
    nlohmann::json hostOf(int device) const override
    {
        return {{"device", device}, {"host", "localhost"}, {"launcher", "local"}};
    }
    void prepare(const std::vector<int>&, const std::string&, const LaunchContext&) override { }
    std::unique_ptr<AgentConnection> startAgent(int) override { return startLocalAgent(m_agent); }

private:
    std::filesystem::path m_agent;
};

/// Served agents on the cluster's nodes over SSH (RemoteDeployment).
class SshLauncher final : public Launcher
{
public:
    explicit SshLauncher(const RunRequest& request)
        : m_cluster(*request.plan.cluster)
        , m_options(*request.remote)
        , m_agent(request.agent_executable)
    {
    }
    std::string kind() const override { return "ssh"; }
    nlohmann::json hostOf(int device) const override
    {
        const auto& node = m_cluster.nodes[static_cast<std::size_t>(m_cluster.device(device).node)];
        return {{"device", device}, {"host", node.host.empty() ? node.name : node.host}, {"node", node.name},
            {"launcher", "ssh"}};
    }
    void prepare(const std::vector<int>& devices, const std::string& plan_json, const LaunchContext& context) override
    {
        // Sessions to the nodes, the run directories, the agent and the plan uploaded there.
        m_remote = std::make_unique<RemoteDeployment>(m_cluster, context.run_id, m_options, m_agent);
        m_remote->prepare(devices, plan_json, context.log);
    }
    std::unique_ptr<AgentConnection> startAgent(int device) override { return m_remote->startAgent(device); }
    std::string journalPath(int device) const override { return m_remote->journalPath(device); }
    std::string glooHost(int device) const override { return m_remote->glooHost(device); }
    std::chrono::seconds reconnectFor() const override { return m_options.reconnect_for; }
    bool remoteClocks() const override { return true; }
    std::vector<std::string> teardown() override
    {
        return m_remote ? m_remote->teardown() : std::vector<std::string> {};
    }

private:
    planner::Cluster m_cluster;
    RemoteOptions m_options;
    std::filesystem::path m_agent;
    std::unique_ptr<RemoteDeployment> m_remote;
};

} // namespace

std::unique_ptr<Launcher> makeLauncher(const RunRequest& request)
{
    if (request.slurm)
        return makeSlurmLauncher(request);
    if (request.remote)
        return std::make_unique<SshLauncher>(request);
    return std::make_unique<LocalLauncher>(request.agent_executable);
}

} // namespace pw::app
