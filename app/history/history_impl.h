// SPDX-License-Identifier: MIT
// Internal to app/: the history store's implementation, shared by its two sources: history.cpp (the file, runs,
// tags, metrics, logs, agent clocks) and history_timeline.cpp (spans in and out, timelines, CSV and Chrome exports).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "history.h"
#include "sqlite_wrappers.h"

namespace pw::app {

/// Metrics holding a predicted timeline's counters are named kPredictedPrefix + the counter's name.
inline constexpr std::string_view kPredictedPrefix = "predicted:";
/// The same range as SQL: names from 'predicted:' up to 'predicted;' (';' follows ':'), which the metrics index
/// serves directly, unlike LIKE.
inline constexpr const char* kIsPredictedMetric = "(name >= 'predicted:' AND name < 'predicted;')";
inline constexpr const char* kInsertMetric
    = "INSERT INTO metrics (run, step, name, value, t_s, device, unit) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

struct HistoryStore::Impl
{
    Impl(const std::filesystem::path& file, Access how, const std::string& uri = {});

    std::filesystem::path path;
    Connection db;
    Access access;
    std::string host; ///< this machine's name (whose dead controllers' runs are interrupted)
    /// The ingest's hot path, prepared once per store (declared after db: finalized before it closes):
    /// kSpansPerInsert rows, and one row for the rest of a batch.
    std::optional<Statement> insertSpanBlock;
    std::optional<Statement> insertSpan;

    [[noreturn]] void noRun(const std::string& id) const { throw HistoryError("no run '" + id + "' in " + db.file()); }

    // Runs (history.cpp)
    bool runExists(const std::string& id);
    void requireRun(const std::string& id);
    void touch(const std::string& id);
    static double value(const Statement& s, int column);
    std::int64_t runKey(const std::string& id);
    std::vector<std::string> tags(const std::string& id);
    RunRecord readRun(const Statement& s);
    std::optional<RunRecord> findRun(const std::string& id);
    void insertTags(const std::string& id, const std::vector<std::string>& tags);
    void replaceDeviceNames(const std::string& id, const std::vector<std::string>& names);
    std::string runClock(const std::string& id);
    std::vector<std::string> deviceNames(const std::string& id);

    // Spans and timelines (history_timeline.cpp)
    static constexpr const char* kSpanColumns
        = "device, lane, kind, stage, microbatch, action, weight_version, peer, bytes, t0, t1";
    Statement& spanInserter(
        std::optional<Statement>& insert, int rows, const std::string& id, planner::Timeline::Source source);
    template <typename RowAt>
    void insertSpans(const std::string& id, planner::Timeline::Source source, std::size_t count, RowAt&& rowAt);
    planner::Span readSpan(const Statement& s, const std::string& id);
    std::vector<planner::Span> spans(const std::string& id, planner::Timeline::Source source);
    void readCounters(const std::string& id, planner::Timeline& t);
    planner::Timeline timeline(const std::string& id, planner::Timeline::Source source);
    void writeCsv(const std::string& id, planner::Timeline::Source source, std::ostream& out);
};

} // namespace pw::app
