// SPDX-License-Identifier: MIT
// The stall report's chain of waits (app/run/stall_report.h) on hand-made device states, and the history's stall
// reports and flight recorders (schema version 5, migrated from version 4).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <sqlite3.h>
#include <unistd.h>

#include "app/history/history.h"
#include "app/history/history_file.h"
#include "app/history/schema.h"
#include "app/run/stall_report.h"

using namespace pw;
using namespace pw::app;
using Catch::Contains;
using planner::ActionKind;
namespace fs = std::filesystem;

namespace {

DeviceWait device(int d, std::vector<int> stages, const std::string& host)
{
    DeviceWait w;
    w.device = d;
    w.stages = std::move(stages);
    w.host = host;
    w.where = "cpu";
    w.reported = true;
    return w;
}

DeviceWait busy(DeviceWait w, ActionKind kind, int stage, int microbatch, int peer, double since)
{
    w.busy = true;
    w.action.device = w.device;
    w.action.kind = kind;
    w.action.stage = stage;
    w.action.microbatch = microbatch;
    w.action.peer = peer;
    w.action.t0 = since;
    return w;
}

struct TempFile
{
    fs::path path = fs::temp_directory_path() / ("pw-stall-" + std::to_string(::getpid()) + ".sqlite");
    ~TempFile()
    {
        std::error_code ec;
        for (const char* suffix : {"", "-wal", "-shm"})
            fs::remove(path.string() + suffix, ec);
    }
};

} // namespace

TEST_CASE("a receive waiting on a silent agent names both ends", "[stall]")
{
    // Stage 1 on host b waits 62 s for F mb 12 from stage 0, whose agent on host a stopped 61 s ago.
    auto waiting = busy(device(1, {1}, "b"), ActionKind::RecvActivation, 0, 12, 0, 38);
    waiting.where = "cuda:1";
    auto stopped = busy(device(0, {0}, "a"), ActionKind::Forward, 0, 13, -1, 39);
    stopped.silent = true;
    stopped.silent_s = 61;
    const auto r = explainStall({stopped, waiting}, {{0}, {1}}, 100);
    CHECK(r.text
        == "stage 1 (device 1, host b, cuda:1) waits 62 s for F mb 12 from stage 0; stage 0 (device 0, host a, cpu) "
           "has sent nothing for 61 s (stopped or hung; it last reported computing F mb 13, begun 61 s ago)");
    CHECK(r.chain == std::vector<int> {1, 0});
    CHECK(r.silent_device == 0);
    CHECK_FALSE(r.cycle);
}

TEST_CASE("receives that wait on each other are a cycle", "[stall]")
{
    const auto s1 = busy(device(1, {1}, "b"), ActionKind::RecvActivation, 0, 5, 0, 10);
    const auto s0 = busy(device(0, {0}, "a"), ActionKind::RecvGradient, 1, 4, 1, 11.5);
    const auto r = explainStall({s0, s1}, {{0}, {1}}, 14);
    CHECK(r.text
        == "stage 1 (device 1, host b, cpu) waits 4.0 s for F mb 5 from stage 0; stage 0 (device 0, host a, cpu) "
           "waits 2.5 s for B mb 4 from stage 1: a cycle of waits back to stage 1 that none of them can end (a "
           "deadlock)");
    CHECK(r.cycle);
    CHECK(r.chain == std::vector<int> {1, 0});
}

TEST_CASE("an all-reduce names the replica that has not reached it and a chain ends at a computing device", "[stall]")
{
    // Stage 0 has replicas on devices 0 and 1; device 0 is in the all-reduce, device 1 still waits for a gradient
    // from stage 1 (device 2), which computes.
    const auto d0 = busy(device(0, {0}, "a"), ActionKind::AllReduce, 0, -1, -1, 5);
    const auto d1 = busy(device(1, {0}, "c"), ActionKind::RecvGradient, 1, 7, 2, 6);
    auto d2 = busy(device(2, {1}, "b"), ActionKind::Backward, 1, 8, -1, 6.5);
    d2.predicted_s = 0.25;
    const auto r = explainStall({d0, d1, d2}, {{0, 1}, {2}}, 70);
    CHECK(r.text
        == "stage 0 (device 0, host a, cpu) is blocked 65 s in its all-reduce of stage 0 with stage 0 (device 1); "
           "stage 0 (device 1, host c, cpu) waits 64 s for B mb 7 from stage 1; stage 1 (device 2, host b, cpu) has "
           "been computing B mb 8 for 64 s (the plan predicts 0.2 s)");
    CHECK(r.chain == std::vector<int> {0, 1, 2});
    CHECK(slowestBeyondPlan({d0, d1, d2}, 70) == 2);
    CHECK(slowestBeyondPlan({d0, d1, d2}, 8) == -1); // beyond 10x the plan, but not over 10 s yet
}

TEST_CASE("an all-reduce waiting on the tied embedding names the other holder", "[stall]")
{
    // The tied embedding's gradient is summed in an all-reduce of its own before the step (issue 30 item 11): with
    // its stage's replicas past theirs, a device in an all-reduce waits on the other holder.
    auto last = busy(device(1, {1}, "b"), ActionKind::AllReduce, 1, -1, -1, 20);
    last.tied = {0};
    auto first = device(0, {0}, "a");
    first.silent = true;
    first.silent_s = 9;
    const auto r = explainStall({first, last}, {{0}, {1}}, 30);
    CHECK(r.text
        == "stage 1 (device 1, host b, cpu) is blocked 10 s in its all-reduce of the tied embedding with stage 0; "
           "stage 0 (device 0, host a, cpu) has sent nothing for 9.0 s (stopped or hung)");
    CHECK(r.chain == std::vector<int> {1, 0});
    // A device whose replica has not reached the stage's all-reduce waits on that replica first.
    const auto replica = busy(device(2, {1}, "c"), ActionKind::Backward, 1, 3, -1, 25);
    const auto r2 = explainStall({first, last, replica}, {{0}, {1, 2}}, 30);
    CHECK_THAT(r2.text,
        Catch::StartsWith(
            "stage 1 (device 1, host b, cpu) is blocked 10 s in its all-reduce of stage 1 with stage 1 (device 2)"));
}

TEST_CASE("a computation in a tensor-parallel group names the rank not in it", "[stall]")
{
    // Stage 0 is one group of ranks on devices 0-3; ranks 0, 1 and 3 compute F mb 6 (inside it they meet in the
    // group's collectives), rank 2 computes B mb 5: the ranks disagree (a schedule bug), and wait on each other.
    std::vector<DeviceWait> ranks;
    for (int d = 0; d < 4; ++d) {
        auto w = busy(device(d, {0}, "a"), ActionKind::Forward, 0, 6, -1, 10);
        w.tensor_group = {0, 1, 2, 3};
        ranks.push_back(w);
    }
    ranks[2] = busy(ranks[2], ActionKind::Backward, 0, 5, -1, 9);
    ranks[2].predicted_s = 0.5;
    const auto r = explainStall(ranks, {{0, 1, 2, 3}}, 40, 0);
    CHECK(r.text
        == "stage 0 (device 0, host a, cpu) is blocked 30 s computing F mb 6 in a collective of its tensor-parallel "
           "group (devices 0, 1, 2, 3) with tensor rank 2, stage 0 (device 2); stage 0 (device 2, host a, cpu) is "
           "blocked 31 s computing B mb 5 in a collective of its tensor-parallel group (devices 0, 1, 2, 3) with "
           "tensor rank 0, stage 0 (device 0): a cycle of waits back to stage 0 (device 0) that none of them can end "
           "(a deadlock)");
    CHECK(r.cycle);
    // Every rank in the same computation: no one to wait on, it computes (or a link between them is stalled).
    ranks[2] = busy(ranks[2], ActionKind::Forward, 0, 6, -1, 10);
    const auto all = explainStall(ranks, {{0, 1, 2, 3}}, 40, 0);
    CHECK(all.text == "stage 0 (device 0, host a, cpu) has been computing F mb 6 for 30 s");
}

TEST_CASE("stall reports and flight recorders are stored and a schema 4 history migrates to them", "[stall][history]")
{
    TempFile file;
    {
        // A history as schema version 4 left it, holding a run with an agent clock.
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(file.path.c_str(), &db) == SQLITE_OK);
        const auto migrations = historyMigrations();
        REQUIRE(migrations.size() >= 5);
        for (std::size_t i = 0; i < 4; ++i)
            REQUIRE(sqlite3_exec(db, std::string(migrations[i]).c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
        const std::string rows = "PRAGMA user_version=4; PRAGMA application_id=" + std::to_string(kApplicationId)
            + "; INSERT INTO runs (id, status, started_unix_s, run_key) VALUES ('old', 'failed', 1, 1);"
              " INSERT INTO agent_clocks (run, agent, host, offset_s, uncertainty_s, samples)"
              " VALUES ('old', 0, 'a', 0.5, 0.001, 4);";
        REQUIRE(sqlite3_exec(db, rows.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
        sqlite3_close(db);
    }
    auto store = HistoryStore::open(file.path);
    REQUIRE(store.run("old"));
    CHECK(store.agentClocks("old").size() == 1);
    CHECK(store.stalls("old").empty());
    CHECK(store.flightRecorder("old").empty());

    planner::Span done;
    done.device = 1;
    done.kind = ActionKind::Forward;
    done.microbatch = 3;
    done.t0 = 1.0;
    done.t1 = 1.5;
    planner::Span waiting = done;
    waiting.kind = ActionKind::RecvActivation;
    waiting.lane = planner::Lane::Recv;
    waiting.microbatch = 4;
    waiting.peer = 0;
    waiting.bytes = 4096;
    waiting.t0 = 1.5;
    planner::Span silent = done;
    silent.device = 0;
    const std::vector<RecordedAction> recorder
        = {{1, done, false, "agent"}, {1, waiting, true, "agent"}, {0, silent, false, "controller"}};
    store.addStall("old", {63.5, "stalled: stage 1 waits", {1, 0}}, recorder);
    CHECK(store.stalls("old") == std::vector<StallRecord> {{63.5, "stalled: stage 1 waits", {1, 0}}});
    const auto back = store.flightRecorder("old");
    REQUIRE(back.size() == 3);
    CHECK(back[0] == recorder[2]); // by device
    CHECK(back[1] == recorder[0]);
    CHECK(back[2].in_progress);
    CHECK(back[2].span.t1 == back[2].span.t0); // stored as begun, not ended
    CHECK(back[2].span.peer == 0);
    CHECK(back[2].span.bytes == 4096);

    // A second stall adds its report; its recorders replace the first's.
    store.addStall("old", {90, "again", {0}}, {{0, silent, false, "agent"}});
    CHECK(store.stalls("old").size() == 2);
    CHECK(store.flightRecorder("old").size() == 1);
    store.deleteRun("old");
    CHECK(store.stalls("old").empty());
    CHECK(store.flightRecorder("old").empty());
}
