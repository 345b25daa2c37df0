// SPDX-License-Identifier: MIT
// The run controller's stall reports: what each device waits on, the chain of waits, every agent's flight
// recorder stored with the report.
#include "controller_impl.h"

namespace pw::app {

/// An agent that missed this many of its heartbeats (one a second) counts as silent in a stall report.
constexpr double kSilentAfter = 3.0;

std::vector<DeviceWait> RunController::Impl::deviceWaits() const
{
    std::vector<DeviceWait> out;
    const auto clockNow = Clock::now();
    for (const auto& a : agents) {
        const double silent = std::chrono::duration<double>(clockNow - a->last_heard).count();
        for (int d : a->devices) {
            DeviceWait w;
            w.device = d;
            for (std::size_t s = 0; s < request.plan.stages.size(); ++s) {
                const auto& devs = request.plan.stages[s].devices;
                if (std::find(devs.begin(), devs.end(), d) != devs.end())
                    w.stages.push_back(static_cast<int>(s));
            }
            // The cluster's node by its name (two hosts may share a hostname: "vm" and "vm"), with the host name
            // its agent reported where that says more.
            const std::string reported = a->host.empty() ? (a->conn ? a->conn->where() : std::string()) : a->host;
            const auto& cluster = *request.plan.cluster;
            const std::string node = d >= 0 && d < cluster.deviceCount()
                ? cluster.nodes[static_cast<std::size_t>(cluster.device(d).node)].name
                : std::string();
            w.host = node.empty()                      ? reported
                : reported.empty() || reported == node ? node
                                                       : node + " (" + reported + ")";
            const auto gpu = cudaDeviceOf(*request.plan.cluster, d);
            w.where = gpu ? "cuda:" + std::to_string(*gpu) : "cpu";
            w.tied = tiedWith(d);
            if (const int t = std::max(1, request.plan.tensor_parallel); t > 1 && !w.stages.empty()) {
                const auto& devs = request.plan.stages[static_cast<std::size_t>(w.stages.front())].devices;
                const auto place = std::find(devs.begin(), devs.end(), d) - devs.begin();
                const auto first = devs.begin() + place / t * t;
                w.tensor_group.assign(first, first + t);
            }
            w.silent = !a->done && (a->exited || a->lost || silent > kSilentAfter);
            w.silent_s = silent;
            for (const auto& p : a->progress)
                if (p.device == d) {
                    w.reported = true;
                    w.busy = p.busy;
                    w.action = p.action;
                    w.finished = p.finished;
                }
            // The newest state: telemetry may have come after the last heartbeat (a heartbeat a second old, or the
            // last before the agent stopped). A span that began at or after the reported action and has ended says
            // the device got past that action: it is reported between actions, after the newest one it finished.
            if (auto it = a->recent.find(d); it != a->recent.end() && w.reported) {
                const auto last = std::find_if(
                    it->second.rbegin(), it->second.rend(), [](const planner::Span& sp) { return sp.t1 > 0; });
                if (last != it->second.rend() && (w.busy ? last->t0 >= w.action.t0 : last->t1 > w.action.t1)) {
                    w.busy = false;
                    w.action = *last;
                }
            }
            if (w.busy)
                if (auto it = predictedAction.find({d, static_cast<int>(w.action.kind)}); it != predictedAction.end())
                    w.predicted_s = it->second;
            out.push_back(std::move(w));
        }
    }
    return out;
}

std::vector<RecordedAction> RunController::Impl::collectRecorders(const RunObserver& o, std::chrono::milliseconds wait)
{
    auto silent
        = [](const AgentLink& a) { return Clock::now() - a.last_heard > std::chrono::duration<double>(kSilentAfter); };
    for (auto& a : agents) {
        a->recorder.reset();
        a->recorder_asked = a->conn && !a->lost && !a->exited && !a->done;
        if (a->recorder_asked)
            send(*a, agents::FlightRecorderAsk {"the run stalled"});
    }
    // A stopped or hung agent does not answer: wait only for those that still speak.
    const auto deadline = Clock::now() + wait;
    while (Clock::now() < deadline && std::any_of(agents.begin(), agents.end(), [&](const auto& a) {
        return a->recorder_asked && !a->recorder && !a->exited && !silent(*a);
    }))
        if (!readReady(o))
            break;
    std::vector<RecordedAction> out;
    for (std::size_t i = 0; i < agents.size(); ++i) {
        const AgentLink& a = *agents[i];
        const int agent = static_cast<int>(i);
        if (a.recorder) {
            for (const auto& sp : *a.recorder)
                out.push_back({agent, sp, sp.t1 == 0, "agent"});
            continue;
        }
        // What the controller received before the agent stopped answering, and the action it last reported unless
        // its telemetry says that one ended (deviceWaits: the newest state).
        const auto waits = deviceWaits();
        for (int d : a.devices) {
            if (auto it = a.recent.find(d); it != a.recent.end())
                for (const auto& sp : it->second)
                    out.push_back({agent, sp, false, "controller"});
            for (const auto& w : waits)
                if (w.device == d && w.busy)
                    out.push_back({agent, w.action, true, "controller"});
        }
    }
    return out;
}

void RunController::Impl::checkStall(const RunObserver& o)
{
    if (!started || stallReported || stopping || !failure.empty())
        return;
    // While a link is down, what its agent does is unknown until it is back (it resends from its journal), and until
    // its first heartbeat after the reconnect its devices' actions are the ones from before the outage.
    if (std::any_of(agents.begin(), agents.end(), [](const auto& a) { return a->lost || a->stale; }))
        return;
    const double now = monotonicNow() - t0;
    const double still = std::chrono::duration<double>(Clock::now() - lastProgress).count();
    const bool noProgress = Clock::now() - lastProgress > request.stall_timeout;
    const std::vector<DeviceWait> waits = deviceWaits();
    // An action "far beyond the plan" only where its agent still works and speaks: a done agent's last report is
    // old news, and an agent on another host silent for a few seconds may be behind a silent link (checkSilence's).
    std::vector<DeviceWait> heard = waits;
    std::set<int> doneDevices;
    for (const auto& a : agents)
        if (a->done)
            doneDevices.insert(a->devices.begin(), a->devices.end());
    for (auto& w : heard)
        w.busy = w.busy && !doneDevices.count(w.device) && !(launcher->remoteClocks() && w.silent);
    const int slow = noProgress ? -1 : slowestBeyondPlan(heard, now);
    if (!noProgress && slow < 0)
        return;
    char head[96];
    if (noProgress)
        std::snprintf(head, sizeof head, "stalled: no device finished an action for %.0f s: ", still);
    else
        std::snprintf(head, sizeof head, "an action runs far beyond the plan's prediction: ");
    const bool wait = request.on_stall == RunRequest::OnStall::Wait;
    const std::string text = reportStall(head, slow, wait ? "warning" : "error", o);
    if (wait)
        logLine(-1, "info", "--on-stall wait: the run waits on (stop it to end it)", o);
    else
        fail(text);
}

std::string RunController::Impl::reportStall(
    const std::string& head, int slow, const std::string& level, const RunObserver& o)
{
    stallReported = true; // once per stall: progress clears it
    const double now = monotonicNow() - t0;
    std::vector<std::vector<int>> stageDevices;
    for (const auto& st : request.plan.stages)
        stageDevices.push_back(st.devices);
    const StallReport report = explainStall(deviceWaits(), stageDevices, now, slow);
    const std::string text = head + report.text;
    logLine(-1, level, text, o);
    const std::vector<RecordedAction> recorder = collectRecorders(o, 2000ms);
    try {
        history.addStall(runId, {now, text, report.chain}, recorder);
    } catch (const std::exception& e) {
        logLine(-1, "warning", std::string("cannot store the stall's flight recorders: ") + e.what(), o);
    }
    return text;
}

} // namespace pw::app
