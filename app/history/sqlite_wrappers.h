// SPDX-License-Identifier: MIT
// Internal to app/: three small RAII wrappers over the sqlite3 C API for the history store: a connection (errors
// name the file), a prepared statement, a transaction.
#pragma once

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

#include <sqlite3.h>

#include "app/history/history.h"

namespace pw::app {

/// How long a write waits for another process holding the file (a controller and a viewer share it).
inline constexpr int kBusyTimeoutMs = 10000;

/// @brief An open sqlite3 connection; errors name the file.
class Connection
{
public:
    /// `flags`: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, or SQLITE_OPEN_READONLY (with SQLITE_OPEN_URI, `uri`
    /// may name the file as a URI with parameters); errors still name `path`.
    explicit Connection(const std::filesystem::path& path, int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
        const std::string& uri = {})
        : m_file(path.string())
    {
        const int rc
            = sqlite3_open_v2(uri.empty() ? m_file.c_str() : uri.c_str(), &m_db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
        if (rc != SQLITE_OK) {
            const std::string message = m_db ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
            sqlite3_close_v2(m_db);
            throw HistoryError(m_file + ": cannot open the history file: " + message);
        }
        sqlite3_busy_timeout(m_db, kBusyTimeoutMs);
    }
    ~Connection() { sqlite3_close_v2(m_db); } // deferred by SQLite until every statement is finalized
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    sqlite3* get() const { return m_db; }
    const std::string& file() const { return m_file; }

    /// Throws the connection's last error, prefixed with `context`.
    [[noreturn]] void fail(std::string_view context) const
    {
        if (sqlite3_errcode(m_db) == SQLITE_NOTADB)
            throw HistoryError(m_file + ": not a Pipewright history: the file is not an SQLite database ("
                + sqlite3_errmsg(m_db) + ")");
        throw HistoryError(m_file + ": " + std::string(context) + ": " + sqlite3_errmsg(m_db));
    }
    /// Runs SQL without results (one statement or several).
    void exec(const std::string& sql) const
    {
        if (sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
            fail(whatItDoes(sql));
    }

    /// What a statement does, for an error message ("writing runs", "reading spans", "creating the history's
    /// tables"), from its first words: never a cut copy of its SQL.
    static std::string whatItDoes(std::string_view sql)
    {
        std::istringstream words {std::string(sql.substr(0, 200))};
        std::string first, second;
        words >> first >> second;
        const auto upper = [](std::string w) {
            for (char& c : w)
                c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            return w;
        };
        const auto table = [](std::string w) { return w.substr(0, w.find_first_of("( ,;\n")); };
        // The word after `keyword` (" FROM ", " INTO "), or "" when the statement has none.
        const auto after = [&](const std::string& keyword) {
            const std::string text(sql.substr(0, 400));
            const auto at = upper(text).find(keyword);
            return at == std::string::npos ? std::string() : table(text.substr(at + keyword.size()));
        };
        first = upper(first);
        if (first == "INSERT" || first == "REPLACE")
            return "writing " + after(" INTO ");
        if (first == "UPDATE")
            return "writing " + table(second);
        if (first == "DELETE")
            return "deleting from " + after(" FROM ");
        if (first == "SELECT") {
            const std::string from = after(" FROM ");
            return "reading " + (from.empty() ? std::string("the history") : from);
        }
        if (first == "CREATE" || first == "ALTER" || first == "DROP")
            return "changing the history's tables (" + upper(first) + " " + upper(second) + ")";
        if (first == "PRAGMA")
            return "setting " + table(second);
        return "running " + first;
    }

private:
    std::string m_file;
    sqlite3* m_db = nullptr;
};

/// @brief A prepared statement; bindings survive reset(), so a batch binds what all its rows share once.
class Statement
{
public:
    Statement(const Connection& db, std::string_view sql)
        : m_db(&db)
    {
        if (sqlite3_prepare_v2(db.get(), sql.data(), static_cast<int>(sql.size()), &m_stmt, nullptr) != SQLITE_OK)
            db.fail("cannot prepare " + Connection::whatItDoes(sql));
    }
    ~Statement() { sqlite3_finalize(m_stmt); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& integer(int index, std::int64_t value) { return check(sqlite3_bind_int64(m_stmt, index, value)); }
    Statement& real(int index, double value) { return check(sqlite3_bind_double(m_stmt, index, value)); }
    Statement& text(int index, std::string_view value)
    {
        return check(sqlite3_bind_text(m_stmt, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT));
    }
    Statement& null(int index) { return check(sqlite3_bind_null(m_stmt, index)); }

    /// True when a row is ready, false when done.
    bool step()
    {
        const int rc = sqlite3_step(m_stmt);
        if (rc == SQLITE_ROW)
            return true;
        if (rc == SQLITE_DONE)
            return false;
        sqlite3_reset(m_stmt);
        m_db->fail(sqlite3_sql(m_stmt) ? Connection::whatItDoes(sqlite3_sql(m_stmt)) : "step");
    }
    /// Runs a statement without results (INSERT, UPDATE, DELETE) and makes it ready to run again.
    void run()
    {
        step();
        reset();
    }
    void reset() { sqlite3_reset(m_stmt); }

    std::int64_t integer(int column) const { return sqlite3_column_int64(m_stmt, column); }
    double real(int column) const { return sqlite3_column_double(m_stmt, column); }
    bool isNull(int column) const { return sqlite3_column_type(m_stmt, column) == SQLITE_NULL; }
    std::string text(int column) const
    {
        const auto* chars = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, column));
        return chars ? std::string(chars, static_cast<std::size_t>(sqlite3_column_bytes(m_stmt, column))) : "";
    }

private:
    Statement& check(int rc)
    {
        if (rc != SQLITE_OK)
            m_db->fail("cannot bind a value");
        return *this;
    }

    const Connection* m_db;
    sqlite3_stmt* m_stmt = nullptr;
};

/// @brief A transaction, rolled back unless committed. Writes take the write lock at once (BEGIN IMMEDIATE):
/// a deferred transaction that starts writing later can fail with SQLITE_BUSY at once, since the busy handler
/// cannot help a reader that must become the writer.
class Transaction
{
public:
    enum class Access { Read, Write };
    Transaction(const Connection& db, Access access)
        : m_db(db)
    {
        db.exec(access == Access::Write ? "BEGIN IMMEDIATE" : "BEGIN");
    }
    ~Transaction()
    {
        if (m_open)
            sqlite3_exec(m_db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    void commit()
    {
        m_db.exec("COMMIT");
        m_open = false;
    }

private:
    const Connection& m_db;
    bool m_open = true;
};

} // namespace pw::app
