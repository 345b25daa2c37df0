// SPDX-License-Identifier: MIT
// The run history on the sqlite3 C API, through three small RAII wrappers (app/history/sqlite_wrappers.h): the file,
// runs, tags, metrics, logs and agent clocks. Spans and timelines are history_timeline.cpp; the schema and its
// migrations app/history/schema.h.
#include "history.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <system_error>
#include <utility>
#include <vector>

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include "history_file.h"
#include "history_impl.h"
#include "planner/errors.h"
#include "schema.h"
#include "sqlite_wrappers.h"

namespace pw::app {

namespace fs = std::filesystem;
using planner::Timeline;

namespace {

double unixNow()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostName()
{
    std::array<char, 256> name {};
    if (::gethostname(name.data(), name.size() - 1) != 0)
        return {};
    return name.data();
}

/// kill(pid, 0) tells whether a process exists: EPERM means it does (another user's), only ESRCH means gone.
bool processAlive(std::int64_t pid)
{
    if (pid <= 0 || pid > std::numeric_limits<pid_t>::max())
        return false; // 0 and negative pids address process groups, never one controller
    return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

/// "r-20261125-153012-4f2a": the start time (UTC) for people, four random hex digits against collisions.
std::string newRunId(double unixSeconds)
{
    const auto seconds = static_cast<std::time_t>(unixSeconds);
    std::tm utc {};
    ::gmtime_r(&seconds, &utc);
    std::array<char, 32> text {};
    std::strftime(text.data(), text.size(), "r-%Y%m%d-%H%M%S-", &utc);
    std::array<char, 8> suffix {};
    std::snprintf(suffix.data(), suffix.size(), "%04x", static_cast<unsigned>(std::random_device {}() & 0xffffu));
    return std::string(text.data()) + suffix.data();
}

/// The rule of markInterrupted(): a running run whose controller ran on this host and no longer exists.
bool controllerGone(const std::string& controllerHost, std::int64_t controllerPid, const std::string& thisHost)
{
    return controllerHost == thisHost && !processAlive(controllerPid);
}

std::string interruptedMessage(std::int64_t pid, const std::string& host)
{
    return "the controller (pid " + std::to_string(pid) + " on " + host + ") ended without finishing the run";
}

/// LIKE's wildcards in `text` taken literally (with ESCAPE '\').
std::string likeEscaped(std::string_view text)
{
    std::string out;
    for (char c : text) {
        if (c == '\\' || c == '%' || c == '_')
            out += '\\';
        out += c;
    }
    return out;
}

constexpr const char* kRunColumns = "id, plan_json, cluster_json, hosts_json, label, status, status_message, "
                                    "started_unix_s, ended_unix_s, controller_host, controller_pid, steps_planned, "
                                    "predicted_steps";
/// What reads select: kRunColumns, the steps whose loss is stored (through the metrics index), the last event.
constexpr const char* kRunSelect
    = "id, plan_json, cluster_json, hosts_json, label, status, status_message, started_unix_s, ended_unix_s, "
      "controller_host, controller_pid, steps_planned, predicted_steps, "
      "(SELECT count(DISTINCT step) FROM metrics m WHERE m.run = runs.id AND m.name = 'loss' AND m.device = -1), "
      "updated_unix_s, launcher, job_id";
} // namespace

std::string_view toString(RunStatus status)
{
    static constexpr std::array<std::string_view, 5> names
        = {"running", "succeeded", "failed", "stopped", "interrupted"};
    return names[static_cast<std::size_t>(status)];
}

RunStatus runStatusFromString(std::string_view name)
{
    for (auto s :
        {RunStatus::Running, RunStatus::Succeeded, RunStatus::Failed, RunStatus::Stopped, RunStatus::Interrupted})
        if (toString(s) == name)
            return s;
    throw planner::InputError(
        "unknown run status '" + std::string(name) + "': use running, succeeded, failed, stopped or interrupted");
}

HistoryStore::Impl::Impl(const fs::path& file, Access how, const std::string& uri)
    : path(file)
    , db(file,
          how == Access::ReadOnly ? SQLITE_OPEN_READONLY | SQLITE_OPEN_URI : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
          uri)
    , access(how)
    , host(hostName())
{
}

bool HistoryStore::Impl::runExists(const std::string& id)
{
    Statement s(db, "SELECT 1 FROM runs WHERE id = ?1");
    s.text(1, id);
    return s.step();
}

void HistoryStore::Impl::requireRun(const std::string& id)
{
    if (!runExists(id))
        noRun(id);
}

/// Records now as the run's last event (inside the caller's write transaction).
void HistoryStore::Impl::touch(const std::string& id)
{
    Statement s(db, "UPDATE runs SET updated_unix_s = ?2 WHERE id = ?1");
    s.text(1, id).real(2, unixNow()).run();
}

/// A metric's value: NULL is the NaN that SQLite stores for one.
double HistoryStore::Impl::value(const Statement& s, int column)
{
    return s.isNull(column) ? std::numeric_limits<double>::quiet_NaN() : s.real(column);
}

/// The run's integer key, which its spans carry (schema 2); the run must exist.
std::int64_t HistoryStore::Impl::runKey(const std::string& id)
{
    Statement s(db, "SELECT run_key FROM runs WHERE id = ?1");
    s.text(1, id);
    if (!s.step())
        noRun(id);
    return s.integer(0);
}

std::vector<std::string> HistoryStore::Impl::tags(const std::string& id)
{
    Statement s(db, "SELECT tag FROM tags WHERE run = ?1 ORDER BY tag");
    s.text(1, id);
    std::vector<std::string> out;
    while (s.step())
        out.push_back(s.text(0));
    return out;
}

/// A row of kRunColumns, tags included.
RunRecord HistoryStore::Impl::readRun(const Statement& s)
{
    RunRecord r;
    r.id = s.text(0);
    r.plan_json = s.text(1);
    r.cluster_json = s.text(2);
    r.hosts_json = s.text(3);
    r.label = s.text(4);
    try {
        r.status = runStatusFromString(s.text(5));
    } catch (const planner::InputError& e) {
        throw HistoryError(db.file() + ": run '" + r.id + "': " + e.what());
    }
    r.status_message = s.text(6);
    r.started_unix_s = s.real(7);
    r.ended_unix_s = s.real(8);
    r.controller_host = s.text(9);
    r.controller_pid = s.integer(10);
    r.steps_planned = s.integer(11);
    r.predicted_steps = s.integer(12);
    r.steps_done = s.integer(13);
    r.launcher = s.text(15);
    if (r.launcher == "import") // importPipeliningTraces refuses a rank that stops within a step
        r.steps_done = r.steps_planned;
    r.job_id = s.text(16);
    r.tags = tags(r.id);
    // A reader that may not write shows what markInterrupted() would write.
    if (access == Access::ReadOnly && r.status == RunStatus::Running
        && controllerGone(r.controller_host, r.controller_pid, host)) {
        r.status = RunStatus::Interrupted;
        r.status_message = interruptedMessage(r.controller_pid, r.controller_host);
        r.ended_unix_s = std::max(r.started_unix_s, s.real(14));
    }
    return r;
}

std::optional<RunRecord> HistoryStore::Impl::findRun(const std::string& id)
{
    Statement s(db, std::string("SELECT ") + kRunSelect + " FROM runs WHERE id = ?1");
    s.text(1, id);
    if (!s.step())
        return std::nullopt;
    return readRun(s);
}

void HistoryStore::Impl::insertTags(const std::string& id, const std::vector<std::string>& tags)
{
    Statement insert(db, "INSERT OR IGNORE INTO tags (run, tag) VALUES (?1, ?2)");
    insert.text(1, id);
    for (const auto& tag : tags)
        insert.text(2, tag).run();
}

void HistoryStore::Impl::replaceDeviceNames(const std::string& id, const std::vector<std::string>& names)
{
    Statement erase(db, "DELETE FROM run_devices WHERE run = ?1");
    erase.text(1, id).run();
    Statement insert(db, "INSERT INTO run_devices (run, device, name) VALUES (?1, ?2, ?3)");
    insert.text(1, id);
    for (std::size_t i = 0; i < names.size(); ++i)
        insert.integer(2, static_cast<std::int64_t>(i)).text(3, names[i]).run();
}

std::string HistoryStore::Impl::runClock(const std::string& id)
{
    Statement s(db, "SELECT clock FROM runs WHERE id = ?1");
    s.text(1, id);
    return s.step() ? s.text(0) : std::string("host");
}

std::vector<std::string> HistoryStore::Impl::deviceNames(const std::string& id)
{
    Statement s(db, "SELECT device, name FROM run_devices WHERE run = ?1 ORDER BY device");
    s.text(1, id);
    std::vector<std::string> names;
    while (s.step()) {
        const auto device = static_cast<std::size_t>(s.integer(0));
        while (names.size() < device)
            names.push_back("device " + std::to_string(names.size()));
        names.push_back(s.text(1));
    }
    return names;
}

HistoryStore::HistoryStore(std::unique_ptr<Impl> impl)
    : m_impl(std::move(impl))
{
}

HistoryStore::HistoryStore(HistoryStore&&) noexcept = default;
HistoryStore& HistoryStore::operator=(HistoryStore&&) noexcept = default;
HistoryStore::~HistoryStore() = default;

HistoryStore::Impl& HistoryStore::impl()
{
    if (!m_impl)
        throw HistoryError("the history store was moved from");
    return *m_impl;
}

HistoryStore HistoryStore::open(const fs::path& path, Access access)
{
    std::error_code ec;
    // A history is an SQLite file of its own with its -wal and -shm beside it: a device (/dev/null, whose
    // "-journal" SQLite would leave in /dev), a directory or a FIFO is refused before SQLite touches it.
    const auto status = fs::status(path, ec);
    if (fs::is_directory(status))
        throw HistoryError(path.string() + ": is a directory, not a history file");
    if (fs::exists(status) && !fs::is_regular_file(status))
        throw HistoryError(path.string()
            + ": is not a regular file (a device, a FIFO or a socket): a history is an "
              "SQLite file; give a file's path");
    if (ec && ec != std::errc::no_such_file_or_directory)
        throw HistoryError(path.string() + ": cannot look at it: " + ec.message()); // e.g. a folder one cannot enter
    if (access == Access::ReadWrite) {
        createDirectoryFor(path);
        const bool created = createPrivate(path);
        try {
            auto impl = std::make_unique<Impl>(path, access);
            checkIdentity(impl->db);
            configureForWriting(impl->db);
            migrate(impl->db);
            return HistoryStore(std::move(impl));
        } catch (...) {
            // A history this call made and could not set up (a full disk) is not left behind, empty or cut.
            if (created) {
                fs::remove(path, ec);
                for (const char* suffix : {"-wal", "-shm", "-journal"})
                    fs::remove(path.string() + suffix, ec);
            }
            throw;
        }
    }
    if (!fs::exists(status))
        throw HistoryError(path.string() + ": no history file there (a run creates it)");
    std::unique_ptr<Impl> impl;
    try {
        impl = std::make_unique<Impl>(path, access);
        checkIdentity(impl->db);
    } catch (const HistoryError&) {
        // A WAL file read by someone who may not use its -shm file (none, and the directory is not theirs to
        // create one in; or one another user's reader left, private to them): while the -wal holds no commits the
        // main file is the whole history, read as it is (immutable). Commits still in a -wal would be skipped
        // unseen: refuse that rather than show less.
        if (const auto wal = path.string() + "-wal"; fs::exists(wal, ec) && fs::file_size(wal, ec) > 0)
            throw HistoryError(path.string() + ": cannot read it without writing: its write-ahead log " + wal
                + " holds commits that only a reader who can use " + path.filename().string()
                + "-shm may see (open it once as its owner, or copy the files somewhere writable)");
        impl = std::make_unique<Impl>(path, access, immutableUri(path));
        checkIdentity(impl->db);
    }
    if (const auto version = pragmaValue(impl->db, "user_version");
        version < kHistorySchemaVersion && ::access(path.c_str(), W_OK) == 0) {
        // An older file this user may write: migrate it once (a reader of a newer Pipewright), then read it.
        impl.reset();
        HistoryStore::open(path, Access::ReadWrite);
        return open(path, Access::ReadOnly);
    } else if (version != kHistorySchemaVersion)
        throw HistoryError(path.string() + ": the history has schema version " + std::to_string(version)
            + " and this Pipewright reads version " + std::to_string(kHistorySchemaVersion)
            + " without writing: open it once with write access to migrate it");
    return HistoryStore(std::move(impl));
}

const fs::path& HistoryStore::path() const
{
    if (!m_impl)
        throw HistoryError("the history store was moved from");
    return m_impl->path;
}

std::string HistoryStore::createRun(const NewRun& run)
{
    return createRun(run, static_cast<std::int64_t>(::getpid()));
}

std::string HistoryStore::createRun(const NewRun& run, std::int64_t controllerPid)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    const double now = unixNow();
    std::string id = newRunId(now);
    for (int attempt = 0; m.runExists(id); ++attempt) {
        if (attempt == 1000)
            throw HistoryError(m.db.file() + ": no free run id for " + id);
        id = newRunId(now);
    }
    Statement insert(m.db,
        std::string("INSERT INTO runs (") + kRunColumns
            + ", launcher, run_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13, "
              "(SELECT coalesce(max(run_key), 0) + 1 FROM runs))");
    insert.text(1, id)
        .text(2, run.plan_json)
        .text(3, run.cluster_json)
        .text(4, run.hosts_json)
        .text(5, run.label)
        .text(6, toString(RunStatus::Running))
        .text(7, "")
        .real(8, now)
        .real(9, 0)
        .text(10, hostName())
        .integer(11, controllerPid)
        .integer(12, run.steps_planned)
        .text(13, run.launcher)
        .run();
    m.insertTags(id, run.tags);
    m.touch(id);
    tx.commit();
    return id;
}

void HistoryStore::finishRun(
    const std::string& id, RunStatus status, const std::string& message, std::optional<double> ended_unix_s)
{
    auto& m = impl();
    if (status == RunStatus::Running)
        throw HistoryError(m.db.file() + ": run '" + id + "' cannot finish as running");
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement update(m.db, "UPDATE runs SET status = ?2, status_message = ?3, ended_unix_s = ?4 WHERE id = ?1");
    update.text(1, id).text(2, toString(status)).text(3, message).real(4, ended_unix_s.value_or(unixNow())).run();
    tx.commit();
}

int HistoryStore::markInterrupted()
{
    auto& m = impl();
    if (m.access == Access::ReadOnly)
        return 0; // readRun() shows them as interrupted instead
    Transaction tx(m.db, Transaction::Access::Write);
    const auto& host = m.host;
    std::vector<std::pair<std::string, std::int64_t>> dead;
    {
        Statement running(m.db,
            "SELECT id, controller_pid, controller_host FROM runs WHERE status = 'running' AND controller_host = ?1");
        running.text(1, host);
        while (running.step())
            if (controllerGone(running.text(2), running.integer(1), host))
                dead.emplace_back(running.text(0), running.integer(1));
    }
    // The run ended at its last recorded event, not when somebody noticed.
    Statement update(m.db,
        "UPDATE runs SET status = 'interrupted', status_message = ?2, ended_unix_s = max(started_unix_s, "
        "updated_unix_s) WHERE id = ?1");
    for (const auto& [id, pid] : dead)
        update.text(1, id).text(2, interruptedMessage(pid, host)).run();
    tx.commit();
    return static_cast<int>(dead.size());
}

void HistoryStore::addTag(const std::string& id, const std::string& tag)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    m.insertTags(id, {tag});
    tx.commit();
}

void HistoryStore::removeTag(const std::string& id, const std::string& tag)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement erase(m.db, "DELETE FROM tags WHERE run = ?1 AND tag = ?2");
    erase.text(1, id).text(2, tag).run();
    tx.commit();
}

void HistoryStore::deleteRun(const std::string& id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    {
        Statement eraseSpans(m.db, "DELETE FROM spans WHERE run = ?1");
        eraseSpans.integer(1, m.runKey(id)).run();
    }
    for (const char* sql : {"DELETE FROM metrics WHERE run = ?1", "DELETE FROM logs WHERE run = ?1",
             "DELETE FROM tags WHERE run = ?1", "DELETE FROM run_devices WHERE run = ?1",
             "DELETE FROM agent_clocks WHERE run = ?1", "DELETE FROM stall_reports WHERE run = ?1",
             "DELETE FROM flight_recorder WHERE run = ?1", "DELETE FROM runs WHERE id = ?1"}) {
        Statement erase(m.db, sql);
        erase.text(1, id).run();
    }
    tx.commit();
}

void HistoryStore::setJobId(const std::string& id, const std::string& job_id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement update(m.db, "UPDATE runs SET job_id = ?2 WHERE id = ?1");
    update.text(1, id).text(2, job_id).run();
    tx.commit();
}

void HistoryStore::setDeviceNames(const std::string& id, const std::vector<std::string>& names)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    m.replaceDeviceNames(id, names);
    tx.commit();
}

void HistoryStore::setAgentClocks(
    const std::string& id, const std::vector<AgentClock>& clocks, planner::ClockDomain clock)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement erase(m.db, "DELETE FROM agent_clocks WHERE run = ?1");
    erase.text(1, id).run();
    Statement insert(m.db,
        "INSERT INTO agent_clocks (run, agent, host, offset_s, uncertainty_s, samples) VALUES (?1, ?2, ?3, ?4, ?5, "
        "?6)");
    insert.text(1, id);
    for (const auto& c : clocks)
        insert.integer(2, c.agent)
            .text(3, c.host)
            .real(4, c.offset_s)
            .real(5, c.uncertainty_s)
            .integer(6, c.samples)
            .run();
    Statement mark(m.db, "UPDATE runs SET clock = ?2 WHERE id = ?1");
    mark.text(1, id).text(2, clock == planner::ClockDomain::Aligned ? "aligned" : "host").run();
    tx.commit();
}

std::vector<AgentClock> HistoryStore::agentClocks(const std::string& id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    Statement s(
        m.db, "SELECT agent, host, offset_s, uncertainty_s, samples FROM agent_clocks WHERE run = ?1 ORDER BY agent");
    s.text(1, id);
    std::vector<AgentClock> out;
    while (s.step())
        out.push_back({static_cast<int>(s.integer(0)), s.text(1), s.real(2), s.real(3), s.integer(4)});
    return out;
}

void HistoryStore::appendMetrics(const std::string& id, std::span<const MetricSample> samples)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement insert(m.db, kInsertMetric);
    insert.text(1, id);
    for (const auto& s : samples) {
        // The one unit every producer agrees on; other series are dimensionless until they carry one.
        const bool bytes = s.name == planner::kMemoryCounter || s.name == planner::kDeviceMemoryCounter
            || s.name == planner::kDeviceMemoryPeakCounter;
        const std::string_view unit = bytes ? "B" : "";
        // A NaN binds as NULL (SQLite has no NaN); infinities are stored as they are.
        insert.integer(2, s.step).text(3, s.name).real(4, s.value).real(5, s.t_s).integer(6, s.device).text(7, unit);
        insert.run();
    }
    m.touch(id);
    tx.commit();
}

void HistoryStore::appendLogs(const std::string& id, std::span<const LogEntry> entries)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement insert(m.db, "INSERT INTO logs (run, t_s, agent, device, level, text) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    insert.text(1, id);
    for (const auto& e : entries)
        insert.real(2, e.t_s).integer(3, e.agent).integer(4, e.device).text(5, e.level).text(6, e.text).run();
    m.touch(id);
    tx.commit();
}

std::vector<RunRecord> HistoryStore::listRuns(const RunFilter& filter)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    Statement s(m.db, std::string("SELECT ") + kRunSelect + R"sql( FROM runs
            WHERE (?1 IS NULL OR status = ?1)
              AND (?2 = '' OR id IN (SELECT run FROM tags WHERE tag LIKE '%' || ?2 || '%' ESCAPE '\'))
              AND (?3 = '' OR label LIKE '%' || ?3 || '%' ESCAPE '\')
            ORDER BY started_unix_s DESC, rowid DESC)sql");
    if (filter.status)
        s.text(1, toString(*filter.status));
    else
        s.null(1);
    s.text(2, likeEscaped(filter.tag)).text(3, likeEscaped(filter.text)); // both substrings, as the label's
    std::vector<RunRecord> runs;
    while (s.step())
        runs.push_back(m.readRun(s));
    tx.commit();
    return runs;
}

std::optional<RunRecord> HistoryStore::run(const std::string& id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    auto record = m.findRun(id);
    tx.commit();
    return record;
}

std::vector<MetricSample> HistoryStore::metrics(const std::string& id, const std::string& name)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    m.requireRun(id);
    Statement s(m.db, "SELECT step, value, t_s, device FROM metrics WHERE run = ?1 AND name = ?2 ORDER BY rowid");
    s.text(1, id).text(2, name);
    std::vector<MetricSample> out;
    while (s.step())
        out.push_back(
            {static_cast<int>(s.integer(0)), name, Impl::value(s, 1), s.real(2), static_cast<int>(s.integer(3))});
    tx.commit();
    return out;
}

std::vector<LogEntry> HistoryStore::logs(const std::string& id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    m.requireRun(id);
    Statement s(m.db, "SELECT t_s, agent, device, level, text FROM logs WHERE run = ?1 ORDER BY rowid");
    s.text(1, id);
    std::vector<LogEntry> out;
    while (s.step())
        out.push_back(
            {s.real(0), static_cast<int>(s.integer(1)), static_cast<int>(s.integer(2)), s.text(3), s.text(4)});
    tx.commit();
    return out;
}

std::string HistoryStore::integrityCheck()
{
    auto& m = impl();
    Statement s(m.db, "PRAGMA integrity_check");
    std::string result;
    while (s.step())
        result += (result.empty() ? "" : "\n") + s.text(0);
    return result;
}

HistoryTotals HistoryStore::totals()
{
    auto& m = impl();
    Statement s(m.db,
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM tags), (SELECT count(*) FROM run_devices), "
        "(SELECT count(*) FROM spans), (SELECT count(*) FROM metrics), (SELECT count(*) FROM logs)");
    s.step();
    return {s.integer(0), s.integer(1), s.integer(2), s.integer(3), s.integer(4), s.integer(5)};
}

} // namespace pw::app
