// SPDX-License-Identifier: MIT
// The run history: every run a controller starts (plan, cluster, status), its measured and predicted spans,
// metrics and logs, in one SQLite file in WAL mode, so that a viewer reads while a controller writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "planner/timeline.h"

namespace pw::app {

/// The schema version this code writes (`PRAGMA user_version`). Older files are migrated step by step on open;
/// newer ones are refused.
inline constexpr int kHistorySchemaVersion = 6;

/// @brief Anything that went wrong with a history file. what() names the file and, for SQLite failures, carries
/// sqlite3_errmsg().
class HistoryError : public std::runtime_error
{
public:
    explicit HistoryError(const std::string& message)
        : std::runtime_error(message)
    {
    }
};

enum class RunStatus : std::uint8_t { Running, Succeeded, Failed, Stopped, Interrupted };
/// "running", "succeeded", "failed", "stopped", "interrupted": the names stored in the file.
std::string_view toString(RunStatus status);
/// The inverse of toString(); throws planner::InputError for an unknown name.
RunStatus runStatusFromString(std::string_view name);

/// @brief One row of the runs table with its tags.
struct RunRecord
{
    std::string id; ///< "r-YYYYMMDD-HHMMSS-xxxx" (UTC, 4 random hex digits)
    std::string plan_json; ///< the plan as given to createRun(), verbatim
    std::string cluster_json;
    std::string hosts_json;
    std::string label;
    RunStatus status = RunStatus::Running;
    std::string status_message;
    double started_unix_s = 0;
    double ended_unix_s = 0; ///< 0 while running; an interrupted run's last recorded event
    std::string controller_host;
    std::int64_t controller_pid = 0;
    std::int64_t steps_planned = 0;
    std::int64_t predicted_steps = 0; ///< the steps the stored prediction covers (0: none stored)
    /// Steps whose loss is recorded (steps_planned is what was asked for); a run imported from traces (launcher
    /// "import") holds complete steps only, and no losses: all of its steps_planned.
    std::int64_t steps_done = 0;
    std::vector<std::string> tags; ///< sorted, no duplicates
    std::string launcher; ///< how its agents were started: "local", "ssh" or "slurm" (empty: not known)
    std::string job_id; ///< the scheduler's job of the run (Slurm's job id); empty: none

    bool operator==(const RunRecord&) const = default;
};

/// @brief What a controller knows when it starts a run.
struct NewRun
{
    std::string plan_json;
    std::string cluster_json;
    std::string hosts_json;
    std::string label;
    std::int64_t steps_planned = 0;
    std::vector<std::string> tags;
    std::string launcher; ///< "local", "ssh" or "slurm"
};

/// @brief A span as telemetry delivers it: the agent that sent it and its number among that agent's spans (from 1,
/// no gaps: Telemetry::first_span + its index in the batch). (run, agent, seq) identifies a span, so that
/// telemetry resumed after a reconnect stores nothing twice.
struct MeasuredSpan
{
    planner::Span span;
    int agent = 0;
    std::int64_t seq = 0;

    bool operator==(const MeasuredSpan&) const = default;
};

/// @brief One value of a named series: loss per step (device -1), memory per device, ...
/// @brief One agent's clock against the controller's, as the run measured it (app/run/clock_offset.h).
struct AgentClock
{
    int agent = 0; ///< the agent's index in the run (its first device's position among the run's agents)
    std::string host;
    double offset_s = 0; ///< the agent host's monotonic clock minus the controller's
    double uncertainty_s = 0; ///< the true offset is within offset_s ± this
    std::int64_t samples = 0; ///< round trips measured

    bool operator==(const AgentClock&) const = default;
};

/// @brief A stall the controller explained (app/run/stall_report.h): when, and the chain of waits it found.
struct StallRecord
{
    double t_s = 0; ///< seconds from the run's start
    std::string report;
    std::vector<int> chain; ///< the devices of the chain, in order

    bool operator==(const StallRecord&) const = default;
};

/// @brief One action of a device's flight recorder: its last actions before a stall (agents keep
/// agents::kFlightRecorderActions per device).
struct RecordedAction
{
    int agent = 0;
    planner::Span span; ///< t0/t1 from the run's start; t1 = t0 while in progress
    bool in_progress = false;
    /// "agent": from the agent's recorder; "controller": an agent that no longer answered, as the controller had
    /// received its actions
    std::string source = "agent";

    bool operator==(const RecordedAction&) const = default;
};

struct MetricSample
{
    int step = 0;
    std::string name;
    double value = 0; ///< may be NaN or infinite (a diverged loss): stored and read back as it was
    double t_s = 0; ///< seconds from the run's t = 0
    int device = -1; ///< -1: the whole run

    bool operator==(const MetricSample&) const = default;
};

/// @brief One line of a run's log.
struct LogEntry
{
    double t_s = 0;
    int agent = -1; ///< -1: the controller
    int device = -1; ///< -1: not about one device
    std::string level; ///< "info", "warning", "error", ...
    std::string text;

    bool operator==(const LogEntry&) const = default;
};

/// @brief Which runs listRuns() returns; empty fields match everything.
struct RunFilter
{
    std::optional<RunStatus> status;
    std::string tag; ///< runs carrying a tag that contains this text (ASCII case-insensitive)
    std::string text; ///< runs whose label contains this text (ASCII case-insensitive)
};

/// @brief Rows per table, for "how big is my history" and for tests.
struct HistoryTotals
{
    std::int64_t runs = 0;
    std::int64_t tags = 0;
    std::int64_t run_devices = 0;
    std::int64_t spans = 0;
    std::int64_t metrics = 0;
    std::int64_t logs = 0;

    bool operator==(const HistoryTotals&) const = default;
};

/// `$XDG_DATA_HOME/pipewright/history.sqlite`, or `~/.local/share/pipewright/history.sqlite` when XDG_DATA_HOME
/// is unset or not absolute (as the XDG base directory specification says).
std::filesystem::path defaultHistoryPath();

/// @brief The history file, open. Every write is one transaction (`BEGIN IMMEDIATE`, so that two processes
/// sharing the file wait for each other under the busy timeout instead of failing); reads that take several
/// queries run in one read transaction and so see one snapshot. Methods taking a run id throw HistoryError
/// "no run 'x' in <file>" for an unknown one. One store is used by one thread at a time; other processes (and
/// other stores) may use the same file concurrently.
///
/// Predicted timelines: spans with source 0 and their counters as metrics named "predicted:<counter>" (step -1,
/// the counter's unit kept in the metrics table), so that metrics() reads them too. Device names (run_devices)
/// are one list per run, shared by the predicted and the measured timeline.
class HistoryStore
{
public:
    enum class Access : std::uint8_t {
        ReadWrite, ///< creates the file (0600) and its directory (0700) when missing, migrates older schemas
        ReadOnly, ///< never writes: the file must exist (a history one may read but not write can be read)
    };
    /// Opens the file; ReadWrite creates it when missing and migrates it. Throws HistoryError naming the file when
    /// it is not SQLite, is an SQLite database of something else, has a newer schema version than
    /// kHistorySchemaVersion (naming both versions), or (ReadOnly) is missing or too old to read without
    /// migrating it; a refused file is left untouched. A ReadOnly store shows the running runs whose controller is
    /// gone (markInterrupted()'s rule) as interrupted, without writing that down; its writing methods throw.
    static HistoryStore open(const std::filesystem::path& path, Access access = Access::ReadWrite);

    HistoryStore(HistoryStore&&) noexcept;
    HistoryStore& operator=(HistoryStore&&) noexcept;
    HistoryStore(const HistoryStore&) = delete;
    HistoryStore& operator=(const HistoryStore&) = delete;
    ~HistoryStore();

    const std::filesystem::path& path() const;

    /// A new run, status running, controlled by this process (getpid(), gethostname()); returns its unique id.
    std::string createRun(const NewRun& run);
    /// The same, recording `controllerPid` as the controller (tests of markInterrupted(), tools that import).
    std::string createRun(const NewRun& run, std::int64_t controllerPid);
    /// Sets the final status (not Running: HistoryError), its message and the end time: now, or `ended_unix_s` (a run
    /// imported from another runtime's traces ends its measured duration after it started).
    void finishRun(const std::string& id, RunStatus status, const std::string& message = {},
        std::optional<double> ended_unix_s = std::nullopt);
    /// Every run still running whose controller ran on this host and no longer exists (kill(pid, 0) fails with
    /// ESRCH) becomes interrupted, ending at its last recorded event; runs of live controllers and of other hosts
    /// are left alone. A controller calls this after open(). Returns how many runs it marked.
    int markInterrupted();
    void addTag(const std::string& id, const std::string& tag);
    void removeTag(const std::string& id, const std::string& tag);
    /// The run and every row that belongs to it, in one transaction.
    void deleteRun(const std::string& id);

    /// Stores the scheduler's job of the run (Slurm's job id), once it is submitted.
    void setJobId(const std::string& id, const std::string& job_id);
    /// Replaces the run's device names (index = device).
    void setDeviceNames(const std::string& id, const std::vector<std::string>& names);
    /// Replaces the run's agent clocks and says which clock its measured spans are on (Host or Aligned).
    void setAgentClocks(const std::string& id, const std::vector<AgentClock>& clocks, planner::ClockDomain clock);
    /// The run's agent clocks, by agent.
    std::vector<AgentClock> agentClocks(const std::string& id);
    /// Adds a stall report to the run, and replaces its flight recorders with `recorder` (ordered per device as
    /// given) unless that is empty.
    void addStall(const std::string& id, const StallRecord& stall, const std::vector<RecordedAction>& recorder);
    /// The run's stall reports, in the order they were added.
    std::vector<StallRecord> stalls(const std::string& id);
    /// The run's flight recorders, by device then the order they were stored in.
    std::vector<RecordedAction> flightRecorder(const std::string& id);
    /// Stores measured spans in one transaction. A span whose (agent, seq) the run already holds is ignored.
    void appendSpans(const std::string& id, std::span<const MeasuredSpan> spans);
    /// The highest span number stored for `agent` in the run, 0 when none: where telemetry resumes.
    std::int64_t lastSequence(const std::string& id, int agent);
    /// Replaces the run's predicted spans and counters with the timeline's, and its device names when the
    /// timeline has any. The prediction covers `steps` steps (a long run's is cut to its first steps).
    void savePredicted(const std::string& id, const planner::Timeline& timeline, std::int64_t steps);
    void appendMetrics(const std::string& id, std::span<const MetricSample> samples);
    void appendLogs(const std::string& id, std::span<const LogEntry> entries);

    /// Runs matching `filter`, newest first.
    std::vector<RunRecord> listRuns(const RunFilter& filter = {});
    /// The run, or nullopt when there is none called `id`.
    std::optional<RunRecord> run(const std::string& id);
    /// Measured spans (ordered by device, then start), clock Host, epoch = the run's start, device names, and
    /// a counter per metric name with device >= 0 (samples ordered by device, then time; "memory" in bytes).
    planner::Timeline measuredTimeline(const std::string& id);
    /// The timeline savePredicted() stored: spans in their order, counters, device names; clock Simulated.
    planner::Timeline predictedTimeline(const std::string& id);
    /// The run's samples called `name`, in the order they were appended.
    std::vector<MetricSample> metrics(const std::string& id, const std::string& name);
    /// The run's log, in the order it was appended.
    std::vector<LogEntry> logs(const std::string& id);

    /// Spans as CSV: a header line "device,lane,kind,stage,microbatch,action,weight_version,peer,bytes,t0_s,t1_s,
    /// agent,seq", then one row per span ordered by device and start (agent and seq empty for predicted spans).
    void exportCsv(const std::string& id, std::ostream& out,
        planner::Timeline::Source source = planner::Timeline::Source::Measured);
    /// The timeline as Chrome Trace Event JSON (planner::writeChromeTrace: opens in Perfetto).
    void exportChromeTrace(const std::string& id, std::ostream& out,
        planner::Timeline::Source source = planner::Timeline::Source::Measured);

    /// `PRAGMA integrity_check`: "ok" for a sound file, otherwise SQLite's findings, one per line.
    std::string integrityCheck();
    HistoryTotals totals();

private:
    struct Impl;
    explicit HistoryStore(std::unique_ptr<Impl> impl);
    Impl& impl();

    std::unique_ptr<Impl> m_impl;
};

} // namespace pw::app
