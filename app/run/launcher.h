// SPDX-License-Identifier: MIT
// Internal to app/run/: the launcher seam of the run controller. A launcher starts the agents of a run and ends
// them: local child processes (launcher.cpp), served agents over SSH (RemoteDeployment, app/run/remote.h) or a
// Slurm batch job whose tasks connect back (app/run/slurm.h). The controller holds one and never asks which: what
// differs between them (where journals go, which address Gloo listens on, what a job ended by its scheduler means,
// what the history records) is asked of it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/run/agent_connection.h"

namespace pw::app {

struct RunRequest;

/// @brief What a launcher may use while it prepares: where it says what it does, and whether a stop was asked
/// (preparing may wait long: a Slurm job pending for its allocation).
struct LaunchContext
{
    std::string run_id;
    std::function<void(const std::string&)> log;
    std::function<bool()> stop_requested;
};

class Launcher
{
public:
    virtual ~Launcher() = default;

    /// "local", "ssh" or "slurm": the history's name for it (runs.launcher, hosts_json).
    virtual std::string kind() const = 0;
    /// Where the agent of `device` runs, for the history's hosts (before anything started: as planned).
    virtual nlohmann::json hostOf(int device) const = 0;
    /// Makes the agents of `devices` ready to start: sessions, uploads, a submitted job and its agents connected.
    /// Throws std::runtime_error (or a subclass) naming what failed; returns early when a stop is asked.
    virtual void prepare(const std::vector<int>& devices, const std::string& plan_json, const LaunchContext& context)
        = 0;
    /// The connection to the agent of `device`, started now or (Slurm) connected during prepare().
    virtual std::unique_ptr<AgentConnection> startAgent(int device) = 0;
    /// The agent's telemetry journal (RunSpec::journal_path); empty: none (its link cannot be resumed).
    virtual std::string journalPath(int /*device*/) const { return {}; }
    /// The address the agent's Gloo transport listens on (RunSpec::gloo_host); empty: 127.0.0.1.
    virtual std::string glooHost(int /*device*/) const { return {}; }
    /// The CUDA device `device` trains on as its agent sees the GPUs, given the one the cluster file names
    /// (`planned`, nullopt for a CPU device): a scheduler may hand a job other GPUs than the file's.
    virtual std::optional<int> cudaDevice(int /*device*/, std::optional<int> planned) const { return planned; }
    /// The threads each agent runs with, where the launcher decides them (a Slurm task's CPUs); nullopt: the
    /// request's, else this machine's cores over the agents.
    virtual std::optional<int> threadsPerAgent() const { return std::nullopt; }
    /// How long a lost agent may be reconnected to before the run fails (0: links are not resumed).
    virtual std::chrono::seconds reconnectFor() const { return std::chrono::seconds {0}; }
    /// Whether the agents' clocks are other hosts' (aligned by the clock probes) rather than this machine's.
    virtual bool remoteClocks() const { return false; }
    /// The scheduler's job of the run once there is one (Slurm's job id), for the history; empty: none.
    virtual std::string jobId() const { return {}; }
    /// Why the run's allocation ended under it (a Slurm job cancelled, out of time, its node failed), when it did;
    /// nullopt while it lives or when there is none. Cheap enough to ask about once a second.
    virtual std::optional<std::string> allocationEnded() { return std::nullopt; }
    /// The run was stopped: ends its allocation now (Slurm: scancel), beside the Stop its agents get. Nothing for
    /// launchers whose agents the controller ends itself.
    virtual void cancel() { }
    /// Ends whatever of the run is still alive and cleans up after it; a line for each thing it found and did.
    virtual std::vector<std::string> teardown() { return {}; }
};

/// The launcher a request asks for: Slurm, SSH (RunRequest::remote) or local processes.
std::unique_ptr<Launcher> makeLauncher(const RunRequest& request);

} // namespace pw::app
