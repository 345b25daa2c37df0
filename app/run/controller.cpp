// SPDX-License-Identifier: MIT
#include "controller.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include <fcntl.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/run/agent_connection.h"
#include "app/run/remote.h"
#include "app/run/run_checks.h"
#include "clock_offset.h"
#include "gpu_devices.h"
#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "stall_report.h"

namespace pw::app {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double monotonicNow()
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

} // namespace

std::string_view toString(AgentStatus::State state)
{
    switch (state) {
    case AgentStatus::State::Starting:
        return "starting";
    case AgentStatus::State::Running:
        return "running";
    case AgentStatus::State::Done:
        return "done";
    case AgentStatus::State::Failed:
        return "failed";
    case AgentStatus::State::Exited:
        return "exited";
    }
    return "?";
}

std::filesystem::path defaultAgentExecutable(const std::filesystem::path& self)
{
    if (const char* env = std::getenv("PIPEWRIGHT_AGENT"); env && *env)
        return env;
    std::error_code ec;
    const auto dir = std::filesystem::canonical(self, ec).parent_path();
    for (const auto& candidate : {dir / "pipewright-agent", dir.parent_path() / "agents" / "pipewright-agent"})
        if (!ec && std::filesystem::exists(candidate))
            return candidate;
    return "pipewright-agent";
}

struct RunController::Impl
{
    RunRequest request;
    HistoryStore& history;
    std::atomic<bool> stopRequested {false};
    std::vector<std::unique_ptr<AgentLink>> agents;
    std::string runId;
    double t0 = 0; ///< monotonic seconds at Start: measured spans are rebased onto it
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
    std::unique_ptr<RemoteDeployment> remote;

    // RunController::run in its four phases, each called once, in this order.
    /// Records the run in the history (with its prediction) and makes one AgentLink per device; nothing starts.
    void prepare(CheckedRun& checked, const RunObserver& o);
    /// Starts the agents (local processes, or over SSH after uploading what they need) and sends each its RunSpec.
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
    /// The devices that all-reduce the tied embedding with `device` in their optimizer step (the engine's tied group:
    /// the devices holding the embedding and the head of its pipeline, when those are different stages); empty for
    /// none.
    std::vector<int> tiedWith(int device) const
    {
        int last = 0;
        for (const auto& st : request.plan.stages)
            last = std::max(last, st.last_layer);
        for (const auto& st : request.plan.stages) {
            if (std::find(st.devices.begin(), st.devices.end(), device) == st.devices.end())
                continue;
            std::vector<int> group;
            for (const auto& other : request.plan.stages) {
                if (other.pipeline != st.pipeline)
                    continue;
                if (other.first_layer == 0 && other.last_layer == last)
                    return {};
                if (other.first_layer == 0 || other.last_layer == last)
                    for (int d : other.devices)
                        if (d != device && std::find(group.begin(), group.end(), d) == group.end())
                            group.push_back(d);
            }
            const bool holds = st.first_layer == 0 || st.last_layer == last;
            return holds ? group : std::vector<int> {};
        }
        return {};
    }
    /// What each device is doing, for explainStall.
    std::vector<DeviceWait> deviceWaits() const;
    /// Every agent's flight recorder: asked for, awaited up to `wait`; the controller's view of those that did not
    /// answer.
    std::vector<RecordedAction> collectRecorders(const RunObserver& o, std::chrono::milliseconds wait);
    /// Stores the buffered spans, metrics and logs when enough are waiting or a quarter of a second has passed.
    void flushPeriodically();
    /// Reads for a moment what agents still send, and puts the agents that died on their own first in `failure`.
    void nameFirstCause(const RunObserver& o);
    /// The outcome as the run stands (status, losses, throughput).
    RunOutcome outcome() const;
    /// The agents' clocks and the last buffered events into the history; throws when they cannot be stored.
    void storeLastEvents();

    std::string planJson; ///< the plan as stored with the run (and uploaded to the nodes of a remote run)
    int threadsPerAgent = 1;
    std::vector<char> readBuffer = std::vector<char>(1 << 16);
    Clock::time_point lastFlush;
};

void RunController::Impl::onEnd(AgentLink& a, const RunObserver& o)
{
    a.decoder = agents::FrameDecoder {}; // a frame cut by a dropped link is not resumed
    auto end = a.conn->ended(!a.conn->canReconnect());
    statusChanged = true;
    if (end) {
        a.exited = true;
        a.exit_text = *end;
        a.died = !a.done;
        if (!a.done)
            fail(a.name + (a.conn->where() == "local" ? "" : " on " + a.conn->where()) + " " + *end
                + " before the run finished");
        return;
    }
    a.lost = true;
    a.lost_since = Clock::now();
    a.next_attempt = a.lost_since;
    a.backoff = 200ms;
    a.next_wait_line = a.lost_since + 5s;
    a.unreachable_why.clear();
    logLine(
        agentIndex(a), "warning", "lost the connection to " + a.name + " on " + a.conn->where() + "; reconnecting", o);
}

void RunController::Impl::reconnectLost(const RunObserver& o)
{
    for (auto& a : agents) {
        if (!a->lost || Clock::now() < a->next_attempt)
            continue;
        std::string why;
        bool back = false;
        try {
            back = a->conn->reconnect();
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (back) {
            a->lost = false;
            a->last_heard = Clock::now();
            a->relinked_after_silence = a->lost_to_silence;
            a->lost_to_silence = false;
            statusChanged = true;
            // The time it was out of sight is no stall: what it did meanwhile arrives now (Resume).
            lastProgress = std::max(lastProgress, Clock::now());
            logLine(agentIndex(*a), "info",
                "reconnected to " + a->name + " after "
                    + std::to_string(
                        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - a->lost_since).count())
                    + " ms; resuming after telemetry batch " + std::to_string(a->last_seq),
                o);
            send(*a, agents::Resume {a->last_seq});
            continue;
        }
        if (!why.empty())
            a->unreachable_why = why;
        const auto limit = request.remote ? request.remote->reconnect_for : std::chrono::seconds {0};
        const auto away = Clock::now() - a->lost_since;
        if (away > limit) {
            a->lost = false;
            a->exited = true;
            a->exit_text = "out of reach";
            fail("lost " + a->name + " on " + a->conn->where() + " and could not reconnect within "
                + std::to_string(limit.count()) + " s" + (a->unreachable_why.empty() ? "" : ": " + a->unreachable_why));
            continue;
        }
        // Say what the loop waits for while it waits (it stays live: each attempt runs in the background).
        if (Clock::now() >= a->next_wait_line) {
            logLine(agentIndex(*a), "info",
                "still waiting for " + a->name + " on " + a->conn->where() + " to answer: out of reach for "
                    + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(away).count()) + " s"
                    + (a->unreachable_why.empty() ? "" : " (" + a->unreachable_why + ")") + "; trying until "
                    + std::to_string(limit.count()) + " s",
                o);
            a->next_wait_line = Clock::now() + 5s;
        }
        if (why.empty()) { // an attempt is on its way: look again soon
            a->next_attempt = Clock::now() + 100ms;
            continue;
        }
        a->next_attempt = Clock::now() + a->backoff;
        a->backoff = std::min<std::chrono::milliseconds>(a->backoff * 2, 2000ms);
    }
}

void RunController::Impl::handle(AgentLink& a, agents::Message&& m, const RunObserver& o)
{
    a.last_heard = Clock::now();
    a.relinked_after_silence = false;
    const int index = agentIndex(a);
    std::visit(
        [&](auto& msg) {
            using T = std::decay_t<decltype(msg)>;
            if constexpr (std::is_same_v<T, agents::Hello>) {
                a.hello = true;
                a.host = msg.host;
                a.remote_pid = msg.pid;
                statusChanged = true;
                // The GPU each of its devices trains on, by name, where the agent lists it (an index it does not
                // see fails in the agent, which says why).
                std::string gpus;
                for (int d : a.devices)
                    if (const auto gpu = cudaDeviceOf(*request.plan.cluster, d);
                        gpu && *gpu < static_cast<int>(msg.gpus.size())) {
                        const std::string name
                            = "cuda:" + std::to_string(*gpu) + " " + msg.gpus[static_cast<std::size_t>(*gpu)].name;
                        gpus += ", device " + std::to_string(d) + " on " + name;
                        if (d >= static_cast<int>(deviceNames.size()))
                            for (int i = static_cast<int>(deviceNames.size()); i <= d; ++i)
                                deviceNames.push_back("device " + std::to_string(i));
                        deviceNames[static_cast<std::size_t>(d)] = name + " (" + msg.host + ")";
                        deviceNamesChanged = true;
                    }
                logLine(index, "info",
                    a.name + " on " + msg.host + " (pid " + std::to_string(msg.pid) + ", " + std::to_string(msg.cores)
                        + " cores, " + msg.blas + gpus + ")",
                    o);
            } else if constexpr (std::is_same_v<T, agents::RendezvousSet>) {
                store[msg.key] = msg.value;
                for (AgentLink* w : waiting[msg.key])
                    send(*w, agents::RendezvousValue {msg.key, msg.value});
                waiting.erase(msg.key);
            } else if constexpr (std::is_same_v<T, agents::RendezvousGet>) {
                if (auto it = store.find(msg.key); it != store.end())
                    send(a, agents::RendezvousValue {msg.key, it->second});
                else
                    waiting[msg.key].insert(&a);
            } else if constexpr (std::is_same_v<T, agents::Telemetry>) {
                onTelemetry(a, msg, o);
            } else if constexpr (std::is_same_v<T, agents::Log>) {
                logLine(index, std::string(agents::toString(msg.level)), msg.text, o);
            } else if constexpr (std::is_same_v<T, agents::Error>) {
                logLine(index, "error", msg.message, o);
                if (msg.fatal && !a.done) // after its Done an agent's run is over: what it says then is only logged
                    fail(a.name + ": " + msg.message);
            } else if constexpr (std::is_same_v<T, agents::Done>) {
                a.done = true;
                a.step = msg.steps;
                statusChanged = true;
                a.done_status = msg.status;
                a.done_message = msg.message;
                if (msg.status == agents::DoneStatus::Failed)
                    fail(a.name + ": " + msg.message);
            } else if constexpr (std::is_same_v<T, agents::Heartbeat>) {
                statusChanged = statusChanged || a.step != msg.step;
                a.step = msg.step;
                std::int64_t before = 0, after = 0;
                for (const auto& p : a.progress)
                    before += p.finished;
                a.progress = msg.devices;
                for (auto& p : a.progress) {
                    after += p.finished;
                    p.action.t0 = a.clock.toController(p.action.t0) - t0;
                }
                if (after > before) { // a device finished an action: whatever stalled goes on
                    lastProgress = Clock::now();
                    stallReported = false;
                }
            } else if constexpr (std::is_same_v<T, agents::FlightRecorder>) {
                std::vector<planner::Span> spans = msg.actions;
                for (auto& sp : spans) {
                    sp.t0 = a.clock.toController(sp.t0) - t0;
                    sp.t1 = sp.t1 == 0 ? 0 : a.clock.toController(sp.t1) - t0; // 0: still in progress
                }
                a.recorder = std::move(spans);
            } else if constexpr (std::is_same_v<T, agents::ClockReply>) {
                if (msg.id == a.probe_id) { // a late reply to an abandoned probe would bound nothing we sent now
                    a.clock.add(msg.controller_t_s, msg.agent_t_s, monotonicNow());
                    a.probe_id = 0;
                }
            } else {
                fail(a.name + " sent a " + agents::toString(T::kType) + " message, which only a controller sends");
            }
        },
        m);
}

void RunController::Impl::onTelemetry(AgentLink& a, agents::Telemetry& t, const RunObserver& o)
{
    if (t.seq <= a.last_seq)
        return; // already stored (a resent batch)
    if (t.seq != a.last_seq + 1)
        logLine(agentIndex(a), "warning",
            "telemetry gap: batch " + std::to_string(t.seq) + " after " + std::to_string(a.last_seq), o);
    a.last_seq = t.seq;
    const int agent = agentIndex(a);
    if (t.first_span != a.next_span && !t.spans.empty())
        logLine(agent, "warning",
            "span numbers jump from " + std::to_string(a.next_span) + " to " + std::to_string(t.first_span), o);
    for (std::size_t i = 0; i < t.spans.size(); ++i) {
        auto& s = t.spans[i];
        s.t0 = a.clock.toController(s.t0) - t0;
        s.t1 = a.clock.toController(s.t1) - t0;
        spanBuffer.push_back({s, agent, t.first_span + static_cast<std::int64_t>(i)});
        auto& recent = a.recent[s.device];
        recent.push_back(s);
        if (recent.size() > agents::kFlightRecorderActions)
            recent.pop_front();
    }
    a.next_span = t.first_span + static_cast<std::int64_t>(t.spans.size());
    spanCount += static_cast<std::int64_t>(t.spans.size());
    if (o.spans && !t.spans.empty())
        o.spans(t.spans);
    for (auto& m : t.metrics) {
        if (m.name == "microbatch_loss") {
            const int step = static_cast<int>(m.step / microbatches);
            auto& [sum, count] = partial[step];
            sum += m.value;
            if (++count == microbatches) {
                if (static_cast<int>(losses.size()) <= step) {
                    losses.resize(static_cast<std::size_t>(step) + 1, NAN);
                    stepEnds.resize(static_cast<std::size_t>(step) + 1, 0);
                }
                losses[static_cast<std::size_t>(step)] = sum / microbatches;
                stepEnds[static_cast<std::size_t>(step)] = monotonicNow() - t0;
                partial.erase(step);
                const double elapsed = stepEnds[static_cast<std::size_t>(step)];
                const double tps = elapsed > 0 ? tokensPerStep * (step + 1) / elapsed : 0;
                const double loss = losses[static_cast<std::size_t>(step)];
                metricBuffer.push_back({step, "loss", loss, elapsed, -1});
                metricBuffer.push_back({step, "tokens_per_s", tps, elapsed, -1});
                if (o.progress)
                    o.progress({runId, step + 1, request.training.steps, loss, tps, elapsed});
                if (!std::isfinite(loss) && request.stop_on_nonfinite)
                    fail("the loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step "
                        + std::to_string(step + 1) + " of " + std::to_string(request.training.steps)
                        + ": training diverged (a lower learning rate may help; --stop-on-nonfinite off trains on)");
            }
        } else {
            metricBuffer.push_back(
                {static_cast<int>(m.step), m.name, m.value, a.clock.toController(m.t_s) - t0, m.device});
        }
    }
    if (spanBuffer.size() >= 20000)
        flush();
}

void RunController::Impl::reportAgents(const RunObserver& o, bool force)
{
    if (!o.agents || (!force && !statusChanged && Clock::now() - lastStatus < 1s))
        return;
    std::vector<AgentStatus> out;
    const auto now = Clock::now();
    for (const auto& a : agents) {
        AgentStatus st;
        st.name = a->name;
        st.devices = a->devices;
        st.host = a->host;
        st.pid = a->remote_pid;
        st.step = a->step;
        st.silent_s = std::chrono::duration<double>(now - a->last_heard).count();
        if (a->done) {
            st.state
                = a->done_status == agents::DoneStatus::Failed ? AgentStatus::State::Failed : AgentStatus::State::Done;
            st.message = a->done_message;
        } else if (a->exited) {
            st.state = AgentStatus::State::Exited;
            st.message = a->exit_text;
        } else {
            st.state = started && a->hello ? AgentStatus::State::Running : AgentStatus::State::Starting;
        }
        out.push_back(std::move(st));
    }
    statusChanged = false;
    lastStatus = now;
    o.agents(out);
}

void RunController::Impl::flush()
{
    if (deviceNamesChanged)
        history.setDeviceNames(runId, deviceNames);
    deviceNamesChanged = false;
    if (!spanBuffer.empty())
        history.appendSpans(runId, spanBuffer);
    if (!metricBuffer.empty())
        history.appendMetrics(runId, metricBuffer);
    if (!logBuffer.empty())
        history.appendLogs(runId, logBuffer);
    spanBuffer.clear();
    metricBuffer.clear();
    logBuffer.clear();
}

void RunController::Impl::shutdown()
{
    // Stop politely, then SIGTERM, then SIGKILL: a device blocked in a transfer whose peer died answers none of
    // the polite ways. (A served agent that already said Done takes the Stop as goodbye and exits.)
    for (auto& a : agents)
        if (!a->exited)
            send(*a, agents::Stop {failure.empty() ? "stop requested" : "the run failed: " + failure});
    const auto deadline = Clock::now() + 1500ms;
    auto reap = [&] {
        bool all = true;
        for (auto& a : agents) {
            if (a->exited || !a->conn)
                continue;
            if (auto end = a->conn->ended(false)) {
                a->exited = true;
                a->exit_text = *end;
            } else
                all = false;
        }
        return all;
    };
    while (!reap() && Clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
    for (auto& a : agents)
        if (!a->exited && a->conn)
            a->conn->signal(SIGTERM);
    const auto hard = Clock::now() + 1500ms;
    while (!reap() && Clock::now() < hard)
        std::this_thread::sleep_for(20ms);
    for (auto& a : agents)
        if (!a->exited && a->conn) {
            a->conn->signal(SIGKILL);
            a->exited = true;
            a->exit_text = a->conn->ended(true).value_or("was killed (SIGKILL)");
        }
}

// ---------------------------------------------------------------------------------------------------------------

RunController::RunController(RunRequest request, HistoryStore& history)
    : m_impl(std::make_unique<Impl>(std::move(request), history))
{
}

RunController::~RunController() = default;

void RunController::stop()
{
    m_impl->stopRequested = true;
}

CheckedRun checkRun(const RunRequest& req)
{
    // (app/run/run_checks.h)
    validateRunSettings(req);
    checkTrainable(req.plan); // the model's shape, and only settings the engine honours
    for (const auto& stage : req.plan.stages) // a precision the GPUs have no kernels for, before anything starts
        for (int d : stage.devices)
            if (cudaDeviceOf(*req.plan.cluster, d))
                gpuPrecision(req.plan);
    {
        planner::Plan p = req.plan;
        p.schedule.iterations = std::min(req.training.steps, 2); // the agents generate the rest (engine::runProgram)
        p.validate();
        planner::generateSchedule(p); // throws for a schedule the plan does not suit
    }
    if (!req.remote) // a remote run's files are on its hosts, where its agents check them the same way
        checkRunFiles(req);
    else
        requireEnvValues(*req.plan.cluster);
    // The prediction of the first steps: the schedule repeats, so a few steps give the per-step figures and the
    // overlay's shape, and a run of a million steps is not simulated (and stored) in full first. It is also what
    // a local run's memory is checked against.
    CheckedRun out;
    out.predicted_steps = std::min(req.training.steps, kPredictedSteps);
    planner::Plan predicted = req.plan;
    predicted.schedule.iterations = out.predicted_steps;
    try {
        out.prediction = planner::simulate(predicted);
    } catch (const std::exception& e) {
        out.no_prediction = e.what();
    }
    if (!req.remote) // before the run is recorded: GPUs this machine does not have fail here, not in an agent
        checkLocalGpus(req.plan, out.prediction ? &*out.prediction : nullptr);
    const auto machine = MachineResources::thisMachine();
    if (!req.remote && !req.force)
        if (const auto excess
            = localRunExcess(localRunLoad(req, out.prediction ? &*out.prediction : nullptr, machine), machine);
            !excess.empty())
            throw planner::InputError(excess + ": give --force to start it anyway");
    return out;
}

RunOutcome RunController::run(const RunObserver& o)
{
    // Everything that can be refused is checked before the run is recorded and a process starts.
    return run(o, checkRun(m_impl->request));
}

RunOutcome RunController::run(const RunObserver& o, CheckedRun checked)
{
    Impl& s = *m_impl;
    s.prepare(checked, o);
    s.launch(o);
    s.loop(o);
    return s.finish(o);
}

void RunController::Impl::prepare(CheckedRun& checked, const RunObserver& o)
{
    const auto machine = MachineResources::thisMachine();
    const auto& arch = *request.plan.model->architecture;
    microbatches = request.plan.microbatchesPerStep(); // every pipeline (virtual worker) takes its own
    const int b = request.plan.schedule.microbatch_size > 0 ? request.plan.schedule.microbatch_size : arch.microbatch;
    tokensPerStep = static_cast<double>(microbatches) * b * arch.sequence;

    // One agent per device, in device order.
    std::set<int> devices;
    for (const auto& st : request.plan.stages)
        devices.insert(st.devices.begin(), st.devices.end());
    threadsPerAgent = localRunLoad(request, nullptr, machine).threads_per_agent;

    NewRun nr;
    nr.plan_json = planner::toJson(request.plan).dump();
    nr.cluster_json = planner::toJson(*request.plan.cluster).dump();
    nlohmann::json hosts = nlohmann::json::array();
    for (int d : devices) {
        const auto& node = request.plan.cluster->nodes[static_cast<std::size_t>(request.plan.cluster->device(d).node)];
        if (request.remote)
            hosts.push_back({{"device", d}, {"host", node.host.empty() ? node.name : node.host}, {"node", node.name},
                {"launcher", "ssh"}});
        else
            hosts.push_back({{"device", d}, {"host", "localhost"}, {"launcher", "local"}});
    }
    nr.hosts_json = hosts.dump();
    nr.label = request.plan_label;
    nr.steps_planned = request.training.steps;
    runId = history.createRun(nr);
    planJson = nr.plan_json;
    auto& sim = checked.prediction;
    try {
        if (!sim)
            throw std::runtime_error(checked.no_prediction);
        sim->timeline.run_id = runId;
        history.savePredicted(runId, sim->timeline, checked.predicted_steps);
        // What each kind of action takes on each device, as predicted: an action far beyond it is a stall too.
        std::map<std::pair<int, int>, std::pair<double, int>> sums;
        for (const auto& sp : sim->timeline.spans) {
            auto& [sum, count] = sums[{sp.device, static_cast<int>(sp.kind)}];
            sum += sp.t1 - sp.t0;
            ++count;
        }
        for (const auto& [key, sc] : sums)
            predictedAction[key] = sc.first / sc.second;
        deviceNames = sim->timeline.device_names;
    } catch (const std::exception& e) {
        logBuffer.push_back({0, -1, -1, "warning", std::string("no prediction: ") + e.what()});
    }

    for (int d : devices) {
        auto a = std::make_unique<AgentLink>();
        a->name = "agent " + std::to_string(d);
        a->devices = {d};
        agents.push_back(std::move(a));
    }
    if (o.created)
        o.created(runId);
}

void RunController::Impl::launch(const RunObserver& o)
{
    std::signal(SIGPIPE, SIG_IGN);
    // The agents write their stages into the checkpoint in place: an old file must not leave its bytes there.
    if (const auto& save = request.training.save_checkpoint; !save.empty()) {
        std::error_code ec;
        std::filesystem::remove(save, ec);
        if (ec)
            fail(save + ": cannot replace the checkpoint: " + ec.message());
    }
    t0 = monotonicNow();
    try {
        if (request.remote) {
            // Over SSH: sessions to the nodes, the run directories, the agent and the plan uploaded there.
            std::vector<int> devices;
            for (const auto& a : agents)
                devices.push_back(a->devices.front());
            remote = std::make_unique<RemoteDeployment>(
                *request.plan.cluster, runId, *request.remote, request.agent_executable);
            remote->prepare(devices, planJson, [&](const std::string& line) { logLine(-1, "info", line, o); });
        }
        for (auto& a : agents) {
            a->conn = remote ? remote->startAgent(a->devices.front()) : startLocalAgent(request.agent_executable);
            a->last_heard = Clock::now(); // silence counts from its start (an upload before may take a while)
        }
    } catch (const std::exception& e) {
        fail(e.what());
    }
    // The key that proves the agents' Gloo connections to each other: new per run, sent only over the agents'
    // channels (pipes, SSH), never stored or logged (docs/execution.md, threat model).
    std::vector<std::uint8_t> glooSecret(32);
    if (RAND_bytes(glooSecret.data(), static_cast<int>(glooSecret.size())) != 1)
        fail("no random bytes for the run's Gloo key (OpenSSL RAND_bytes)");
    for (auto& a : agents) {
        if (!a->conn || !failure.empty()) // a run without its key sends no plan: the agents are stopped in finish
            continue; // not started: the run failed before (an unreachable node)
        send(*a, runSpecFor(*a, glooSecret));
    }
}

agents::RunSpec RunController::Impl::runSpecFor(const AgentLink& a, const std::vector<std::uint8_t>& glooSecret) const
{
    agents::RunSpec spec;
    spec.gloo_secret = glooSecret;
    spec.run_id = runId;
    spec.agent = a.name;
    spec.plan = planner::toJson(request.plan);
    spec.devices = a.devices;
    spec.training = request.training;
    spec.threads = threadsPerAgent;
    spec.transport = runTransport(request.plan); // NCCL between GPUs of their own, else Gloo
    spec.telemetry_batch = request.telemetry_batch;
    assignDevices(spec, request.plan); // the node's GPU for each device; none on a CPU node
    if (remote) {
        spec.journal_path = remote->journalPath(a.devices.front());
        spec.gloo_host = remote->glooHost(a.devices.front());
    }
    return spec;
}

void RunController::Impl::loop(const RunObserver& o)
{
    lastFlush = Clock::now();
    while (failure.empty()) {
        if (stopRequested && !stopping) {
            stopping = true;
            break;
        }
        probeClocks();
        startWhenReady();
        if (std::all_of(agents.begin(), agents.end(), [](auto& a) { return a->done; }))
            break;
        if (!readReady(o))
            break;
        reconnectLost(o);
        checkSilence(o);
        checkStall(o);
        reportAgents(o);
        flushPeriodically();
    }
}

void RunController::Impl::startWhenReady()
{
    // Start once every agent has said hello and its clock is known (a few round trips: the first spans are then
    // already on the controller's clock).
    if (started || !std::all_of(agents.begin(), agents.end(), [](auto& a) {
            return a->hello && a->clock.samples() >= kClockSamplesBeforeStart;
        }))
        return;
    started = true;
    statusChanged = true;
    t0 = monotonicNow();
    lastProgress = Clock::now();
    for (auto& a : agents)
        send(*a, agents::Start {});
}

bool RunController::Impl::readReady(const RunObserver& o)
{
    std::vector<pollfd> fds;
    bool buffered = false;
    for (auto& a : agents) {
        const bool live = a->conn && !a->lost && !a->exited;
        fds.push_back({live ? a->conn->pollFd() : -1, POLLIN, 0});
        buffered = buffered || (live && a->conn->buffersInput());
    }
    const int ready = poll(fds.data(), fds.size(), buffered ? 20 : 100);
    if (ready < 0 && errno != EINTR) {
        fail(std::string("poll: ") + std::strerror(errno));
        return false;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
        AgentLink& a = *agents[i];
        if (!a.conn || a.lost || a.exited)
            continue;
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !a.conn->buffersInput())
            continue;
        try {
            if (readAvailable(a, readBuffer, o) < 0) {
                if (!a.conn->canReconnect())
                    a.decoder.finish(); // a local agent that died mid-frame; a dropped link is resumed
                onEnd(a, o);
            }
        } catch (const agents::ProtocolError& e) {
            fail(a.name + ": malformed telemetry: " + e.what());
        }
    }
    return true;
}

void RunController::Impl::checkSilence(const RunObserver& o)
{
    const auto heartbeatS = std::chrono::duration_cast<std::chrono::seconds>(request.heartbeat_timeout).count();
    for (auto& a : agents) {
        if (a->done || a->exited || a->lost || Clock::now() - a->last_heard <= request.heartbeat_timeout)
            continue;
        if (a->conn && a->conn->canReconnect() && !a->relinked_after_silence) {
            // A remote agent's silence is first its link's: packets dropped without a reset (a switch, a cable, a
            // firewall) leave TCP retrying for many minutes while the agent trains on. Give that link up and make
            // another, as for a dropped one; the agent resends from its journal. Only if it stays silent once its
            // host answers again is the agent itself stalled or hung.
            const auto limit = request.remote ? request.remote->reconnect_for : std::chrono::seconds {0};
            logLine(agentIndex(*a), "warning",
                "waiting for " + a->name + " on " + a->conn->where() + " to answer: its link has been silent for "
                    + std::to_string(
                        std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - a->last_heard).count())
                    + " s; reconnecting (the agent trains on meanwhile; trying for up to "
                    + std::to_string(limit.count()) + " s)",
                o);
            a->conn->abandonLink();
            a->decoder = agents::FrameDecoder {}; // a frame cut by the silence is not resumed
            a->lost = true;
            a->lost_to_silence = true;
            a->lost_since = Clock::now();
            a->next_attempt = a->lost_since;
            a->backoff = 200ms;
            a->next_wait_line = a->lost_since + 5s;
            a->unreachable_why.clear();
            statusChanged = true;
            continue;
        }
        const std::string why = a->name + " sent nothing for " + std::to_string(heartbeatS) + " s (stalled or hung"
            + (a->relinked_after_silence ? "; its host answered, and the link to it was made again" : "") + ")";
        // Before the stall timeout: say what the others wait for, and keep every agent's last actions.
        fail(stallReported || !started ? why : reportStall(why + ": ", -1, "error", o));
        return;
    }
}

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
    // old news, and a remote agent silent for a few seconds may be behind a silent link (checkSilence's).
    std::vector<DeviceWait> heard = waits;
    std::set<int> doneDevices;
    for (const auto& a : agents)
        if (a->done)
            doneDevices.insert(a->devices.begin(), a->devices.end());
    for (auto& w : heard)
        w.busy = w.busy && !doneDevices.count(w.device) && !(remote && w.silent);
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

void RunController::Impl::flushPeriodically()
{
    // Batched, yet never more than a quarter of a second behind: a viewer of the history follows the run, and a
    // controller killed mid-run loses at most that much.
    if (spanBuffer.size() + metricBuffer.size() <= 4096 && Clock::now() - lastFlush <= 250ms)
        return;
    try {
        flush();
    } catch (const std::exception& e) {
        // Stop the agents and keep what is stored; a run that cannot be recorded failed, even while stopping.
        if (failure.empty())
            failure = std::string("cannot record the run: ") + e.what();
    }
    lastFlush = Clock::now();
}

RunOutcome RunController::Impl::finish(const RunObserver& o)
{
    if (!failure.empty())
        nameFirstCause(o);
    shutdown();
    // Whatever was already on the pipes still counts (the last batches before Done).
    for (auto& a : agents) {
        if (!a->conn || a->lost)
            continue;
        try {
            readAvailable(*a, readBuffer, o);
        } catch (const std::exception&) {
        }
    }
    if (remote)
        for (const auto& line : remote->teardown())
            logLine(-1, "info", line, o);
    for (auto& a : agents)
        a->conn.reset();

    RunOutcome out = outcome();
    logLine(-1, out.status == RunStatus::Failed ? "error" : "info",
        std::string("run ") + std::string(toString(out.status)) + (out.message.empty() ? "" : ": " + out.message), o);
    try {
        storeLastEvents();
    } catch (const std::exception& e) {
        // What could not be stored is lost, but the run still ends with a status, and says why.
        if (out.status != RunStatus::Failed)
            out.message.clear();
        out.status = RunStatus::Failed;
        out.message
            += (out.message.empty() ? "" : "; ") + std::string("cannot record the run's last events: ") + e.what();
    }
    history.finishRun(runId, out.status, out.message);
    reportAgents(o, true);
    return out;
}

void RunController::Impl::nameFirstCause(const RunObserver& o)
{
    // One failure brings others (a dead agent's peers fail their transfers): read for a moment what is still on
    // the way, so that an agent that died on its own is known, and name it first as the cause.
    const auto until = Clock::now() + 500ms;
    while (Clock::now() < until) {
        for (auto& a : agents) {
            if (!a->conn || a->lost || a->exited)
                continue;
            try {
                if (readAvailable(*a, readBuffer, o) < 0)
                    onEnd(*a, o);
            } catch (const std::exception&) {
            }
        }
        std::this_thread::sleep_for(20ms);
    }
    std::string causes;
    for (auto& a : agents)
        if (a->died && failure.rfind(a->name + " ", 0) != 0)
            causes += a->name + (a->conn->where() == "local" ? "" : " on " + a->conn->where()) + " " + a->exit_text
                + " before the run finished; then ";
    failure = causes + failure;
}

RunOutcome RunController::Impl::outcome() const
{
    RunOutcome out;
    out.run_id = runId;
    out.losses = losses;
    out.seconds = monotonicNow() - t0;
    out.spans = spanCount;
    if (!stepEnds.empty() && stepEnds.back() > 0)
        out.tokens_per_s = tokensPerStep * static_cast<double>(stepEnds.size()) / stepEnds.back();
    if (!failure.empty()) {
        out.status = RunStatus::Failed;
        out.message = failure;
    } else if (stopping) {
        out.status = RunStatus::Stopped;
        out.message = "stopped by the user";
    } else {
        out.status = RunStatus::Succeeded;
    }
    return out;
}

void RunController::Impl::storeLastEvents()
{
    // Each agent's clock as measured: the offsets every span was moved by, and their uncertainty.
    std::vector<AgentClock> clocks;
    for (std::size_t i = 0; i < agents.size(); ++i) {
        const auto& a = *agents[i];
        if (a.clock.known())
            clocks.push_back({static_cast<int>(i), a.host, a.clock.offset(), a.clock.convertedWithin(),
                static_cast<std::int64_t>(a.clock.samples())});
    }
    history.setAgentClocks(runId, clocks, request.remote ? planner::ClockDomain::Aligned : planner::ClockDomain::Host);
    flush();
}

} // namespace pw::app
