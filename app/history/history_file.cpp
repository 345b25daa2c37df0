// SPDX-License-Identifier: MIT
// The history file itself: where it lives, how it is created (private to its owner) and opened, what makes it
// ours, and its schema brought up to date (app/history/history_file.h).
#include "history_file.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <tuple>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/cluster.h"
#include "schema.h"

namespace pw::app {

namespace fs = std::filesystem;

namespace {

fs::path homeDirectory()
{
    if (const char* home = std::getenv("HOME"); home && *home)
        return home;
    std::array<char, 4096> buffer {};
    passwd entry {};
    passwd* found = nullptr;
    if (::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found && found->pw_dir)
        return found->pw_dir;
    throw HistoryError("cannot find the home directory for the history file: HOME is not set");
}

/// `text` (a stored cluster, or a plan holding one under "cluster") with every node's `env` value replaced by
/// planner::kRedactedValue unless the node's `env_keep` names it, as planner::toJson(Cluster) writes them since
/// schema 3; nullopt when nothing changed (or the text is not such JSON: left as it is).
std::optional<std::string> redactedEnvJson(const std::string& text)
{
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return std::nullopt;
    bool changed = false;
    for (auto* cluster : {&j, j.contains("cluster") ? &j["cluster"] : nullptr}) {
        if (!cluster || !cluster->is_object() || !cluster->contains("nodes") || !(*cluster)["nodes"].is_array())
            continue;
        for (auto& node : (*cluster)["nodes"]) {
            if (!node.is_object() || !node.contains("env") || !node["env"].is_object())
                continue;
            const auto keep = node.value("env_keep", nlohmann::json::array());
            for (auto& [name, value] : node["env"].items()) {
                const bool kept = keep.is_array() && std::find(keep.begin(), keep.end(), name) != keep.end();
                if (!kept && value != planner::kRedactedValue) {
                    value = planner::kRedactedValue;
                    changed = true;
                }
            }
        }
    }
    return changed ? std::optional<std::string>(j.dump()) : std::nullopt;
}

[[noreturn]] void refuseNewer(const Connection& db, std::int64_t version)
{
    throw HistoryError(db.file() + ": the history has schema version " + std::to_string(version)
        + ", newer than version " + std::to_string(kHistorySchemaVersion)
        + ", the newest this Pipewright knows: open it with a newer Pipewright");
}

/// Part of migration 3: earlier versions stored node env values (tokens, passwords) in the runs' plans and
/// clusters. secure_delete zeroes what the rewritten rows leave behind, so the old text is not kept in free pages.
void redactStoredEnv(const Connection& db)
{
    db.exec("PRAGMA secure_delete=ON");
    std::vector<std::tuple<std::int64_t, std::string, std::string>> rows;
    {
        Statement select(db, "SELECT rowid, plan_json, cluster_json FROM runs");
        while (select.step()) {
            auto plan = redactedEnvJson(select.text(1));
            auto cluster = redactedEnvJson(select.text(2));
            if (plan || cluster)
                rows.emplace_back(select.integer(0), plan.value_or(select.text(1)), cluster.value_or(select.text(2)));
        }
    }
    Statement update(db, "UPDATE runs SET plan_json = ?2, cluster_json = ?3 WHERE rowid = ?1");
    for (const auto& [rowid, plan, cluster] : rows)
        update.integer(1, rowid).text(2, plan).text(3, cluster).run();
}

} // namespace

fs::path defaultHistoryPath()
{
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && fs::path(xdg).is_absolute())
        return fs::path(xdg) / "pipewright" / "history.sqlite";
    return homeDirectory() / ".local" / "share" / "pipewright" / "history.sqlite";
}

void createDirectoryFor(const fs::path& file)
{
    const auto dir = file.parent_path();
    if (dir.empty())
        return;
    std::vector<fs::path> missing;
    for (auto d = dir; !d.empty() && !fs::exists(d); d = d.parent_path()) {
        missing.push_back(d);
        if (d == d.parent_path())
            break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it)
        if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST)
            throw HistoryError(file.string() + ": cannot create its directory " + it->string() + ": "
                + std::generic_category().message(errno));
}

bool createPrivate(const fs::path& file)
{
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return false; // it exists (or SQLite's open names the cause)
    ::close(fd);
    return true;
}

std::string immutableUri(const fs::path& file)
{
    std::string uri = "file:";
    for (unsigned char c : fs::absolute(file).string()) {
        if (std::isalnum(c) || std::strchr("/-._~", c))
            uri += static_cast<char>(c);
        else {
            std::array<char, 4> hex {};
            std::snprintf(hex.data(), hex.size(), "%%%02X", c);
            uri += hex.data();
        }
    }
    return uri + "?immutable=1";
}

std::int64_t pragmaValue(const Connection& db, const std::string& name)
{
    Statement s(db, "PRAGMA " + name);
    return s.step() ? s.integer(0) : 0;
}

void checkIdentity(const Connection& db)
{
    const auto version = pragmaValue(db, "user_version"); // the first read: fails here for a file that is not SQLite
    const auto applicationId = pragmaValue(db, "application_id");
    Statement tables(db, "SELECT count(*) FROM sqlite_master");
    tables.step();
    const bool fresh = version == 0 && applicationId == 0 && tables.integer(0) == 0;
    if (!fresh && applicationId != kApplicationId)
        throw HistoryError(db.file() + ": not a Pipewright history: an SQLite database of something else "
            + "(application_id " + std::to_string(applicationId) + ")");
    if (!fresh && version == 0) // ours, with tables, yet at version 0: migrating would create them again
        throw HistoryError(db.file() + ": a damaged history: its schema version is 0 (PRAGMA user_version) but it "
            + "holds " + std::to_string(tables.integer(0)) + " tables and objects; this Pipewright writes version "
            + std::to_string(kHistorySchemaVersion) + ": restore the file from a copy");
    if (version > kHistorySchemaVersion)
        refuseNewer(db, version);
}

void configureForWriting(const Connection& db)
{
    // WAL: readers never block the writer and a killed writer leaves only uncommitted frames behind, which
    // recovery drops. synchronous=NORMAL in WAL mode is safe against process crashes (only a power loss can
    // lose the last commits), and skips an fsync per transaction.
    db.exec("PRAGMA journal_mode=WAL");
    db.exec("PRAGMA synchronous=NORMAL");
    db.exec("PRAGMA cache_size=-16384"); // 16 MiB: the spans index stays in memory while a run ingests
}

void migrate(const Connection& db)
{
    for (;;) {
        Transaction tx(db, Transaction::Access::Write);
        const auto version = pragmaValue(db, "user_version");
        if (version > kHistorySchemaVersion)
            refuseNewer(db, version);
        if (version == kHistorySchemaVersion)
            return;
        db.exec(std::string(historyMigrations()[static_cast<std::size_t>(version)]));
        if (version + 1 == 3)
            redactStoredEnv(db); // schema 3 stores no env value a node did not mark to keep
        db.exec("PRAGMA user_version=" + std::to_string(version + 1));
        if (version == 0)
            db.exec("PRAGMA application_id=" + std::to_string(kApplicationId));
        tx.commit();
    }
}

} // namespace pw::app
