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

} // namespace pw::planner
