// SPDX-License-Identifier: MIT
// The history file itself: schema versions (newer refused, older migrated, a damaged version 0), what is not an
// SQLite history (another file, a device, a FIFO, a directory), the directory and the privacy of a new file, a new file
// that cannot be written, and errors that say what was being done.
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
#include "tests/app/history_fixtures.h"

using namespace pw::test::history;

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
