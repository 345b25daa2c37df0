// SPDX-License-Identifier: MIT
// The Slurm launcher: a run as a batch job. `sbatch` gets a script (written to a private run directory) whose
// `srun` starts one agent per device of the plan inside the allocation, the plan's nodes mapped onto the
// allocation's nodes in order (SLURM_JOB_NODELIST, placed with SLURM_HOSTFILE). Each agent connects back to the
// controller over TCP (`pipewright-agent --connect HOST:PORT --secret-file F`), proves it holds the run's secret
// (HMAC-SHA256 over the controller's nonce: agents/protocol/connect_auth.h) and then speaks the protocol it speaks
// over SSH. Stop cancels the job (`scancel`); a job the scheduler ended fails the run with its state and reason.
// Before anything is submitted, the partition is checked against the plan (`sinfo`, `scontrol show node`).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "planner/plan.h"

namespace pw::app {

struct RunRequest;
class Launcher;

/// @brief How a run goes through Slurm (`run --slurm`).
struct SlurmOptions
{
    std::string partition; ///< --partition; empty: the cluster's default partition
    std::string account; ///< --account; empty: the user's default
    std::string time; ///< --time, as sbatch takes it ("30", "2:00:00", "1-0"); empty: the partition's default
    std::vector<std::string> sbatch_args; ///< more sbatch options, each one word ("--qos=high", "--exclusive")
    /// The address the compute nodes reach the controller at; empty: this machine's hostname.
    std::string controller_address;
    /// Where the run directories (job script, secret, hostfile, the job's output) go: a folder the compute nodes
    /// see at the same path (a shared filesystem), as they read the secret there. Empty: ~/.cache/pipewright/slurm.
    std::filesystem::path run_root;
    /// CPUs each agent gets (sbatch --cpus-per-task), and its threads: the run's --threads (1 when not given, the
    /// CPU Slurm gives a task by default).
    int cpus_per_task = 1;

    bool operator==(const SlurmOptions&) const = default;
};

/// @brief A node of the cluster as `scontrol show node` describes it.
struct SlurmNode
{
    std::string name;
    int cpus = 0;
    int gpus = 0; ///< Gres gpu count (0: none)
    std::string state; ///< "IDLE", "MIXED", "DOWN*", "IDLE+DRAIN", ...
    std::vector<std::string> partitions;
    /// Whether a job can get it: not down, drained, failing, not responding or a future node.
    bool usable() const;

    bool operator==(const SlurmNode&) const = default;
};

/// @brief What one node of the plan asks of its node of the allocation: a task per device, a GPU per GPU device.
struct SlurmNeed
{
    std::string plan_node; ///< the plan's cluster node
    int tasks = 0;
    int gpus = 0;
    int cpus = 0; ///< tasks x CPUs per task

    bool operator==(const SlurmNeed&) const = default;
};

/// The plan's nodes that hold one of its devices, in the order of their devices: what the job asks for.
std::vector<SlurmNeed> slurmNeeds(const planner::Plan& plan, int cpus_per_task = 1);

/// "KEY=VALUE KEY=VALUE ..." (a line of `scontrol -o`) as a map; values may hold spaces only where Slurm puts
/// none, so a word without '=' is joined to the value before it.
std::map<std::string, std::string> parseSlurmFields(const std::string& line);

/// The nodes in `scontrol show node -o` output (one line each).
std::vector<SlurmNode> parseSlurmNodes(const std::string& scontrol_output);

/// @brief Whether a partition can hold a plan: what pre-flight says, and why not when it cannot.
struct SlurmFit
{
    std::string partition; ///< the one checked (the default when none was given)
    std::vector<std::string> lines; ///< what was checked, a line each
    std::string refusal; ///< empty when the plan fits

    bool operator==(const SlurmFit&) const = default;
};

/// Checks the plan against `nodes` of `partition` (up or not): a node of the partition for every node of the
/// plan, each with CPUs for its tasks and GPUs (Gres) for its GPU devices (best fit, largest needs first).
SlurmFit fitSlurmNodes(const planner::Plan& plan, const std::string& partition, bool partition_up,
    const std::vector<SlurmNode>& nodes, int cpus_per_task = 1);

/// Asks Slurm (`sinfo`, `scontrol show node`; SLURM_CONF as the environment says) whether the partition exists,
/// is up and holds the plan. Throws planner::InputError when Slurm's commands cannot be run.
SlurmFit checkSlurmFit(const planner::Plan& plan, const SlurmOptions& options);

/// checkSlurmFit, throwing planner::InputError with the refusal when the plan does not fit: what `run --slurm`
/// does before it records or submits anything.
void requireSlurmFit(const planner::Plan& plan, const SlurmOptions& options);

/// The launcher for `request.slurm` (app/run/launcher.h).
std::unique_ptr<Launcher> makeSlurmLauncher(const RunRequest& request);

/// @brief What `scontrol show job -o ID` says of a job.
struct SlurmJobState
{
    std::string state; ///< JobState: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ...; empty: unknown job
    std::string reason; ///< Reason: Resources, Priority, None, ...
    std::string nodes; ///< NodeList
    /// Whether it ended (or is ending: COMPLETING counts): no more agent of it will start.
    bool ended() const;
    /// Whether Slurm ended it (cancelled, out of time, a node failed, preempted) rather than its tasks.
    bool endedBySlurm() const;

    bool operator==(const SlurmJobState&) const = default;
};
SlurmJobState slurmJobState(const std::string& job_id);

} // namespace pw::app
