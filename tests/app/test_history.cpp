// SPDX-License-Identifier: MIT
// The run history: round trips, filters and order, deletion, telemetry resumed without duplicates, files it must
// refuse, runs of dead controllers, a writer killed mid-batch (the file stays sound and holds whole batches only),
// and the exports.
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
#include "app/history/sqlite_wrappers.h"

namespace fs = std::filesystem;
using namespace pw::app;
using Catch::Matchers::Contains;
using pw::planner::ActionKind;
using pw::planner::Lane;
using pw::planner::Span;
using pw::planner::Timeline;

namespace {

/// A directory of its own under the system's temporary directory, removed with what it holds.
class TempDir
{
public:
    TempDir()
    {
        static int made = 0;
        const auto suffix = std::to_string(std::random_device {}() & 0xffffu);
        m_path = fs::temp_directory_path()
            / ("pw-history-test-" + std::to_string(::getpid()) + "-" + std::to_string(++made) + "-" + suffix);
        fs::create_directories(m_path);
    }
    ~TempDir()
    {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const fs::path& path() const { return m_path; }
    fs::path file() const { return m_path / "history.sqlite"; }

private:
    fs::path m_path;
};

Span span(int device, Lane lane, ActionKind kind, double t0, double t1)
{
    Span s;
    s.device = device;
    s.lane = lane;
    s.kind = kind;
    s.t0 = t0;
    s.t1 = t1;
    return s;
}

/// `count` compute spans of `agent` (its device) with sequence numbers first, first + 1, ..., back to back.
std::vector<MeasuredSpan> batch(int agent, std::int64_t first, int count)
{
    std::vector<MeasuredSpan> out;
    for (int i = 0; i < count; ++i) {
        const auto seq = first + i;
        auto s = span(agent, Lane::Compute, seq % 2 ? ActionKind::Forward : ActionKind::Backward,
            static_cast<double>(seq), static_cast<double>(seq) + 0.5);
        s.stage = agent;
        s.microbatch = static_cast<int>(seq);
        s.action = static_cast<int>(seq);
        s.weight_version = static_cast<int>(seq / 8);
        out.push_back({s, agent, seq});
    }
    return out;
}

/// The pid of a child that has exited and been reaped: no process has it (a controller that is gone).
pid_t deadPid()
{
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return child;
}

NewRun newRun(const std::string& label, std::vector<std::string> tags = {})
{
    NewRun r;
    r.plan_json = R"({"schedule":"1f1b","stages":2})";
    r.cluster_json = R"({"name":"two gpus"})";
    r.hosts_json = R"(["localhost"])";
    r.label = label;
    r.steps_planned = 100;
    r.tags = std::move(tags);
    return r;
}

template <typename Fn> std::string errorOf(Fn&& fn)
{
    try {
        fn();
    } catch (const HistoryError& e) {
        return e.what();
    }
    return "no HistoryError";
}

std::vector<std::string> ids(const std::vector<RunRecord>& runs)
{
    std::vector<std::string> out;
    for (const auto& r : runs)
        out.push_back(r.id);
    return out;
}

/// The big-endian 32-bit word at `offset` of an SQLite file's header (user_version at 60, application_id at 68).
std::uint32_t headerWord(const fs::path& file, int offset)
{
    std::ifstream in(file, std::ios::binary);
    in.seekg(offset);
    unsigned char b[4] = {};
    in.read(reinterpret_cast<char*>(b), 4);
    return std::uint32_t {b[0]} << 24 | std::uint32_t {b[1]} << 16 | std::uint32_t {b[2]} << 8 | b[3];
}

void setHeaderWord(const fs::path& file, int offset, std::uint32_t value)
{
    std::fstream io(file, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(offset);
    const char b[4] = {static_cast<char>(value >> 24), static_cast<char>(value >> 16), static_cast<char>(value >> 8),
        static_cast<char>(value)};
    io.write(b, 4);
}

std::string text(const fs::path& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> lines(const std::string& text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

/// A run with a row in every table: tags, device names, measured and predicted spans, metrics, logs.
void fill(HistoryStore& store, const std::string& id)
{
    store.setDeviceNames(id, {"gpu0", "gpu1"});
    const auto spans = batch(0, 1, 10);
    store.appendSpans(id, spans);
    Timeline predicted;
    predicted.spans = {span(0, Lane::Compute, ActionKind::Forward, 0, 1)};
    predicted.counter("memory", "B").samples = {{0, 0, 100}};
    store.savePredicted(id, predicted, 2);
    const std::vector<MetricSample> metrics = {{1, "loss", 2.5, 1.0}, {1, "memory", 1e9, 1.0, 0}};
    store.appendMetrics(id, metrics);
    const std::vector<LogEntry> logs = {{0.5, 0, 0, "info", "started"}};
    store.appendLogs(id, logs);
}

} // namespace

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

TEST_CASE("a history with a newer schema version is refused naming the file and both versions", "[history]")
{
    TempDir dir;
    const auto file = dir.file();
    {
        auto store = HistoryStore::open(file);
        store.createRun(newRun("old"));
    } // closing the last connection checkpoints the WAL into the file and removes it
    REQUIRE_FALSE(fs::exists(file.string() + "-wal"));
    CHECK(headerWord(file, 60) == kHistorySchemaVersion);
    CHECK(headerWord(file, 68) == 0x50577268);

    setHeaderWord(file, 60, 99);
    const auto error = errorOf([&] { HistoryStore::open(file); });
    CHECK_THAT(error,
        Contains(file.string()) && Contains("schema version 99")
            && Contains("version " + std::to_string(kHistorySchemaVersion)));
    CHECK(headerWord(file, 60) == 99); // left untouched

    setHeaderWord(file, 60, 1);
    setHeaderWord(file, 68, 0x12345678);
    CHECK_THAT(errorOf([&] { HistoryStore::open(file); }),
        Contains(file.string()) && Contains("not a Pipewright history") && Contains("something else"));
}

TEST_CASE("a history written by schema version 1 is migrated with every span kept", "[history]")
{
    // tests/data/history/history-v1.sqlite: a 2-step local run recorded by the first release of the history
    // (spans keyed by the run's id text), and its spans as that release exported them.
    TempDir dir;
    const auto file = dir.file();
    fs::copy_file(fs::path(PW_TEST_DATA_DIR) / "history" / "history-v1.sqlite", file);
    REQUIRE(headerWord(file, 60) == 1);
    std::string id;
    {
        auto store = HistoryStore::open(file);
        const auto runs = store.listRuns();
        REQUIRE(runs.size() == 1);
        id = runs[0].id;
        std::ostringstream csv;
        store.exportCsv(id, csv);
        std::ifstream golden(fs::path(PW_TEST_DATA_DIR) / "history" / "history-v1-spans.csv");
        std::stringstream expected;
        expected << golden.rdbuf();
        CHECK(csv.str() == expected.str());
        CHECK(store.measuredTimeline(id).spans.size() == 68);
        CHECK(store.lastSequence(id, 0) > 0);
        // The migrated file takes new runs and spans beside the old ones.
        const auto fresh = store.createRun(newRun("after"));
        CHECK(store.listRuns().size() == 2);
        store.deleteRun(id);
        CHECK(store.listRuns().size() == 1);
        CHECK(store.listRuns()[0].id == fresh);
        CHECK(store.totals().spans == 0); // the old run's spans went with it
    }
    CHECK(headerWord(file, 60) == kHistorySchemaVersion);
}

TEST_CASE("a file that is not SQLite is refused naming the file", "[history]")
{
    TempDir dir;
    const auto file = dir.path() / "notes.txt";
    std::string content;
    for (int i = 0; i < 40; ++i)
        content += "line " + std::to_string(i) + ": this is a text file, not a database\n";
    std::ofstream(file) << content;
    const auto error = errorOf([&] { HistoryStore::open(file); });
    CHECK_THAT(error, Contains(file.string()) && Contains("not an SQLite database"));
    CHECK(text(file) == content);
}

TEST_CASE("open creates the directory: the default path follows XDG_DATA_HOME", "[history]")
{
    TempDir dir;
    const auto nested = dir.path() / "a" / "b" / "history.sqlite";
    {
        auto store = HistoryStore::open(nested);
        CHECK(store.path() == nested);
    }
    CHECK(fs::exists(nested));

    auto saved = [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        return v ? std::optional<std::string>(v) : std::nullopt;
    };
    const auto xdg = saved("XDG_DATA_HOME");
    const auto home = saved("HOME");
    ::setenv("HOME", dir.path().c_str(), 1);
    ::setenv("XDG_DATA_HOME", "/srv/data", 1);
    CHECK(defaultHistoryPath() == fs::path("/srv/data/pipewright/history.sqlite"));
    ::setenv("XDG_DATA_HOME", "relative/data", 1); // not absolute: ignored, as the XDG specification says
    CHECK(defaultHistoryPath() == dir.path() / ".local/share/pipewright/history.sqlite");
    ::unsetenv("XDG_DATA_HOME");
    CHECK(defaultHistoryPath() == dir.path() / ".local/share/pipewright/history.sqlite");
    for (const auto& [name, value] : {std::pair {"XDG_DATA_HOME", xdg}, std::pair {"HOME", home}}) {
        if (value)
            ::setenv(name, value->c_str(), 1);
        else
            ::unsetenv(name);
    }
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

TEST_CASE("a new history file is private to its user, and so is the directory made for it", "[history]")
{
    TempDir dir;
    const auto file = dir.path() / "made" / "for" / "it" / "history.sqlite";
    {
        auto store = HistoryStore::open(file);
        store.createRun(newRun("x"));
    }
    CHECK((fs::status(file).permissions() & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none);
    CHECK((fs::status(dir.path() / "made").permissions() & (fs::perms::group_all | fs::perms::others_all))
        == fs::perms::none);
    // An existing file keeps the mode its owner gave it (shared for reading on purpose).
    const auto shared = dir.path() / "shared.sqlite";
    {
        HistoryStore::open(shared);
    }
    const auto readable
        = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read;
    fs::permissions(shared, readable);
    {
        HistoryStore::open(shared).createRun(newRun("y"));
    }
    CHECK(fs::status(shared).permissions() == readable);
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

TEST_CASE("a history of schema version 1 migrates to a file that keeps NaN losses", "[history]")
{
    TempDir dir;
    const auto file = dir.file();
    fs::copy_file(fs::path(PW_TEST_DATA_DIR) / "history" / "history-v1.sqlite", file);
    auto store = HistoryStore::open(file);
    const auto id = store.listRuns().at(0).id;
    const auto losses = store.metrics(id, "loss");
    REQUIRE(losses.size() == 2); // the metrics table was rebuilt with its rows (and their order)
    CHECK(store.run(id)->steps_done == 2);
    store.appendMetrics(id, std::vector<MetricSample> {{2, "loss", std::numeric_limits<double>::quiet_NaN(), 1, -1}});
    CHECK(std::isnan(store.metrics(id, "loss").back().value));
    CHECK(store.integrityCheck() == "ok");
}

TEST_CASE("migration 3 redacts the node env values earlier versions stored, leaving no trace in the file",
    "[history][security]")
{
    TempDir dir;
    const auto file = dir.file();
    fs::copy_file(fs::path(PW_TEST_DATA_DIR) / "history" / "history-v1.sqlite", file);
    const std::string secret = "hf_0123456789abcdefSECRET";
    {
        // What an earlier version wrote: the cluster (and the plan's copy of it) with every env value in clear.
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
        const std::string cluster = R"({"nodes":[{"name":"n0","env":{"HF_TOKEN":")" + secret
            + R"(","CUDA_VISIBLE_DEVICES":"0,1"},"env_keep":["CUDA_VISIBLE_DEVICES"]}]})";
        const std::string sql
            = "UPDATE runs SET cluster_json = '" + cluster + "', plan_json = '{\"cluster\":" + cluster + "}'";
        REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
        sqlite3_close(db);
    }
    REQUIRE(text(file).find(secret) != std::string::npos);
    std::string id;
    {
        auto store = HistoryStore::open(file);
        const auto r = store.listRuns().at(0);
        id = r.id;
        CHECK(r.cluster_json.find(secret) == std::string::npos);
        CHECK_THAT(r.cluster_json, Contains("HF_TOKEN") && Contains("<redacted>") && Contains("0,1"));
        CHECK_THAT(r.plan_json, Contains("HF_TOKEN") && Contains("<redacted>"));
        CHECK(store.integrityCheck() == "ok");
    }
    std::string bytes = text(file);
    if (fs::exists(file.string() + "-wal"))
        bytes += text(fs::path(file.string() + "-wal"));
    CHECK(bytes.find(secret) == std::string::npos);
}

TEST_CASE("a history path that is not a regular file is refused before SQLite touches it", "[history]")
{
    // issue 30 item 15: `--history /dev/null` left /dev/null-journal (0666) in /dev.
    fs::remove("/dev/null-journal"); // a leftover of an earlier version, if any
    for (const auto access : {HistoryStore::Access::ReadWrite, HistoryStore::Access::ReadOnly})
        CHECK_THROWS_WITH(HistoryStore::open("/dev/null", access), Contains("/dev/null: is not a regular file"));
    CHECK_FALSE(fs::exists("/dev/null-journal"));
    TempDir dir;
    const auto fifo = dir.path() / "fifo.sqlite";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(HistoryStore::open(fifo), Contains("is not a regular file"));
    CHECK_THROWS_WITH(HistoryStore::open(dir.path()), Contains("is a directory"));
}

TEST_CASE("a new history that cannot be written (a full disk) is not left behind as an empty file", "[history]")
{
    // issue 30 item 15. A full disk, as a process sees it: RLIMIT_FSIZE 0 makes every write past byte 0 fail
    // (EFBIG), in a child so that this process keeps its limits.
    TempDir dir;
    const auto file = dir.file();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::signal(SIGXFSZ, SIG_IGN);
        const rlimit none {0, 0};
        ::setrlimit(RLIMIT_FSIZE, &none);
        try {
            HistoryStore::open(file);
            ::_exit(1); // it should not open
        } catch (const std::exception&) {
            ::_exit(fs::exists(file) ? 2 : 0);
        }
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0); // 1: it opened; 2: the empty file stayed
    CHECK_FALSE(fs::exists(file));
}

TEST_CASE("history errors say what was being done, never a cut copy of the SQL", "[history]")
{
    // issue 30 item 15: "INSERT INTO runs (id, plan_json, cluster_json, h: attempt to write a readonly database" and,
    // for a history at schema version 0 that holds tables, ": table runs already exists".
    TempDir dir;
    {
        auto h = HistoryStore::open(dir.file());
        h.createRun({});
    }
    // A damaged history: ours (its application id), with tables, but its schema version reset to 0.
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(dir.file().c_str(), &db) == SQLITE_OK);
        REQUIRE(sqlite3_exec(db, "PRAGMA user_version=0", nullptr, nullptr, nullptr) == SQLITE_OK);
        sqlite3_close(db);
    }
    try {
        HistoryStore::open(dir.file());
        FAIL("opened a damaged history");
    } catch (const HistoryError& e) {
        CHECK_THAT(e.what(), Contains("a damaged history: its schema version is 0"));
    }
    // The statement described, not quoted: what a failed write says.
    CHECK(Connection::whatItDoes("INSERT INTO runs (id, plan_json, cluster_json, hosts_json) VALUES (?1, ?2)")
        == "writing runs");
    CHECK(Connection::whatItDoes("INSERT OR REPLACE INTO tags (run_id, tag) VALUES (?1, ?2)") == "writing tags");
    CHECK(Connection::whatItDoes("UPDATE runs SET status = ?1") == "writing runs");
    CHECK(Connection::whatItDoes("DELETE FROM spans WHERE run_id = ?1") == "deleting from spans");
    CHECK(Connection::whatItDoes("SELECT count(*) FROM spans WHERE run_id = ?1") == "reading spans");
    CHECK(Connection::whatItDoes("\nCREATE TABLE runs (id TEXT)") == "changing the history's tables (CREATE TABLE)");
}
