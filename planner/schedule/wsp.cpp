// SPDX-License-Identifier: MIT
// "wsp": HetPipe's execution (Park et al., ATC'20; digest §1.2.4-§1.2.6). Every pipeline of the plan is a
// virtual worker (VW) running its own minibatches with the FIFO rules of §1.2.4; the VWs synchronise through
// parameter servers under wave synchronous parallel with staleness bound D (§1.2.5).
//
// A Schedule is a static action list per device, but FIFO ("serve the F or B whose input arrived first") is a
// run-time rule. The order is therefore derived here by simulating every VW with the plan's predicted costs
// (the simulator's CostModel, link and parameter-server times, including the WSP gates), and the simulator
// replays that order with the same timing rules, so the simulated run is the FIFO run.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "../costs.h"
#include "../errors.h"
#include "../sim/link_calendar.h"
#include "../sim/simulator.h"
#include "builder.h"

namespace pw::planner {
namespace {

constexpr double kUnknown = -1.0;
constexpr double kNever = std::numeric_limits<double>::infinity();

/// One stage of one VW as the FIFO simulation sees it.
struct StageState
{
    int device = 0;
    int first = 0; ///< first stage of its pipeline
    bool is_first = false, is_last = false;
    double forward = 0, backward = 0, step = 0;
    int act_peer = -1, grad_peer = -1; ///< devices the activation goes on to / the gradient goes back to
    double ps = 0; ///< seconds of one push or pull of the partition
    double free = 0, send_free = 0;
    int next_f = 0, next_b = 0;
    int version = 0; ///< local updates applied so far
    std::vector<double> f_arrive, b_arrive, step_end; ///< per minibatch
    std::vector<int> f_version;
};

class Wsp
{
public:
    Wsp(const Plan& plan, ScheduleBuilder& builder)
        : m_plan(plan)
        , m_b(builder)
        , m_cost(CostModel::fromPlan(plan))
    {
        const int S = plan.stageCount();
        m_M = builder.totalMicrobatches();
        m_D = plan.schedule.staleness;
        m_nm = plan.effectiveConcurrentMinibatches();
        m_waves = (m_M + m_nm - 1) / m_nm;
        const auto& cost = m_cost;
        m_uplinks.resize(cost.node_links.size());
        const bool overlap = plan.schedule.overlap_communication;
        m_overlap = overlap;
        m_st.resize(S);
        for (int s = 0; s < S; ++s) {
            auto& st = m_st[s];
            const int d = plan.stages[s].devices[0];
            st.device = d;
            st.first = plan.pipelineBegin(s);
            st.is_first = plan.firstInPipeline(s);
            st.is_last = plan.lastInPipeline(s);
            st.forward = cost.forward(s, 0);
            st.backward = cost.backward(s, 0);
            st.step = cost.optimizerStepSeconds(d, s);
            if (!st.is_last)
                st.act_peer = plan.stages[s + 1].devices[0];
            if (!st.is_first)
                st.grad_peer = plan.stages[s - 1].devices[0];
            st.ps = cost.parameterServerSeconds(d, builder.weightBytes(s), plan.schedule.local_parameter_servers);
            st.f_arrive.assign(m_M, kUnknown);
            st.b_arrive.assign(m_M, kUnknown);
            st.step_end.assign(m_M, kUnknown);
            st.f_version.assign(m_M, 0);
        }
        m_waveDone.assign(std::max(1, m_waves), kUnknown);
        m_waveLast.assign(std::max(1, m_waves), 0.0);
        m_wavePushed.assign(std::max(1, m_waves), 0);
    }

    void run()
    {
        const int S = static_cast<int>(m_st.size());
        for (;;) {
            int bestStage = -1;
            bool bestBackward = false;
            double bestStart = kNever;
            for (int s = 0; s < S; ++s) {
                const auto& st = m_st[s];
                const double f = st.next_f < m_M ? forwardReady(s, st.next_f) : kUnknown;
                const double b = !st.is_last && st.next_b < st.next_f ? st.b_arrive[st.next_b] : kUnknown;
                if (f == kUnknown && b == kUnknown)
                    continue;
                // FIFO: at the time the device can start, the input that arrived first; backward on ties.
                double earliest = kNever;
                if (f != kUnknown)
                    earliest = std::min(earliest, f);
                if (b != kUnknown)
                    earliest = std::min(earliest, b);
                const double start = std::max(st.free, earliest);
                const bool backward = b != kUnknown && (f == kUnknown || b <= f);
                if (start < bestStart) {
                    bestStart = start;
                    bestStage = s;
                    bestBackward = backward;
                }
            }
            if (bestStage < 0)
                break;
            if (bestBackward)
                runBackward(bestStage, bestStart);
            else
                runForward(bestStage, bestStart);
        }
        for (int s = 0; s < S; ++s)
            if (m_st[s].next_f < m_M || (!m_st[s].is_last && m_st[s].next_b < m_M))
                throw InputError("wsp: the FIFO simulation of stage " + std::to_string(s) + " stopped at minibatch "
                    + std::to_string(m_st[s].next_f) + " (the wave gates cannot be met)");
    }

private:
    /// The wave minibatch k must have pulled before it starts: floor(p / N_m) - 2 - D with p = k + 1 (digest
    /// §1.2.5); a pull is placed before the first minibatch of each such wave only. -1: none here.
    int pullWave(int k) const
    {
        if ((k + 1) % m_nm != 0)
            return -1;
        const int w = (k + 1) / m_nm - 2 - m_D;
        return w >= 0 ? w : -1;
    }

    double forwardReady(int s, int k) const
    {
        const auto& st = m_st[s];
        double ready;
        if (st.is_first)
            ready = k < m_nm ? 0.0 : st.step_end[k - m_nm]; // admission: k - N_m has completed
        else
            ready = st.f_arrive[k];
        if (ready == kUnknown)
            return kUnknown;
        if (int w = pullWave(k); w >= 0) {
            if (m_waveDone[w] == kUnknown)
                return kUnknown;
            ready = std::max(ready, m_waveDone[w]);
        }
        return ready;
    }

    /// A send of `bytes` to device `peer` on the send lane after the compute that produced it, booking the node's
    /// uplink as the simulator does (link_calendar.h).
    double send(StageState& st, int peer, double bytes)
    {
        const double start = std::max(st.free, st.send_free);
        const double arrival = bookedArrival(m_cost, m_uplinks, st.device, peer, bytes, start);
        st.send_free = std::max(start, arrival - m_cost.link(st.device, peer).latency_s);
        if (!m_overlap)
            st.free = arrival;
        return arrival;
    }

    void emitSend(int s, ActionKind kind, int peerStage, int k, double bytes)
    {
        m_b.append(m_st[s].device, {kind, static_cast<std::int32_t>(s), k, m_st[peerStage].device, 0, -1, bytes});
    }

    void runForward(int s, double start)
    {
        auto& st = m_st[s];
        const int k = st.next_f++;
        const int d = st.device;
        if (!st.is_first)
            m_b.append(d, {ActionKind::RecvActivation, s - 1, k, m_st[s - 1].device, 0, -1, m_b.cutBytes(s - 1)});
        double t = start;
        if (int w = pullWave(k); w >= 0) {
            Action pull {ActionKind::WavePull, s, -1, -1, 0, -1, m_b.weightBytes(s)};
            pull.wave = w;
            m_b.append(d, pull);
            t += st.ps;
        }
        st.f_version[k] = st.version;
        m_b.append(d, {ActionKind::Forward, s, k, -1, st.version, -1, 0.0});
        st.free = t + st.forward;
        if (!st.is_last) {
            emitSend(s, ActionKind::SendActivation, s + 1, k, m_b.cutBytes(s));
            m_st[s + 1].f_arrive[k] = send(st, st.act_peer, m_b.cutBytes(s));
            return;
        }
        // The last partition runs F and B of a minibatch as one task (digest §1.2.4 rule 4).
        st.next_b = st.next_f;
        finishBackward(s, k, st.free);
    }

    void runBackward(int s, double start)
    {
        auto& st = m_st[s];
        const int k = st.next_b++;
        m_b.append(st.device, {ActionKind::RecvGradient, s + 1, k, m_st[s + 1].device, 0, -1, m_b.cutBytes(s)});
        finishBackward(s, k, start);
    }

    /// B(s, k) from `start`, its gradient, the local update and, at the end of a wave, the push.
    void finishBackward(int s, int k, double start)
    {
        auto& st = m_st[s];
        const int d = st.device;
        m_b.append(d, {ActionKind::Backward, s, k, -1, st.f_version[k], -1, 0.0});
        st.free = start + st.backward;
        if (!st.is_first) {
            emitSend(s, ActionKind::SendGradient, s - 1, k, m_b.cutBytes(s - 1));
            m_st[s - 1].b_arrive[k] = send(st, st.grad_peer, m_b.cutBytes(s - 1));
        }
        // Local update w_local += u_k (HetPipe applies one per minibatch, digest §1.2.4).
        st.version += 1;
        m_b.tiedAllReduce(d, s);
        m_b.append(d, {ActionKind::OptimizerStep, s, -1, -1, st.version, -1, 0.0});
        st.free += st.step;
        st.step_end[k] = st.free;
        const bool waveEnd = (k + 1) % m_nm == 0 || k + 1 == m_M;
        if (!waveEnd)
            return;
        const int w = k / m_nm;
        Action push {ActionKind::WavePush, s, -1, -1, 0, -1, m_b.weightBytes(s)};
        push.wave = w;
        m_b.append(d, push);
        const double begin = std::max(st.free, st.send_free);
        const double arrival = begin + st.ps;
        st.send_free = arrival;
        if (!m_overlap)
            st.free = arrival;
        // The wave is complete at the parameter servers when every stage of every VW has pushed it.
        m_waveLast[w] = std::max(m_waveLast[w], arrival);
        if (++m_wavePushed[w] == static_cast<int>(m_st.size()))
            m_waveDone[w] = m_waveLast[w];
    }

    const Plan& m_plan;
    ScheduleBuilder& m_b;
    CostModel m_cost;
    std::vector<LinkCalendar> m_uplinks; ///< per node, as in the simulator
    int m_M = 0, m_D = 0, m_nm = 1, m_waves = 0;
    bool m_overlap = true;
    std::vector<StageState> m_st;
    std::vector<double> m_waveDone;
    std::vector<double> m_waveLast; ///< latest push arrival so far
    std::vector<int> m_wavePushed;
};

class WspGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "wsp"; }
    std::string_view description() const override
    {
        return "HetPipe: every pipeline (virtual worker) runs FIFO pipelined model parallelism with N_m "
               "minibatches in flight; pipelines synchronise per wave through parameter servers (WSP, staleness D)";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.synchronous = false,
            .flush_per_batch = false,
            .update_per_backward = true,
            .weight_versions = WeightVersions::InFlight,
            .stash = StashDepth::InFlight,
            .in_flight_limit = InFlightLimit::ConcurrentMinibatches,
            .replicated_stages = false,
            .wave_synchronous = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        if (plan.schedule.chunks != 1)
            throw InputError({}, 0, "/schedule/chunks",
                "wsp runs one stage per device (chunks = 1), got " + std::to_string(plan.schedule.chunks));
        ScheduleBuilder builder(plan, name());
        for (int s = 0; s < plan.stageCount(); ++s)
            if (plan.stages[s].replicas() != 1)
                throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                    "wsp runs each stage on one device (HetPipe's virtual workers do not replicate stages), got "
                        + std::to_string(plan.stages[s].replicas()));
        if (plan.schedule.recompute != Recompute::None)
            throw InputError({}, 0, "/schedule/recompute", "wsp keeps activations (HetPipe does not recompute)");
        Wsp wsp(plan, builder);
        wsp.run();
        return builder.finish();
    }
};

} // namespace

const ScheduleGenerator& wspGenerator()
{
    static const WspGenerator instance;
    return instance;
}

} // namespace pw::planner
