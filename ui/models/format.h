// SPDX-License-Identifier: MIT
// How the desktop app writes seconds, bytes and rates: one place, so every view reads the same.
#pragma once

#include <QString>
#include <cmath>

namespace pw::ui {

/// "1.234 s", "12.500 ms", "80.000 us", "0 s" (with `decimals` after the point).
inline QString secondsText(double s, int decimals = 3)
{
    const double a = std::abs(s);
    if (a == 0)
        return QStringLiteral("0 s");
    if (a >= 1)
        return QString::number(s, 'f', decimals) + QStringLiteral(" s");
    if (a >= 1e-3)
        return QString::number(s * 1e3, 'f', decimals) + QStringLiteral(" ms");
    return QString::number(s * 1e6, 'f', decimals) + QStringLiteral(" us");
}

/// Bytes in GiB (2^30) with two decimals: "21.09 GiB".
inline QString bytesText(double bytes)
{
    return QString::number(bytes / double(1ull << 30), 'f', 2) + QStringLiteral(" GiB");
}

/// A percentage of a fraction: "44.6%".
inline QString percentText(double fraction, int decimals = 1)
{
    return QString::number(fraction * 100, 'f', decimals) + QLatin1Char('%');
}

} // namespace pw::ui
