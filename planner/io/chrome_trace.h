// SPDX-License-Identifier: MIT
// Exports: Chrome Trace Event JSON (opens in Perfetto) and the per-device actions CSV.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "../schedule.h"
#include "../timeline.h"

namespace pw::planner {

/// {"traceEvents": [...], "displayTimeUnit": "ms"}: one process per device (named after it), one thread
/// per lane (compute, send, recv, collective), X slices in microseconds, flow arrows (s/f) from each send
/// to its receive, and memory as a "memory" counter (C) per device.
nlohmann::json chromeTrace(const Timeline& timeline);

/// One row per device: "device,action,action,...", actions in actionLabel() form.
std::string actionsCsv(const Schedule& schedule);

} // namespace pw::planner
