// SPDX-License-Identifier: MIT
// The run history's content: round trips, filters and order, deletion, telemetry resumed without duplicates, runs of
// dead controllers, a writer killed mid-batch (the file stays sound and holds whole batches only), and the exports.
// The file itself (schema versions, what is refused, privacy): test_history_file.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/history/history.h"
#include "tests/app/history_fixtures.h"

using namespace pw::test::history;

TEST_CASE("a run round-trips with its spans, metrics, logs and predicted timeline", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto input = newRun("gpt-demo 1f1b", {"nightly", "baseline", "nightly"});
    const auto id = store.createRun(input);
    CHECK(std::regex_match(id, std::regex(R"(r-\d{8}-\d{6}-[0-9a-f]{4})")));

    auto record = store.run(id);
    REQUIRE(record);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const RunRecord expected {id, input.plan_json, input.cluster_json, input.hosts_json, input.label,
        RunStatus::Running, "", record->started_unix_s, 0, host, ::getpid(), 100, 0, 0, {"baseline", "nightly"}};
    CHECK(*record == expected);
    const double now = static_cast<double>(std::time(nullptr));
    CHECK(record->started_unix_s > now - 60);
    CHECK(record->started_unix_s < now + 60);

    // Measured spans arrive interleaved across devices; the timeline orders them by device, then start.
    store.setDeviceNames(id, {"gpu0", "gpu1"});
    auto send = span(1, Lane::Send, ActionKind::SendActivation, 0.2, 0.4);
    send.peer = 0;
    send.bytes = 1048576;
    auto late = span(0, Lane::Compute, ActionKind::Backward, 0.3, 0.5);
    late.weight_version = 3;
    const auto early = span(0, Lane::Compute, ActionKind::Forward, 0.1, 0.2);
    const std::vector<MeasuredSpan> measured = {{send, 1, 1}, {late, 0, 2}, {early, 0, 1}};
    store.appendSpans(id, measured);

    const std::vector<MetricSample> samples = {{1, "loss", 3.5, 0.5}, {2, "loss", 3.25, 1.0},
        {1, "memory", 4e9, 0.5, 0}, {1, "memory", 2e9, 0.1, 0}, {1, "memory", 1e9, 0.2, 1}};
    store.appendMetrics(id, samples);
    CHECK(store.metrics(id, "loss") == std::vector<MetricSample>(samples.begin(), samples.begin() + 2));

    const std::vector<LogEntry> log = {{0.0, -1, -1, "info", "run started"}, {0.7, 1, 1, "warning", "slow link"}};
    store.appendLogs(id, log);
    CHECK(store.logs(id) == log);

    Timeline predicted;
    predicted.device_names = {"gpu0", "gpu1"};
    predicted.spans = {span(1, Lane::Compute, ActionKind::Forward, 0.5, 0.6),
        span(0, Lane::Compute, ActionKind::Forward, 0.0, 0.25),
        span(0, Lane::Send, ActionKind::SendActivation, 0.25, 0.3)};
    predicted.counter("memory", "B").samples = {{0, 0.0, 1e9}, {1, 0.5, 2e9}};
    predicted.counter("utilisation", "%").samples = {{0, 0.0, 50}};
    store.savePredicted(id, predicted, 2);
    CHECK(store.run(id)->predicted_steps == 2);

    auto checkMeasured = [&](HistoryStore& s) {
        const auto t = s.measuredTimeline(id);
        CHECK(t.source == Timeline::Source::Measured);
        CHECK(t.clock == pw::planner::ClockDomain::Host);
        CHECK(t.run_id == id);
        CHECK(t.label == "gpt-demo 1f1b");
        CHECK(t.epoch_unix_s == record->started_unix_s);
        CHECK(t.device_names == std::vector<std::string> {"gpu0", "gpu1"});
        CHECK(t.spans == std::vector<Span> {early, late, send});
        REQUIRE(t.counters.size() == 1); // loss is not per device: a metric, not a counter
        CHECK(t.counters[0].name == "memory");
        CHECK(t.counters[0].unit == "B");
        CHECK(t.counters[0].samples
            == std::vector<pw::planner::CounterSample> {{0, 0.1, 2e9}, {0, 0.5, 4e9}, {1, 0.2, 1e9}});
    };
    checkMeasured(store);

    auto back = store.predictedTimeline(id);
    CHECK(back.source == Timeline::Source::Predicted);
    CHECK(back.run_id == id);
    CHECK(back.spans == predicted.spans); // in saved order
    CHECK(back.counters == predicted.counters);
    CHECK(back.device_names == predicted.device_names);
    CHECK(store.metrics(id, "predicted:memory").size() == 2);

    // Saving again replaces the prediction and leaves the measurements alone.
    predicted.spans.pop_back();
    predicted.counters.pop_back();
    store.savePredicted(id, predicted, 2);
    back = store.predictedTimeline(id);
    CHECK(back.spans == predicted.spans);
    CHECK(back.counters == predicted.counters);
    checkMeasured(store);

    store.finishRun(id, RunStatus::Succeeded, "100 steps");
    record = store.run(id);
    REQUIRE(record);
    CHECK(record->status == RunStatus::Succeeded);
    CHECK(record->status_message == "100 steps");
    CHECK(record->ended_unix_s >= record->started_unix_s);
    CHECK_THAT(errorOf([&] { store.finishRun(id, RunStatus::Running); }), Contains("cannot finish as running"));

    // Everything is in the file: a second store opened on it reads the same.
    auto reopened = HistoryStore::open(dir.file());
    CHECK(reopened.run(id) == record);
    checkMeasured(reopened);
    CHECK(reopened.logs(id) == log);
    CHECK(reopened.integrityCheck() == "ok");
}

TEST_CASE("run statuses have names", "[history]")
{
    for (auto s :
        {RunStatus::Running, RunStatus::Succeeded, RunStatus::Failed, RunStatus::Stopped, RunStatus::Interrupted})
        CHECK(runStatusFromString(toString(s)) == s);
    CHECK(toString(RunStatus::Interrupted) == "interrupted");
    CHECK_THROWS_WITH(runStatusFromString("done"), Contains("unknown run status 'done'"));
}

TEST_CASE("runs are listed newest first and filtered by status, tag and label text", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto a = store.createRun(newRun("GPT-demo baseline", {"nightly"}));
    const auto b = store.createRun(newRun("bert 100%"));
    const auto c = store.createRun(newRun("gpt tuned", {"nightly", "tuned"}));
    store.finishRun(a, RunStatus::Failed, "out of memory");
    store.finishRun(b, RunStatus::Succeeded);
    using Ids = std::vector<std::string>;

    CHECK(ids(store.listRuns()) == Ids {c, b, a});
    CHECK(ids(store.listRuns({RunStatus::Running})) == Ids {c});
    CHECK(ids(store.listRuns({RunStatus::Failed})) == Ids {a});
    CHECK(ids(store.listRuns({RunStatus::Stopped})).empty());
    CHECK(ids(store.listRuns({{}, "nightly"})) == Ids {c, a});
    CHECK(ids(store.listRuns({{}, "tuned"})) == Ids {c});
    CHECK(ids(store.listRuns({{}, "none"})).empty());
    CHECK(ids(store.listRuns({{}, "", "gpt"})) == Ids {c, a}); // case-insensitive
    CHECK(ids(store.listRuns({{}, "", "100%"})) == Ids {b});
    CHECK(ids(store.listRuns({{}, "", "%"})) == Ids {b}); // LIKE's wildcards are taken literally
    CHECK(ids(store.listRuns({{}, "", "_"})).empty());
    CHECK(ids(store.listRuns({RunStatus::Failed, "nightly", "demo"})) == Ids {a});
    CHECK(ids(store.listRuns({RunStatus::Running, "nightly", "demo"})).empty());

    store.addTag(b, "nightly");
    store.addTag(b, "nightly"); // twice is once
    store.removeTag(a, "nightly");
    CHECK(ids(store.listRuns({{}, "nightly"})) == Ids {c, b});
    CHECK(store.run(b)->tags == std::vector<std::string> {"nightly"});
    CHECK(store.run(a)->tags.empty());
    CHECK(store.run(c)->tags == std::vector<std::string> {"nightly", "tuned"});
    CHECK_FALSE(store.run("r-nope"));
}

TEST_CASE("the tag filter matches substrings of tags, ASCII case-insensitive, as the label filter does", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto a = store.createRun(newRun("a", {"Nightly-2026"}));
    const auto b = store.createRun(newRun("b", {"lr_sweep", "100%"}));
    const auto c = store.createRun(newRun("c"));
    using Ids = std::vector<std::string>;
    CHECK(ids(store.listRuns({{}, "night"})) == Ids {a});
    CHECK(ids(store.listRuns({{}, "NIGHTLY"})) == Ids {a});
    CHECK(ids(store.listRuns({{}, "2026"})) == Ids {a});
    CHECK(ids(store.listRuns({{}, "sweep"})) == Ids {b});
    CHECK(ids(store.listRuns({{}, "_"})) == Ids {b}); // LIKE's wildcards are taken literally
    CHECK(ids(store.listRuns({{}, "%"})) == Ids {b});
    CHECK(ids(store.listRuns({{}, "r%"})).empty());
    CHECK(ids(store.listRuns({{}, "weekly"})).empty());
    CHECK(ids(store.listRuns({{}, ""})) == Ids {c, b, a});
}

TEST_CASE("deleting a run removes every row of it and nothing else", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto a = store.createRun(newRun("a", {"x", "y"}));
    const auto b = store.createRun(newRun("b", {"x", "y"}));
    fill(store, a);
    fill(store, b);
    const auto before = store.totals();
    CHECK(before == HistoryTotals {2, 4, 4, 22, 6, 2});
    const auto bTimeline = store.measuredTimeline(b);

    store.deleteRun(a);
    CHECK(store.totals() == HistoryTotals {1, 2, 2, 11, 3, 1});
    CHECK_FALSE(store.run(a));
    CHECK(ids(store.listRuns()) == std::vector<std::string> {b});
    CHECK(store.measuredTimeline(b) == bTimeline);
    CHECK(errorOf([&] { store.deleteRun(a); }) == "no run '" + a + "' in " + dir.file().string());
    CHECK(store.integrityCheck() == "ok");
}

TEST_CASE("spans already stored under their (agent, seq) are ignored: lastSequence tells where to resume", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto id = store.createRun(newRun("resume"));
    CHECK(store.lastSequence(id, 0) == 0);

    store.appendSpans(id, batch(0, 1, 100));
    CHECK(store.lastSequence(id, 0) == 100);

    // Telemetry resumed from an older point sends 51..150 again; the resent copies of 51..100 are dropped.
    auto resent = batch(0, 51, 100);
    for (auto& s : resent)
        s.span.t1 += 10;
    store.appendSpans(id, resent);
    auto spans = store.measuredTimeline(id).spans;
    REQUIRE(spans.size() == 150);
    CHECK(store.lastSequence(id, 0) == 150);
    CHECK(spans[59] == batch(0, 60, 1)[0].span); // the first copy of seq 60 stays
    CHECK(spans[120] == resent[70].span); // seq 121 arrived once, in the resent batch

    // Sequence numbers are per agent and per run; duplicates inside one call are dropped too.
    auto twice = batch(1, 1, 10);
    twice.push_back(twice.front());
    store.appendSpans(id, twice);
    CHECK(store.measuredTimeline(id).spans.size() == 160);
    CHECK(store.lastSequence(id, 1) == 10);
    CHECK(store.lastSequence(id, 0) == 150);
    CHECK(store.lastSequence(id, 7) == 0);
    const auto other = store.createRun(newRun("other"));
    store.appendSpans(other, batch(0, 1, 100));
    CHECK(store.measuredTimeline(other).spans.size() == 100);
    CHECK(store.totals().spans == 260);
}

TEST_CASE("every method refuses an unknown run id naming it and the file", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto expected = "no run 'r-nope' in " + dir.file().string();
    const std::string nope = "r-nope";
    CHECK(errorOf([&] { store.appendSpans(nope, batch(0, 1, 1)); }) == expected);
    CHECK(errorOf([&] { store.lastSequence(nope, 0); }) == expected);
    CHECK(errorOf([&] { store.finishRun(nope, RunStatus::Stopped); }) == expected);
    CHECK(errorOf([&] { store.addTag(nope, "x"); }) == expected);
    CHECK(errorOf([&] { store.measuredTimeline(nope); }) == expected);
    CHECK(errorOf([&] { store.predictedTimeline(nope); }) == expected);
    CHECK(errorOf([&] { store.metrics(nope, "loss"); }) == expected);
    CHECK(errorOf([&] { store.logs(nope); }) == expected);
    CHECK(errorOf([&] { store.savePredicted(nope, {}, 1); }) == expected);
    std::ostringstream out;
    CHECK(errorOf([&] { store.exportCsv(nope, out); }) == expected);
    CHECK(store.totals() == HistoryTotals {}); // nothing was written
}

TEST_CASE("two stores share one file", "[history]")
{
    TempDir dir;
    auto controller = HistoryStore::open(dir.file());
    auto viewer = HistoryStore::open(dir.file());
    const auto id = controller.createRun(newRun("shared"));
    CHECK(ids(viewer.listRuns()) == std::vector<std::string> {id});
    controller.appendSpans(id, batch(0, 1, 50));
    CHECK(viewer.measuredTimeline(id).spans.size() == 50);
    viewer.addTag(id, "seen");
    CHECK(controller.run(id)->tags == std::vector<std::string> {"seen"});
}

TEST_CASE("markInterrupted marks running runs whose controller is gone and leaves live ones", "[history]")
{
    const pid_t child = deadPid();

    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto dead = store.createRun(newRun("dead controller"), child);
    const auto live = store.createRun(newRun("live controller"));
    const auto finished = store.createRun(newRun("finished"), child);
    store.finishRun(finished, RunStatus::Succeeded, "done");

    CHECK(store.markInterrupted() == 1);
    const auto record = store.run(dead);
    CHECK(record->status == RunStatus::Interrupted);
    CHECK_THAT(record->status_message, Contains("pid " + std::to_string(child)));
    CHECK(record->ended_unix_s >= record->started_unix_s);
    CHECK(store.run(live)->status == RunStatus::Running);
    CHECK(store.run(finished)->status == RunStatus::Succeeded);
    CHECK(store.run(finished)->status_message == "done");
    CHECK(store.markInterrupted() == 0);
}

namespace {

constexpr int kCrashBatch = 1000;

/// The child of the crash test: appends batches to the runs in turn, writing a byte to `notify` after each
/// commit, until it is killed.
[[noreturn]] void writeUntilKilled(const fs::path& file, const std::vector<std::string>& runs, int notify)
{
    ::alarm(60); // a safety net should the parent fail before it kills us
    try {
        auto store = HistoryStore::open(file);
        for (std::int64_t b = 0; b < 100000; ++b) {
            const auto round = b / static_cast<std::int64_t>(runs.size());
            store.appendSpans(
                runs[static_cast<std::size_t>(b) % runs.size()], batch(0, 1 + round * kCrashBatch, kCrashBatch));
            const char done = 'b';
            if (::write(notify, &done, 1) != 1)
                ::_exit(3);
        }
    } catch (...) {
        ::_exit(2);
    }
    ::_exit(0);
}

} // namespace

TEST_CASE("a writer killed mid-batch leaves a sound file holding whole batches only", "[history]")
{
    TempDir dir;
    std::vector<std::string> runs;
    {
        auto store = HistoryStore::open(dir.file());
        runs = {store.createRun(newRun("crash a")), store.createRun(newRun("crash b"))};
    } // no connection crosses the fork

    int pipeFds[2];
    REQUIRE(::pipe(pipeFds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(pipeFds[0]);
        writeUntilKilled(dir.file(), runs, pipeFds[1]);
    }
    ::close(pipeFds[1]);
    constexpr int kCommitted = 20;
    int committed = 0;
    char byte = 0;
    while (committed < kCommitted && ::read(pipeFds[0], &byte, 1) == 1)
        ++committed;
    ::kill(child, SIGKILL); // the child is writing its next batch by now
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    ::close(pipeFds[0]);
    CHECK(committed == kCommitted);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);

    auto store = HistoryStore::open(dir.file());
    CHECK(store.integrityCheck() == "ok");
    std::size_t total = 0;
    for (const auto& id : runs) {
        const auto spans = store.measuredTimeline(id).spans;
        CHECK(spans.size() % kCrashBatch == 0);
        CHECK(store.lastSequence(id, 0) == static_cast<std::int64_t>(spans.size())); // no gap, no partial batch
        total += spans.size();
    }
    CHECK(total >= static_cast<std::size_t>(kCommitted * kCrashBatch));
    CHECK(store.totals().spans == static_cast<std::int64_t>(total));
}

TEST_CASE("exports: CSV with a header and a row per span, Chrome trace with a slice per span", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto id = store.createRun(newRun("export"));
    store.setDeviceNames(id, {"gpu0", "gpu1"});
    auto send = span(0, Lane::Send, ActionKind::SendActivation, 0.5, 0.75);
    send.peer = 1;
    send.bytes = 1048576;
    send.microbatch = 2;
    const std::vector<MeasuredSpan> spans = {{span(1, Lane::Compute, ActionKind::Forward, 0.75, 1.5), 1, 1},
        {send, 0, 2}, {span(0, Lane::Compute, ActionKind::Forward, 0, 0.5), 0, 1}};
    store.appendSpans(id, spans);

    std::ostringstream csv;
    store.exportCsv(id, csv);
    const auto rows = lines(csv.str());
    REQUIRE(rows.size() == 4);
    CHECK(rows[0] == "device,lane,kind,stage,microbatch,action,weight_version,peer,bytes,t0_s,t1_s,agent,seq");
    CHECK(rows[1] == "0,compute,F,0,0,0,0,-1,0,0,0.5,0,1");
    CHECK(rows[2] == "0,send,SEND_F,0,2,0,0,1,1048576,0.5,0.75,0,2");
    CHECK(rows[3] == "1,compute,F,0,0,0,0,-1,0,0.75,1.5,1,1");

    Timeline predicted;
    predicted.spans = {span(0, Lane::Compute, ActionKind::Backward, 0.25, 1)};
    store.savePredicted(id, predicted, 2);
    std::ostringstream predictedCsv;
    store.exportCsv(id, predictedCsv, Timeline::Source::Predicted);
    CHECK(lines(predictedCsv.str()) == std::vector<std::string> {rows[0], "0,compute,B,0,0,0,0,-1,0,0.25,1,,"});

    std::ostringstream trace;
    store.exportChromeTrace(id, trace);
    const auto j = nlohmann::json::parse(trace.str());
    int slices = 0;
    bool namedGpu1 = false;
    for (const auto& e : j.at("traceEvents")) {
        slices += e.value("ph", "") == "X";
        namedGpu1 = namedGpu1 || (e.value("name", "") == "process_name" && e.at("args").value("name", "") == "gpu1");
    }
    CHECK(slices == 3);
    CHECK(namedGpu1);
}

TEST_CASE("a loss that is NaN or infinite is stored and read back as it was, with every step", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto id = store.createRun(newRun("diverged"));
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<MetricSample> samples = {{0, "loss", 4.2, 0.1, -1}, {1, "loss", inf, 0.2, -1},
        {2, "loss", std::numeric_limits<double>::quiet_NaN(), 0.3, -1}, {3, "loss", -inf, 0.4, -1}};
    store.appendMetrics(id, samples); // schema 2's NOT NULL refused the NaN, losing the run
    const auto back = store.metrics(id, "loss");
    REQUIRE(back.size() == 4);
    CHECK(back[0].value == 4.2);
    CHECK(back[1].value == inf);
    CHECK(std::isnan(back[2].value));
    CHECK(back[3].value == -inf);
    CHECK(back[2].step == 2);
    CHECK(back[2].t_s == 0.3);
    CHECK(store.run(id)->steps_done == 4);
}

TEST_CASE("a run's record counts the steps done, not only those planned", "[history]")
{
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    auto request = newRun("short");
    request.steps_planned = 100;
    const auto id = store.createRun(request);
    CHECK(store.run(id)->steps_done == 0);
    store.appendMetrics(id,
        std::vector<MetricSample> {{0, "loss", 5, 0.1, -1}, {0, "tokens_per_s", 10, 0.1, -1}, {1, "loss", 4, 0.2, -1},
            {1, "memory", 1e6, 0.2, 0}, {2, "loss", 3, 0.3, -1}});
    CHECK(store.run(id)->steps_done == 3);
    CHECK(store.run(id)->steps_planned == 100);
    CHECK(store.listRuns()[0].steps_done == 3);
}

TEST_CASE("an interrupted run ends at its last recorded event, not when somebody noticed", "[history]")
{
    const pid_t child = deadPid();
    TempDir dir;
    auto store = HistoryStore::open(dir.file());
    const auto id = store.createRun(newRun("killed"), child);
    store.appendMetrics(id, std::vector<MetricSample> {{0, "loss", 5, 0.1, -1}});
    const double lastEvent = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ::usleep(1'200'000); // the next command comes along later
    REQUIRE(store.markInterrupted() == 1);
    const auto r = store.run(id);
    CHECK(r->status == RunStatus::Interrupted);
    CHECK(r->ended_unix_s >= r->started_unix_s);
    CHECK(r->ended_unix_s <= lastEvent + 0.05);
}

TEST_CASE(
    "a read-only store writes nothing, creates nothing, and shows dead controllers' runs as interrupted", "[history]")
{
    const pid_t child = deadPid();
    TempDir dir;
    const auto missing = dir.path() / "nothing" / "history.sqlite";
    CHECK_THAT(errorOf([&] { HistoryStore::open(missing, HistoryStore::Access::ReadOnly); }),
        Contains(missing.string()) && Contains("no history file"));
    CHECK(!fs::exists(dir.path() / "nothing"));
    CHECK_THAT(
        errorOf([&] { HistoryStore::open(dir.path(), HistoryStore::Access::ReadOnly); }), Contains("is a directory"));

    std::string id;
    {
        auto store = HistoryStore::open(dir.file());
        id = store.createRun(newRun("dead controller"), child);
        store.appendMetrics(id, std::vector<MetricSample> {{0, "loss", 5, 0.1, -1}});
    }
    const auto before = fs::last_write_time(dir.file());
    auto reader = HistoryStore::open(dir.file(), HistoryStore::Access::ReadOnly);
    const auto r = reader.run(id);
    REQUIRE(r);
    CHECK(r->status == RunStatus::Interrupted);
    CHECK(r->steps_done == 1);
    CHECK(reader.markInterrupted() == 0);
    CHECK_THROWS_AS(reader.addTag(id, "x"), HistoryError);
    CHECK(fs::last_write_time(dir.file()) == before);
    // The writer still sees it running until one marks it.
    auto writer = HistoryStore::open(dir.file());
    CHECK(writer.run(id)->status == RunStatus::Running);
}
