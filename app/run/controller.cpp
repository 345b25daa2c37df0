// SPDX-License-Identifier: MIT
#include "controller.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
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
            statusChanged = true;
            logLine(agentIndex(*a), "info",
                "reconnected to " + a->name + " after "
                    + std::to_string(
                        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - a->lost_since).count())
                    + " ms; resuming after telemetry batch " + std::to_string(a->last_seq),
                o);
            send(*a, agents::Resume {a->last_seq});
            continue;
        }
        const auto limit = request.remote ? request.remote->reconnect_for : std::chrono::seconds {0};
        if (Clock::now() - a->lost_since > limit) {
            a->lost = false;
            a->exited = true;
            a->exit_text = "out of reach";
            fail("lost " + a->name + " on " + a->conn->where() + " and could not reconnect within "
                + std::to_string(limit.count()) + " s" + (why.empty() ? "" : ": " + why));
            continue;
        }
        a->next_attempt = Clock::now() + a->backoff;
        a->backoff = std::min<std::chrono::milliseconds>(a->backoff * 2, 2000ms);
    }
}

void RunController::Impl::handle(AgentLink& a, agents::Message&& m, const RunObserver& o)
{
    a.last_heard = Clock::now();
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
                    o.progress({runId, step + 1, request.steps, loss, tps, elapsed});
                if (!std::isfinite(loss) && request.stop_on_nonfinite)
                    fail("the loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step "
                        + std::to_string(step + 1) + " of " + std::to_string(request.steps)
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
        p.schedule.iterations = std::min(req.steps, 2); // the agents generate the rest (engine::runProgram)
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
    out.predicted_steps = std::min(req.steps, kPredictedSteps);
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
    auto& req = s.request;
    auto& sim = checked.prediction;
    const std::string& noPrediction = checked.no_prediction;
    const auto machine = MachineResources::thisMachine();
    const auto& arch = *req.plan.model->architecture;
    s.microbatches = req.plan.microbatchesPerStep(); // every pipeline (virtual worker) takes its own
    const int b = req.plan.schedule.microbatch_size > 0 ? req.plan.schedule.microbatch_size : arch.microbatch;
    s.tokensPerStep = static_cast<double>(s.microbatches) * b * arch.sequence;

    // One agent per device, in device order.
    std::set<int> devices;
    for (const auto& st : req.plan.stages)
        devices.insert(st.devices.begin(), st.devices.end());
    const int threads = localRunLoad(req, nullptr, machine).threads_per_agent;

    NewRun nr;
    nr.plan_json = planner::toJson(req.plan).dump();
    nr.cluster_json = planner::toJson(*req.plan.cluster).dump();
    nlohmann::json hosts = nlohmann::json::array();
    for (int d : devices) {
        const auto& node = req.plan.cluster->nodes[static_cast<std::size_t>(req.plan.cluster->device(d).node)];
        if (req.remote)
            hosts.push_back({{"device", d}, {"host", node.host.empty() ? node.name : node.host}, {"node", node.name},
                {"launcher", "ssh"}});
        else
            hosts.push_back({{"device", d}, {"host", "localhost"}, {"launcher", "local"}});
    }
    nr.hosts_json = hosts.dump();
    nr.label = req.plan_label;
    nr.steps_planned = req.steps;
    s.runId = s.history.createRun(nr);
    RunOutcome out;
    out.run_id = s.runId;
    try {
        if (!sim)
            throw std::runtime_error(noPrediction);
        sim->timeline.run_id = s.runId;
        s.history.savePredicted(s.runId, sim->timeline, checked.predicted_steps);
        s.deviceNames = sim->timeline.device_names;
    } catch (const std::exception& e) {
        s.logBuffer.push_back({0, -1, -1, "warning", std::string("no prediction: ") + e.what()});
    }

    for (int d : devices) {
        auto a = std::make_unique<AgentLink>();
        a->name = "agent " + std::to_string(d);
        a->devices = {d};
        s.agents.push_back(std::move(a));
    }
    if (o.created)
        o.created(s.runId);
    std::signal(SIGPIPE, SIG_IGN);
    // The agents write their stages into the checkpoint in place: an old file must not leave its bytes there.
    if (!req.save_checkpoint.empty()) {
        std::error_code ec;
        std::filesystem::remove(req.save_checkpoint, ec);
        if (ec)
            s.fail(req.save_checkpoint + ": cannot replace the checkpoint: " + ec.message());
    }
    s.t0 = monotonicNow();
    try {
        if (req.remote) {
            // Over SSH: sessions to the nodes, the run directories, the agent and the plan uploaded there.
            s.remote
                = std::make_unique<RemoteDeployment>(*req.plan.cluster, s.runId, *req.remote, req.agent_executable);
            s.remote->prepare(std::vector<int>(devices.begin(), devices.end()), nr.plan_json,
                [&](const std::string& line) { s.logLine(-1, "info", line, o); });
        }
        for (auto& a : s.agents) {
            a->conn = s.remote ? s.remote->startAgent(a->devices.front()) : startLocalAgent(req.agent_executable);
            a->last_heard = Clock::now(); // silence counts from its start (an upload before may take a while)
        }
    } catch (const std::exception& e) {
        s.fail(e.what());
    }
    // The key that proves the agents' Gloo connections to each other: new per run, sent only over the agents'
    // channels (pipes, SSH), never stored or logged (docs/execution.md, threat model).
    std::vector<std::uint8_t> glooSecret(32);
    if (RAND_bytes(glooSecret.data(), static_cast<int>(glooSecret.size())) != 1)
        s.fail("no random bytes for the run's Gloo key (OpenSSL RAND_bytes)");
    for (auto& a : s.agents) {
        if (!a->conn || !s.failure.empty()) // a run without its key sends no plan: the agents are stopped below
            continue; // not started: the run failed before (an unreachable node)
        agents::RunSpec spec;
        spec.gloo_secret = glooSecret;
        spec.run_id = s.runId;
        spec.agent = a->name;
        spec.plan = planner::toJson(req.plan);
        spec.devices = a->devices;
        spec.steps = req.steps;
        spec.data = req.data;
        spec.init_checkpoint = req.init_checkpoint;
        spec.save_checkpoint = req.save_checkpoint;
        spec.lr = req.lr;
        spec.weight_decay = req.weight_decay;
        spec.warmup_steps = req.warmup_steps;
        spec.cosine = req.cosine;
        spec.seed = req.seed;
        spec.threads = threads;
        spec.transport = agents::Transport::Gloo;
        spec.telemetry_batch = req.telemetry_batch;
        assignDevices(spec, req.plan); // the node's GPU for each device; none on a CPU node
        if (s.remote) {
            spec.journal_path = s.remote->journalPath(a->devices.front());
            spec.gloo_host = s.remote->glooHost(a->devices.front());
        }
        s.send(*a, spec);
    }
    auto lastFlush = Clock::now();
    std::vector<char> buffer(1 << 16);
    while (s.failure.empty()) {
        if (s.stopRequested && !s.stopping) {
            s.stopping = true;
            break;
        }
        s.probeClocks();
        // Start once every agent has said hello and its clock is known (a few round trips: the first spans are
        // then already on the controller's clock).
        if (!s.started && std::all_of(s.agents.begin(), s.agents.end(), [](auto& a) {
                return a->hello && a->clock.samples() >= kClockSamplesBeforeStart;
            })) {
            s.started = true;
            s.statusChanged = true;
            s.t0 = monotonicNow();
            for (auto& a : s.agents)
                s.send(*a, agents::Start {});
        }
        if (std::all_of(s.agents.begin(), s.agents.end(), [](auto& a) { return a->done; }))
            break;
        std::vector<pollfd> fds;
        bool buffered = false;
        for (auto& a : s.agents) {
            const bool live = a->conn && !a->lost && !a->exited;
            fds.push_back({live ? a->conn->pollFd() : -1, POLLIN, 0});
            buffered = buffered || (live && a->conn->buffersInput());
        }
        const int ready = poll(fds.data(), fds.size(), buffered ? 20 : 100);
        if (ready < 0 && errno != EINTR) {
            s.fail(std::string("poll: ") + std::strerror(errno));
            break;
        }
        for (std::size_t i = 0; i < fds.size(); ++i) {
            AgentLink& a = *s.agents[i];
            if (!a.conn || a.lost || a.exited)
                continue;
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !a.conn->buffersInput())
                continue;
            try {
                if (s.readAvailable(a, buffer, o) < 0) {
                    if (!a.conn->canReconnect())
                        a.decoder.finish(); // a local agent that died mid-frame; a dropped link is resumed
                    s.onEnd(a, o);
                }
            } catch (const agents::ProtocolError& e) {
                s.fail(a.name + ": malformed telemetry: " + e.what());
            }
        }
        s.reconnectLost(o);
        for (auto& a : s.agents)
            if (!a->done && !a->exited && !a->lost && Clock::now() - a->last_heard > req.heartbeat_timeout)
                s.fail(a->name + " sent nothing for "
                    + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(req.heartbeat_timeout).count())
                    + " s (stalled or hung)");
        // Batched, yet never more than a quarter of a second behind: a viewer of the history follows the run,
        // and a controller killed mid-run loses at most that much.
        s.reportAgents(o);
        if (s.spanBuffer.size() + s.metricBuffer.size() > 4096 || Clock::now() - lastFlush > 250ms) {
            try {
                s.flush();
            } catch (const std::exception& e) {
                // Stop the agents and keep what is stored; a run that cannot be recorded failed, even while stopping.
                if (s.failure.empty())
                    s.failure = std::string("cannot record the run: ") + e.what();
            }
            lastFlush = Clock::now();
        }
    }
    if (!s.failure.empty()) {
        // One failure brings others (a dead agent's peers fail their transfers): read for a moment what is still
        // on the way, so that an agent that died on its own is known, and name it first as the cause.
        const auto until = Clock::now() + 500ms;
        while (Clock::now() < until) {
            for (auto& a : s.agents) {
                if (!a->conn || a->lost || a->exited)
                    continue;
                try {
                    if (s.readAvailable(*a, buffer, o) < 0)
                        s.onEnd(*a, o);
                } catch (const std::exception&) {
                }
            }
            std::this_thread::sleep_for(20ms);
        }
        std::string causes;
        for (auto& a : s.agents)
            if (a->died && s.failure.rfind(a->name + " ", 0) != 0)
                causes += a->name + (a->conn->where() == "local" ? "" : " on " + a->conn->where()) + " " + a->exit_text
                    + " before the run finished; then ";
        s.failure = causes + s.failure;
    }
    s.shutdown();
    // Whatever was already on the pipes still counts (the last batches before Done).
    for (auto& a : s.agents) {
        if (!a->conn || a->lost)
            continue;
        try {
            s.readAvailable(*a, buffer, o);
        } catch (const std::exception&) {
        }
    }
    if (s.remote)
        for (const auto& line : s.remote->teardown())
            s.logLine(-1, "info", line, o);
    for (auto& a : s.agents)
        a->conn.reset();

    out.losses = s.losses;
    out.seconds = monotonicNow() - s.t0;
    out.spans = s.spanCount;
    if (!s.stepEnds.empty() && s.stepEnds.back() > 0)
        out.tokens_per_s = s.tokensPerStep * static_cast<double>(s.stepEnds.size()) / s.stepEnds.back();
    if (!s.failure.empty()) {
        out.status = RunStatus::Failed;
        out.message = s.failure;
    } else if (s.stopping) {
        out.status = RunStatus::Stopped;
        out.message = "stopped by the user";
    } else {
        out.status = RunStatus::Succeeded;
    }
    s.logLine(-1, out.status == RunStatus::Failed ? "error" : "info",
        std::string("run ") + std::string(toString(out.status)) + (out.message.empty() ? "" : ": " + out.message), o);
    try {
        // Each agent's clock as measured: the offsets every span was moved by, and their uncertainty.
        std::vector<AgentClock> clocks;
        for (std::size_t i = 0; i < s.agents.size(); ++i) {
            const auto& a = *s.agents[i];
            if (a.clock.known())
                clocks.push_back({static_cast<int>(i), a.host, a.clock.offset(), a.clock.uncertainty(),
                    static_cast<std::int64_t>(a.clock.samples())});
        }
        s.history.setAgentClocks(
            s.runId, clocks, req.remote ? planner::ClockDomain::Aligned : planner::ClockDomain::Host);
        s.flush();
    } catch (const std::exception& e) {
        // What could not be stored is lost, but the run still ends with a status, and says why.
        if (out.status != RunStatus::Failed)
            out.message.clear();
        out.status = RunStatus::Failed;
        out.message
            += (out.message.empty() ? "" : "; ") + std::string("cannot record the run's last events: ") + e.what();
    }
    s.history.finishRun(s.runId, out.status, out.message);
    s.reportAgents(o, true);
    return out;
}

} // namespace pw::app
