// SPDX-License-Identifier: MIT
#include "comparison.h"

#include <algorithm>
#include <limits>
#include <map>

#include "planner/schedule/generator.h"

namespace pw::app {

namespace {

struct DeviceSums
{
    double compute = 0;
    double first = std::numeric_limits<double>::infinity();
    double last = -std::numeric_limits<double>::infinity();
};

double relativeError(double measured, double predicted)
{
    return predicted > 0 ? measured / predicted - 1.0 : 0.0;
}

} // namespace

std::vector<StageTimes> stageTimes(const planner::Plan& plan, const planner::Timeline& timeline, int steps)
{
    std::map<int, DeviceSums> devices;
    for (const auto& s : timeline.spans) {
        auto& d = devices[s.device];
        if (s.lane == planner::Lane::Compute)
            d.compute += s.t1 - s.t0;
        d.first = std::min(d.first, s.t0);
        d.last = std::max(d.last, s.t1);
    }
    std::vector<StageTimes> out(static_cast<std::size_t>(plan.stageCount()));
    std::vector<int> counts(out.size(), 0);
    std::map<int, int> stageOf;
    for (int st = 0; st < plan.stageCount(); ++st)
        for (int dev : plan.stages[static_cast<std::size_t>(st)].devices)
            stageOf.emplace(dev, st);
    const double n = std::max(1, steps);
    for (const auto& [dev, sums] : devices) {
        auto it = stageOf.find(dev);
        if (it == stageOf.end() || sums.last < sums.first)
            continue;
        auto& t = out[static_cast<std::size_t>(it->second)];
        t.compute_s += sums.compute / n;
        t.iteration_s += (sums.last - sums.first) / n;
        ++counts[static_cast<std::size_t>(it->second)];
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (counts[i] > 0) {
            out[i].compute_s /= counts[i];
            out[i].iteration_s /= counts[i];
        }
        out[i].idle_s = std::max(0.0, out[i].iteration_s - out[i].compute_s);
    }
    return out;
}

RunComparison compareRun(const planner::Plan& plan, const planner::Timeline& predicted, int predictedSteps,
    const planner::Timeline& measured, int measuredSteps)
{
    RunComparison c;
    const auto p = stageTimes(plan, predicted, predictedSteps);
    const auto m = stageTimes(plan, measured, measuredSteps);
    for (std::size_t i = 0; i < p.size(); ++i)
        c.stages.push_back({static_cast<int>(i), p[i], m[i], relativeError(m[i].iteration_s, p[i].iteration_s)});
    auto makespan = [](const planner::Timeline& t) {
        double first = std::numeric_limits<double>::infinity(), last = 0;
        for (const auto& s : t.spans) {
            first = std::min(first, s.t0);
            last = std::max(last, s.t1);
        }
        return t.spans.empty() ? 0.0 : last - first;
    };
    c.predicted_iteration_s = makespan(predicted) / std::max(1, predictedSteps);
    c.measured_iteration_s = makespan(measured) / std::max(1, measuredSteps);
    c.iteration_error = relativeError(c.measured_iteration_s, c.predicted_iteration_s);
    return c;
}

planner::Timeline predictSteps(const planner::Plan& plan, int steps, const planner::CostModel& cost)
{
    planner::Plan p = plan;
    p.schedule.iterations = std::max(1, steps);
    return planner::simulate(p, planner::generateSchedule(p), cost).timeline;
}

} // namespace pw::app
