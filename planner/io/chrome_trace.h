// SPDX-License-Identifier: MIT
// Exports: Chrome Trace Event JSON (opens in Perfetto) and the per-device actions CSV.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "../schedule.h"
#include "../timeline.h"

namespace pw::planner {

/// Writes {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: one process per device (named
/// after it), one thread per lane (compute, send, recv, collective), X slices in microseconds, flow arrows
/// (s/f) from each send to its receive, and memory as a "memory" counter (C) per device. Streams: no JSON
/// document is built, the text goes out through a 64 KiB buffer (the export keeps ~40 bytes per span for
/// sorting and pairing, nothing per byte written). Throws InputError for a span that ends before it starts.
void writeChromeTrace(std::ostream& out, const Timeline& timeline);
/// writeChromeTrace() into a file, replaced only when the whole trace was written; InputError naming the file
/// when it cannot be written.
void writeChromeTraceFile(const std::string& path, const Timeline& timeline);
/// The same trace as a JSON document (for tests and small timelines; writeChromeTraceFile() for big ones).
nlohmann::json chromeTrace(const Timeline& timeline);

/// One row per device: "device,action,action,...", actions in actionLabel() form.
std::string actionsCsv(const Schedule& schedule);

} // namespace pw::planner
