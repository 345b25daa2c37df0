// SPDX-License-Identifier: MIT
#include "remote.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <future>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "agents/protocol/crypto.h"
#include "planner/errors.h"

namespace pw::app {

using agents::shellQuote;
using agents::SshChannel;
using agents::SshSession;

namespace {

/// SHA-256 of a file, in hex (OpenSSL, crypto.h): the agent build's name in the hosts' cache.
std::string sha256Of(const std::string& bytes)
{
    const agents::crypto::Digest digest = agents::crypto::sha256(bytes);
    std::ostringstream hex;
    for (std::size_t i = 0; i < digest.size(); ++i)
        hex << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(digest[i]);
    return hex.str();
}

std::string readFile(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read the agent " + path.string());
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

} // namespace

agents::SshEndpoint endpointOf(const planner::Node& node)
{
    agents::SshEndpoint e;
    e.host = node.host.empty() ? node.name : node.host;
    e.port = node.ssh_port == 22 ? 0 : node.ssh_port;
    e.user = node.ssh_user;
    e.identity_file = node.ssh_identity_file;
    return e;
}

std::string shellCommand(const std::map<std::string, std::string>& env, const std::vector<std::string>& words)
{
    std::string out;
    if (!env.empty()) {
        out = "env";
        for (const auto& [name, value] : env)
            out += " " + shellQuote(name + "=" + value);
    }
    for (const auto& w : words)
        out += (out.empty() ? "" : " ") + shellQuote(w);
    return out;
}

void requireEnvValues(const planner::Cluster& cluster, const std::vector<int>& nodes)
{
    for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
        if (!nodes.empty() && std::find(nodes.begin(), nodes.end(), static_cast<int>(i)) == nodes.end())
            continue;
        const auto redacted = cluster.nodes[i].redactedEnv();
        if (!redacted.empty())
            throw planner::InputError({}, 0, "/nodes/" + std::to_string(i) + "/env/" + redacted.front(),
                "the value was redacted when this file was written (files keep only the names of env_keep's "
                "variables' values): deploy with the cluster file that holds it");
    }
}

/// @brief One node of the run: its session (opened again when it dropped) and its directories.
struct RemoteDeployment::Node
{
    planner::Node node;
    agents::SshEndpoint endpoint;
    const agents::SshSettings* settings = nullptr;
    std::unique_ptr<SshSession> session;
    /// Sessions given up (a link that went silent): the agents' channels on them are freed before they are.
    std::vector<std::unique_ptr<SshSession>> retired;
    /// A new session being opened in the background (connecting to a host that does not answer takes up to the
    /// SSH timeout, which the controller's loop must not spend blocked).
    std::future<std::unique_ptr<SshSession>> opening;
    int generation = 0; ///< sessions opened so far: which one an agent's channel belongs to
    std::string where; ///< user@host:port
    std::string host; ///< after ~/.ssh/config
    std::string runDir, agentPath;

    /// The session, opened now (blocking) when there is none or it dropped; throws SshError.
    SshSession& connected()
    {
        if (opening.valid()) {
            auto pending = std::move(opening);
            try {
                adopt(pending.get());
            } catch (const std::exception&) {
                // Failed in the background: one more try, here, below.
            }
        }
        if (!session || !session->connected()) {
            retire();
            adopt(SshSession::open(endpoint, *settings));
        }
        return *session;
    }

    /// Without blocking: the session when it is up; nullptr while a new one is being opened in the background
    /// (started here when there is none); throws SshError when that attempt failed (the next call starts another).
    SshSession* tryConnected()
    {
        if (!opening.valid() && session && session->connected())
            return session.get();
        if (!opening.valid()) {
            retire();
            // A copy for the other thread; no question about a host key there (the key was recorded at the first
            // contact: an unknown one now is refused, a changed one always is).
            agents::SshSettings copy = *settings;
            copy.confirm_new_host_key = nullptr;
            opening = std::async(
                std::launch::async, [e = endpoint, copy = std::move(copy)] { return SshSession::open(e, copy); });
            return nullptr;
        }
        if (opening.wait_for(std::chrono::seconds {0}) != std::future_status::ready)
            return nullptr;
        auto pending = std::move(opening);
        adopt(pending.get());
        return session.get();
    }

    /// Gives up the session of `of_generation` when it is still the current one (a link that went silent).
    void abandon(int of_generation)
    {
        if (of_generation == generation && !opening.valid())
            retire();
    }

private:
    void adopt(std::unique_ptr<SshSession> s)
    {
        session = std::move(s);
        ++generation;
        where = session->name();
    }
    void retire()
    {
        if (!session)
            return;
        session->abandon();
        retired.push_back(std::move(session));
    }
};

namespace {

/// @brief A served agent through an SSH channel.
class SshAgent final : public AgentConnection
{
public:
    SshAgent(RemoteDeployment::Node& node, std::string socket, std::unique_ptr<SshChannel> channel)
        : m_node(node)
        , m_socket(std::move(socket))
        , m_channel(std::move(channel))
        , m_generation(node.generation)
    {
    }

    std::string where() const override { return m_node.where; }
    int pollFd() const override { return current() ? m_node.session->socket() : -1; }
    bool buffersInput() const override { return m_channel != nullptr; }

    long read(std::span<char> buffer) override
    {
        if (!m_channel)
            return -1;
        const long n = m_channel->readSome(buffer);
        if (n < 0)
            m_channel.reset();
        return n;
    }

    void write(std::string_view bytes) override
    {
        if (!m_channel || !current())
            throw std::runtime_error("the link to the agent is down");
        m_channel->write(std::span<const char>(bytes.data(), bytes.size()));
    }

    std::optional<std::string> ended(bool) override
    {
        try {
            if (m_node.opening.valid() || !m_node.session || !m_node.session->connected())
                return std::nullopt; // cannot tell: the caller reconnects
            // Alive: its pid file names a process that is not a zombie (an agent's parent is init, which may
            // take its time to reap it, and kill -0 succeeds on a zombie).
            const auto r = m_node.session->run("p=$(cat " + shellQuote(m_socket + ".pid")
                    + " 2>/dev/null); s=$(cut -d')' -f2 /proc/$p/stat 2>/dev/null | cut -c2); "
                      "if [ -n \"$p\" ] && [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo alive; else tail -n 2 "
                    + shellQuote(m_socket + ".log") + " 2>/dev/null; fi",
                {}, std::chrono::seconds {10});
            if (r.out.rfind("alive", 0) == 0)
                return std::nullopt;
            std::string tail = r.out;
            while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' '))
                tail.pop_back();
            for (char& c : tail)
                if (c == '\n')
                    c = ' ';
            return "ended" + (tail.empty() ? std::string() : " (its log: " + tail + ")");
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }

    void signal(int signal) override
    {
        try {
            if (!m_node.opening.valid() && m_node.session && m_node.session->connected())
                m_node.session->run("kill -" + std::to_string(signal) + " \"$(cat " + shellQuote(m_socket + ".pid")
                        + " 2>/dev/null)\" 2>/dev/null",
                    {}, std::chrono::seconds {10});
        } catch (const std::exception&) {
        }
    }

    void abandonLink() override
    {
        // The session first: closing the channel politely would wait on the dead link.
        m_node.abandon(m_generation);
        m_channel.reset();
    }

    bool canReconnect() const override { return true; }
    bool reconnect() override
    {
        m_channel.reset();
        SshSession* session = m_node.tryConnected(); // throws SshError when the host was not reached this time
        if (!session)
            return false; // still connecting, in the background
        // The new relay takes the served agent over from the old one, which may still hang on the silent link.
        m_channel = session->start(shellCommand({}, {m_node.agentPath, "--attach", m_socket}));
        m_generation = m_node.generation;
        return true;
    }

private:
    /// Whether the channel belongs to the node's current session, and that session is up.
    bool current() const
    {
        return m_channel && !m_node.opening.valid() && m_node.session && m_node.session->connected()
            && m_generation == m_node.generation;
    }

    RemoteDeployment::Node& m_node;
    std::string m_socket;
    std::unique_ptr<SshChannel> m_channel;
    int m_generation = 0; ///< of the session the channel is on
};

} // namespace

RemoteDeployment::RemoteDeployment(
    const planner::Cluster& cluster, std::string run_id, RemoteOptions options, std::filesystem::path agent_executable)
    : m_cluster(cluster)
    , m_runId(std::move(run_id))
    , m_options(std::move(options))
    , m_agent(std::move(agent_executable))
{
    m_nodes.resize(m_cluster.nodes.size());
}

RemoteDeployment::~RemoteDeployment() = default;

RemoteDeployment::Node& RemoteDeployment::nodeOf(int device)
{
    auto& n = m_nodes.at(static_cast<std::size_t>(m_cluster.device(device).node));
    if (!n)
        throw std::logic_error("device " + std::to_string(device) + " is not part of the deployment");
    return *n;
}

const RemoteDeployment::Node& RemoteDeployment::nodeOf(int device) const
{
    return const_cast<RemoteDeployment*>(this)->nodeOf(device);
}

AgentBuild AgentBuild::load(const std::filesystem::path& executable)
{
    AgentBuild b;
    b.bytes = readFile(executable);
    b.sha256 = sha256Of(b.bytes);
    return b;
}

std::string remoteRoot(agents::SshSession& session, const std::string& configured)
{
    if (!configured.empty())
        return configured;
    const auto home = session.run("printf '%s' \"$HOME\"");
    if (home.exit_status != 0 || home.out.empty() || home.out.front() != '/')
        throw agents::SshError(
            agents::SshFailure::Remote, session.name(), "cannot find the home directory: " + home.err);
    return home.out + "/.cache/pipewright";
}

std::pair<std::string, bool> installAgent(
    agents::SshSession& session, const std::string& root, const AgentBuild& build, const std::string& upload_tag)
{
    const std::string dir = root + "/agents/" + build.sha256;
    const std::string path = dir + "/pipewright-agent";
    const auto made = session.run("mkdir -p " + shellQuote(dir) + " && if test -x " + shellQuote(path)
        + "; then echo cached; else echo missing; fi");
    if (made.exit_status != 0)
        throw agents::SshError(agents::SshFailure::Remote, session.name(), "cannot make " + dir + ": " + made.err);
    if (made.out.rfind("missing", 0) != 0)
        return {path, false};
    const std::string partial = path + ".part-" + upload_tag;
    session.upload(build.bytes, partial, 0755);
    const auto moved = session.run("mv -f " + shellQuote(partial) + " " + shellQuote(path));
    if (moved.exit_status != 0)
        throw agents::SshError(agents::SshFailure::Transfer, session.name(), "cannot install the agent: " + moved.err);
    return {path, true};
}

LeftoverRuns removeLeftoverRuns(
    agents::SshSession& session, const std::string& root, const std::string& keep, bool include_kept)
{
    // The markers first, then the processes: a run whose marker is gone has an agent process that already listens
    // (it removes the marker), so that a run being deployed right now is never taken for a leftover.
    const std::string script = "r=" + shellQuote(root + "/runs") + "\nkeep=" + shellQuote(keep)
        + "\nkept=" + (include_kept ? "0" : "1")
        + "\n[ -d \"$r\" ] || exit 0"
          "\ncand="
          "\nfor d in \"$r\"/*/; do [ -d \"$d\" ] || continue; d=${d%/}; n=${d##*/}; [ \"$n\" = \"$keep\" ] && "
          "continue; "
          "if [ -e \"$d/.preparing\" ] && [ -n \"$(find \"$d/.preparing\" -mmin -10 2>/dev/null)\" ]; then echo "
          "\"inuse:$n\"; "
          "continue; fi; if [ \"$kept\" = 1 ] && [ -e \"$d/.kept\" ]; then echo \"kept:$n\"; continue; fi; "
          "cand=\"$cand $n\"; done"
          "\nps=$(for p in /proc/[0-9]*; do tr '\\000' ' ' < \"$p/cmdline\" 2>/dev/null; echo; done)"
          "\nfor n in $cand; do d=\"$r/$n\"; case \"$ps\" in *\"pipewright-agent --serve $d/\"*|"
          "*\"pipewright-agent --session $d/\"*|*\"pipewright-agent --attach $d/\"*) echo \"inuse:$n\";; "
          "*) rm -rf -- \"$d\" && echo \"removed:$n\";; esac; done\n";
    const auto r = session.run("sh -s", script, std::chrono::seconds {30});
    if (r.exit_status != 0)
        throw agents::SshError(agents::SshFailure::Remote, session.name(),
            "cannot look for leftover run directories in " + root + "/runs: " + r.err);
    LeftoverRuns out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        const auto colon = line.find(':');
        if (colon == std::string::npos)
            continue;
        const std::string what = line.substr(0, colon), run = line.substr(colon + 1);
        (what == "removed" ? out.removed : what == "kept" ? out.kept : out.in_use).push_back(run);
    }
    return out;
}

void RemoteDeployment::prepare(
    const std::vector<int>& devices, const std::string& plan_json, const std::function<void(const std::string&)>& log)
{
    std::optional<AgentBuild> build;
    for (int d : devices) {
        const int index = m_cluster.device(d).node;
        auto& slot = m_nodes.at(static_cast<std::size_t>(index));
        if (slot)
            continue;
        slot = std::make_unique<Node>();
        Node& n = *slot;
        n.node = m_cluster.nodes[static_cast<std::size_t>(index)];
        n.endpoint = endpointOf(n.node);
        n.settings = &m_options.ssh;
        auto& session = n.connected();
        n.host = session.hostKey().host;
        if (n.host.size() > 1 && n.host.front() == '[') // "[name]:port"
            n.host = n.host.substr(1, n.host.find(']') - 1);
        if (!build)
            build = AgentBuild::load(m_agent);
        const std::string root = remoteRoot(session, m_options.remote_root);
        n.runDir = root + "/runs/" + m_runId;
        // What earlier runs left on this host (it was out of reach at their teardown, or their controller died).
        if (const auto left = removeLeftoverRuns(session, root, m_runId); !left.removed.empty() && log) {
            std::string names;
            for (const auto& run : left.removed)
                names += (names.empty() ? "" : ", ") + run;
            log(n.where + ": removed the leftover directories of earlier runs (no agent of theirs runs): " + names);
        }
        // The marker keeps this directory from another controller's cleanup until the agent listens.
        const auto made = session.run(
            "mkdir -p -m 700 " + shellQuote(n.runDir) + " && : > " + shellQuote(n.runDir + "/.preparing"));
        if (made.exit_status != 0)
            throw agents::SshError(
                agents::SshFailure::Remote, n.where, "cannot make the run directory " + n.runDir + ": " + made.err);
        const auto [path, uploaded] = installAgent(session, root, *build, m_runId);
        n.agentPath = path;
        if (log)
            log(n.where
                + (uploaded ? ": uploaded the agent (" + std::to_string(build->bytes.size() >> 20) + " MiB, build "
                            : ": the agent of this build is there (")
                + build->sha256.substr(0, 12) + ")");
        session.upload(plan_json, n.runDir + "/plan.json", 0600);
    }
}

std::unique_ptr<AgentConnection> RemoteDeployment::startAgent(int device)
{
    Node& n = nodeOf(device);
    const std::string socket = n.runDir + "/agent-" + std::to_string(device) + ".sock";
    // The node's env values may be secrets: not on the command line, which every user of the host can read
    // (/proc/PID/cmdline), but in a file of the run's (0600) that the shell reads and removes before the agent starts.
    std::string script;
    for (const auto& [name, value] : n.node.env)
        script += "export " + name + "=" + shellQuote(value) + "\n";
    std::string sourceEnv;
    if (!script.empty()) {
        const std::string file = n.runDir + "/agent-" + std::to_string(device) + ".env";
        n.connected().upload(std::span<const char>(script.data(), script.size()), file, 0600);
        sourceEnv = ". " + shellQuote(file) + " && rm -f " + shellQuote(file) + " && ";
    }
    const std::string command = "cd " + shellQuote(n.runDir) + " && " + sourceEnv + "exec "
        + shellCommand(n.node.env.contains("OMP_WAIT_POLICY") // as the local launcher: idle OpenMP threads sleep
                ? std::map<std::string, std::string> {}
                : std::map<std::string, std::string> {{"OMP_WAIT_POLICY", "PASSIVE"}},
            {n.agentPath, "--session", socket, "--linger", std::to_string(m_options.linger.count())});
    return std::make_unique<SshAgent>(n, socket, n.connected().start(command));
}

std::string RemoteDeployment::journalPath(int device) const
{
    return nodeOf(device).runDir + "/agent-" + std::to_string(device) + ".journal";
}

std::string RemoteDeployment::glooHost(int device) const
{
    return nodeOf(device).host;
}

std::vector<std::string> RemoteDeployment::teardown()
{
    std::vector<std::string> report;
    for (auto& slot : m_nodes) {
        if (!slot)
            continue;
        Node& n = *slot;
        // The run's processes, found through /proc (no procps needed): served agents, their relays, attaches.
        const std::string script = "d=" + shellQuote(n.runDir)
            + "\nrun() { for p in /proc/[0-9]*; do c=$(tr '\\000' ' ' < \"$p/cmdline\" 2>/dev/null) || continue; "
              "case \"$c\" in *\"pipewright-agent --serve $d/\"*|*\"pipewright-agent --session $d/\"*|"
              "*\"pipewright-agent --attach $d/\"*) s=$(cut -d')' -f2 \"$p/stat\" 2>/dev/null | cut -c2); "
              "[ \"$s\" = Z ] || echo \"${p#/proc/}\";; esac; done | tr '\\n' ' '; }"
              "\nfor i in $(seq 30); do [ -z \"$(run)\" ] && break; sleep 0.1; done"
              "\nleft=$(run)"
              "\nif [ -n \"$left\" ]; then kill -TERM $left 2>/dev/null; sleep 1; kill -KILL $(run) 2>/dev/null; sleep "
              "0.2; fi"
              "\nstill=$(run)"
              "\necho \"left:$left\"\necho \"still:$still\"\n"
            + (m_options.keep_run_dir ? std::string(": > \"$d/.kept\"\n") : "rm -rf -- \"$d\"\n");
        try {
            auto& session = n.connected();
            const auto r = session.run("sh -s", script, std::chrono::seconds {30});
            std::string left, still;
            std::istringstream lines(r.out);
            for (std::string line; std::getline(lines, line);) {
                if (line.rfind("left:", 0) == 0)
                    left = line.substr(5);
                else if (line.rfind("still:", 0) == 0)
                    still = line.substr(6);
            }
            const auto trim = [](std::string s) {
                while (!s.empty() && s.back() == ' ')
                    s.pop_back();
                return s;
            };
            left = trim(left);
            still = trim(still);
            std::string line = n.where + ": ";
            if (!still.empty())
                line += "agent processes still alive after SIGKILL: " + still;
            else if (!left.empty())
                line += "had to stop agent processes left running (pids " + left + "); none is left";
            else
                line += "no agent process of the run is left";
            line += m_options.keep_run_dir ? "; run directory kept: " + n.runDir : "; run directory removed";
            report.push_back(line);
        } catch (const std::exception& e) {
            report.push_back(n.where + ": cannot check for agent processes of the run: " + e.what()
                + " (they stop themselves after " + std::to_string(m_options.linger.count())
                + " s without a controller)");
        }
    }
    return report;
}

} // namespace pw::app
