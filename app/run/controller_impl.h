// SPDX-License-Identifier: MIT
// Internal to app/run/: the run controller's state (RunController::Impl) and its agents' links, shared by the
// files that implement it: controller.cpp (prepare, launch, loop, finish), controller_agents.cpp (each agent's
// stream, reconnects and silence) and controller_stalls.cpp (stall reports and flight recorders).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/protocol/crypto.h"
#include "app/run/agent_connection.h"
#include "app/run/diagnosis.h"
#include "app/run/remote.h"
#include "app/run/run_checks.h"
#include "clock_offset.h"
#include "controller.h"
#include "gpu_devices.h"
#include "launcher.h"
#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "stall_report.h"

namespace pw::app {

namespace controller_detail {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline double monotonicNow()
{
    timespec ts {};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Clock round trips with each agent before the run starts, and how often one is sent during it.
constexpr std::size_t kClockSamplesBeforeStart = 4;
constexpr double kClockProbeInterval = 2.0;

/// @brief One agent: its connection (a local process, or a served agent over SSH) and where its stream stands.
struct AgentLink
{
    std::string name;
    std::vector<int> devices;
    std::unique_ptr<AgentConnection> conn;
    agents::FrameDecoder decoder;
    bool hello = false;
    bool done = false;
    bool exited = false;
    std::string exit_text; ///< how its process ended
    bool lost = false; ///< a remote agent's link dropped: reconnecting
    bool died = false; ///< its process ended before its Done, while the run went on
    /// Back after a lost link, its devices' last reported actions are from before the outage (it trained on): none
    /// of them is judged (checkStall) until its first heartbeat after the reconnect says where it is now.
    bool stale = false;
    double relinked_at = 0; ///< when it was back (s on the run's clock): older heartbeats are still stale
    bool stopped_alone = false; ///< it stopped (a signal on its host) while the controller asked no stop
    Clock::time_point lost_since;
    Clock::time_point next_attempt;
    std::chrono::milliseconds backoff {200};
    bool lost_to_silence = false; ///< lost because its link went silent (not closed)
    /// Its link was made again after it had gone silent: silence now is the agent's own (its host answers).
    bool relinked_after_silence = false;
    Clock::time_point next_wait_line; ///< when to say again what the controller waits for (a lost link)
    std::string unreachable_why; ///< why the last attempt to reach it failed
    agents::DoneStatus done_status = agents::DoneStatus::Failed;
    std::string done_message;
    std::string host;
    std::int64_t remote_pid = 0;
    std::int64_t step = 0; ///< its last heartbeat's
    std::int64_t last_seq = 0; ///< the last Telemetry batch taken
    std::int64_t next_span = 1; ///< the span number the next batch should start at
    Clock::time_point last_heard = Clock::now();
    /// Its host's monotonic clock against ours (its spans' and metrics' times are moved onto ours with it).
    ClockOffset clock;
    std::int64_t probe_id = 0; ///< the probe in flight (0: none)
    double probe_sent = 0; ///< when it left (our monotonic clock)
    double next_probe = 0; ///< when to send the next one
    /// Each device's progress as its last heartbeat said (action times moved onto the run's clock).
    std::vector<agents::DeviceProgress> progress;
    /// Per device, the last spans its telemetry brought (the run's clock): the flight recorder of an agent that no
    /// longer answers.
    std::map<int, std::deque<planner::Span>> recent;
    bool recorder_asked = false;
    std::optional<std::vector<planner::Span>> recorder; ///< its own flight recorder, on the run's clock
};
} // namespace controller_detail

using controller_detail::AgentLink;
using controller_detail::Clock;
using controller_detail::kClockProbeInterval;
using controller_detail::kClockSamplesBeforeStart;
using controller_detail::monotonicNow;
using namespace std::chrono_literals;

struct RunController::Impl
{
    RunRequest request;
    HistoryStore& history;
    std::atomic<bool> stopRequested {false};
    std::vector<std::unique_ptr<AgentLink>> agents;
    std::string runId;
    double t0 = 0; ///< monotonic seconds at Start: measured spans are rebased onto it
    /// Monotonic seconds when the run was recorded: its duration counts from here, as the history's start does.
    double recordedAt = 0;
    int microbatches = 1;
    double tokensPerStep = 0;
    // Rendezvous store relayed between agents.
    std::map<std::string, std::vector<std::uint8_t>> store;
    std::map<std::string, std::set<AgentLink*>> waiting;
    // Losses: per step the sum of its microbatches' losses and how many arrived.
    std::map<int, std::pair<double, int>> partial;
    std::vector<double> losses;
    std::vector<double> stepEnds;
    std::vector<MeasuredSpan> spanBuffer;
    std::vector<MetricSample> metricBuffer;
    std::vector<LogEntry> logBuffer;
    std::int64_t spanCount = 0;
    std::string failure;
    bool stopping = false;
    bool started = false; ///< Start was sent
    bool statusChanged = true; ///< an agent's status changed since the observer last heard
    Clock::time_point lastStatus;
    /// The run's device names in the history: the prediction's (the cluster's device types), then each GPU's
    /// name as its agent's hello reports it.
    std::vector<std::string> deviceNames;
    bool deviceNamesChanged = false;
    std::int64_t probeCounter = 0;
    // Stalls (app/run/stall_report.h).
    Clock::time_point lastProgress; ///< when a device last finished an action (as heartbeats tell)
    bool stallReported = false; ///< this stall was reported (until progress resumes)
    std::map<std::pair<int, int>, double> predictedAction; ///< (device, kind) -> mean predicted seconds
    // Stragglers named live (app/run/diagnosis.h): the spans measured so far against the prediction, over the
    // program the devices run (made for runs of up to kLiveDiagnosisSteps steps).
    static constexpr int kLiveDiagnosisSteps = 5000;
    static constexpr std::size_t kLiveDiagnosisSpans = 4'000'000;
    std::optional<planner::Schedule> liveProgram;
    planner::Timeline liveMeasured;
    planner::Timeline livePredicted;
    std::set<std::tuple<int, int, int>> namedStragglers; ///< (device, kind, peer) named in their current run
    double lastDiagnosis = 0;
    double lastCauses = 0; ///< when the observer last got the time by cause
    double diagnosisCost = 0; ///< seconds the last live diagnosis took

    Impl(RunRequest r, HistoryStore& h)
        : request(std::move(r))
        , history(h)
    {
    }

    /// One clock probe in flight per agent: back to back until a few samples are in, then every
    /// kClockProbeInterval (the window follows the clocks' drift); a probe unanswered for 5 s is abandoned.
    void probeClocks()
    {
        const double now = monotonicNow();
        for (auto& a : agents) {
            if (!a->hello || !a->conn || a->lost || a->exited || a->done)
                continue;
            if (a->probe_id != 0 && now - a->probe_sent < 5.0)
                continue;
            if (now < a->next_probe)
                continue;
            a->probe_id = ++probeCounter;
            a->probe_sent = now;
            a->next_probe = now + (a->clock.samples() < kClockSamplesBeforeStart ? 0.0 : kClockProbeInterval);
            send(*a, agents::ClockProbe {a->probe_id, now});
        }
    }

    void send(AgentLink& a, const agents::Message& m)
    {
        if (!a.conn || a.lost || a.exited)
            return;
        try {
            a.conn->write(agents::encode(m));
        } catch (const std::exception&) {
            // Its input is closed: the agent is gone (or its link dropped), which the end of its output reports.
        }
    }

    int agentIndex(const AgentLink& a) const
    {
        for (std::size_t i = 0; i < agents.size(); ++i)
            if (agents[i].get() == &a)
                return static_cast<int>(i);
        return -1;
    }

    void fail(const std::string& why)
    {
        if (failure.empty() && !stopping && !stopRequested)
            failure = why;
    }

    void logLine(int agent, const std::string& level, const std::string& text, const RunObserver& o)
    {
        logBuffer.push_back({monotonicNow() - t0, agent, -1, level, text});
        if (o.log)
            o.log(agent < 0 ? "controller" : agents[static_cast<std::size_t>(agent)]->name, level, text);
    }

    /// As telemetry with spans arrives: names (in the log, stored with the run) each straggler not named since it
    /// last was one.
    void diagnoseLive(const RunObserver& o)
    {
        if (!liveProgram || liveMeasured.spans.size() > kLiveDiagnosisSpans)
            return;
        const double now = monotonicNow();
        // At most four times a second (a step of a tiny model takes milliseconds), and at most a tenth of the
        // controller's time (it sweeps every span so far).
        if (now - lastDiagnosis < std::max(0.25, 10 * diagnosisCost))
            return;
        lastDiagnosis = now;
        std::set<std::tuple<int, int, int>> current;
        const auto stragglers = planner::findStragglers(liveMeasured, livePredicted, *liveProgram);
        if (o.diagnosis && now - lastCauses >= 1.0) {
            lastCauses = now;
            o.diagnosis({planner::timeByCause(liveMeasured, livePredicted, *liveProgram), stragglers});
        }
        for (const auto& s : stragglers) {
            const std::tuple<int, int, int> key {s.device, static_cast<int>(s.kind), s.peer};
            current.insert(key);
            if (!namedStragglers.count(key))
                logLine(-1, "warning", "straggler: " + s.text(), o);
        }
        namedStragglers = std::move(current);
        diagnosisCost = monotonicNow() - now;
    }

    void handle(AgentLink& a, agents::Message&& m, const RunObserver& o);
    /// Tells the observer every agent's status when one changed, or a second has passed.
    void reportAgents(const RunObserver& o, bool force = false);
    void onTelemetry(AgentLink& a, agents::Telemetry& t, const RunObserver& o);
    void flush();
    void shutdown();
    /// Takes every frame the agent's connection holds now; returns 0 when it has no more for now, -1 at the end of
    /// its stream. Throws ProtocolError for a malformed frame.
    long readAvailable(AgentLink& a, std::vector<char>& buffer, const RunObserver& o)
    {
        long n = 0;
        while ((n = a.conn->read(buffer)) > 0) {
            a.decoder.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
            while (auto frame = a.decoder.next())
                handle(a, agents::decode(*frame), o);
        }
        return n;
    }
    /// The end of an agent's stream: its process ended (a failure before its Done), or its link dropped.
    void onEnd(AgentLink& a, const RunObserver& o);
    /// Tries again to reach agents whose link dropped; fails the run when one stays out of reach too long.
    void reconnectLost(const RunObserver& o);
    std::unique_ptr<Launcher> launcher; ///< made in prepare(): local, SSH or Slurm
    Clock::time_point nextAllocationCheck; ///< when to ask the launcher again whether the allocation ended

    // RunController::run in its four phases, each called once, in this order.
    /// Records the run in the history (with its prediction) and makes one AgentLink per device; nothing starts.
    void prepare(CheckedRun& checked, const RunObserver& o);
    /// Starts the agents through the launcher (local processes, over SSH after uploading what they need, or a Slurm
    /// job's tasks once they connected) and sends each its RunSpec.
    /// A failure here ends in `failure`: finish() still stops whatever started.
    void launch(const RunObserver& o);
    /// Until every agent is Done, the run fails or a stop is asked: one pass per poll of the agents' connections.
    void loop(const RunObserver& o);
    /// Names the first cause of a failure, stops the agents, takes their last frames, tears a remote run down and
    /// records how the run ended.
    RunOutcome finish(const RunObserver& o);

    // The parts of the phases.
    agents::RunSpec runSpecFor(const AgentLink& a, const std::vector<std::uint8_t>& glooSecret) const;
    /// Sends Start once every agent has said hello and its clock is known.
    void startWhenReady();
    /// Waits (briefly) for input and takes it from every agent that has some; false when polling itself failed.
    bool readReady(const RunObserver& o);
    /// Fails the run when a live agent has said nothing for the heartbeat timeout.
    void checkSilence(const RunObserver& o);
    /// When no device finished an action for the stall timeout, or one runs far beyond the plan: reports the chain of
    /// waits, stores the flight recorders, and fails the run (or, with OnStall::Wait, waits on).
    void checkStall(const RunObserver& o);
    /// Names the chain of waits (explainStall) after `head`, logs it at `level`, and stores it with every agent's
    /// flight recorder in the history; returns the whole text. Once per stall.
    std::string reportStall(const std::string& head, int slow, const std::string& level, const RunObserver& o);
    /// The devices that all-reduce the tied embedding's gradient with `device` before their steps (its group of
    /// Plan::tiedWeightGroups, less itself); empty for none.
    std::vector<int> tiedWith(int device) const
    {
        for (int p = 0; p < request.plan.pipelineCount(); ++p)
            for (auto group : request.plan.tiedWeightGroups(p))
                if (std::find(group.begin(), group.end(), device) != group.end()) {
                    group.erase(std::find(group.begin(), group.end(), device));
                    return group;
                }
        return {};
    }
    /// What each device is doing, for explainStall.
    std::vector<DeviceWait> deviceWaits() const;
    /// Every agent's flight recorder: asked for, awaited up to `wait`; the controller's view of those that did not
    /// answer.
    std::vector<RecordedAction> collectRecorders(const RunObserver& o, std::chrono::milliseconds wait);
    /// Stores the launcher's job id (Slurm's) with the run once it has one.
    void recordJob();
    std::string recordedJob;
    /// Fails the run when the launcher says its allocation ended (a Slurm job cancelled or out of time); once a
    /// second.
    void checkAllocation();
    /// Stores the buffered spans, metrics and logs when enough are waiting or a quarter of a second has passed.
    void flushPeriodically();
    /// Reads for a moment what agents still send, and puts the agents that died on their own first in `failure`.
    void nameFirstCause(const RunObserver& o);
    /// An agent's error waits here a moment before it is logged (`all`: every one now): a peer's failed receive
    /// often arrives before the Done of the agent whose stop caused it, and is then logged as that stop's aftermath
    /// (info), not as an error of its own.
    void logAgentErrors(const RunObserver& o, bool all);
    struct PendingError
    {
        int agent = -1;
        std::string text;
        Clock::time_point at;
    };
    std::vector<PendingError> pendingErrors;
    /// The outcome as the run stands (status, losses, throughput).
    RunOutcome outcome() const;
    /// The agents' clocks and the last buffered events into the history; throws when they cannot be stored.
    void storeLastEvents();

    std::string planJson; ///< the plan as stored with the run (and uploaded to the nodes of a remote run)
    int threadsPerAgent = 1;
    std::vector<char> readBuffer = std::vector<char>(1 << 16);
    Clock::time_point lastFlush;
};

} // namespace pw::app
