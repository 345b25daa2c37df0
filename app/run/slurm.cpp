// SPDX-License-Identifier: MIT
// Slurm's side of the Slurm launcher (slurm.h): its client commands, what they say of partitions, nodes and jobs,
// and whether a partition holds a plan (pre-flight, and `run --slurm` before it submits anything). The launcher
// itself is in slurm_launcher.cpp.
#include "slurm.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_devices.h"
#include "planner/errors.h"
#include "slurm_tools.h"

extern char** environ;

namespace pw::app {

namespace slurm_detail {

ToolResult runTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout)
{
    ToolResult r;
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
        r.errors = std::string("pipe: ") + std::strerror(errno);
        for (int fd : {out[0], out[1], err[0], err[1]})
            if (fd >= 0)
                ::close(fd);
        return r;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    if (rc != 0) {
        ::close(out[0]);
        ::close(err[0]);
        r.errors = argv[0] + ": " + std::strerror(rc);
        return r;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    bool timedOut = false;
    char buffer[4096];
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        const auto left
            = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timedOut = true;
            break;
        }
        if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
            if (n > 0)
                (i == 0 ? r.output : r.errors).append(buffer, static_cast<std::size_t>(n));
            else if (n == 0 || errno != EINTR) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
            }
        }
    }
    for (auto& p : fds)
        if (p.fd >= 0)
            ::close(p.fd);
    if (timedOut)
        ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
    if (timedOut) {
        r.errors += argv[0] + ": no answer within "
            + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) + " s";
        r.status = -1;
    } else
        r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

std::string describeFailure(const std::vector<std::string>& argv, const ToolResult& r)
{
    std::string words;
    for (const auto& a : argv)
        words += (words.empty() ? "" : " ") + a;
    std::string why = r.errors.empty() ? r.output : r.errors;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' '))
        why.pop_back();
    return words + (r.status > 0 ? ": exited with status " + std::to_string(r.status) : std::string(": failed"))
        + (why.empty() ? "" : ": " + why);
}

} // namespace slurm_detail

using slurm_detail::describeFailure;
using slurm_detail::runTool;

namespace {

int toInt(const std::string& s)
{
    try {
        return std::stoi(s);
    } catch (const std::exception&) {
        return 0;
    }
}

/// GPUs in a Gres value: "gpu:4", "gpu:a100:2(S:0-1)", "gpu:a100:2,gpu:v100:1", "(null)".
int gresGpus(std::string gres)
{
    // Socket bindings in parentheses may hold commas of their own.
    std::string plain;
    int depth = 0;
    for (char c : gres) {
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
        if (depth == 0 && c != ')')
            plain += c;
    }
    int total = 0;
    std::stringstream entries(plain);
    std::string entry;
    while (std::getline(entries, entry, ',')) {
        if (entry.rfind("gpu", 0) != 0)
            continue;
        const auto colon = entry.rfind(':');
        total += colon == std::string::npos ? 1 : toInt(entry.substr(colon + 1));
    }
    return total;
}

std::string plural(int n, const std::string& word)
{
    return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string describeNeed(const SlurmNeed& n)
{
    return n.plan_node + ": " + plural(n.tasks, "task") + (n.cpus != n.tasks ? ", " + plural(n.cpus, "CPU") : "")
        + (n.gpus > 0 ? ", " + plural(n.gpus, "GPU") : "");
}

std::string describeNode(const SlurmNode& n)
{
    return n.name + ": " + plural(n.cpus, "CPU") + (n.gpus > 0 ? ", " + plural(n.gpus, "GPU") : "");
}

} // namespace

bool SlurmNode::usable() const
{
    for (const char* bad : {"DOWN", "DRAIN", "FAIL", "FUTURE", "INVAL", "POWERED_DOWN", "NOT_RESPONDING"})
        if (state.find(bad) != std::string::npos)
            return false;
    return !state.empty() && state.back() != '*'; // '*': not responding
}

std::vector<SlurmNeed> slurmNeeds(const planner::Plan& plan, int cpus_per_task)
{
    // One task per agent (the devices sharing a GPU are one agent's), one GPU per physical GPU.
    std::vector<SlurmNeed> needs;
    std::vector<int> nodeOf; // needs' cluster node indices
    for (const auto& agent : agentDevices(plan)) {
        const int d = agent.front();
        const int node = plan.cluster->device(d).node;
        auto it = std::find(nodeOf.begin(), nodeOf.end(), node);
        if (it == nodeOf.end()) {
            nodeOf.push_back(node);
            needs.push_back({plan.cluster->nodes[static_cast<std::size_t>(node)].name, 0, 0});
            it = nodeOf.end() - 1;
        }
        auto& need = needs[static_cast<std::size_t>(it - nodeOf.begin())];
        ++need.tasks;
        need.cpus += std::max(1, cpus_per_task);
        if (cudaDeviceOf(*plan.cluster, d))
            ++need.gpus;
    }
    return needs;
}

std::map<std::string, std::string> parseSlurmFields(const std::string& line)
{
    std::map<std::string, std::string> fields;
    std::string last;
    std::stringstream words(line);
    std::string word;
    while (words >> word) {
        const auto eq = word.find('=');
        if (eq == std::string::npos || eq == 0) {
            if (!last.empty())
                fields[last] += " " + word; // "OS=Linux 6.1.0 #1 SMP": a value with spaces
            continue;
        }
        last = word.substr(0, eq);
        fields[last] = word.substr(eq + 1);
    }
    return fields;
}

std::vector<SlurmNode> parseSlurmNodes(const std::string& scontrol_output)
{
    std::vector<SlurmNode> nodes;
    std::stringstream lines(scontrol_output);
    std::string line;
    while (std::getline(lines, line)) {
        auto f = parseSlurmFields(line);
        if (f["NodeName"].empty())
            continue;
        SlurmNode n;
        n.name = f["NodeName"];
        // CPUEfctv (22.05): the CPUs jobs may use, CPUs set aside for the system not counted.
        n.cpus = toInt(f.count("CPUEfctv") ? f["CPUEfctv"] : f["CPUTot"]);
        n.gpus = gresGpus(f["Gres"]);
        n.state = f["State"];
        std::stringstream parts(f["Partitions"]);
        std::string p;
        while (std::getline(parts, p, ','))
            if (!p.empty())
                n.partitions.push_back(p);
        nodes.push_back(std::move(n));
    }
    return nodes;
}

SlurmFit fitSlurmNodes(const planner::Plan& plan, const std::string& partition, bool partition_up,
    const std::vector<SlurmNode>& nodes, int cpus_per_task)
{
    SlurmFit fit;
    fit.partition = partition;
    const auto needs = slurmNeeds(plan, cpus_per_task);
    std::vector<SlurmNode> usable;
    std::string unusable;
    for (const auto& n : nodes) {
        if (std::find(n.partitions.begin(), n.partitions.end(), partition) == n.partitions.end())
            continue;
        if (n.usable())
            usable.push_back(n);
        else
            unusable += (unusable.empty() ? "" : ", ") + n.name + " (" + n.state + ")";
    }
    std::string have;
    for (const auto& n : usable)
        have += (have.empty() ? "" : "; ") + describeNode(n);
    std::string want;
    for (const auto& n : needs)
        want += (want.empty() ? "" : "; ") + describeNeed(n);
    fit.lines.push_back("partition " + partition + ": " + (partition_up ? "up" : "not up") + ", "
        + plural(static_cast<int>(usable.size()), "usable node") + (have.empty() ? "" : " (" + have + ")")
        + (unusable.empty() ? "" : "; not usable: " + unusable));
    fit.lines.push_back("the plan needs " + plural(static_cast<int>(needs.size()), "node") + " (" + want + ")");
    const std::string head = "the Slurm partition '" + partition + "' cannot hold this plan: ";
    if (!partition_up) {
        fit.refusal = head + "the partition is not up";
        return fit;
    }
    if (needs.size() > usable.size()) {
        fit.refusal = head + "it needs " + plural(static_cast<int>(needs.size()), "node") + " (" + want
            + ") and the partition has " + plural(static_cast<int>(usable.size()), "usable node")
            + (have.empty() ? "" : " (" + have + ")") + (unusable.empty() ? "" : "; not usable: " + unusable);
        return fit;
    }
    // Largest needs first, each on the smallest node that holds it.
    std::vector<SlurmNeed> order = needs;
    std::stable_sort(order.begin(), order.end(),
        [](const SlurmNeed& a, const SlurmNeed& b) { return std::tie(a.gpus, a.cpus) > std::tie(b.gpus, b.cpus); });
    std::vector<bool> taken(usable.size(), false);
    for (const auto& need : order) {
        int best = -1;
        for (std::size_t i = 0; i < usable.size(); ++i) {
            const auto& n = usable[i];
            if (taken[i] || n.cpus < need.cpus || n.gpus < need.gpus)
                continue;
            if (best < 0
                || std::tie(n.gpus, n.cpus) < std::tie(
                       usable[static_cast<std::size_t>(best)].gpus, usable[static_cast<std::size_t>(best)].cpus))
                best = static_cast<int>(i);
        }
        if (best < 0) {
            fit.refusal = head + "no node left for plan node " + describeNeed(need) + " (its usable nodes: " + have
                + "; a node needs the CPUs of its tasks and a GPU, as Gres gpu, per GPU device)";
            return fit;
        }
        taken[static_cast<std::size_t>(best)] = true;
        fit.lines.push_back(
            "plan node " + describeNeed(need) + " fits " + describeNode(usable[static_cast<std::size_t>(best)]));
    }
    return fit;
}

SlurmFit checkSlurmFit(const planner::Plan& plan, const SlurmOptions& options)
{
    const std::vector<std::string> sinfo = {"sinfo", "--noheader", "--format=%P|%a"};
    const auto parts = runTool(sinfo);
    if (!parts.ok())
        throw planner::InputError("cannot ask Slurm for its partitions (is Slurm's client installed, and SLURM_CONF "
                                  "set where the configuration is not the default?): "
            + describeFailure(sinfo, parts));
    std::map<std::string, bool> up;
    std::string fallback;
    std::stringstream lines(parts.output);
    std::string line;
    while (std::getline(lines, line)) {
        const auto bar = line.find('|');
        if (bar == std::string::npos)
            continue;
        std::string name = line.substr(0, bar);
        if (!name.empty() && name.back() == '*') {
            name.pop_back();
            fallback = name;
        }
        up[name] = up[name] || line.substr(bar + 1) == "up";
    }
    std::string partition = options.partition.empty() ? fallback : options.partition;
    if (partition.empty()) {
        std::string names;
        for (const auto& [name, state] : up)
            names += (names.empty() ? "" : ", ") + name;
        throw planner::InputError("Slurm has no default partition: give --partition (" + names + ")");
    }
    if (!up.count(partition)) {
        std::string names;
        for (const auto& [name, state] : up)
            names += (names.empty() ? "" : ", ") + name;
        throw planner::InputError("the Slurm partition '" + partition
            + "' does not exist (partitions: " + (names.empty() ? "none" : names) + ")");
    }
    const std::vector<std::string> show = {"scontrol", "--oneliner", "show", "node"};
    const auto nodes = runTool(show);
    if (!nodes.ok())
        throw planner::InputError("cannot ask Slurm for its nodes: " + describeFailure(show, nodes));
    return fitSlurmNodes(plan, partition, up[partition], parseSlurmNodes(nodes.output), options.cpus_per_task);
}

void requireSlurmFit(const planner::Plan& plan, const SlurmOptions& options)
{
    const auto fit = checkSlurmFit(plan, options);
    if (!fit.refusal.empty())
        throw planner::InputError(fit.refusal);
}

bool SlurmJobState::ended() const
{
    static const std::set<std::string> live = {"", "PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED",
        "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"};
    return !live.count(state);
}

bool SlurmJobState::endedBySlurm() const
{
    static const std::set<std::string> bySlurm
        = {"CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};
    return bySlurm.count(state) > 0;
}

SlurmJobState slurmJobState(const std::string& job_id)
{
    const auto r = runTool({"scontrol", "--oneliner", "show", "job", job_id}, std::chrono::seconds(10));
    SlurmJobState s;
    if (!r.ok()) {
        // A job Slurm no longer knows (purged MinJobAge after it ended) has ended; any other failure says nothing.
        if ((r.errors + r.output).find("Invalid job id") != std::string::npos)
            s.state = "GONE";
        return s;
    }
    auto f = parseSlurmFields(r.output);
    s.state = f["JobState"];
    s.reason = f["Reason"];
    s.nodes = f["NodeList"];
    return s;
}

} // namespace pw::app
