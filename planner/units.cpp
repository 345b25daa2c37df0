// SPDX-License-Identifier: MIT
// formatBytes / formatSeconds: binary memory units and seconds.
#include "units.h"

#include <cmath>
#include <cstdio>

namespace pw::planner {

std::string formatBytes(double bytes)
{
    if (!std::isfinite(bytes))
        return bytes > 0 ? "infinite B" : "undefined B";
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    double shown = bytes;
    while (std::fabs(shown) >= 1024 && u < 6) {
        shown /= 1024;
        ++u;
    }
    char buf[48];
    if (std::fabs(shown) >= 1024) // beyond EiB
        std::snprintf(buf, sizeof buf, "%.4g %s", shown, units[u]);
    else
        std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", shown, units[u]);
    return buf;
}

std::string formatSeconds(double s)
{
    if (!std::isfinite(s))
        return s > 0 ? "infinite s" : "undefined s";
    char buf[48];
    if (std::fabs(s) >= 1e5)
        std::snprintf(buf, sizeof buf, "%.4g s", s);
    else if (std::fabs(s) >= 1)
        std::snprintf(buf, sizeof buf, "%.3f s", s);
    else if (std::fabs(s) >= 1e-3)
        std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
    return buf;
}

namespace {

/// `value` divided by the largest power of 1000 it reaches (up to count - 1), with that power's suffix and `unit`.
std::string scaled(double value, const char* const* suffixes, int count, const char* unit)
{
    char buf[64];
    if (!std::isfinite(value)) {
        std::snprintf(buf, sizeof buf, "%s%s%s", value > 0 ? "infinite" : "undefined", *unit ? " " : "", unit);
        return buf;
    }
    int k = 0;
    double shown = value;
    // Round first, so that 999.96 K becomes "1.0 M" rather than "1000.0 K".
    while (k + 1 < count && std::fabs(std::round(shown * 10) / 10) >= 1000) {
        shown /= 1000;
        ++k;
    }
    std::snprintf(buf, sizeof buf, "%.1f%s%s", shown, suffixes[k], unit);
    return buf;
}

} // namespace

std::string formatCount(double count)
{
    if (std::isfinite(count) && std::fabs(count) < 1000 && count == std::round(count)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0f", count);
        return buf;
    }
    static const char* const suffixes[] = {"", " K", " M", " B", " T"};
    return scaled(count, suffixes, 5, "");
}

std::string formatFlopRate(double flops_per_s)
{
    static const char* const suffixes[] = {" ", " k", " M", " G", " T", " P", " E"};
    return scaled(flops_per_s, suffixes, 7, "FLOP/s");
}

} // namespace pw::planner
