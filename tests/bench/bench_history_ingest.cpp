// SPDX-License-Identifier: MIT
// The run history's ingest, the live telemetry path: 2 million measured spans in batches of 10,000 into a fresh
// file (one transaction and one prepared statement per batch), in spans per second. Baseline measured in the same
// run: one transaction per span, the naive writer, on 2,000 spans and scaled. Also the read back of the whole run
// as a timeline and the file's size per span.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/history/history.h"
#include "bench_common.h"

namespace fs = std::filesystem;
using pw::app::HistoryStore;
using pw::app::MeasuredSpan;

namespace {

constexpr int kAgents = 4;
constexpr int kDevicesPerAgent = 2;

/// Spans `first`, `first` + 1, ... of a run: round robin over the agents, each agent's sequence numbering its own
/// spans from 1, devices alternating within an agent, 1 ms compute spans back to back per device.
void fillBatch(std::vector<MeasuredSpan>& batch, std::int64_t first)
{
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const std::int64_t n = first + static_cast<std::int64_t>(i);
        auto& m = batch[i];
        m.agent = static_cast<int>(n % kAgents);
        m.seq = n / kAgents + 1;
        auto& s = m.span;
        s.device = m.agent * kDevicesPerAgent + static_cast<int>(m.seq % kDevicesPerAgent);
        s.kind = m.seq % 3 == 0 ? pw::planner::ActionKind::Backward : pw::planner::ActionKind::Forward;
        s.stage = s.device;
        s.microbatch = static_cast<std::int32_t>(m.seq % 64);
        s.action = static_cast<std::int32_t>(m.seq);
        s.weight_version = static_cast<std::int32_t>(m.seq / 64);
        s.t0 = static_cast<double>(m.seq) * 1e-3;
        s.t1 = s.t0 + 0.9e-3;
    }
}

void removeStore(const fs::path& file)
{
    for (const char* suffix : {"", "-wal", "-shm"})
        fs::remove(file.string() + suffix);
}

/// Seconds spent in appendSpans() for `total` spans in batches of `batchSize` (the last one shorter).
double ingest(HistoryStore& store, const std::string& id, std::int64_t total, int batchSize)
{
    std::vector<MeasuredSpan> batch;
    double seconds = 0;
    for (std::int64_t first = 0; first < total; first += batchSize) {
        batch.resize(static_cast<std::size_t>(std::min<std::int64_t>(batchSize, total - first)));
        fillBatch(batch, first);
        seconds += pw::bench::bestOf(1, [&] { store.appendSpans(id, batch); });
    }
    return seconds;
}

} // namespace

int main(int argc, char** argv)
{
    const std::int64_t total = argc > 1 ? std::stoll(argv[1]) : 2'000'000;
    constexpr int kBatch = 10'000;
    constexpr int kBaselineSpans = 2'000;
    const auto dir = fs::temp_directory_path() / ("pw-bench-history-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto file = dir / "history.sqlite";

    // Best of three, each into a fresh file (the first batches of a fresh file are the cheapest: a short index).
    double best = 1e300;
    double readSeconds = 0;
    std::size_t readSpans = 0;
    std::uintmax_t bytes = 0;
    for (int repeat = 0; repeat < 3; ++repeat) {
        removeStore(file);
        auto store = HistoryStore::open(file);
        const auto id = store.createRun({"{}", "{}", "[]", "bench", 0, {}});
        best = std::min(best, ingest(store, id, total, kBatch));
        if (repeat == 0) {
            readSeconds = pw::bench::bestOf(1, [&] { readSpans = store.measuredTimeline(id).spans.size(); });
            bytes = fs::file_size(file)
                + (fs::exists(file.string() + "-wal") ? fs::file_size(file.string() + "-wal") : 0);
        }
    }

    removeStore(file);
    double baseline = 0;
    {
        auto store = HistoryStore::open(file);
        const auto id = store.createRun({"{}", "{}", "[]", "baseline", 0, {}});
        baseline = ingest(store, id, kBaselineSpans, 1) * (static_cast<double>(total) / kBaselineSpans);
    }
    removeStore(file);
    fs::remove_all(dir);

    const double rate = static_cast<double>(total) / best;
    std::printf("history ingest: %lld spans in %.3f s = %.2f M spans/s (%.1f x the per-row-transaction baseline)\n",
        static_cast<long long>(total), best, rate / 1e6, baseline / best);
    std::printf("  baseline: one transaction per span, %d spans: %.0f spans/s (%.1f s scaled to %lld)\n",
        kBaselineSpans, static_cast<double>(total) / baseline, baseline, static_cast<long long>(total));
    std::printf("  read back as a timeline: %zu spans in %.3f s = %.2f M spans/s\n", readSpans, readSeconds,
        static_cast<double>(readSpans) / readSeconds / 1e6);
    std::printf("  file: %.1f MiB, %.1f bytes per span\n", static_cast<double>(bytes) / (1 << 20),
        static_cast<double>(bytes) / static_cast<double>(total));
    return 0;
}
