// SPDX-License-Identifier: MIT
// Internal to tests/app/: what the history tests share: a scratch folder, spans and runs to store, a dead pid, the
// header words of an SQLite file, and the text of a file.
#pragma once

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

namespace pw::test::history {

namespace fs = std::filesystem;
using namespace pw::app;
using Catch::Matchers::Contains;
using pw::planner::ActionKind;
using pw::planner::Lane;
using pw::planner::Span;
using pw::planner::Timeline;

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

inline Span span(int device, Lane lane, ActionKind kind, double t0, double t1)
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
inline std::vector<MeasuredSpan> batch(int agent, std::int64_t first, int count)
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
inline pid_t deadPid()
{
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return child;
}

inline NewRun newRun(const std::string& label, std::vector<std::string> tags = {})
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

template <typename Fn> inline std::string errorOf(Fn&& fn)
{
    try {
        fn();
    } catch (const HistoryError& e) {
        return e.what();
    }
    return "no HistoryError";
}

inline std::vector<std::string> ids(const std::vector<RunRecord>& runs)
{
    std::vector<std::string> out;
    for (const auto& r : runs)
        out.push_back(r.id);
    return out;
}

/// The big-endian 32-bit word at `offset` of an SQLite file's header (user_version at 60, application_id at 68).
inline std::uint32_t headerWord(const fs::path& file, int offset)
{
    std::ifstream in(file, std::ios::binary);
    in.seekg(offset);
    unsigned char b[4] = {};
    in.read(reinterpret_cast<char*>(b), 4);
    return std::uint32_t {b[0]} << 24 | std::uint32_t {b[1]} << 16 | std::uint32_t {b[2]} << 8 | b[3];
}

inline void setHeaderWord(const fs::path& file, int offset, std::uint32_t value)
{
    std::fstream io(file, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(offset);
    const char b[4] = {static_cast<char>(value >> 24), static_cast<char>(value >> 16), static_cast<char>(value >> 8),
        static_cast<char>(value)};
    io.write(b, 4);
}

inline std::string text(const fs::path& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline std::vector<std::string> lines(const std::string& text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

/// A run with a row in every table: tags, device names, measured and predicted spans, metrics, logs.
inline void fill(HistoryStore& store, const std::string& id)
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

} // namespace pw::test::history
