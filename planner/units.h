// SPDX-License-Identifier: MIT
// Units shown to people: one memory unit (binary: KiB, MiB, GiB), seconds, counts and FLOP rates, the same in every
// front end.
#pragma once

#include <string>

namespace pw::planner {

/// Memory in binary units, Pipewright's one memory unit (CLI, diagnostics, app; docs/formats.md "Units"):
/// "512 B", "272.00 KiB", "21.09 GiB", "1.50 TiB". Bandwidths stay decimal (GB/s = 1e9 bytes/s).
std::string formatBytes(double bytes);
/// A time with its unit: "12.500 us", "1.500 ms", "3.250 s"; "1.235e+05 s" from 1e5 s up (never a
/// 30-digit number); "infinite s" / "undefined s" for what is not finite.
std::string formatSeconds(double seconds);
/// A count (parameters, tokens) with the scale that fits, one decimal: "512", "357.8 K", "124.4 M", "175.0 B",
/// "1.2 T" (K = 1e3, M = 1e6, B = 1e9, T = 1e12: the scales model sizes are quoted in).
std::string formatCount(double count);
/// A FLOP rate with the SI prefix that fits, one decimal: "850.0 MFLOP/s", "12.3 GFLOP/s", "312.5 TFLOP/s",
/// "1.2 PFLOP/s" (never "0.0 TFLOP/s" for a small rate).
std::string formatFlopRate(double flops_per_s);

} // namespace pw::planner
