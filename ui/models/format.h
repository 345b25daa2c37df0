// SPDX-License-Identifier: MIT
// How the desktop app writes seconds, bytes and rates: one place, so every view reads the same.
#pragma once

#include <QString>
#include <QStringList>
#include <cmath>

#include "planner/units.h"

namespace pw::ui {

/// "1.234 s", "12.500 ms", "80.000 µs", "0 s" (with `decimals` after the point).
inline QString secondsText(double s, int decimals = 3)
{
    const double a = std::abs(s);
    if (a == 0)
        return QStringLiteral("0 s");
    if (a >= 1)
        return QString::number(s, 'f', decimals) + QStringLiteral(" s");
    if (a >= 1e-3)
        return QString::number(s * 1e3, 'f', decimals) + QStringLiteral(" ms");
    return QString::number(s * 1e6, 'f', decimals) + QStringLiteral(" µs");
}

/// `s` seconds written in `unit` (1, 1e-3 or 1e-6: "s", "ms", "µs") with `decimals`: an axis labels every tick in
/// the one unit it chose ("0 ms, 500 ms, 1000 ms", never "0 s, 500.0 ms, 1.0 s").
inline QString secondsTextIn(double s, double unit, int decimals)
{
    const QString symbol = unit >= 1 ? QStringLiteral(" s")
        : unit >= 1e-3               ? QStringLiteral(" ms")
                                     : QStringLiteral(" µs");
    return QString::number(s / unit, 'f', decimals) + symbol;
}

/// Bytes in the binary unit that fits, two decimals: "21.09 GiB", "8.53 MiB" (planner::formatBytes, as the CLI
/// writes them: a tiny model's memory is never "0.00 GiB").
inline QString bytesText(double bytes)
{
    return QString::fromStdString(planner::formatBytes(bytes));
}

/// Bytes in MiB (2^20) with one decimal: "12.5 MiB" (per-layer sizes).
inline QString mebibytesText(double bytes)
{
    return QString::number(bytes / double(1ull << 20), 'f', 1) + QStringLiteral(" MiB");
}

/// A plan's configuration string (planner::Plan::configString(): replicas per stage, "-" between stages, "|"
/// between pipelines, " t=T" for tensor parallelism) short enough for a table cell or a label: kept as it is up to
/// `maxChars`; else "64 stages × 1" when every stage has the same replicas, "2 pipelines, 32 stages" for
/// multi-pipeline plans, otherwise the first and last stages around "…". The whole string belongs in a tooltip.
inline QString configText(const QString& config, int maxChars = 24)
{
    if (config.size() <= maxChars)
        return config;
    const int space = config.indexOf(QLatin1Char(' '));
    const QString stages = space < 0 ? config : config.left(space);
    const QString suffix = space < 0 ? QString() : config.mid(space);
    const QStringList pipelines = stages.split(QLatin1Char('|'));
    QStringList replicas;
    for (const QString& p : pipelines)
        replicas += p.split(QLatin1Char('-'));
    if (pipelines.size() > 1)
        return QStringLiteral("%1 pipelines, %2 stages%3").arg(pipelines.size()).arg(replicas.size()).arg(suffix);
    if (replicas.count(replicas.front()) == replicas.size())
        return QStringLiteral("%1 stages × %2%3").arg(replicas.size()).arg(replicas.front(), suffix);
    return QStringLiteral("%1-%2-%3-…-%4 (%5 stages)%6")
        .arg(replicas[0], replicas[1], replicas[2], replicas.back())
        .arg(replicas.size())
        .arg(suffix);
}

/// A percentage of a fraction: "44.6%".
inline QString percentText(double fraction, int decimals = 1)
{
    return QString::number(fraction * 100, 'f', decimals) + QLatin1Char('%');
}

} // namespace pw::ui
