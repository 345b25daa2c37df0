// SPDX-License-Identifier: MIT
// The run controller's agents: each agent's stream (messages, telemetry), its status, a lost link's reconnect
// and resume, and an agent's silence.
#include "controller_impl.h"

namespace pw::app {

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
            a->stale = true;
            a->relinked_at = monotonicNow() - t0;
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
        const auto limit = launcher->reconnectFor();
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

void RunController::Impl::logAgentErrors(const RunObserver& o, bool all)
{
    // Once the run is stopping (the user asked, or an agent stopped on its own), a peer's failed transfers are what
    // the stop does, not errors of their own.
    const bool aftermath = stopping || stopRequested
        || std::any_of(agents.begin(), agents.end(), [](const auto& other) { return other->stopped_alone; });
    const auto due = Clock::now() - 300ms;
    std::erase_if(pendingErrors, [&](const PendingError& e) {
        if (!all && !aftermath && e.at > due)
            return false;
        logLine(e.agent, aftermath ? "info" : "error", (aftermath ? "after the stop: " : "") + e.text, o);
        return true;
    });
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
                pendingErrors.push_back({index, msg.message, Clock::now()}); // logged by logAgentErrors
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
                if (msg.status == agents::DoneStatus::Stopped && !stopping && !stopRequested) {
                    a.stopped_alone = true; // the cause of its peers' failures: named first (nameFirstCause)
                    fail(a.name + (a.conn->where() == "local" ? "" : " on " + a.conn->where())
                        + " stopped before the run finished: " + msg.message);
                }
            } else if constexpr (std::is_same_v<T, agents::Heartbeat>) {
                // Its devices' actions as they are now, once a heartbeat sent after the reconnect comes (one queued
                // on the old link would be from before the outage).
                if (a.stale && a.clock.toController(msg.t_s) - t0 >= a.relinked_at - 1.0)
                    a.stale = false;
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
        if (liveProgram && liveMeasured.spans.size() <= kLiveDiagnosisSpans)
            liveMeasured.spans.push_back(s);
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
    // As spans arrive, not only when a loss completes a step: the losses come from the last stage, and a straggling
    // earlier stage's spans reach the controller in bursts between its stops, after the losses of the steps it slowed.
    if (!t.spans.empty())
        diagnoseLive(o);
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
            const auto limit = launcher->reconnectFor();
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

} // namespace pw::app
