// SPDX-License-Identifier: MIT
// The chain of waits of a stalled run, said for people (stall_report.h).
#include "stall_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "planner/schedule.h"

namespace pw::app {

namespace {

using planner::ActionKind;

std::string seconds(double s)
{
    char text[32];
    std::snprintf(text, sizeof text, s < 10 ? "%.1f s" : "%.0f s", std::max(0.0, s));
    return text;
}

std::string stagesOf(const DeviceWait& d)
{
    if (d.stages.empty())
        return "device " + std::to_string(d.device);
    std::string out = d.stages.size() == 1 ? "stage " : "stages ";
    for (std::size_t i = 0; i < d.stages.size(); ++i)
        out += (i ? "+" : "") + std::to_string(d.stages[i]);
    return out;
}

/// @brief Names devices as a reader can tell them apart: the first time in full, then by stage (and device where a
/// stage has replicas).
class Names
{
public:
    Names(const std::map<int, const DeviceWait*>& byDevice, const std::vector<std::vector<int>>& stageDevices)
        : m_byDevice(byDevice)
        , m_stageDevices(stageDevices)
    {
    }

    std::string full(int device) const
    {
        auto it = m_byDevice.find(device);
        if (it == m_byDevice.end())
            return "device " + std::to_string(device);
        const DeviceWait& d = *it->second;
        std::string where = "device " + std::to_string(device);
        if (!d.host.empty())
            where += ", host " + d.host;
        if (!d.where.empty())
            where += ", " + d.where;
        return stagesOf(d) + " (" + where + ")";
    }

    std::string brief(int device) const
    {
        auto it = m_byDevice.find(device);
        if (it == m_byDevice.end() || it->second->stages.empty())
            return "device " + std::to_string(device);
        const DeviceWait& d = *it->second;
        const bool replicated = std::any_of(d.stages.begin(), d.stages.end(), [&](int s) {
            return s >= 0 && s < static_cast<int>(m_stageDevices.size())
                && m_stageDevices[static_cast<std::size_t>(s)].size() > 1;
        });
        return stagesOf(d) + (replicated ? " (device " + std::to_string(device) + ")" : "");
    }

private:
    const std::map<int, const DeviceWait*>& m_byDevice;
    const std::vector<std::vector<int>>& m_stageDevices;
};

std::string microbatch(const planner::Span& a)
{
    const bool backward
        = planner::isBackward(a.kind) || a.kind == ActionKind::SendGradient || a.kind == ActionKind::RecvGradient;
    return std::string(backward ? "B" : "F") + " mb " + std::to_string(a.microbatch);
}

/// What an action is, for "it last reported ...".
std::string doing(const planner::Span& a)
{
    switch (a.kind) {
    case ActionKind::Forward:
    case ActionKind::Backward:
    case ActionKind::BackwardInput:
    case ActionKind::BackwardWeight:
        return "computing " + microbatch(a);
    case ActionKind::OptimizerStep:
        return "in its optimizer step";
    case ActionKind::SendActivation:
    case ActionKind::SendGradient:
        return "sending " + microbatch(a) + " to device " + std::to_string(a.peer);
    case ActionKind::RecvActivation:
    case ActionKind::RecvGradient:
        return "waiting for " + microbatch(a) + " from device " + std::to_string(a.peer);
    case ActionKind::AllReduce:
        return "its all-reduce of stage " + std::to_string(a.stage);
    case ActionKind::WavePush:
        return "its wave push";
    case ActionKind::WavePull:
        return "its wave pull";
    }
    return "?";
}

/// The member of a collective that `d` waits for: one of `members` (less `d`) that is not in the same collective
/// (`inIt`), a silent one first; -1 when every one is in it.
template <class InIt>
int missingMember(
    const DeviceWait& d, const std::vector<int>& members, const std::map<int, const DeviceWait*>& byDevice, InIt&& inIt)
{
    int best = -1;
    for (int r : members) {
        if (r == d.device)
            continue;
        auto it = byDevice.find(r);
        if (it == byDevice.end())
            continue;
        const DeviceWait& o = *it->second;
        if (o.silent)
            return r;
        if (!(o.busy && inIt(o)) && best < 0)
            best = r;
    }
    return best;
}

} // namespace

StallReport explainStall(
    const std::vector<DeviceWait>& devices, const std::vector<std::vector<int>>& stageDevices, double now, int start)
{
    std::map<int, const DeviceWait*> byDevice;
    for (const DeviceWait& d : devices)
        byDevice[d.device] = &d;
    const Names names(byDevice, stageDevices);
    // Every member is in the collective and it still makes no progress: what carries it between them (a link, a
    // transport) is broken or stalled. Name the others in full: the link's other ends.
    const auto stuckCollective = [&](const DeviceWait& d, const std::vector<int>& members) {
        std::string others;
        for (int m : members)
            if (m != d.device)
                others += (others.empty() ? "" : ", ") + names.full(m);
        return others.empty() ? std::string()
                              : " (" + others + "), so the link between them carries nothing (broken or stalled)";
    };
    StallReport out;
    if (start < 0) {
        // The longest wait among agents still speaking; failing that, a silent agent.
        double earliest = INFINITY;
        for (const DeviceWait& d : devices)
            if (!d.silent && d.busy && d.action.t0 < earliest) {
                earliest = d.action.t0;
                start = d.device;
            }
        if (start < 0)
            for (const DeviceWait& d : devices)
                if (d.silent) {
                    start = d.device;
                    break;
                }
        if (start < 0 && !devices.empty())
            start = devices.front().device;
    }
    std::set<int> seen;
    int current = start;
    std::string text;
    while (current >= 0) {
        auto it = byDevice.find(current);
        if (it == byDevice.end()) {
            text += names.full(current) + " reported nothing";
            break;
        }
        const DeviceWait& d = *it->second;
        out.chain.push_back(current);
        seen.insert(current);
        text += (text.empty() ? "" : "; ") + names.full(current) + " ";
        const planner::Span& a = d.action;
        const std::string waited = seconds(now - a.t0);
        if (d.silent) {
            out.silent_device = current;
            text += "has sent nothing for " + seconds(d.silent_s) + " (stopped or hung";
            if (d.busy)
                text += "; it last reported " + doing(a) + ", begun " + waited + " ago";
            else if (d.reported && a.t1 > 0)
                text += "; the newest action it finished: " + doing(a) + ", " + seconds(now - a.t1) + " ago";
            else if (!d.reported)
                text += "; it never reported its progress";
            text += ")";
            break;
        }
        if (!d.busy) {
            if (!d.reported)
                text += "has not reported its progress";
            else if (d.action.t1 > 0) // the newest action it finished, as its telemetry said
                text
                    += "is between actions: it finished " + doing(d.action) + " " + seconds(now - d.action.t1) + " ago";
            else
                text += "is between actions (" + std::to_string(d.finished) + " finished)";
            break;
        }
        int next = -1;
        switch (a.kind) {
        case ActionKind::RecvActivation:
        case ActionKind::RecvGradient:
            text += "waits " + waited + " for " + microbatch(a) + " from " + names.brief(a.peer);
            next = a.peer;
            break;
        case ActionKind::SendActivation:
        case ActionKind::SendGradient:
            text += "is blocked " + waited + " sending " + microbatch(a) + " to " + names.brief(a.peer);
            next = a.peer;
            break;
        case ActionKind::AllReduce: {
            const int stage = a.stage;
            const std::vector<int> replicas = stage >= 0 && stage < static_cast<int>(stageDevices.size())
                ? stageDevices[static_cast<std::size_t>(stage)]
                : std::vector<int> {};
            next = missingMember(d, replicas, byDevice,
                [&](const DeviceWait& o) { return o.action.kind == ActionKind::AllReduce && o.action.stage == stage; });
            if (next < 0 && !d.tied.empty()) {
                // Every replica of its stage is past their all-reduce or in it: this is the tied embedding's, which
                // follows it before the step (its other holders are other stages).
                next = missingMember(
                    d, d.tied, byDevice, [](const DeviceWait& o) { return o.action.kind == ActionKind::AllReduce; });
                text += "is blocked " + waited + " in its all-reduce of the tied embedding"
                    + (next >= 0 ? " with " + names.brief(next)
                                 : ", which every holder has reached" + stuckCollective(d, d.tied));
                break;
            }
            text += "is blocked " + waited + " in its all-reduce of stage " + std::to_string(a.stage)
                + (next >= 0 ? " with " + names.brief(next)
                             : ", which every replica has reached" + stuckCollective(d, replicas));
            break;
        }
        case ActionKind::WavePush:
        case ActionKind::WavePull:
            text += "is blocked " + waited + " in " + doing(a);
            break;
        default: {
            // Tensor parallelism: the group's collectives inside the computation wait for every member to reach it.
            next = d.tensor_group.empty() ? -1 : missingMember(d, d.tensor_group, byDevice, [&](const DeviceWait& o) {
                return o.action.kind == a.kind && o.action.stage == a.stage && o.action.microbatch == a.microbatch;
            });
            if (next >= 0) {
                const auto rank
                    = std::find(d.tensor_group.begin(), d.tensor_group.end(), next) - d.tensor_group.begin();
                std::string group;
                for (int m : d.tensor_group)
                    group += (group.empty() ? "" : ", ") + std::to_string(m);
                text += "is blocked " + waited + " " + doing(a)
                    + " in a collective of its tensor-parallel group (devices " + group + ") with tensor rank "
                    + std::to_string(rank) + ", " + names.brief(next);
                break;
            }
            text += "has been " + doing(a) + " for " + waited;
            if (d.predicted_s > 0)
                text += " (the plan predicts " + seconds(d.predicted_s) + ")";
            break;
        }
        }
        if (next >= 0 && seen.count(next)) {
            out.cycle = true;
            text += ": a cycle of waits back to " + names.brief(next) + " that none of them can end (a deadlock)";
            break;
        }
        current = next;
    }
    out.text = text;
    return out;
}

int slowestBeyondPlan(const std::vector<DeviceWait>& devices, double now, double factor, double floor_s)
{
    int out = -1;
    double worst = 0;
    for (const DeviceWait& d : devices) {
        if (d.silent || !d.busy || d.predicted_s <= 0)
            continue;
        const double took = now - d.action.t0;
        if (took > floor_s && took > factor * d.predicted_s && took / d.predicted_s > worst) {
            worst = took / d.predicted_s;
            out = d.device;
        }
    }
    return out;
}

} // namespace pw::app
