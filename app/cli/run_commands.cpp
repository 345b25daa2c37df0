// SPDX-License-Identifier: MIT
#include "run_commands.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "app/history/history.h"
#include "app/run/compare_runs.h"
#include "app/run/comparison.h"
#include "app/run/controller.h"
#include "app/run/diagnosis.h"
#include "app/run/preflight.h"
#include "app/run/run_checks.h"
#include "app/run/snapshot.h"
#include "commands.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/schedule.h"
#include "planner/sim/calibration.h"
#include "planner/units.h"
#include "report.h"

namespace pw::cli {

using planner::InputError;

namespace {

app::RunController* g_running = nullptr;

void onInterrupt(int)
{
    if (g_running)
        g_running->stop(); // only sets an atomic flag: safe in a signal handler
}

agents::DataSpec dataSpec(const RunOptions& o, std::uint64_t seed)
{
    agents::DataSpec d;
    d.seed = seed;
    if (o.data.empty())
        return d;
    std::ifstream in(o.data, std::ios::binary);
    if (!in)
        throw InputError(o.data + ": cannot open the data file");
    std::int32_t magic = 0;
    in.read(reinterpret_cast<char*>(&magic), sizeof magic);
    d.kind = magic == 20240520 ? agents::DataKind::Tokens : agents::DataKind::Text;
    d.path = std::filesystem::absolute(o.data).string();
    return d;
}

std::string milliseconds(double seconds)
{
    return fixedText(seconds * 1e3, 2) + " ms";
}

} // namespace

app::HistoryStore openHistory(const std::string& path)
{
    auto store = app::HistoryStore::open(path.empty() ? app::defaultHistoryPath() : std::filesystem::path(path));
    store.markInterrupted();
    return store;
}

app::HistoryStore readHistory(const std::string& path)
{
    return app::HistoryStore::open(
        path.empty() ? app::defaultHistoryPath() : std::filesystem::path(path), app::HistoryStore::Access::ReadOnly);
}

app::RunRecord findRun(app::HistoryStore& h, const std::string& id)
{
    if (id == "latest") {
        auto runs = h.listRuns(); // newest first
        if (runs.empty())
            throw InputError("no run in " + h.path().string() + " yet ('latest' names the newest)");
        return runs.front();
    }
    if (auto r = h.run(id))
        return *r;
    std::vector<app::RunRecord> matches;
    for (auto& r : h.listRuns())
        if (r.id.rfind(id, 0) == 0)
            matches.push_back(r);
    if (matches.size() == 1)
        return matches.front();
    throw InputError(matches.empty()
            ? "no run '" + id + "' in " + h.path().string()
            : "'" + id + "' matches " + std::to_string(matches.size()) + " runs: give more of the id");
}

int runPlan(const RunOptions& o, std::ostream& out, std::ostream& err)
{
    if (int(o.local) + int(!o.cluster.empty()) + int(o.slurm) != 1)
        throw InputError("run: give --local (agents on this machine), --cluster CLUSTER.json (over SSH) or --slurm "
                         "(a Slurm batch job), one of them");
    if (!o.slurm
        && (!o.partition.empty() || !o.account.empty() || !o.time.empty() || !o.sbatch_args.empty()
            || !o.controller_address.empty() || !o.slurm_dir.empty()))
        throw InputError(
            "--partition, --account, --time, --sbatch-arg, --controller-address and --slurm-dir go with --slurm");
    if (o.cluster.empty()
        && (o.accept_new_host_keys || !o.known_hosts.empty() || o.keep_run_dir || !o.remote_root.empty()))
        throw InputError("--known-hosts, --accept-new-host-keys, --keep-run-dir and --remote-root go with --cluster");
    app::RunRequest req;
    try {
        req.plan = planner::loadPlan(o.plan);
    } catch (const InputError& e) {
        throw e.inFile(o.plan);
    }
    if (!o.cluster.empty()) {
        // The cluster file says how to reach the nodes (host, ssh_port, ssh_user, ssh_identity_file, env); the
        // plan's devices must be its devices.
        planner::Cluster cluster;
        try {
            cluster = planner::loadCluster(o.cluster);
            app::requireEnvValues(cluster);
        } catch (const InputError& e) {
            throw e.inFile(o.cluster);
        }
        if (cluster.deviceCount() != req.plan.cluster->deviceCount())
            throw InputError(o.cluster + ": the cluster has " + std::to_string(cluster.deviceCount())
                + " devices, the plan's " + std::to_string(req.plan.cluster->deviceCount())
                + ": deploy a plan made for this cluster");
        req.plan.cluster = cluster;
        try {
            req.plan.validate();
        } catch (const InputError& e) {
            throw InputError(o.cluster + ": the plan does not fit this cluster: " + e.what());
        }
        app::RemoteOptions remote;
        remote.ssh.known_hosts = o.known_hosts;
        remote.ssh.accept_new_host_keys = o.accept_new_host_keys;
        remote.keep_run_dir = o.keep_run_dir;
        remote.remote_root = o.remote_root;
        req.remote = remote;
    }
    if (o.slurm) {
        app::SlurmOptions slurm;
        slurm.partition = o.partition;
        slurm.account = o.account;
        slurm.time = o.time;
        slurm.sbatch_args = o.sbatch_args;
        slurm.controller_address = o.controller_address;
        slurm.run_root = o.slurm_dir;
        req.slurm = slurm;
    }
    req.plan_label = std::filesystem::path(o.plan).filename().string();
    req.training = o.training;
    req.training.seed = app::parseSeed(o.seed);
    req.training.data = dataSpec(o, req.training.seed);
    req.training.init_checkpoint = o.init.empty() ? "" : std::filesystem::absolute(o.init).string();
    req.training.save_checkpoint = o.save.empty() ? "" : std::filesystem::absolute(o.save).string();
    req.threads = o.threads;
    req.stop_on_nonfinite = o.stop_on_nonfinite;
    req.force = o.force;
    if (!(o.stall_timeout_s >= 1) || o.stall_timeout_s > 1e6)
        throw InputError("--stall-timeout " + std::to_string(o.stall_timeout_s) + ": give seconds from 1 to 1e6");
    req.stall_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.stall_timeout_s * 1000));
    req.on_stall = o.on_stall == "wait" ? app::RunRequest::OnStall::Wait : app::RunRequest::OnStall::Fail;
    // The options are checked before the history is opened (created): a refused run leaves nothing behind.
    app::validateRunSettings(req);
    const char* env = std::getenv("PIPEWRIGHT_AGENT");
    req.agent_executable = env && *env ? std::filesystem::path(env) : app::defaultAgentExecutable("/proc/self/exe");

    // So is everything else the controller refuses (the plan, --init/--data, this machine's cores and memory): a
    // refused run creates no history file either; the controller takes what was checked (and simulated) as it is.
    auto checked = app::checkRun(req);
    auto history = openHistory(o.history);
    app::RunController controller(req, history);
    const bool tty = isatty(STDERR_FILENO);
    app::RunObserver observer;
    observer.progress = [&](const app::RunProgress& p) {
        err << (tty ? "\r" : "") << "step " << p.step << "/" << p.steps << "  loss " << fixedText(p.loss, 4) << "  "
            << fixedText(p.tokens_per_s, 0) << " tokens/s  " << fixedText(p.elapsed_s, 1) << " s"
            << (tty ? "   " : "\n") << std::flush;
    };
    observer.log = [&](const std::string& agent, const std::string& level, const std::string& text) {
        // A remote run's deployment (uploads, teardown), where each agent landed and each reconnect and resume of a
        // dropped link are worth a line too (the controller says these at level info).
        if (level == "error" || level == "warning" || (!req.local() && (agent == "controller" || level == "info")))
            err << (tty ? "\n" : "") << agent << ": " << level << ": " << text << "\n";
    };
    g_running = &controller;
    // Ctrl+C, kill, and the terminal closing (SIGHUP) all stop the run the same way: recorded as stopped.
    struct sigaction sa = {};
    sa.sa_handler = onInterrupt;
    constexpr std::array kStopSignals = {SIGINT, SIGTERM, SIGHUP};
    std::array<struct sigaction, kStopSignals.size()> old {};
    for (std::size_t i = 0; i < kStopSignals.size(); ++i)
        sigaction(kStopSignals[i], &sa, &old[i]);
    const auto restore = [&] {
        g_running = nullptr;
        for (std::size_t i = 0; i < kStopSignals.size(); ++i)
            sigaction(kStopSignals[i], &old[i], nullptr);
    };
    app::RunOutcome r;
    try {
        r = controller.run(observer, std::move(checked));
    } catch (...) {
        restore();
        throw;
    }
    restore();
    if (tty)
        err << "\n";
    const double finalLoss = r.losses.empty() ? NAN : r.losses.back();
    if (o.json) {
        nlohmann::json j = {{"run_id", r.run_id}, {"status", std::string(app::toString(r.status))},
            {"message", r.message}, {"losses", r.losses}, {"tokens_per_s", r.tokens_per_s}, {"seconds", r.seconds},
            {"spans", r.spans}, {"history", history.path().string()}};
        j["final_loss"] = std::isnan(finalLoss) ? nlohmann::json(nullptr) : nlohmann::json(finalLoss);
        out << j.dump(2) << "\n";
    } else {
        out << "run " << r.run_id << ": " << app::toString(r.status)
            << (r.message.empty() ? "" : " (" + r.message + ")") << "\n";
        if (!r.losses.empty())
            out << "  " << r.losses.size() << " steps, final loss " << fixedText(finalLoss, 4) << ", "
                << fixedText(r.tokens_per_s, 0) << " tokens/s, " << fixedText(r.seconds, 1) << " s, " << r.spans
                << " spans\n";
        out << "  history: " << history.path().string() << " (pipewright-cli history show " << r.run_id << ")\n";
    }
    return r.status == app::RunStatus::Succeeded ? 0 : kExitRunFailed;
}

namespace {

/// preflight PLAN --slurm: whether the partition holds the plan, a line per check.
int slurmPreflight(const PreflightOptions& o, std::ostream& out, std::ostream& err)
{
    planner::Plan plan;
    try {
        plan = planner::loadPlan(o.cluster);
    } catch (const InputError& e) {
        throw e.inFile(o.cluster);
    }
    app::SlurmOptions options;
    options.partition = o.partition;
    const auto fit = app::checkSlurmFit(plan, options);
    if (o.json) {
        out << nlohmann::json {{"partition", fit.partition}, {"fits", fit.refusal.empty()}, {"checks", fit.lines},
            {"refusal", fit.refusal}}
                   .dump(2)
            << "\n";
    } else {
        for (const auto& line : fit.lines)
            err << "  " << line << "\n";
        (fit.refusal.empty() ? err : out)
            << (fit.refusal.empty() ? "  ok: the plan fits" : "  FAIL  " + fit.refusal) << "\n";
    }
    return fit.refusal.empty() ? 0 : 1;
}

} // namespace

int preflightCommand(const PreflightOptions& o, std::ostream& out, std::ostream& err)
{
    if (o.slurm)
        return slurmPreflight(o, out, err);
    if (!o.partition.empty())
        throw InputError("--partition goes with --slurm");
    planner::Cluster cluster;
    try {
        cluster = planner::loadCluster(o.cluster);
    } catch (const InputError& e) {
        throw e.inFile(o.cluster);
    }
    std::optional<planner::Plan> plan;
    if (!o.plan.empty()) {
        try {
            plan = planner::loadPlan(o.plan);
        } catch (const InputError& e) {
            throw e.inFile(o.plan);
        }
        if (plan->cluster->deviceCount() != cluster.deviceCount())
            throw InputError(o.cluster + ": the cluster has " + std::to_string(cluster.deviceCount())
                + " devices, the plan's " + std::to_string(plan->cluster->deviceCount()));
        plan->cluster = cluster;
    }
    app::PreflightOptions options;
    options.ssh.known_hosts = o.known_hosts;
    options.ssh.accept_new_host_keys = o.accept_new_host_keys;
    options.remote_root = o.remote_root;
    const char* env = std::getenv("PIPEWRIGHT_AGENT");
    options.agent_executable = env && *env ? std::filesystem::path(env) : app::defaultAgentExecutable("/proc/self/exe");
    const auto checks = app::preflight(cluster, plan ? &*plan : nullptr, options, [&](const app::PreflightCheck& c) {
        if (!o.json)
            err << (c.ok ? "  ok    " : "  FAIL  ") << c.node << " (" << c.where << ")  " << c.check << ": " << c.detail
                << (c.fix.empty() ? "" : "\n          fix: " + c.fix) << "\n";
    });
    const bool all = std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.ok; });
    if (o.json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& c : checks)
            j.push_back({{"node", c.node}, {"where", c.where}, {"check", c.check}, {"ok", c.ok}, {"detail", c.detail},
                {"fix", c.fix}});
        out << nlohmann::json({{"ok", all}, {"checks", j}}).dump(2) << "\n";
    } else {
        out << (all ? "pre-flight passed: " : "pre-flight FAILED: ")
            << std::count_if(checks.begin(), checks.end(), [](const auto& c) { return c.ok; }) << " of "
            << checks.size() << " checks passed\n";
    }
    return all ? 0 : 1;
}

int teardownCommand(const TeardownOptions& o, std::ostream& out, std::ostream& err)
{
    planner::Cluster cluster;
    try {
        cluster = planner::loadCluster(o.cluster);
    } catch (const InputError& e) {
        throw e.inFile(o.cluster);
    }
    agents::SshSettings ssh;
    ssh.known_hosts = o.known_hosts;
    ssh.accept_new_host_keys = o.accept_new_host_keys;
    int status = 0;
    std::vector<agents::SshEndpoint> done; // nodes on one host and account share its run directories
    const auto join = [](const std::vector<std::string>& runs) {
        std::string s;
        for (const auto& r : runs)
            s += (s.empty() ? "" : ", ") + r;
        return s;
    };
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& node : cluster.nodes) {
        const auto endpoint = app::endpointOf(node);
        if (std::find(done.begin(), done.end(), endpoint) != done.end())
            continue;
        done.push_back(endpoint);
        try {
            auto session = agents::SshSession::open(endpoint, ssh);
            const std::string root = app::remoteRoot(*session, o.remote_root);
            const auto left = app::removeLeftoverRuns(*session, root, {}, true);
            if (o.json) {
                nodes.push_back({{"node", node.name}, {"host", session->name()}, {"runs_dir", root + "/runs"},
                    {"removed", left.removed}, {"in_use", left.in_use}});
                continue;
            }
            out << node.name << " (" << session->name() << "): ";
            if (left.removed.empty())
                out << "no leftover run directory in " << root << "/runs";
            else
                out << "removed " << left.removed.size() << " run director" << (left.removed.size() == 1 ? "y" : "ies")
                    << " in " << root << "/runs: " << join(left.removed);
            if (!left.in_use.empty())
                out << "; kept " << join(left.in_use) << " (an agent of the run is running, or it is being deployed)";
            out << "\n";
        } catch (const std::exception& e) {
            if (o.json)
                nodes.push_back({{"node", node.name}, {"error", e.what()}});
            else
                err << node.name << ": " << e.what() << "\n";
            status = 1;
        }
    }
    if (o.json)
        out << nlohmann::json {{"nodes", nodes}}.dump(2) << "\n";
    return status;
}

void historyCompare(const HistoryOptions& o, std::ostream& out)
{
    if (o.runs.size() < 2)
        throw UsageError("history compare: give two runs or more");
    auto h = readHistory(o.history);
    std::vector<app::RunSnapshot> snapshots;
    for (const auto& id : o.runs)
        snapshots.push_back(app::loadRunSnapshot(h, findRun(h, id).id));
    const auto c = app::compareRuns(snapshots);
    const auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    if (o.json) {
        nlohmann::json runs = nlohmann::json::array();
        for (const auto& r : c.runs) {
            nlohmann::json stages = nlohmann::json::array();
            for (const auto& st : r.stages)
                stages.push_back({{"compute_s", st.compute_s}, {"idle_s", st.idle_s}, {"iteration_s", st.iteration_s}});
            runs.push_back({{"run_id", r.run_id}, {"label", r.label}, {"status", r.status}, {"steps", r.steps},
                {"first_loss", number(r.first_loss)}, {"final_loss", number(r.final_loss)},
                {"tokens_per_s", r.tokens_per_s}, {"iteration_s", r.iteration_s},
                {"predicted_iteration_s", r.predicted_iteration_s}, {"prediction_error", r.prediction_error},
                {"stages", stages}});
            nlohmann::json causes;
            for (const auto& field : planner::causeFields())
                causes[std::string(field.name)] = r.causes.*field.seconds;
            runs.back()["time_by_cause_per_step_s"] = causes;
            runs.back()["grew"] = c.grew[runs.size() - 1];
        }
        nlohmann::json diffs = nlohmann::json::array();
        for (const auto& d : c.differences)
            diffs.push_back({{"field", d.field}, {"values", d.values}});
        nlohmann::json deltas = nlohmann::json::array();
        for (std::size_t s = 0; s < c.compute_delta_s.size(); ++s) {
            nlohmann::json cs = nlohmann::json::array(), is = nlohmann::json::array();
            for (double v : c.compute_delta_s[s])
                cs.push_back(number(v));
            for (double v : c.idle_delta_s[s])
                is.push_back(number(v));
            deltas.push_back({{"stage", s}, {"compute_delta_s", cs}, {"idle_delta_s", is}});
        }
        out << nlohmann::json({{"runs", runs}, {"differences", diffs}, {"stages", deltas}}).dump(2) << "\n";
        return;
    }
    out << "compare " << c.runs.size() << " runs (deltas against the first)\n";
    out << "  run                        status      steps  first loss  final loss  tokens/s  iteration\n";
    for (const auto& r : c.runs) {
        out << "  " << std::left << std::setw(26) << r.run_id << " " << std::setw(11) << r.status << std::right
            << std::setw(5) << r.steps << "  " << std::setw(10)
            << (std::isnan(r.first_loss) ? "-" : fixedText(r.first_loss, 4)) << "  " << std::setw(10)
            << (std::isnan(r.final_loss) ? "-" : fixedText(r.final_loss, 4)) << "  " << std::setw(8)
            << fixedText(r.tokens_per_s, 0) << "  " << milliseconds(r.iteration_s) << "\n";
    }
    if (c.differences.empty())
        out << "configuration: the same\n";
    else {
        out << "configuration differences:\n";
        for (const auto& d : c.differences) {
            out << "  " << d.field << ":";
            for (std::size_t i = 0; i < d.values.size(); ++i)
                out << (i ? " | " : " ") << d.values[i];
            out << "\n";
        }
    }
    out << "per stage and step, measured compute / idle (bubble):\n";
    for (std::size_t s = 0; s < c.compute_delta_s.size(); ++s) {
        out << "  stage " << s << ":";
        for (std::size_t r = 0; r < c.runs.size(); ++r) {
            if (s >= c.runs[r].stages.size()) {
                out << "   run " << r + 1 << ": -";
                continue;
            }
            const auto& st = c.runs[r].stages[s];
            out << "   run " << r + 1 << ": " << milliseconds(st.compute_s) << " / " << milliseconds(st.idle_s);
            if (r > 0 && !std::isnan(c.compute_delta_s[s][r]))
                out << " (" << (c.compute_delta_s[s][r] >= 0 ? "+" : "") << milliseconds(c.compute_delta_s[s][r])
                    << " / " << (c.idle_delta_s[s][r] >= 0 ? "+" : "") << milliseconds(c.idle_delta_s[s][r]) << ")";
        }
        out << "\n";
    }
    out << "time by cause per step, the mean over each run's devices:\n";
    for (std::size_t r = 0; r < c.runs.size(); ++r) {
        out << "  run " << r + 1 << ":";
        for (const auto& field : planner::causeFields())
            out << "  " << field.name << " " << milliseconds(c.runs[r].causes.*field.seconds);
        if (!c.grew[r].empty())
            out << "  (grew most: " << c.grew[r] << ")";
        out << "\n";
    }
}

void historyList(const HistoryOptions& o, std::ostream& out)
{
    // Listing creates nothing: a missing file (or directory) has no runs.
    const std::filesystem::path file = o.history.empty() ? app::defaultHistoryPath() : std::filesystem::path(o.history);
    std::error_code ec;
    const bool exists = std::filesystem::exists(file, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) // a folder one may not enter: not "no history yet"
        throw app::HistoryError(file.string() + ": cannot look at it: " + ec.message());
    if (!exists) {
        if (o.json)
            out << "[]\n";
        else
            out << "(no runs in " << file.string() << ": no history file there yet)\n";
        return;
    }
    auto h = readHistory(o.history);
    app::RunFilter f;
    if (!o.status.empty())
        f.status = app::runStatusFromString(o.status);
    const auto runs = h.listRuns(f);
    if (o.json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : runs)
            j.push_back({{"run_id", r.id}, {"label", r.label}, {"status", std::string(app::toString(r.status))},
                {"message", r.status_message}, {"started_unix_s", r.started_unix_s}, {"ended_unix_s", r.ended_unix_s},
                {"steps", r.steps_done}, {"steps_planned", r.steps_planned}, {"tags", r.tags}, {"launcher", r.launcher},
                {"job_id", r.job_id}});
        out << j.dump(2) << "\n";
        return;
    }
    // Steps done of those planned; the duration up to the end (an interrupted run's last recorded event).
    out << std::left << std::setw(26) << "run" << std::setw(12) << "status" << std::setw(16) << "steps" << std::setw(10)
        << "duration"
        << "plan\n";
    for (const auto& r : runs) {
        const std::string duration
            = r.ended_unix_s > 0 ? fixedText(std::max(0.0, r.ended_unix_s - r.started_unix_s), 1) + " s" : "-";
        out << std::left << std::setw(26) << r.id << std::setw(12) << app::toString(r.status) << std::setw(16)
            << (std::to_string(r.steps_done) + "/" + std::to_string(r.steps_planned) + " ") << std::setw(10)
            << (duration + " ") << r.label << "\n";
    }
    if (runs.empty())
        out << "(no runs in " << h.path().string() << ")\n";
}

namespace {

/// `text` right-aligned in `width` columns, with at least one space before it: a wide value pushes the row on
/// instead of running into the column before ("14.36 ms5688.61 ms").
std::string cell(const std::string& text, int width)
{
    return std::string(static_cast<std::size_t>(std::max(1, width - static_cast<int>(text.size()))), ' ') + text;
}

} // namespace

/// One action of a flight recorder, for people: "RecvActivation stage 0 mb 3 from device 0, 12.001 s -> in
/// progress".
std::string recordedAction(const app::RecordedAction& r)
{
    const planner::Span& s = r.span;
    std::ostringstream line;
    line << planner::toString(s.kind) << " stage " << s.stage;
    if (s.microbatch >= 0)
        line << " mb " << s.microbatch;
    if (s.peer >= 0)
        line << (planner::isSend(s.kind)  ? " to device "
                : planner::isRecv(s.kind) ? " from device "
                                          : " with device ")
             << s.peer;
    if (s.bytes > 0)
        line << ", " << planner::formatBytes(s.bytes);
    line << ", " << fixedText(s.t0, 3) << " s -> ";
    if (r.in_progress)
        line << "in progress";
    else
        line << fixedText(s.t1, 3) << " s";
    return line.str();
}

/// The time by cause of history show --json: per device the causes summed over its complete steps (seconds), the
/// peers it waited on beyond the plan, the overlap per communication kind, the stragglers.
static nlohmann::json timeByCauseJson(const app::RunDiagnosis& d)
{
    const auto& t = d.causes;
    nlohmann::json devices = nlohmann::json::array();
    for (int device = 0; device < t.deviceCount(); ++device) {
        const auto c = t.device(device);
        std::map<int, double> late;
        for (const auto& s : t.steps)
            if (s.device == device)
                for (const auto& l : s.late_by)
                    late[l.peer] += l.seconds;
        nlohmann::json lateJson = nlohmann::json::array();
        for (const auto& [peer, seconds] : late)
            lateJson.push_back({{"peer", peer}, {"seconds", seconds}});
        devices.push_back({{"device", device}, {"time_s", c.total()}, {"compute_s", c.compute_s},
            {"p2p_exposed_s", c.p2p_exposed_s}, {"collective_exposed_s", c.collective_exposed_s},
            {"bubble_s", c.bubble_s}, {"late_s", c.late_s}, {"host_gap_s", c.host_gap_s}, {"late_by", lateJson}});
    }
    nlohmann::json overlap = nlohmann::json::array();
    for (const auto& o : t.overlap)
        overlap.push_back({{"kind", std::string(planner::toString(o.kind))}, {"exposed_s", o.exposed_s},
            {"overlapped_s", o.overlapped_s}, {"overlap_percent", o.percent()}});
    nlohmann::json stragglers = nlohmann::json::array();
    for (const auto& s : d.stragglers)
        stragglers.push_back({{"device", s.device}, {"peer", s.peer}, {"kind", std::string(planner::toString(s.kind))},
            {"slowdown", s.slowdown}, {"extra_s_per_step", s.extra_s}, {"since_step", s.since_step},
            {"last_step", s.last_step}, {"text", s.text()}});
    return {{"steps", t.stepCount()}, {"scale", t.scale}, {"devices", devices}, {"overlap", overlap},
        {"stragglers", stragglers}};
}

void historyShow(const HistoryOptions& o, std::ostream& out)
{
    auto h = readHistory(o.history);
    const auto r = findRun(h, o.run);
    const auto plan = planner::planFromJson(nlohmann::json::parse(r.plan_json));
    const auto measured = h.measuredTimeline(r.id);
    const auto predicted = h.predictedTimeline(r.id);
    const auto losses = h.metrics(r.id, "loss");
    // Why slow: every complete step of every device by cause, and the stragglers of the last complete step.
    const auto diagnosis = app::diagnoseRun(plan, std::max(1, static_cast<int>(r.steps_planned)), measured, predicted);
    // Steps: those with a loss, or the complete steps measured (a run imported from traces has no loss).
    const int steps = !losses.empty() ? static_cast<int>(losses.size()) : diagnosis.causes.stepCount();
    const auto cmp = app::compareRun(plan, predicted, static_cast<int>(r.predicted_steps), measured, steps);
    const auto memory = app::compareMemory(plan, app::measuredPeakMemory(measured));
    const auto stalls = h.stalls(r.id);
    const auto recorder = h.flightRecorder(r.id);
    const auto clocks = h.agentClocks(r.id); // what every measured span was moved by onto the controller's clock
    // The calibrated costs' prediction of the same steps as the stored one (of the run's steps when none is stored).
    std::optional<app::RunComparison> calibrated;
    if (!o.costs.empty()) {
        const int n = r.predicted_steps > 0 ? static_cast<int>(r.predicted_steps) : std::max(1, steps);
        const auto model = planner::loadCostModel(o.costs, plan);
        calibrated = app::compareRun(plan, app::predictSteps(plan, n, model), n, measured, steps, &model);
    }
    if (o.json) {
        nlohmann::json stages = nlohmann::json::array();
        for (const auto& s : cmp.stages)
            stages.push_back({{"stage", s.stage},
                {"predicted",
                    {{"compute_s", s.predicted.compute_s}, {"idle_s", s.predicted.idle_s},
                        {"iteration_s", s.predicted.iteration_s}}},
                {"measured",
                    {{"compute_s", s.measured.compute_s}, {"idle_s", s.measured.idle_s},
                        {"iteration_s", s.measured.iteration_s}}},
                {"compute_error", s.compute_error}, {"iteration_error", s.iteration_error}});
        nlohmann::json ls = nlohmann::json::array();
        for (const auto& l : losses)
            ls.push_back(l.value);
        nlohmann::json mem = nlohmann::json::array();
        for (const auto& m : memory)
            mem.push_back({{"device", m.device},
                {"name",
                    m.device < static_cast<int>(measured.device_names.size())
                        ? measured.device_names[static_cast<std::size_t>(m.device)]
                        : std::string()},
                {"role", plan.deviceRole(m.device)}, {"predicted_peak_bytes", m.predicted_peak_bytes},
                {"measured_peak_bytes", m.measured_peak_bytes}, {"error", m.error}});
        nlohmann::json j({{"run_id", r.id}, {"label", r.label}, {"status", std::string(app::toString(r.status))},
            {"message", r.status_message}, {"losses", ls}, {"spans", measured.spans.size()},
            {"predicted_iteration_s", cmp.predicted_iteration_s}, {"measured_iteration_s", cmp.measured_iteration_s},
            {"iteration_error", cmp.iteration_error}, {"stages", stages}, {"memory", mem}, {"launcher", r.launcher},
            {"job_id", r.job_id}});
        nlohmann::json stallsJson = nlohmann::json::array();
        for (const auto& s : stalls)
            stallsJson.push_back({{"t_s", s.t_s}, {"report", s.report}, {"chain", s.chain}});
        j["stalls"] = stallsJson;
        nlohmann::json recorderJson = nlohmann::json::array();
        for (const auto& a : recorder)
            recorderJson.push_back(
                {{"agent", a.agent}, {"device", a.span.device}, {"kind", std::string(planner::toString(a.span.kind))},
                    {"stage", a.span.stage}, {"microbatch", a.span.microbatch}, {"action", a.span.action},
                    {"peer", a.span.peer}, {"bytes", a.span.bytes}, {"t0", a.span.t0}, {"t1", a.span.t1},
                    {"in_progress", a.in_progress}, {"source", a.source}});
        j["flight_recorder"] = recorderJson;
        nlohmann::json clocksJson = nlohmann::json::array();
        for (const auto& c : clocks)
            clocksJson.push_back({{"agent", c.agent}, {"host", c.host}, {"offset_s", c.offset_s},
                {"uncertainty_s", c.uncertainty_s}, {"samples", c.samples}});
        j["clocks"] = clocksJson;
        nlohmann::json kinds = nlohmann::json::array();
        const auto kindTimes = [](const app::KindTimes& t) {
            return nlohmann::json {{"time_s", t.time_s}, {"actions", t.actions}, {"mean_s", t.mean_s}};
        };
        for (const auto& k : cmp.kinds)
            kinds.push_back({{"kind", std::string(app::toString(k.kind))}, {"predicted", kindTimes(k.predicted)},
                {"measured", kindTimes(k.measured)}, {"error", k.error}, {"counts_match", k.counts_match}});
        j["kinds"] = kinds;
        j["time_by_cause"] = timeByCauseJson(diagnosis);
        if (calibrated) {
            j["costs"] = o.costs;
            j["calibrated_iteration_s"] = calibrated->predicted_iteration_s;
            j["calibrated_iteration_error"] = calibrated->iteration_error;
        }
        out << j.dump(2) << "\n";
        return;
    }
    out << "run " << r.id << " (" << r.label << "): " << app::toString(r.status)
        << (r.status_message.empty() ? "" : " - " + r.status_message) << "\n";
    if (!r.launcher.empty())
        out << "  "
            << (r.launcher == "import"         ? "imported from PyTorch profiler traces"
                       : r.launcher == "local" ? "launched on this machine"
                                               : "launched by " + r.launcher)
            << (r.job_id.empty() ? "" : " as job " + r.job_id) << "\n";
    out << "  plan " << plan.configString() << ", schedule " << plan.schedule.kind << ", " << steps << " of "
        << r.steps_planned << " steps, " << measured.spans.size() << " measured spans\n";
    if (!losses.empty())
        out << "  loss " << fixedText(losses.front().value, 4) << " -> " << fixedText(losses.back().value, 4) << "\n";
    out << "  iteration time: predicted " << milliseconds(cmp.predicted_iteration_s)
        << " (the plan's, as `plan` prints it), measured " << milliseconds(cmp.measured_iteration_s) << " per step ("
        << signedPercent(cmp.iteration_error) << "); per stage: the first " << r.predicted_steps
        << " steps simulated\n";
    if (calibrated)
        out << "  calibrated (" << o.costs << "): predicted " << milliseconds(calibrated->predicted_iteration_s)
            << ", measured " << milliseconds(calibrated->measured_iteration_s) << " ("
            << signedPercent(calibrated->iteration_error) << ")\n";
    out << "  per " << (plan.schedule.chunks > 1 ? "virtual stage" : "stage")
        << " and step; error = measured / predicted - 1 of the compute, and of the device's window (compute + idle)\n";
    out << std::string(24, ' ') << std::setw(19) << "compute: predicted" << std::setw(10) << "measured" << std::setw(10)
        << "error" << std::setw(19) << "idle: predicted" << std::setw(10) << "measured" << std::setw(14)
        << "window error"
        << "\n";
    for (const auto& s : cmp.stages)
        out << "    stage " << std::left << std::setw(14) << s.stage << cell(milliseconds(s.predicted.compute_s), 19)
            << cell(milliseconds(s.measured.compute_s), 10) << cell(signedPercent(s.compute_error), 10)
            << cell(milliseconds(s.predicted.idle_s), 19) << cell(milliseconds(s.measured.idle_s), 10)
            << cell(signedPercent(s.iteration_error), 14) << "\n";
    if (!cmp.kinds.empty()) {
        // Actions per step: whole numbers where the steps ran whole.
        const auto count
            = [](double n) { return std::abs(n - std::round(n)) < 1e-9 ? fixedText(n, 0) : fixedText(n, 2); };
        out << "  per action kind and step: time = its spans summed over every device, mean = per action, error = "
               "measured / predicted - 1;\n  send: the simulator's transfer against the sender's posting of it; "
               "receive: the wait for the data, on both sides\n";
        out << std::string(16, ' ') << std::setw(19) << "time: predicted" << std::setw(10) << "measured"
            << std::setw(12) << "error" << std::setw(19) << "mean: predicted" << std::setw(10) << "measured"
            << std::setw(10) << "actions"
            << "\n";
        std::vector<std::string> differ;
        for (const auto& k : cmp.kinds) {
            const std::string actions = k.counts_match
                ? count(k.measured.actions)
                : count(k.predicted.actions) + " / " + count(k.measured.actions) + " !";
            out << "    " << std::left << std::setw(12) << app::toString(k.kind)
                << cell(milliseconds(k.predicted.time_s), 19) << cell(milliseconds(k.measured.time_s), 10)
                << cell(signedPercent(k.error), 12) << cell(fixedText(k.predicted.mean_s * 1e3, 3) + " ms", 19)
                << cell(fixedText(k.measured.mean_s * 1e3, 3) + " ms", 10) << cell(actions, 10) << "\n";
            if (!k.counts_match)
                differ.push_back(std::string(app::toString(k.kind)) + " " + count(k.predicted.actions) + " predicted, "
                    + count(k.measured.actions) + " measured");
        }
        if (!differ.empty()) {
            out << "  the run did not follow the plan: its actions per step differ from the prediction's (";
            for (std::size_t i = 0; i < differ.size(); ++i)
                out << (i ? "; " : "") << differ[i];
            out << "), or it stopped within a step\n";
        }
    }
    if (!memory.empty()) {
        out << "  memory per device: the planner's predicted peak, the peak the engine's buffers reached on it "
               "(weights, gradients, optimizer state, stashed activations, workspaces), error = measured / predicted - "
               "1\n";
        for (const auto& m : memory) {
            const std::string name = m.device < static_cast<int>(measured.device_names.size())
                ? measured.device_names[static_cast<std::size_t>(m.device)]
                : std::string();
            out << "    device " << std::left << std::setw(4) << m.device << std::setw(28) << name.substr(0, 27)
                << std::right << " predicted " << std::setw(10) << planner::formatBytes(m.predicted_peak_bytes)
                << "  measured " << std::setw(10) << planner::formatBytes(m.measured_peak_bytes) << "  "
                << (m.predicted_peak_bytes > 0 ? signedPercent(m.error) : std::string("(no prediction)"));
            // Which replica and tensor rank of its stage (a tensor-parallel group's devices read as one).
            if (const std::string role = plan.deviceRole(m.device); role.find(',') != std::string::npos)
                out << "   " << role;
            out << "\n";
        }
    }
    if (!clocks.empty()) {
        // issue 30 item 15: the history stores them; the spans above were moved by these onto one clock.
        out << "  clocks: each agent's host clock minus the controller's, as the run measured it (its spans were "
               "moved by it)\n";
        for (const auto& c : clocks)
            out << "    agent " << std::left << std::setw(4) << c.agent << std::setw(24) << c.host.substr(0, 23)
                << std::right << " offset " << planner::formatSeconds(c.offset_s) << " ± "
                << planner::formatSeconds(c.uncertainty_s) << " (" << c.samples << " round trips)\n";
    }
    {
        std::istringstream lines(planner::timeByCauseText(diagnosis.causes, diagnosis.stragglers));
        for (std::string line; std::getline(lines, line);)
            out << "  " << line << "\n";
    }
    for (const auto& s : stalls)
        out << "  stall at " << fixedText(s.t_s, 1) << " s: " << s.report << "\n";
    if (!recorder.empty()) {
        // The last few actions of each device (--json has every one the recorder kept).
        constexpr std::size_t kShown = 8;
        std::map<int, std::vector<const app::RecordedAction*>> byDevice;
        for (const auto& a : recorder)
            byDevice[a.span.device].push_back(&a);
        out << "  flight recorder: each device's last actions before the stall (times from the run's start)\n";
        for (const auto& [device, actions] : byDevice) {
            out << "    device " << device << " (agent " << actions.front()->agent << ", " << actions.size() << " kept"
                << (actions.front()->source == "controller" ? ", as the controller received them: the agent did not "
                                                              "answer"
                                                            : "")
                << ")\n";
            for (std::size_t i = actions.size() > kShown ? actions.size() - kShown : 0; i < actions.size(); ++i)
                out << "      " << recordedAction(*actions[i]) << "\n";
        }
    }
}

void historyExport(const HistoryOptions& o, std::ostream& out)
{
    auto h = readHistory(o.history);
    const auto r = findRun(h, o.run);
    std::ofstream file(o.output, std::ios::trunc);
    if (!file)
        throw InputError(o.output + ": cannot write the file");
    if (o.format == "csv")
        h.exportCsv(r.id, file);
    else
        h.exportChromeTrace(r.id, file);
    if (!file.flush())
        throw InputError(o.output + ": write failed");
    if (o.json)
        out << nlohmann::json {{"run_id", r.id}, {"format", o.format}, {"output", o.output}}.dump(2) << "\n";
    else
        out << "wrote " << o.output << " (" << o.format << " of run " << r.id << ")\n";
}

void historyDelete(const HistoryOptions& o, std::ostream& out)
{
    auto h = openHistory(o.history);
    const auto r = findRun(h, o.run);
    h.deleteRun(r.id);
    if (o.json)
        out << nlohmann::json {{"deleted", r.id}}.dump(2) << "\n";
    else
        out << "deleted run " << r.id << "\n";
}

} // namespace pw::cli
