// SPDX-License-Identifier: MIT
#include "comparison.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "planner/schedule/generator.h"

namespace pw::app {

namespace {

struct DeviceSums
{
    double compute = 0; ///< all its compute spans
    std::map<int, double> stage_compute; ///< per (virtual) stage it holds: its compute spans
    double first = std::numeric_limits<double>::infinity();
    double last = -std::numeric_limits<double>::infinity();
};

double relativeError(double measured, double predicted)
{
    return predicted > 0 ? measured / predicted - 1.0 : 0.0;
}

} // namespace

std::string_view toString(KindRow row)
{
    switch (row) {
    case KindRow::Forward:
        return "F";
    case KindRow::Backward:
        return "B";
    case KindRow::BackwardInput:
        return "I";
    case KindRow::BackwardWeight:
        return "W";
    case KindRow::Send:
        return "send";
    case KindRow::Receive:
        return "receive";
    case KindRow::AllReduce:
        return "all-reduce";
    case KindRow::OptimizerStep:
        return "optimizer";
    case KindRow::WavePush:
        return "wave push";
    case KindRow::WavePull:
        return "wave pull";
    }
    return "?";
}

KindRow kindRow(planner::ActionKind kind)
{
    using planner::ActionKind;
    switch (kind) {
    case ActionKind::Forward:
        return KindRow::Forward;
    case ActionKind::Backward:
        return KindRow::Backward;
    case ActionKind::BackwardInput:
        return KindRow::BackwardInput;
    case ActionKind::BackwardWeight:
        return KindRow::BackwardWeight;
    case ActionKind::SendActivation:
    case ActionKind::SendGradient:
        return KindRow::Send;
    case ActionKind::RecvActivation:
    case ActionKind::RecvGradient:
        return KindRow::Receive;
    case ActionKind::AllReduce:
        return KindRow::AllReduce;
    case ActionKind::OptimizerStep:
        return KindRow::OptimizerStep;
    case ActionKind::WavePush:
        return KindRow::WavePush;
    case ActionKind::WavePull:
        return KindRow::WavePull;
    }
    return KindRow::Forward;
}

std::map<KindRow, KindTimes> kindTimes(const planner::Timeline& timeline, int steps, bool simulated)
{
    std::map<KindRow, KindTimes> rows;
    for (const auto& s : timeline.spans) {
        auto& r = rows[kindRow(s.kind)];
        r.time_s += s.t1 - s.t0;
        r.actions += 1;
    }
    if (simulated) {
        // The simulator leaves out a receive whose data had arrived (it takes no time): every send pairs with one
        // receive, so the sends count the receives.
        const auto sends = rows.find(KindRow::Send);
        if (sends != rows.end())
            rows[KindRow::Receive].actions = sends->second.actions;
    }
    const double n = std::max(1, steps);
    for (auto& [row, t] : rows) {
        t.mean_s = t.actions > 0 ? t.time_s / t.actions : 0.0;
        t.time_s /= n;
        t.actions /= n;
    }
    return rows;
}

std::vector<KindComparison> compareKinds(
    const planner::Timeline& predicted, int predictedSteps, const planner::Timeline& measured, int measuredSteps)
{
    const auto p = kindTimes(predicted, predictedSteps, true);
    const auto m = kindTimes(measured, measuredSteps, false);
    std::map<KindRow, KindComparison> rows;
    for (const auto& [row, t] : p) {
        rows[row].kind = row;
        rows[row].predicted = t;
    }
    for (const auto& [row, t] : m) {
        rows[row].kind = row;
        rows[row].measured = t;
    }
    std::vector<KindComparison> out;
    for (auto& [row, c] : rows) {
        c.error = relativeError(c.measured.time_s, c.predicted.time_s);
        // Counts per step are whole numbers over whole steps: a difference beyond rounding is a real one.
        c.counts_match = predicted.spans.empty()
            || std::abs(c.measured.actions - c.predicted.actions) <= 1e-9 * std::max(1.0, c.predicted.actions);
        out.push_back(c);
    }
    return out;
}

std::vector<StageTimes> stageTimes(const planner::Plan& plan, const planner::Timeline& timeline, int steps)
{
    std::map<int, DeviceSums> devices;
    for (const auto& s : timeline.spans) {
        auto& d = devices[s.device];
        if (s.lane == planner::Lane::Compute) {
            d.compute += s.t1 - s.t0;
            d.stage_compute[s.stage] += s.t1 - s.t0;
        }
        d.first = std::min(d.first, s.t0);
        d.last = std::max(d.last, s.t1);
    }
    // Every (virtual) stage its own row: its compute is that of the spans of that stage on its devices; the window
    // and the idle time are its devices' (a device holding several virtual stages idles for all of them at once).
    std::vector<StageTimes> out(static_cast<std::size_t>(plan.stageCount()));
    const double n = std::max(1, steps);
    for (int st = 0; st < plan.stageCount(); ++st) {
        auto& t = out[static_cast<std::size_t>(st)];
        int count = 0;
        for (int dev : plan.stages[static_cast<std::size_t>(st)].devices) {
            const auto it = devices.find(dev);
            if (it == devices.end() || it->second.last < it->second.first)
                continue;
            const auto& sums = it->second;
            const auto own = sums.stage_compute.find(st);
            t.compute_s += (own == sums.stage_compute.end() ? 0.0 : own->second) / n;
            t.iteration_s += (sums.last - sums.first) / n;
            t.idle_s += std::max(0.0, sums.last - sums.first - sums.compute) / n;
            ++count;
        }
        if (count > 0) {
            t.compute_s /= count;
            t.iteration_s /= count;
            t.idle_s /= count;
        }
    }
    return out;
}

double planIterationTime(const planner::Plan& plan, const planner::CostModel* cost)
{
    try {
        const planner::SimulationOptions metricsOnly {.record_spans = false, .record_memory = false};
        const auto schedule = planner::generateSchedule(plan);
        const auto sim = cost ? planner::simulate(plan, schedule, *cost, metricsOnly)
                              : planner::simulate(plan, schedule, metricsOnly);
        return std::isfinite(sim.iteration_time_s) ? sim.iteration_time_s : 0.0;
    } catch (const std::exception&) {
        return 0.0;
    }
}

std::vector<DeviceMemory> compareMemory(const planner::Plan& plan, const std::map<int, double>& measuredPeak)
{
    std::vector<double> predicted;
    try {
        const planner::SimulationOptions metricsOnly {.record_spans = false, .record_memory = false};
        const auto sim = planner::simulate(plan, planner::generateSchedule(plan), metricsOnly);
        for (const auto& d : sim.devices)
            predicted.push_back(d.peak_memory_bytes);
    } catch (const std::exception&) {
        predicted.clear(); // no prediction: the measured peaks alone
    }
    std::vector<DeviceMemory> out;
    for (const auto& [device, bytes] : measuredPeak) {
        DeviceMemory m;
        m.device = device;
        m.measured_peak_bytes = bytes;
        if (device >= 0 && device < static_cast<int>(predicted.size()))
            m.predicted_peak_bytes = predicted[static_cast<std::size_t>(device)];
        m.error = m.predicted_peak_bytes > 0 ? bytes / m.predicted_peak_bytes - 1.0 : 0.0;
        out.push_back(m);
    }
    return out;
}

std::map<int, double> measuredPeakMemory(const planner::Timeline& measured)
{
    std::map<int, double> peak;
    for (const auto& c : measured.counters)
        if (c.name == planner::kDeviceMemoryPeakCounter)
            for (const auto& s : c.samples)
                if (s.device >= 0 && std::isfinite(s.value))
                    peak[s.device] = std::max(peak[s.device], s.value);
    return peak;
}

RunComparison compareRun(const planner::Plan& plan, const planner::Timeline& predicted, int predictedSteps,
    const planner::Timeline& measured, int measuredSteps, const planner::CostModel* cost)
{
    return compareRun(plan, predicted, predictedSteps, measured, measuredSteps,
        predicted.spans.empty() ? 0.0 : planIterationTime(plan, cost));
}

RunComparison compareRun(const planner::Plan& plan, const planner::Timeline& predicted, int predictedSteps,
    const planner::Timeline& measured, int measuredSteps, double planIterationS)
{
    RunComparison c;
    const auto p = stageTimes(plan, predicted, predictedSteps);
    const auto m = stageTimes(plan, measured, measuredSteps);
    for (std::size_t i = 0; i < p.size(); ++i)
        c.stages.push_back({static_cast<int>(i), p[i], m[i], relativeError(m[i].compute_s, p[i].compute_s),
            relativeError(m[i].iteration_s, p[i].iteration_s)});
    auto makespan = [](const planner::Timeline& t) {
        double first = std::numeric_limits<double>::infinity(), last = 0;
        for (const auto& s : t.spans) {
            first = std::min(first, s.t0);
            last = std::max(last, s.t1);
        }
        return t.spans.empty() ? 0.0 : last - first;
    };
    c.predicted_iteration_s = predicted.spans.empty() ? 0.0 : planIterationS;
    c.measured_iteration_s = makespan(measured) / std::max(1, measuredSteps);
    c.iteration_error = relativeError(c.measured_iteration_s, c.predicted_iteration_s);
    c.kinds = compareKinds(predicted, predictedSteps, measured, measuredSteps);
    return c;
}

planner::Timeline predictSteps(const planner::Plan& plan, int steps, const planner::CostModel& cost)
{
    planner::Plan p = plan;
    p.schedule.iterations = std::max(1, steps);
    return planner::simulate(p, planner::generateSchedule(p), cost).timeline;
}

} // namespace pw::app
