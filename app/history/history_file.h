// SPDX-License-Identifier: MIT
// Internal to app/: the history file itself, apart from what the store reads and writes in it: where it lives, how
// it is created and opened, what makes it ours, and migrating its schema.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "sqlite_wrappers.h"

namespace pw::app {

/// `PRAGMA application_id` of a history file ("PWrh"): tells our files from other SQLite databases.
inline constexpr std::int32_t kApplicationId = 0x50577268;

/// Creates the file's missing directories, private to the user (0700: what they hold is nobody else's).
void createDirectoryFor(const std::filesystem::path& file);
/// A history holds plans, clusters, host names and logs: only its owner reads it. A missing file is created 0600
/// (SQLite gives its -wal and -shm files the database file's mode); an existing one keeps the mode its owner gave it
/// (a history shared for reading on purpose stays readable).
/// True when this call made the file (it was not there).
bool createPrivate(const std::filesystem::path& file);
/// The file as an SQLite URI opened immutable (percent-encoded, `?immutable=1`): how a reader who cannot create the
/// -shm file beside it reads a WAL file that no writer holds.
std::string immutableUri(const std::filesystem::path& file);

/// An integer PRAGMA's value (0 when it returns no row).
std::int64_t pragmaValue(const Connection& db, const std::string& name);
/// Refuses other SQLite databases and newer schemas before anything is written to the file: HistoryError naming it.
void checkIdentity(const Connection& db);
/// WAL, synchronous=NORMAL and the cache a writer wants.
void configureForWriting(const Connection& db);
/// Applies the missing migrations (schema.h), each in a write transaction that re-reads the version first: two
/// processes opening an old file at once migrate it once. Migration 3 also redacts the node env values earlier
/// versions stored in the runs' plans and clusters.
void migrate(const Connection& db);

} // namespace pw::app
