// SPDX-License-Identifier: MIT
// The Slurm launcher (slurm.h): the run directory, the job script, sbatch, the agents' connections back to the
// controller (proved with the run's secret), the job watched while it is pending and while it runs, and scancel.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/protocol/connect_auth.h"
#include "agents/protocol/crypto.h"
#include "app/run/controller.h"
#include "app/run/remote.h"
#include "gpu_devices.h"
#include "launcher.h"
#include "slurm.h"
#include "slurm_tools.h"

namespace pw::app {

using slurm_detail::describeFailure;
using slurm_detail::runTool;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

/// The run's job, shared by the launcher and its agents' connections (any of which may cancel it).
struct SlurmJob
{
    std::string id;
    std::atomic<bool> cancelled {false}; ///< by this controller: what follows is no failure of Slurm's
    void cancel()
    {
        if (id.empty() || cancelled.exchange(true))
            return;
        runTool({"scancel", id}, 30s);
    }
};

/// The numeric address of a connected socket's peer ("10.0.0.5", "fe80::1"; an IPv4-mapped one as IPv4).
std::string peerAddress(int fd)
{
    sockaddr_storage a {};
    socklen_t len = sizeof a;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        return {};
    char host[NI_MAXHOST] = {};
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
        return {};
    std::string s = host;
    if (s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos)
        s = s.substr(7);
    return s;
}

/// An agent of the run, connected over TCP and proven: the protocol on a socket.
class SlurmAgent final : public AgentConnection
{
public:
    SlurmAgent(int fd, std::string where, std::shared_ptr<SlurmJob> job)
        : m_fd(fd)
        , m_where(std::move(where))
        , m_job(std::move(job))
    {
    }
    ~SlurmAgent() override
    {
        if (m_fd >= 0)
            ::close(m_fd);
    }
    std::string where() const override { return m_where; }
    int pollFd() const override { return m_eof ? -1 : m_fd; }
    long read(std::span<char> buffer) override
    {
        if (m_eof)
            return -1;
        const ssize_t n = ::recv(m_fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (n > 0)
            return static_cast<long>(n);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        m_eof = true;
        return -1;
    }
    void write(std::string_view bytes) override
    {
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t w = ::send(m_fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                throw std::runtime_error(m_where + ": the connection is closed");
            done += static_cast<std::size_t>(w);
        }
    }
    std::optional<std::string> ended(bool wait) override
    {
        // An agent elsewhere has no exit status to reap: its end is its connection's (the job's state says more,
        // which the launcher adds when Slurm ended it).
        if (!m_eof) {
            pollfd p {m_fd, POLLRDHUP, 0};
            if (::poll(&p, 1, wait ? 5000 : 0) <= 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                return std::nullopt;
        }
        return std::string("ended its connection");
    }
    void signal(int) override
    {
        // One signal for all: the job's tasks are the agents, and scancel ends every one of them (SIGTERM, then
        // SIGKILL after the cluster's KillWait).
        m_job->cancel();
    }

private:
    int m_fd;
    std::string m_where;
    std::shared_ptr<SlurmJob> m_job;
    bool m_eof = false;
};

/// A connection accepted but not proven yet.
struct Pending
{
    int fd = -1;
    std::string nonce;
    std::string answer;
    Clock::time_point deadline;
};

std::string quoted(const std::string& s)
{
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

class SlurmLauncher final : public Launcher
{
public:
    explicit SlurmLauncher(const RunRequest& request)
        : m_plan(request.plan)
        , m_options(*request.slurm)
        , m_agent(request.agent_executable)
        , m_needs(slurmNeeds(request.plan))
        , m_threads(std::max(1, request.threads.value_or(1)))
        , m_job(std::make_shared<SlurmJob>())
    {
        // The controller's agents in order (each named by its first device; the devices sharing a GPU are one
        // agent's), each one's plan node, and each device's GPU among the physical GPUs its node's agents use.
        std::vector<int> nodes;
        std::map<int, int> gpusSoFar;
        for (const auto& agent : agentDevices(m_plan)) {
            const int node = m_plan.cluster->device(agent.front()).node;
            auto it = std::find(nodes.begin(), nodes.end(), node);
            if (it == nodes.end())
                it = nodes.insert(nodes.end(), node);
            m_devices.push_back(agent.front());
            m_planNodeOf.push_back(static_cast<int>(it - nodes.begin()));
            if (cudaDeviceOf(*m_plan.cluster, agent.front())) {
                const int gpu = gpusSoFar[node]++;
                for (int d : agent)
                    m_gpuOnNode[d] = gpu;
            }
        }
    }
    ~SlurmLauncher() override
    {
        closeListener();
        for (auto& p : m_pending)
            ::close(p.fd);
        for (int fd : m_connected)
            if (fd >= 0)
                ::close(fd);
    }

    std::string kind() const override { return "slurm"; }
    nlohmann::json hostOf(int device) const override
    {
        const auto& node = m_plan.cluster->nodes[static_cast<std::size_t>(m_plan.cluster->device(device).node)];
        return {{"device", device}, {"node", node.name}, {"task", taskOf(device)}, {"launcher", "slurm"}};
    }
    void prepare(const std::vector<int>& devices, const std::string&, const LaunchContext& context) override;
    std::unique_ptr<AgentConnection> startAgent(int device) override
    {
        const int task = taskOf(device);
        const int fd = std::exchange(m_connected[static_cast<std::size_t>(task)], -1);
        if (fd < 0)
            throw std::runtime_error("the agent of device " + std::to_string(device) + " did not connect");
        return std::make_unique<SlurmAgent>(fd,
            "task " + std::to_string(task) + " of Slurm job " + m_job->id + " ("
                + m_peers[static_cast<std::size_t>(task)] + ")",
            m_job);
    }
    std::string glooHost(int device) const override
    {
        // The address the agent reached the controller from: its node's, on a network the nodes share.
        const auto& peer = m_peers[static_cast<std::size_t>(taskOf(device))];
        return peer == "::1" ? "127.0.0.1" : peer;
    }
    bool remoteClocks() const override { return true; }
    std::optional<int> threadsPerAgent() const override { return m_threads; }
    std::string jobId() const override { return m_job->id; }
    std::optional<std::string> allocationEnded() override;
    void cancel() override { m_job->cancel(); }
    std::vector<std::string> teardown() override;
    /// The GPU a device trains on: its place among its plan node's GPU devices, on the GPUs Slurm gave the job
    /// there (CUDA_VISIBLE_DEVICES), whatever GPU index the cluster file named.
    std::optional<int> cudaDevice(int device, std::optional<int> planned) const override
    {
        if (!planned)
            return planned;
        const auto it = m_gpuOnNode.find(device);
        return it == m_gpuOnNode.end() ? planned : std::optional<int>(it->second);
    }

private:
    int taskOf(int device) const
    {
        const auto it = std::find(m_devices.begin(), m_devices.end(), device);
        if (it == m_devices.end())
            throw std::runtime_error("device " + std::to_string(device) + " is not one of the plan's");
        return static_cast<int>(it - m_devices.begin());
    }
    void closeListener()
    {
        if (m_listen >= 0)
            ::close(m_listen);
        m_listen = -1;
    }
    /// Listens on every address of this machine (the secret, not the address, keeps others out); returns the port.
    int listen();
    std::string writeScript(int port) const;
    void submit(const std::string& script, const LaunchContext& context);
    /// Accepts, challenges and checks connections until every task is connected, the job ended, or a stop.
    void awaitAgents(const LaunchContext& context);
    void takeAnswer(Pending& p, const LaunchContext& context);
    std::string outputTail() const;

    planner::Plan m_plan;
    SlurmOptions m_options;
    std::filesystem::path m_agent;
    std::vector<SlurmNeed> m_needs;
    int m_threads; ///< per agent: its CPUs in the job
    std::vector<int> m_devices; ///< task -> its agent's first device
    std::vector<int> m_planNodeOf; ///< task -> the plan node's place in m_needs
    std::map<int, int> m_gpuOnNode; ///< device -> its place among its node's GPU devices
    std::shared_ptr<SlurmJob> m_job;
    std::filesystem::path m_dir;
    std::vector<std::uint8_t> m_secret;
    int m_listen = -1;
    std::vector<Pending> m_pending;
    std::vector<int> m_connected; ///< task -> proven connection (-1: none yet, or taken)
    std::vector<std::string> m_peers; ///< task -> its address
    std::optional<std::string> m_ended;
};

int SlurmLauncher::listen()
{
    int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool v6 = fd >= 0;
    if (v6) {
        const int off = 0;
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off); // IPv4 too, as mapped addresses
        sockaddr_in6 a {};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd);
            v6 = false;
        }
    }
    if (!v6) {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a {};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            throw std::runtime_error(std::string("cannot listen for the Slurm job's agents: ") + std::strerror(errno));
    }
    if (::listen(fd, 128) != 0)
        throw std::runtime_error(std::string("cannot listen for the Slurm job's agents: ") + std::strerror(errno));
    m_listen = fd;
    sockaddr_storage a {};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

std::string SlurmLauncher::writeScript(int port) const
{
    std::string address = m_options.controller_address;
    if (address.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        address = host;
    }
    if (address.find(':') != std::string::npos && address.front() != '[')
        address = "[" + address + "]";
    std::string order;
    for (int k : m_planNodeOf)
        order += (order.empty() ? "" : " ") + std::to_string(k);
    const std::string hostfile = (m_dir / "hostfile").string();
    std::string s = "#!/bin/sh\n"
                    "# Pipewright: one agent per device of the plan (task i trains its i-th device), each on the node\n"
                    "# of the allocation that stands for its plan node (the plan's k-th node on the job's k-th).\n"
                    "set -eu\n"
                    "# OpenMP threads that wait sleep, as for local agents: agents on one node share its cores.\n"
                    ": \"${OMP_WAIT_POLICY:=PASSIVE}\"\n"
                    "export OMP_WAIT_POLICY\n"
                    "set -- $(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n"
                    ": > "
        + quoted(hostfile) + "\nfor k in " + order + "; do eval \"echo \\\"\\${$((k + 1))}\\\"\" >> " + quoted(hostfile)
        + "; done\nSLURM_HOSTFILE=" + quoted(hostfile)
        + "\nexport SLURM_HOSTFILE\nexec srun --distribution=arbitrary --ntasks=" + std::to_string(m_devices.size())
        + " --kill-on-bad-exit=1 " + quoted(std::filesystem::absolute(m_agent).string()) + " --connect "
        + quoted(address + ":" + std::to_string(port)) + " --secret-file " + quoted((m_dir / "secret").string()) + "\n";
    const auto path = m_dir / "job.sh";
    std::ofstream out(path, std::ios::trunc);
    out << s;
    out.close();
    if (!out)
        throw std::runtime_error(path.string() + ": cannot write the job script");
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path.string();
}

void SlurmLauncher::submit(const std::string& script, const LaunchContext& context)
{
    int tasksPerNode = 1, gpusPerNode = 0;
    for (const auto& n : m_needs) {
        tasksPerNode = std::max(tasksPerNode, n.tasks);
        gpusPerNode = std::max(gpusPerNode, n.gpus);
    }
    // Every node of the job alike (the largest plan node's tasks and GPUs), so that any plan node fits any of them
    // in the order Slurm lists them.
    std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=pipewright-" + context.run_id,
        "--output=" + (m_dir / "slurm-%j.out").string(), "--nodes=" + std::to_string(m_needs.size()),
        "--ntasks-per-node=" + std::to_string(tasksPerNode)};
    if (m_threads > 1)
        argv.push_back("--cpus-per-task=" + std::to_string(m_threads));
    if (gpusPerNode > 0)
        argv.push_back("--gres=gpu:" + std::to_string(gpusPerNode));
    if (!m_options.partition.empty())
        argv.push_back("--partition=" + m_options.partition);
    if (!m_options.account.empty())
        argv.push_back("--account=" + m_options.account);
    if (!m_options.time.empty())
        argv.push_back("--time=" + m_options.time);
    argv.insert(argv.end(), m_options.sbatch_args.begin(), m_options.sbatch_args.end());
    argv.push_back(script);
    const auto r = runTool(argv, 60s);
    std::string id = r.output.substr(0, r.output.find_first_of(";\n"));
    if (!r.ok() || id.empty() || id.find_first_not_of("0123456789_") != std::string::npos)
        throw std::runtime_error("cannot submit the run to Slurm: " + describeFailure(argv, r));
    m_job->id = id;
    if (context.log)
        context.log("submitted Slurm job " + id + " (" + std::to_string(m_needs.size()) + " nodes, "
            + std::to_string(m_devices.size()) + " agents"
            + (gpusPerNode > 0 ? ", " + std::to_string(gpusPerNode) + " GPUs a node" : "")
            + "); its output: " + (m_dir / ("slurm-" + id + ".out")).string());
}

void SlurmLauncher::prepare(const std::vector<int>& devices, const std::string&, const LaunchContext& context)
{
    if (devices != m_devices)
        throw std::runtime_error("the Slurm launcher was made for other devices than the run's");
    // The run directory: the job script, the secret and the hostfile, only for the user (0700; the secret 0600).
    std::filesystem::path root = m_options.run_root;
    if (root.empty()) {
        const char* home = std::getenv("HOME");
        root = std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "pipewright" / "slurm";
    }
    std::filesystem::create_directories(root);
    m_dir = std::filesystem::absolute(root / context.run_id);
    if (::mkdir(m_dir.c_str(), 0700) != 0)
        throw std::runtime_error(m_dir.string() + ": cannot make the run directory: " + std::strerror(errno));
    m_secret.resize(32);
    agents::crypto::randomBytes(m_secret);
    const auto secretPath = m_dir / "secret";
    const int sf = ::open(secretPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (sf < 0 || ::write(sf, m_secret.data(), m_secret.size()) != static_cast<ssize_t>(m_secret.size())) {
        if (sf >= 0)
            ::close(sf);
        throw std::runtime_error(secretPath.string() + ": cannot write the run's secret");
    }
    ::close(sf);
    m_connected.assign(m_devices.size(), -1);
    m_peers.assign(m_devices.size(), "");
    const int port = listen();
    submit(writeScript(port), context);
    awaitAgents(context);
}

void SlurmLauncher::takeAnswer(Pending& p, const LaunchContext& context)
{
    char buffer[64];
    const ssize_t n
        = ::recv(p.fd, buffer, std::min(sizeof buffer, agents::kConnectAnswerBytes - p.answer.size()), MSG_DONTWAIT);
    if (n > 0)
        p.answer.append(buffer, static_cast<std::size_t>(n));
    const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    if (p.answer.size() < agents::kConnectAnswerBytes && !closed && Clock::now() < p.deadline)
        return;
    const std::string peer = peerAddress(p.fd);
    const long task
        = p.answer.size() == agents::kConnectAnswerBytes ? agents::checkConnectAnswer(m_secret, p.nonce, p.answer) : -1;
    if (task < 0 || task >= static_cast<long>(m_devices.size()) || m_connected[static_cast<std::size_t>(task)] >= 0) {
        if (context.log)
            context.log("refused a connection from " + peer
                + (task < 0 ? ": it did not prove the run's secret"
                            : ": task " + std::to_string(task)
                            + " is not one "
                              "waited for"));
        ::close(p.fd);
    } else {
        m_connected[static_cast<std::size_t>(task)] = p.fd;
        m_peers[static_cast<std::size_t>(task)] = peer;
    }
    p.fd = -1;
}

void SlurmLauncher::awaitAgents(const LaunchContext& context)
{
    auto nextState = Clock::now();
    std::string said;
    while (std::count(m_connected.begin(), m_connected.end(), -1) > 0) {
        if (context.stop_requested && context.stop_requested())
            return;
        if (Clock::now() >= nextState) {
            nextState = Clock::now() + 1s;
            const auto s = slurmJobState(m_job->id);
            const std::string now = s.state == "PENDING" ? "Slurm job " + m_job->id + " is pending (" + s.reason + ")"
                : s.state == "RUNNING" ? "Slurm job " + m_job->id + " runs on " + s.nodes + "; waiting for its agents"
                                       : "";
            if (!now.empty() && now != said && context.log)
                context.log(now);
            if (!now.empty())
                said = now;
            if (s.ended())
                throw std::runtime_error("the Slurm job " + m_job->id + " ended before its agents connected: " + s.state
                    + (s.reason.empty() || s.reason == "None" ? "" : " (" + s.reason + ")") + outputTail());
        }
        std::vector<pollfd> fds = {{m_listen, POLLIN, 0}};
        for (const auto& p : m_pending)
            fds.push_back({p.fd, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR)
            throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
        for (std::size_t i = 1; i < fds.size(); ++i)
            if (fds[i].revents || Clock::now() >= m_pending[i - 1].deadline)
                takeAnswer(m_pending[i - 1], context);
        std::erase_if(m_pending, [](const Pending& p) { return p.fd < 0; });
        if (fds[0].revents & POLLIN) {
            const int fd = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
            Pending p;
            p.fd = fd;
            p.nonce.resize(agents::kConnectNonceBytes);
            try {
                agents::crypto::randomBytes(
                    {reinterpret_cast<std::uint8_t*>(p.nonce.data()), p.nonce.size()}); // a fresh challenge
            } catch (const std::exception&) {
                ::close(fd);
                throw;
            }
            const std::string hello = std::string(agents::kConnectHello) + p.nonce;
            if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
                ::close(fd);
                continue;
            }
            p.deadline = Clock::now() + 10s;
            m_pending.push_back(std::move(p));
        }
    }
    closeListener(); // every agent is here: nobody else is let in
    if (context.log)
        context.log("every agent of Slurm job " + m_job->id + " connected");
}

std::string SlurmLauncher::outputTail() const
{
    std::ifstream in(m_dir / ("slurm-" + m_job->id + ".out"));
    std::string text {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (text.size() > 2000)
        text = "..." + text.substr(text.size() - 2000);
    while (!text.empty() && text.back() == '\n')
        text.pop_back();
    return text.empty() ? "" : "; its output: " + text;
}

std::optional<std::string> SlurmLauncher::allocationEnded()
{
    if (m_ended || m_job->id.empty() || m_job->cancelled)
        return m_job->cancelled ? std::nullopt : m_ended;
    auto s = slurmJobState(m_job->id);
    // A job being cancelled is COMPLETING first while its steps are ended, then CANCELLED: wait for the verdict.
    for (const auto until = Clock::now() + 5s; s.state == "COMPLETING" && Clock::now() < until;) {
        std::this_thread::sleep_for(200ms);
        s = slurmJobState(m_job->id);
    }
    if (!s.endedBySlurm())
        return std::nullopt;
    m_ended = "the Slurm job " + m_job->id + " ended: " + s.state
        + (s.reason.empty() || s.reason == "None" ? "" : " (" + s.reason + ")");
    return m_ended;
}

std::vector<std::string> SlurmLauncher::teardown()
{
    std::vector<std::string> lines;
    closeListener();
    if (!m_job->id.empty()) {
        auto s = slurmJobState(m_job->id);
        // A job whose agents all ended on their own completes at once; one still running after a moment is ended.
        for (const auto until = Clock::now() + 3s; !s.ended() && Clock::now() < until;) {
            std::this_thread::sleep_for(100ms);
            s = slurmJobState(m_job->id);
        }
        const bool cancelling = !s.ended() && !m_job->cancelled;
        if (cancelling)
            m_job->cancel();
        for (const auto until = Clock::now() + 60s; (!s.ended() || s.state == "COMPLETING") && Clock::now() < until;) {
            std::this_thread::sleep_for(200ms);
            s = slurmJobState(m_job->id);
        }
        if (!s.ended() || s.state == "COMPLETING")
            lines.push_back("Slurm job " + m_job->id + " is still " + s.state
                + " a minute after scancel: its agents may still run (scancel " + m_job->id + ")");
        else
            lines.push_back("Slurm job " + m_job->id + " ended: " + s.state
                + (m_job->cancelled ? " (cancelled by the controller)" : "") + "; no agent of it runs");
    }
    // The secret and the job's files go; the job's output stays for a post-mortem.
    std::error_code ec;
    if (!m_dir.empty())
        for (const char* file : {"secret", "hostfile", "job.sh"})
            std::filesystem::remove(m_dir / file, ec);
    return lines;
}

} // namespace

std::unique_ptr<Launcher> makeSlurmLauncher(const RunRequest& request)
{
    return std::make_unique<SlurmLauncher>(request);
}

} // namespace pw::app
