// SPDX-License-Identifier: MIT
// The history's spans and timelines: spans stored in blocks of multi-row INSERTs (the ingest's hot path), read back
// as a measured or predicted planner::Timeline with its counters, and exported as CSV or a Chrome trace.
#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <tuple>

#include "history.h"
#include "history_impl.h"
#include "planner/io/chrome_trace.h"
#include "schema.h"
#include "sqlite_wrappers.h"

namespace pw::app {

using planner::Timeline;

namespace {

/// The shortest text that reads back as the same double.
void appendNumber(std::string& out, double value)
{
    std::array<char, 32> buffer {};
    auto end = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value).ptr;
    out.append(buffer.data(), end);
}

/// The agent of predicted spans (measured ones come from agents 0, 1, ...).
constexpr int kPredictedAgent = -1;
/// Parameters of one span in an INSERT (the run and the source, ?1 and ?2, are shared by all rows).
constexpr int kSpanParameters = 13;
/// Spans per INSERT statement: a step has a fixed cost (opening the table and its index, halting, resetting)
/// that a single-row INSERT pays per span; 64 rows spread it thin (832 parameters, SQLite allows 32766).
constexpr int kSpansPerInsert = 64;

/// "INSERT OR IGNORE INTO spans (...) VALUES (?1, ?2, ?3, ..., ?15), (?1, ?2, ?16, ...), ...": `rows` rows, a
/// stored (run, agent, seq) ignored.
std::string insertSpansSql(int rows)
{
    std::string sql = "INSERT OR IGNORE INTO spans (run, source, agent, seq, device, lane, kind, stage, microbatch, "
                      "action, weight_version, peer, bytes, t0, t1) VALUES ";
    for (int r = 0; r < rows; ++r) {
        sql += r == 0 ? "(?1, ?2" : ", (?1, ?2";
        for (int p = 0; p < kSpanParameters; ++p)
            sql += ", ?" + std::to_string(3 + r * kSpanParameters + p);
        sql += ')';
    }
    return sql;
}

/// @brief A span as a row of the spans table: with its agent and sequence number.
struct SpanRow
{
    const planner::Span& span;
    std::int64_t agent;
    std::int64_t seq;
};

/// Binds the kSpanParameters parameters of a row of insertSpansSql() from `first` on.
void bindSpan(Statement& insert, int first, const SpanRow& row)
{
    const auto& s = row.span;
    insert.integer(first, row.agent)
        .integer(first + 1, row.seq)
        .integer(first + 2, s.device)
        .integer(first + 3, static_cast<int>(s.lane))
        .integer(first + 4, static_cast<int>(s.kind))
        .integer(first + 5, s.stage)
        .integer(first + 6, s.microbatch)
        .integer(first + 7, s.action)
        .integer(first + 8, s.weight_version)
        .integer(first + 9, s.peer)
        .real(first + 10, s.bytes)
        .real(first + 11, s.t0)
        .real(first + 12, s.t1);
}

int sourceCode(Timeline::Source source)
{
    return source == Timeline::Source::Predicted ? 0 : 1;
}

} // namespace

/// `insert` prepared for `rows` rows when it is not yet, ready to run with the run and the source bound.
Statement& HistoryStore::Impl::spanInserter(
    std::optional<Statement>& insert, int rows, const std::string& id, Timeline::Source source)
{
    if (!insert)
        insert.emplace(db, insertSpansSql(rows));
    insert->reset();
    insert->integer(1, runKey(id)).integer(2, sourceCode(source));
    return *insert;
}

/// Inserts `count` spans, `rowAt(i)` giving the i-th as a SpanRow, with the cached statements; the caller
/// holds the transaction.
template <typename RowAt>
void HistoryStore::Impl::insertSpans(const std::string& id, Timeline::Source source, std::size_t count, RowAt&& rowAt)
{
    auto& block = spanInserter(insertSpanBlock, kSpansPerInsert, id, source);
    std::size_t i = 0;
    for (; i + kSpansPerInsert <= count; i += kSpansPerInsert) {
        for (int r = 0; r < kSpansPerInsert; ++r)
            bindSpan(block, 3 + r * kSpanParameters, rowAt(i + static_cast<std::size_t>(r)));
        block.run();
    }
    auto& single = spanInserter(insertSpan, 1, id, source);
    for (; i < count; ++i) {
        bindSpan(single, 3, rowAt(i));
        single.run();
    }
}

planner::Span HistoryStore::Impl::readSpan(const Statement& s, const std::string& id)
{
    const auto lane = s.integer(1);
    const auto kind = s.integer(2);
    if (lane < 0 || lane >= kLaneCount || kind < 0 || kind >= kKindCount)
        throw HistoryError(db.file() + ": run '" + id + "' holds a span with lane " + std::to_string(lane)
            + " and kind " + std::to_string(kind) + ", which this Pipewright does not know");
    planner::Span span;
    span.device = static_cast<std::int32_t>(s.integer(0));
    span.lane = static_cast<planner::Lane>(lane);
    span.kind = static_cast<planner::ActionKind>(kind);
    span.stage = static_cast<std::int32_t>(s.integer(3));
    span.microbatch = static_cast<std::int32_t>(s.integer(4));
    span.action = static_cast<std::int32_t>(s.integer(5));
    span.weight_version = static_cast<std::int32_t>(s.integer(6));
    span.peer = static_cast<std::int32_t>(s.integer(7));
    span.bytes = s.real(8);
    span.t0 = s.real(9);
    span.t1 = s.real(10);
    return span;
}

/// Measured spans by device, then start; predicted spans in the order they were saved.
std::vector<planner::Span> HistoryStore::Impl::spans(const std::string& id, Timeline::Source source)
{
    // Predicted spans through the index, in order of seq (their position); measured ones in any order.
    const std::string where = source == Timeline::Source::Predicted
        ? " WHERE run = ?1 AND agent = -1 AND source = 0 ORDER BY seq"
        : " WHERE run = ?1 AND source = 1";
    Statement s(db, std::string("SELECT ") + kSpanColumns + " FROM spans" + where);
    s.integer(1, runKey(id));
    std::vector<planner::Span> out;
    while (s.step())
        out.push_back(readSpan(s, id));
    // Sorting here is cheaper than SQL's ORDER BY over an index that is not in (device, t0) order.
    if (source == Timeline::Source::Measured)
        std::stable_sort(out.begin(), out.end(), [](const planner::Span& a, const planner::Span& b) {
            return std::tie(a.device, a.t0) < std::tie(b.device, b.t0);
        });
    return out;
}

/// Predicted: the "predicted:" metrics, in saved order. Measured: per-device metrics, ordered by (device, t).
void HistoryStore::Impl::readCounters(const std::string& id, Timeline& t)
{
    const bool predicted = t.source == Timeline::Source::Predicted;
    const std::string where = predicted ? std::string(" AND ") + kIsPredictedMetric
                                        : std::string(" AND device >= 0 AND NOT ") + kIsPredictedMetric;
    Statement s(db, "SELECT name, unit, device, t_s, value FROM metrics WHERE run = ?1" + where + " ORDER BY rowid");
    s.text(1, id);
    while (s.step()) {
        auto name = s.text(0);
        if (predicted)
            name.erase(0, kPredictedPrefix.size());
        t.counter(name, s.text(1)).samples.push_back({static_cast<std::int32_t>(s.integer(2)), s.real(3), value(s, 4)});
    }
    if (!predicted)
        for (auto& c : t.counters)
            std::stable_sort(c.samples.begin(), c.samples.end(),
                [](const auto& a, const auto& b) { return std::tie(a.device, a.t) < std::tie(b.device, b.t); });
}

Timeline HistoryStore::Impl::timeline(const std::string& id, Timeline::Source source)
{
    Transaction tx(db, Transaction::Access::Read); // one snapshot while a controller appends
    const auto record = findRun(id);
    if (!record)
        noRun(id);
    Timeline t;
    t.source = source;
    t.run_id = id;
    t.label = record->label;
    const bool measured = source == Timeline::Source::Measured;
    t.clock = !measured             ? planner::ClockDomain::Simulated
        : runClock(id) == "aligned" ? planner::ClockDomain::Aligned
                                    : planner::ClockDomain::Host;
    t.epoch_unix_s = measured ? record->started_unix_s : 0;
    t.device_names = deviceNames(id);
    t.spans = spans(id, source);
    // Devices without a stored name get Timeline::append()'s placeholders.
    for (const auto& s : t.spans)
        while (s.device >= 0 && static_cast<std::size_t>(s.device) >= t.device_names.size())
            t.device_names.push_back("device " + std::to_string(t.device_names.size()));
    readCounters(id, t);
    tx.commit();
    return t;
}

void HistoryStore::Impl::writeCsv(const std::string& id, Timeline::Source source, std::ostream& out)
{
    Transaction tx(db, Transaction::Access::Read);
    requireRun(id);
    Statement s(db,
        std::string("SELECT ") + kSpanColumns
            + ", agent, seq FROM spans WHERE run = ?1 AND source = ?2 ORDER BY device, t0, agent, seq");
    s.integer(1, runKey(id)).integer(2, sourceCode(source));
    std::string text = "device,lane,kind,stage,microbatch,action,weight_version,peer,bytes,t0_s,t1_s,agent,seq\n";
    while (s.step()) {
        const auto span = readSpan(s, id);
        text += std::to_string(span.device) + ',' + std::string(toString(span.lane)) + ','
            + std::string(toString(span.kind)) + ',' + std::to_string(span.stage) + ','
            + std::to_string(span.microbatch) + ',' + std::to_string(span.action) + ','
            + std::to_string(span.weight_version) + ',' + std::to_string(span.peer) + ',';
        appendNumber(text, span.bytes);
        text += ',';
        appendNumber(text, span.t0);
        text += ',';
        appendNumber(text, span.t1);
        text += ',';
        if (source == Timeline::Source::Measured)
            text += std::to_string(s.integer(11)) + ',' + std::to_string(s.integer(12));
        else
            text += ','; // agent and seq mean nothing for a prediction
        text += '\n';
        if (text.size() > (1u << 16)) {
            out << text;
            text.clear();
        }
    }
    out << text;
    tx.commit();
}

void HistoryStore::appendSpans(const std::string& id, std::span<const MeasuredSpan> spans)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    m.insertSpans(id, Timeline::Source::Measured, spans.size(), [&](std::size_t i) {
        return SpanRow {spans[i].span, spans[i].agent, spans[i].seq};
    });
    m.touch(id);
    tx.commit();
}

std::int64_t HistoryStore::lastSequence(const std::string& id, int agent)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    m.requireRun(id);
    Statement s(m.db, "SELECT max(seq) FROM spans WHERE run = ?1 AND source = 1 AND agent = ?2");
    s.integer(1, m.runKey(id)).integer(2, agent);
    const auto last = s.step() && !s.isNull(0) ? s.integer(0) : 0;
    tx.commit();
    return last;
}

void HistoryStore::savePredicted(const std::string& id, const Timeline& timeline, std::int64_t steps)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement setSteps(m.db, "UPDATE runs SET predicted_steps = ?2 WHERE id = ?1");
    setSteps.text(1, id).integer(2, steps).run();
    Statement eraseSpans(m.db, "DELETE FROM spans WHERE run = ?1 AND agent = -1 AND source = 0");
    eraseSpans.integer(1, m.runKey(id)).run();
    Statement eraseCounters(m.db, std::string("DELETE FROM metrics WHERE run = ?1 AND ") + kIsPredictedMetric);
    eraseCounters.text(1, id).run();
    if (!timeline.device_names.empty())
        m.replaceDeviceNames(id, timeline.device_names);
    m.insertSpans(id, Timeline::Source::Predicted, timeline.spans.size(), [&](std::size_t i) {
        return SpanRow {timeline.spans[i], kPredictedAgent, static_cast<std::int64_t>(i)};
    });
    Statement metric(m.db, kInsertMetric);
    metric.text(1, id).integer(2, -1);
    for (const auto& c : timeline.counters)
        for (const auto& sample : c.samples)
            metric.text(3, std::string(kPredictedPrefix) + c.name)
                .real(4, sample.value)
                .real(5, sample.t)
                .integer(6, sample.device)
                .text(7, c.unit)
                .run();
    tx.commit();
}

Timeline HistoryStore::measuredTimeline(const std::string& id)
{
    return impl().timeline(id, Timeline::Source::Measured);
}

Timeline HistoryStore::predictedTimeline(const std::string& id)
{
    return impl().timeline(id, Timeline::Source::Predicted);
}

void HistoryStore::exportCsv(const std::string& id, std::ostream& out, Timeline::Source source)
{
    impl().writeCsv(id, source, out);
}

void HistoryStore::exportChromeTrace(const std::string& id, std::ostream& out, Timeline::Source source)
{
    planner::writeChromeTrace(out, impl().timeline(id, source));
}

} // namespace pw::app
