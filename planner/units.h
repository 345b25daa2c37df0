// SPDX-License-Identifier: MIT
// Units shown to people: one memory unit (binary: KiB, MiB, GiB) and seconds, the same in every front end.
#pragma once

#include <string>

namespace pw::planner {

/// Memory in binary units, Pipewright's one memory unit (CLI, diagnostics, app; docs/formats.md "Units"):
/// "512 B", "272.00 KiB", "21.09 GiB", "1.50 TiB". Bandwidths stay decimal (GB/s = 1e9 bytes/s).
std::string formatBytes(double bytes);
/// A time with its unit: "12.500 us", "1.500 ms", "3.250 s"; "1.235e+05 s" from 1e5 s up (never a
/// 30-digit number); "infinite s" / "undefined s" for what is not finite.
std::string formatSeconds(double seconds);

} // namespace pw::planner
