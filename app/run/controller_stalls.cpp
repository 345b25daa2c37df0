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
            w.host = a->host.empty() ? (a->conn ? a->conn->where() : std::string()) : a->host;
            const auto gpu = cudaDeviceOf(*request.plan.cluster, d);
            w.where = gpu ? "cuda:" + std::to_string(*gpu) : "cpu";
            w.tied = tiedWith(d);
            w.silent = !a->done && (a->exited || a->lost || silent > kSilentAfter);
            w.silent_s = silent;
            for (const auto& p : a->progress)
                if (p.device == d) {
                    w.reported = true;
                    w.busy = p.busy;
                    w.action = p.action;
                    w.finished = p.finished;
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
        // What the controller received before the agent stopped answering, and the action it last reported.
        for (int d : a.devices) {
            if (auto it = a.recent.find(d); it != a.recent.end())
                for (const auto& sp : it->second)
                    out.push_back({agent, sp, false, "controller"});
            for (const auto& p : a.progress)
                if (p.device == d && p.busy)
                    out.push_back({agent, p.action, true, "controller"});
        }
    }
    return out;
}

void RunController::Impl::checkStall(const RunObserver& o)
{
    if (!started || stallReported || stopping || !failure.empty())
        return;
    // While a link is down, what its agent does is unknown until it is back (it resends from its journal).
    if (std::any_of(agents.begin(), agents.end(), [](const auto& a) { return a->lost; }))
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
