// SPDX-License-Identifier: MIT
// The history's stall reports and flight recorders (schema version 5): what a run that stopped making progress
// was waiting for, and each device's last actions before it.
#include <map>
#include <sstream>

#include "history.h"
#include "history_impl.h"
#include "sqlite_wrappers.h"

namespace pw::app {

namespace {

std::string joinDevices(const std::vector<int>& devices)
{
    std::string out;
    for (int d : devices)
        out += (out.empty() ? "" : ",") + std::to_string(d);
    return out;
}

std::vector<int> splitDevices(const std::string& text)
{
    std::vector<int> out;
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, ','))
        if (!item.empty())
            out.push_back(std::stoi(item));
    return out;
}

} // namespace

void HistoryStore::addStall(
    const std::string& id, const StallRecord& stall, const std::vector<RecordedAction>& recorder)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Write);
    m.requireRun(id);
    Statement add(m.db, "INSERT INTO stall_reports (run, t_s, report, chain) VALUES (?1, ?2, ?3, ?4)");
    add.text(1, id).real(2, stall.t_s).text(3, stall.report).text(4, joinDevices(stall.chain)).run();
    if (!recorder.empty()) {
        Statement erase(m.db, "DELETE FROM flight_recorder WHERE run = ?1");
        erase.text(1, id).run();
        Statement insert(m.db,
            "INSERT OR REPLACE INTO flight_recorder (run, device, seq, agent, lane, kind, stage, microbatch, action, "
            "weight_version, peer, bytes, t0, t1, in_progress, source) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
            "?10, ?11, ?12, ?13, ?14, ?15, ?16)");
        insert.text(1, id);
        std::map<int, std::int64_t> next; // seq per device, in the order given
        for (const RecordedAction& r : recorder) {
            const planner::Span& s = r.span;
            insert.integer(2, s.device)
                .integer(3, next[s.device]++)
                .integer(4, r.agent)
                .integer(5, static_cast<int>(s.lane))
                .integer(6, static_cast<int>(s.kind))
                .integer(7, s.stage)
                .integer(8, s.microbatch)
                .integer(9, s.action)
                .integer(10, s.weight_version)
                .integer(11, s.peer)
                .real(12, s.bytes)
                .real(13, s.t0)
                .real(14, r.in_progress ? s.t0 : s.t1)
                .integer(15, r.in_progress ? 1 : 0)
                .text(16, r.source == "controller" ? "controller" : "agent")
                .run();
        }
    }
    m.touch(id);
    tx.commit();
}

std::vector<StallRecord> HistoryStore::stalls(const std::string& id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    Statement s(m.db, "SELECT t_s, report, chain FROM stall_reports WHERE run = ?1 ORDER BY rowid");
    s.text(1, id);
    std::vector<StallRecord> out;
    while (s.step())
        out.push_back({s.real(0), s.text(1), splitDevices(s.text(2))});
    return out;
}

std::vector<RecordedAction> HistoryStore::flightRecorder(const std::string& id)
{
    auto& m = impl();
    Transaction tx(m.db, Transaction::Access::Read);
    Statement s(m.db,
        "SELECT device, agent, lane, kind, stage, microbatch, action, weight_version, peer, bytes, t0, t1, "
        "in_progress, source FROM flight_recorder WHERE run = ?1 ORDER BY device, seq");
    s.text(1, id);
    std::vector<RecordedAction> out;
    while (s.step()) {
        RecordedAction r;
        r.span.device = static_cast<std::int32_t>(s.integer(0));
        r.agent = static_cast<int>(s.integer(1));
        r.span.lane = static_cast<planner::Lane>(s.integer(2));
        r.span.kind = static_cast<planner::ActionKind>(s.integer(3));
        r.span.stage = static_cast<std::int32_t>(s.integer(4));
        r.span.microbatch = static_cast<std::int32_t>(s.integer(5));
        r.span.action = static_cast<std::int32_t>(s.integer(6));
        r.span.weight_version = static_cast<std::int32_t>(s.integer(7));
        r.span.peer = static_cast<std::int32_t>(s.integer(8));
        r.span.bytes = s.real(9);
        r.span.t0 = s.real(10);
        r.span.t1 = s.real(11);
        r.in_progress = s.integer(12) != 0;
        r.source = s.text(13);
        out.push_back(std::move(r));
    }
    return out;
}

} // namespace pw::app
