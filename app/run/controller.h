// SPDX-License-Identifier: MIT
// The run controller: starts the agents of a plan through a launcher (local child processes, served agents on the
// cluster's nodes over SSH, or the tasks of a Slurm job: app/run/launcher.h), relays their rendezvous, ingests
// telemetry into the history, notices a dead or stalled agent, stops every agent of a failed run, and records how the
// run ended. No Qt: the CLI and the app both drive it.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agents/protocol/messages.h"
#include "app/history/history.h"
#include "app/run/diagnosis.h"
#include "app/run/remote.h"
#include "app/run/slurm.h"
#include "planner/plan.h"
#include "planner/sim/simulator.h"

namespace pw::app {

/// The steps of a run the controller simulates and stores as its prediction (fewer when the run is shorter).
inline constexpr int kPredictedSteps = 20;

/// @brief What to run and how.
struct RunRequest
{
    planner::Plan plan;
    std::string plan_label; ///< for the history (e.g. the plan file's name)
    /// Steps, data, checkpoints (paths as the agents see them; a saved one is replaced when it exists) and optimizer
    /// settings: sent to every agent as they are (RunSpec::training).
    agents::TrainingOptions training;
    std::optional<int> threads; ///< per agent (at least 1); unset: cores / agents
    /// Start a local run even when it asks more of this machine than it has (more agents or threads than cores,
    /// predicted memory above its RAM: localRunExcess in app/run/run_checks.h); `run --force`.
    bool force = false;
    std::filesystem::path agent_executable; ///< pipewright-agent
    std::chrono::milliseconds heartbeat_timeout {10000}; ///< an agent silent this long is dead
    /// No device of the run finished an action for this long: the run stalled, and the controller names the chain
    /// of waits (app/run/stall_report.h), stores each agent's flight recorder, and acts as `on_stall` says. An
    /// action running more than 10x the plan's prediction (and over 10 s) counts as well. `run --stall-timeout`.
    std::chrono::milliseconds stall_timeout {60000};
    /// What a stall does: fail the run (its message is the report), or log the report and keep waiting
    /// (`run --on-stall fail|wait`).
    enum class OnStall : std::uint8_t { Fail, Wait };
    OnStall on_stall = OnStall::Fail;
    int telemetry_batch = 256;
    /// A step whose loss is NaN or infinite fails the run (after storing it and every step before); false: the
    /// run goes on (the history keeps the non-finite values).
    bool stop_on_nonfinite = true;
    /// Deploy over SSH to the plan's cluster nodes (run --cluster); unset: local agent processes (run --local).
    std::optional<RemoteOptions> remote;
    /// Run as a Slurm batch job whose tasks connect back to the controller (run --slurm); not with `remote`.
    std::optional<SlurmOptions> slurm;

    /// Whether the agents are processes of this machine (neither SSH nor Slurm): what is checked against it.
    bool local() const { return !remote && !slurm; }
};

/// @brief Where a run stands, for progress lines and the run monitor.
struct RunProgress
{
    std::string run_id;
    int step = 0; ///< steps whose loss is known
    int steps = 0;
    double loss = 0; ///< the last step's
    double tokens_per_s = 0; ///< over the steps so far
    double elapsed_s = 0;
};

/// @brief How a run ended.
struct RunOutcome
{
    std::string run_id;
    RunStatus status = RunStatus::Failed;
    std::string message;
    std::vector<double> losses; ///< per step
    double tokens_per_s = 0; ///< trained tokens over the wall time from Start to the last step
    double seconds = 0; ///< from the run's record to its end (the history's started and ended times)
    std::int64_t spans = 0;
};

/// @brief Where one agent of a run stands, for the run monitor's table.
struct AgentStatus
{
    enum class State : std::uint8_t { Starting, Running, Done, Failed, Exited };
    std::string name;
    std::vector<int> devices;
    std::string host; ///< from its Hello (empty until then)
    std::int64_t pid = 0; ///< on its host
    State state = State::Starting;
    std::int64_t step = 0; ///< its last heartbeat's
    double silent_s = 0; ///< since it was last heard from
    std::string message; ///< how it ended

    bool operator==(const AgentStatus&) const = default;
};
/// "starting", "running", "done", "failed", "exited".
std::string_view toString(AgentStatus::State state);

/// @brief Everything the controller reports while a run goes on (called on the controller's thread).
struct RunObserver
{
    /// The run is in the history (with its prediction stored) and its agents are about to start.
    std::function<void(const std::string& run_id)> created;
    /// Every agent's status, when one changes and at least once a second.
    std::function<void(const std::vector<AgentStatus>&)> agents;
    std::function<void(const RunProgress&)> progress;
    std::function<void(std::span<const planner::Span>)> spans; ///< measured, t from the run's start
    std::function<void(const std::string& agent, const std::string& level, const std::string& text)> log;
    /// The run's time by cause and stragglers so far (app/run/diagnosis.h), at most once a second while it runs.
    std::function<void(const RunDiagnosis&)> diagnosis;
};

/// @brief What checkRun() found: the prediction of the run's first steps (simulated for the memory check and
/// stored with the run), or why there is none.
struct CheckedRun
{
    std::optional<planner::SimulationResult> prediction;
    int predicted_steps = 0; ///< min(steps, kPredictedSteps)
    std::string no_prediction; ///< the simulator's error when prediction is empty
};
/// Everything RunController::run refuses before it records the run and starts a process (settings, a plan the
/// engine does not train as planned, --init/--data contents, a local run beyond this machine without `force`,
/// redacted env values of a remote run): throws planner::InputError. A caller that must not even create the history
/// file for a refused run (the CLI) calls it first.
CheckedRun checkRun(const RunRequest& request);

class RunController
{
public:
    RunController(RunRequest request, HistoryStore& history);
    ~RunController();

    /// Runs to the end (blocking): launches the agents, ingests telemetry, records the run. Throws InputError
    /// only before anything started and before the run is recorded (app/run/run_checks.h: settings out of range,
    /// a plan the engine cannot train as planned, --init or --data files that do not fit the plan, a local run
    /// beyond this machine without `force`); afterwards failures end in the outcome.
    RunOutcome run(const RunObserver& observer = {});
    /// The same, with checkRun(request) already done by the caller (its prediction is the one stored).
    RunOutcome run(const RunObserver& observer, CheckedRun checked);
    /// Asks the run to stop (any thread): agents get Stop, then SIGTERM, then SIGKILL after a grace period.
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

/// $PIPEWRIGHT_AGENT when set; else the agent next to the running executable `self` (build tree or install prefix);
/// else "pipewright-agent" on PATH.
std::filesystem::path defaultAgentExecutable(const std::filesystem::path& self);

} // namespace pw::app
