// SPDX-License-Identifier: MIT
// The CLI's execution half: `run` (train a plan with local agents) and `history` (list, show, export, delete).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "agents/protocol/messages.h"
#include "app/history/history.h"

namespace pw::cli {

/// A run started but did not succeed (failed, or stopped): its record is in the history.
inline constexpr int kExitRunFailed = 4;

struct RunOptions
{
    std::string plan;
    bool local = false;
    std::string cluster; ///< deploy over SSH to this cluster file's nodes (instead of --local)
    std::string known_hosts; ///< --known-hosts: another known_hosts file than ~/.ssh/known_hosts
    bool accept_new_host_keys = false;
    bool keep_run_dir = false;
    std::string remote_root; ///< --remote-root: where runs and agent builds go on the hosts
    bool slurm = false; ///< --slurm: a Slurm batch job (app/run/slurm.h) instead of --local or --cluster
    std::string partition, account, time; ///< --partition, --account, --time (sbatch's)
    std::vector<std::string> sbatch_args; ///< --sbatch-arg, each one word for sbatch
    std::string controller_address; ///< --controller-address: where the compute nodes reach this machine
    std::string slurm_dir; ///< --slurm-dir: the run directories' folder, on a filesystem the nodes share
    /// --steps, --lr, --weight-decay, --warmup and --cosine land here; runPlan fills in its seed, data and
    /// checkpoints from the options below, which keep what the user wrote.
    agents::TrainingOptions training;
    std::string data; ///< llm.c token file or a text file (bytes); empty: the synthetic corpus
    std::string init; ///< llm.c checkpoint
    std::string save;
    std::string seed = "1234"; ///< as written: app::parseSeed refuses what is not a uint64
    std::optional<int> threads; ///< per agent; unset: cores / agents
    bool force = false; ///< start a local run beyond this machine's cores or memory
    std::string history; ///< empty: the user's data directory
    bool json = false;
    bool stop_on_nonfinite = true; ///< fail the run (exit kExitRunFailed) at the first NaN or infinite loss
    double stall_timeout_s = 60; ///< --stall-timeout: no device finished an action this long = a stall
    std::string on_stall = "fail"; ///< --on-stall: "fail" the run with the stall report, or "wait" on
};

struct PreflightOptions
{
    std::string cluster; ///< with --slurm: the plan
    bool slurm = false; ///< check a Slurm partition against the plan instead of SSH nodes
    std::string partition; ///< --partition (with --slurm; default: the cluster's default partition)
    std::string plan; ///< only the nodes and devices this plan uses
    std::string known_hosts;
    std::string remote_root;
    bool accept_new_host_keys = false;
    bool json = false;
};

/// pipewright-cli preflight: every check on every node, a line each; exit 0 when all passed, 1 otherwise.
int preflightCommand(const PreflightOptions& o, std::ostream& out, std::ostream& err);

struct TeardownOptions
{
    std::string cluster;
    std::string known_hosts;
    std::string remote_root;
    bool accept_new_host_keys = false;
    bool json = false; ///< one JSON object: per node, what it removed and kept, or its error
};

/// pipewright-cli teardown --cluster FILE: on every node of the cluster, removes the Pipewright run directories
/// (with their journals and logs) that no agent process uses: what runs left where their host was out of reach at
/// teardown or their controller died, and those kept with --keep-run-dir. A line per node says what it removed and
/// what it kept (in use, or being deployed). Exit 0; 1 when a node could not be reached (the others are done).
int teardownCommand(const TeardownOptions& o, std::ostream& out, std::ostream& err);

struct HistoryOptions
{
    std::string history;
    std::string run; ///< show/export/delete: the run id (a unique prefix will do)
    std::vector<std::string> runs; ///< compare: two runs or more
    std::string format = "csv"; ///< export: csv | chrome-trace
    std::string output; ///< export: file
    std::string status; ///< list: only runs of this status
    std::string costs; ///< show: calibrated costs whose prediction to compare with the run too
    std::string plan; ///< import-trace: the plan the traces ran
    std::vector<std::string> traces; ///< import-trace: one PyTorch profiler trace per pipeline rank
    std::string label; ///< import-trace: the run's label
    bool json = false;
};

/// pipewright-cli history import-trace: a torch.distributed.pipelining run of an exported plan, from its ranks'
/// PyTorch profiler traces, recorded as a measured run of the plan (app/run/trace_import.h) with its prediction.
void historyImportTrace(const HistoryOptions& o, std::ostream& out);

/// pipewright-cli history compare: configuration differences, per-stage time and bubble deltas, metric summaries.
void historyCompare(const HistoryOptions& o, std::ostream& out);

/// The history at `path` (the user's data directory when empty), runs of dead controllers marked interrupted.
app::HistoryStore openHistory(const std::string& path);
/// The same, read-only (list, show, export, compare, calibrate): never creates, migrates or marks anything; a
/// missing file is a HistoryError naming it.
app::HistoryStore readHistory(const std::string& path);
/// The run whose id is `id` or starts with it; throws InputError when none or several match.
app::RunRecord findRun(app::HistoryStore& history, const std::string& id);

/// Trains the plan; returns the exit status (0 succeeded, kExitRunFailed otherwise). `err` gets the progress line.
int runPlan(const RunOptions& o, std::ostream& out, std::ostream& err);
void historyList(const HistoryOptions& o, std::ostream& out);
void historyShow(const HistoryOptions& o, std::ostream& out);
void historyExport(const HistoryOptions& o, std::ostream& out);
void historyDelete(const HistoryOptions& o, std::ostream& out);

} // namespace pw::cli
