// SPDX-License-Identifier: MIT
// Dataflow execution of a Schedule: each device runs its list in order; a blocked device waits on the
// send, or the all-reduce, that releases it, so every action is handled once (O(actions)).
#include "simulator.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <string>

#include "../costs.h"
#include "../errors.h"
#include "../schedule/generator.h"
#include "device_memory.h"
#include "link_calendar.h"
#include "model_parallel_groups.h"
#include "shared_gpus.h"
#include "simulation_metrics.h"

namespace pw::planner {
namespace {

constexpr double kUnset = -1.0;

struct Transfer
{
    double start = kUnset;
    double arrival = kUnset;
};

struct Collective
{
    int arrived = 0;
    double ready = 0;
    double start = 0;
    double end = kUnset;
    int stage = -2; ///< the stage whose gradients the members sum (-1: another group); -2 until the first arrives
    std::vector<double> bucket_ready; ///< overlapped all-reduce: when each bucket is final on every member
};

/// The last backward of a (device, stage): its end and its backward part (without recomputation).
struct LastBackward
{
    double end = kUnset;
    double backward_s = 0;
};

struct DeviceState
{
    std::size_t pc = 0;
    double compute_free = 0;
    double compute_start = 0; ///< start of the latest compute op (streamed transfers begin there)
    double send_free = 0;
    bool registered = false; ///< has announced itself to the all-reduce it is waiting on
    bool queued = false;
    /// (group, all-reduces reached so far) of the groups it has reached: a device is in a few of the groups, so a
    /// short list rather than one entry per group (thousands of devices x thousands of groups).
    std::vector<std::pair<int, int>> collective_seq;
    double busy = 0;
    double collective_wait = 0; ///< compute lane idle until an all-reduce it waits on ends
};

/// HetPipe's wave synchronous parallel: how many pushes of a wave the schedule holds, how many have
/// arrived at the parameter servers and when the last did, and the devices waiting to pull it.
struct Wave
{
    int expected = 0;
    int pushed = 0;
    double complete = 0;
    std::vector<int> waiters;
};

/// Weight versions of one (device, stage): which are alive, and the last action that uses each. A version
/// is freed once it is superseded and its last user has run (weight stashing and 2BW's shadow version
/// both follow from this).
struct VersionBook
{
    std::vector<std::int64_t> last_use; ///< action index of the last F/B using the version, -1 when none
    std::vector<bool> alive;
    int latest = 0;
};

/// The traits of the schedule's kind; a schedule of an unknown kind (read from a file) runs as a flushed one.
ScheduleTraits traitsOf(const Schedule& schedule)
{
    const auto* traits = findScheduleTraits(schedule.kind);
    return traits ? *traits : ScheduleTraits {};
}

class Simulation
{
public:
    /// `leaders`: `schedule` holds the programs of the model-parallel groups' first devices alone
    /// (groupLeaderSchedule), every member running its leader's; else the groups run once where the schedule allows.
    Simulation(const Plan& plan, const Schedule& schedule, const CostModel& cost, const SimulationOptions& options,
        bool leaders = false)
        : m_plan(plan)
        , m_s(schedule)
        , m_o(options)
        , m_cost(cost)
        , m_traits(traitsOf(schedule))
        , m_sharedGpus(plan)
    {
        const int D = schedule.num_devices;
        if (D != plan.cluster->deviceCount())
            throw InputError("the schedule has " + std::to_string(D) + " devices, the plan's cluster "
                + std::to_string(plan.cluster->deviceCount()));
        if (schedule.num_stages != plan.stageCount())
            throw InputError("the schedule has " + std::to_string(schedule.num_stages) + " stages, the plan "
                + std::to_string(plan.stageCount()));
        cost.check(plan, D);
        m_groups = leaders ? groupsOf(plan, D) : modelParallelGroups(plan, schedule, cost);
        m_uplinks.resize(m_cost.uplinkCount());
        m_collectiveFree.assign(D, 0.0);
        const int p = plan.pipelineDepth();
        m_replicaOf.assign(D, -1);
        m_tpRankOf.assign(D, 0);
        const int tp = plan.modelParallel(); // a group's ranks each have their own transfer lanes
        for (int s = 0; s < p; ++s)
            for (int r = 0; r < plan.stages[s].replicas(); ++r) {
                m_replicaOf[plan.stages[s].devices[r]] = r;
                m_tpRankOf[plan.stages[s].devices[r]] = r % tp;
            }
        m_transfers.assign(
            static_cast<std::size_t>(2) * tp * schedule.num_stages * std::max(1, schedule.microbatches), {});
        m_waiter.assign(m_transfers.size(), -1);
        m_devices.assign(D, {});
        m_collectives.resize(schedule.groups.size());
        for (const auto& group : schedule.groups) // who reaches each all-reduce: with groups run once, their leaders
            m_collectiveMembers.push_back(static_cast<int>(
                std::count_if(group.devices.begin(), group.devices.end(), [this](int d) { return m_groups.runs(d); })));
        // Per-(device, stage) books only for the pairs the plan has (a stage's replicas in order), not devices x
        // stages: at 16,384 devices and a hundred stages that table alone was a gigabyte.
        m_slotOffset.assign(plan.stageCount() + 1, 0);
        for (int s = 0; s < plan.stageCount(); ++s)
            m_slotOffset[s + 1] = m_slotOffset[s] + plan.stages[s].devices.size();
        m_books.resize(m_slotOffset.back());
        m_lastBackward.assign(m_slotOffset.back(), {});
        m_waves.resize(std::max(1, schedule.microbatches));
        for (int d = 0; d < D; ++d) {
            const auto& list = schedule.devices[d];
            for (std::size_t i = 0; i < list.size(); ++i) {
                const auto& a = list[i];
                if (isWaveSync(a.kind)) {
                    if (a.wave < 0 || a.wave >= static_cast<int>(m_waves.size()) || a.stage < 0
                        || a.stage >= schedule.num_stages)
                        throw InputError(plan.cluster->deviceName(d) + ": " + actionLabel(a)
                            + " names a wave or stage outside the schedule");
                    if (a.kind == ActionKind::WavePush)
                        m_waves[a.wave].expected += 1;
                    continue;
                }
                const bool computes = a.kind == ActionKind::Forward || a.kind == ActionKind::Backward
                    || a.kind == ActionKind::BackwardInput || a.kind == ActionKind::BackwardWeight;
                if (!computes || a.stage < 0 || a.stage >= schedule.num_stages || a.weight_version < 0)
                    continue;
                const std::size_t at = slot(d, a.stage);
                if (at == kNoSlot)
                    continue; // a stage the device does not hold fails when the action runs (replica())
                auto& uses = m_books[at].last_use;
                if (static_cast<int>(uses.size()) <= a.weight_version)
                    uses.resize(a.weight_version + 1, -1);
                uses[a.weight_version] = static_cast<std::int64_t>(i);
            }
        }
        m_lastStageDone.assign(std::max(1, schedule.microbatches), kUnset);
        m_result.timeline.source = Timeline::Source::Predicted;
        for (int d = 0; d < D; ++d)
            m_result.timeline.device_names.push_back(plan.cluster->deviceName(d));
        if (m_o.record_spans)
            m_result.timeline.spans.reserve(schedule.actionCount());
    }

    SimulationResult run()
    {
        const int D = m_s.num_devices;
        std::size_t total = 0; // a group's first device runs for all its members
        for (int d = 0; d < D; ++d)
            if (m_groups.runs(d))
                total += m_s.devices[d].size();
        initialMemory();
        for (int d = D - 1; d >= 0; --d)
            if (m_groups.runs(d))
                push(d);
        while (!m_ready.empty()) {
            int d = m_ready.back();
            m_ready.pop_back();
            m_devices[d].queued = false;
            advance(d);
        }
        if (m_o.stop.stop_requested())
            throw Cancelled();
        std::size_t done = 0;
        for (int d = 0; d < D; ++d)
            if (m_groups.runs(d))
                done += m_devices[d].pc;
        if (done != total)
            throw InputError(deadlockMessage());
        m_result.simulated_actions = total;
        copyToMembers();
        if (m_o.record_memory) {
            auto& mem = m_result.timeline.counter(kMemoryCounter, "B").samples;
            std::stable_sort(mem.begin(), mem.end(),
                [](const CounterSample& a, const CounterSample& b) { return a.device < b.device; });
        }
        metrics();
        return std::move(m_result);
    }

private:
    std::size_t transferKey(int d, const Action& a, bool gradient) const
    {
        if (a.stage < 0 || a.stage >= m_s.num_stages || a.microbatch < 0
            || a.microbatch >= std::max(1, m_s.microbatches) || a.peer < 0 || a.peer >= m_s.num_devices)
            throw InputError(m_plan.cluster->deviceName(d) + ": " + actionLabel(a)
                + " names a stage, microbatch or peer outside the schedule");
        // Every tensor-parallel rank moves its own slice: one transfer slot per (rank, direction, stage, mb).
        const std::size_t lane = static_cast<std::size_t>(m_tpRankOf[d]) * 2 + (gradient ? 1 : 0);
        return (lane * m_s.num_stages + a.stage) * std::max(1, m_s.microbatches) + a.microbatch;
    }

    void push(int d)
    {
        if (!m_devices[d].queued) {
            m_devices[d].queued = true;
            m_ready.push_back(d);
        }
    }

    double transferArrival(int a, int b, double bytes, double start)
    {
        return bookedArrival(m_cost, m_uplinks, a, b, bytes, start);
    }

    /// An overlapped all-reduce: when each bucket of `stage` is final on device d (from its last backward of the
    /// stage, and not before d's previous all-reduce has left the link).
    void noteBuckets(Collective& c, int d, int stage) const
    {
        const auto& buckets = m_cost.stage_buckets[stage];
        if (c.bucket_ready.empty())
            c.bucket_ready.assign(buckets.size(), 0.0);
        const std::size_t at = slot(d, stage);
        const auto& last = at == kNoSlot ? LastBackward {} : m_lastBackward[at];
        for (std::size_t j = 0; j < buckets.size(); ++j) {
            const double ready = last.end == kUnset ? m_devices[d].compute_free
                                                    : last.end - (1.0 - buckets[j].ready_fraction) * last.backward_s;
            c.bucket_ready[j] = std::max({c.bucket_ready[j], ready, m_collectiveFree[d]});
        }
    }

    /// Start and end of an all-reduce of `bytes` whose last member has arrived; `stage` is the stage whose replicas
    /// sum their gradients, -1 for another group (tied weights), which is charged as itself and overlaps nothing.
    void scheduleAllReduce(Collective& c, const std::vector<int>& group, int stage, double bytes) const
    {
        // A stand-in group (CostModel::stage_rings) is charged as the real one: its members and its link.
        const bool standIn = stage >= 0 && static_cast<std::size_t>(stage) < m_cost.stage_rings.size()
            && m_cost.stage_rings[stage].members > 0;
        const int n = standIn ? m_cost.stage_rings[stage].members : static_cast<int>(group.size());
        const LinkCost link = standIn ? m_cost.stage_rings[stage].link : m_cost.groupLink(group);
        // With the parameters' all-gather under the next forward, a stage's sum shows its reduce-scatter only; with
        // FSDP the gradients were reduce-scattered microbatch by microbatch (in B) and nothing is left to move.
        const double half = stage >= 0 && m_cost.zero_sum_after_microbatches ? 0.0
            : stage >= 0 && m_cost.overlap_param_gather                      ? 0.5
                                                                             : 1.0;
        // HSDP: that sum inside each shard group of s (on its own link), then each member's 1/s shard all-reduced
        // across the n / s groups (on the whole group's slowest link). Without it s = n: one ring.
        const int s = stage >= 0 && m_cost.shard_group > 0 && m_cost.shard_group < n ? m_cost.shard_group : n;
        const int across = n / s;
        const LinkCost inner = s == n ? link
            : standIn                 ? m_cost.stage_rings[stage].shard_link
                                      : m_cost.groupLink({group.begin(), group.begin() + s});
        const auto wire = [&](double b) {
            return half * 2.0 * (s - 1) / s * inner.wireSeconds(b)
                + (across > 1 ? 2.0 * (across - 1) / across * link.wireSeconds(b / s) : 0.0);
        };
        const double latency = half * 2.0 * (s - 1) * inner.latency_s + 2.0 * (across - 1) * link.latency_s;
        if (!overlapsAllReduce(stage) || n < 2) {
            c.start = c.ready;
            c.end = c.ready + (n < 2 ? 0.0 : latency + wire(bytes));
            return;
        }
        // Buckets follow each other on the ring; the latency steps are paid once, with the first bucket.
        const auto& buckets = m_cost.stage_buckets[stage];
        double t = c.bucket_ready[0] + latency;
        for (std::size_t j = 0; j < buckets.size(); ++j)
            t = std::max(t, c.bucket_ready[j]) + wire(bytes * buckets[j].bytes_fraction);
        c.start = c.bucket_ready[0];
        c.end = t;
    }

    bool overlapsAllReduce(int stage) const
    {
        return stage >= 0 && m_cost.overlap_gradient_allreduce && !m_cost.stage_buckets.empty()
            && !m_cost.stage_buckets[stage].empty();
    }

    void span(int d, Lane lane, const Action& a, std::size_t index, double t0, double t1)
    {
        if (m_o.record_spans)
            m_result.timeline.spans.push_back(
                {d, lane, a.kind, a.stage, a.microbatch, static_cast<std::int32_t>(index), t0, t1, a.peer});
    }

    void initialMemory()
    {
        // Every stage a device holds: weights (version 0), gradients and optimizer state.
        for (int s = 0; s < m_plan.stageCount(); ++s) {
            for (std::size_t r = 0; r < m_plan.stages[s].devices.size(); ++r) {
                const int d = m_plan.stages[s].devices[r];
                if (!m_groups.runs(d))
                    continue; // copyToMembers
                auto& book = m_books[m_slotOffset[s] + r];
                book.alive.assign(1, true);
                if (book.last_use.empty())
                    book.last_use.assign(1, -1);
                m_memory.version(d, +1);
                m_memory.change(
                    d, 0, m_cost.residentWeightBytes(s) + m_cost.gradientBytes(s) + m_cost.stage_optimizer_bytes[s]);
            }
        }
    }

    static constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

    /// Index of (device d, stage) in the per-(stage, replica) tables; kNoSlot when d does not hold the stage.
    std::size_t slot(int d, int stage) const
    {
        if (stage < 0 || stage >= m_plan.stageCount())
            return kNoSlot;
        const auto& devices = m_plan.stages[stage].devices;
        const int r = m_replicaOf[d];
        if (r >= 0 && r < static_cast<int>(devices.size()) && devices[r] == d)
            return m_slotOffset[stage] + r;
        const auto it = std::find(devices.begin(), devices.end(), d); // a virtual stage in another order
        return it == devices.end() ? kNoSlot : m_slotOffset[stage] + (it - devices.begin());
    }

    /// The slot of a (device, stage) that replica() has checked: the device is the stage's replica m_replicaOf[d].
    std::size_t heldSlot(int d, int stage) const { return m_slotOffset[stage] + m_replicaOf[d]; }

    /// The version book of a (device, stage) the device holds (replica() has checked it).
    VersionBook& book(int d, int stage) { return m_books[heldSlot(d, stage)]; }

    void useVersion(int d, const Action& a, double t, bool finished)
    {
        auto& b = book(d, a.stage);
        const int v = a.weight_version;
        if (v < 0 || v >= static_cast<int>(b.alive.size()) || !b.alive[v])
            throw InputError(m_plan.cluster->deviceName(d) + ": " + actionLabel(a) + " uses weight version "
                + std::to_string(v) + ", which does not exist at that point");
        if (finished && v != b.latest && b.last_use[v] == static_cast<std::int64_t>(m_devices[d].pc))
            freeVersion(d, a.stage, v, t);
    }

    void freeVersion(int d, int stage, int v, double t)
    {
        auto& b = book(d, stage);
        b.alive[v] = false;
        m_memory.version(d, -1);
        m_memory.change(d, t, -m_cost.stage_weight_bytes[stage]);
    }

    void newVersion(int d, const Action& a, double t)
    {
        auto& b = book(d, a.stage);
        const int v = a.weight_version;
        if (v <= b.latest)
            throw InputError(m_plan.cluster->deviceName(d) + ": optimizer step of stage " + std::to_string(a.stage)
                + " produces version " + std::to_string(v) + " after version " + std::to_string(b.latest));
        if (static_cast<int>(b.last_use.size()) <= v)
            b.last_use.resize(v + 1, -1);
        b.alive.resize(v + 1, false);
        const int old = b.latest;
        // The update writes the new version over the old one when no later action needs the old one.
        if (b.last_use[old] < static_cast<std::int64_t>(m_devices[d].pc))
            freeVersion(d, a.stage, old, t);
        b.alive[v] = true;
        b.latest = v;
        m_memory.version(d, +1);
        m_memory.change(d, t, m_cost.stage_weight_bytes[a.stage]);
    }

    double weightGradientBytes(int stage) const
    {
        const auto& bytes = m_cost.stage_weight_gradient_bytes;
        return bytes.empty() ? 0.0 : bytes[static_cast<std::size_t>(stage)];
    }

    double stash(int stage) const { return m_cost.keptBytes(stage); }

    /// Runs device d until it finishes or blocks.
    void advance(int d)
    {
        auto& dev = m_devices[d];
        const auto& list = m_s.devices[d];
        while (dev.pc < list.size()) {
            if (!execute(d, list[dev.pc]))
                return; // blocked: whoever releases it pushes d again
            ++dev.pc;
            if ((++m_executed & 0xfff) == 0 && m_o.stop.stop_requested())
                throw Cancelled();
        }
    }

    /// Executes action `a` of device d; false when it must wait for another device.
    bool execute(int d, const Action& a)
    {
        switch (a.kind) {
        case ActionKind::Forward:
            forward(d, a);
            return true;
        case ActionKind::BackwardInput:
            backwardInput(d, a);
            return true;
        case ActionKind::BackwardWeight:
            backwardWeight(d, a);
            return true;
        case ActionKind::Backward:
            backward(d, a);
            return true;
        case ActionKind::OptimizerStep:
            optimizerStep(d, a);
            return true;
        case ActionKind::SendActivation:
        case ActionKind::SendGradient:
            send(d, a);
            return true;
        case ActionKind::RecvActivation:
        case ActionKind::RecvGradient:
            return receive(d, a);
        case ActionKind::WavePush:
            wavePush(d, a);
            return true;
        case ActionKind::WavePull:
            return wavePull(d, a);
        case ActionKind::AllReduce:
            return allReduce(d, a);
        }
        return true;
    }

    void forward(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        const int r = replica(d, a);
        const auto [t0, t1] = occupy(d, dev.compute_free, m_cost.forward(a.stage, r));
        useVersion(d, a, t0, false);
        m_memory.change(d, t0, stash(a.stage));
        m_memory.stash(d, +1);
        compute(d, a, t0, t1);
    }

    void backward(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        const int r = replica(d, a);
        const auto [t0, t1] = occupy(d, dev.compute_free, m_cost.backward(a.stage, r) + m_cost.recompute(a.stage, r));
        // Recomputation's rebuilt activations and one layer's activation gradients at a time live during it.
        const auto& gradients = m_cost.stage_backward_working_bytes;
        const double working = m_cost.recomputeWorkingBytes(a.stage)
            + (gradients.empty() ? 0.0 : gradients[static_cast<std::size_t>(a.stage)]);
        if (working > 0) {
            m_memory.change(d, t0, working);
            m_memory.change(d, t1, -working);
        }
        compute(d, a, t0, t1);
        m_lastBackward[heldSlot(d, a.stage)] = {t1, m_cost.backward(a.stage, r)};
        m_memory.change(d, t1, -stash(a.stage));
        m_memory.stash(d, -1);
        useVersion(d, a, t1, true);
        lastStageDone(a, t1);
    }

    // A split backward (zero-bubble schedules). I computes the input gradient, which the previous stage waits for;
    // W, later, the weight gradient. Memory: W needs the layers' inputs, so the whole stash stays until W ends (as
    // in Qi et al.'s memory accounting), and the output gradients I leaves behind (the stage's weight-gradient
    // bytes, the paper's M_W), held from the end of the I to the end of the W; with recomputation I recomputes the
    // forward and its activations live until W ends.
    void backwardInput(int d, const Action& a)
    {
        const int r = replica(d, a);
        const auto [t0, t1]
            = occupy(d, m_devices[d].compute_free, m_cost.backwardInput(a.stage, r) + m_cost.recompute(a.stage, r));
        if (const double working = m_cost.recomputeWorkingBytes(a.stage); working > 0)
            m_memory.change(d, t0, working);
        compute(d, a, t0, t1);
        if (const double kept = weightGradientBytes(a.stage); kept > 0)
            m_memory.change(d, t1, kept);
        useVersion(d, a, t1, true);
        lastStageDone(a, t1);
    }

    void backwardWeight(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        const int r = replica(d, a);
        const auto [t0, t1] = occupy(d, dev.compute_free, m_cost.backwardWeight(a.stage, r));
        compute(d, a, t0, t1);
        // The stage's gradients are final only after its last W: the all-reduce's buckets wait for it.
        m_lastBackward[heldSlot(d, a.stage)] = {t1, m_cost.backwardWeight(a.stage, r)};
        if (const double working = m_cost.recomputeWorkingBytes(a.stage); working > 0)
            m_memory.change(d, t1, -working);
        if (const double kept = weightGradientBytes(a.stage); kept > 0)
            m_memory.change(d, t1, -kept);
        m_memory.change(d, t1, -stash(a.stage));
        m_memory.stash(d, -1);
        useVersion(d, a, t1, true);
    }

    void lastStageDone(const Action& a, double t)
    {
        if (a.stage == m_s.num_stages - 1 && a.microbatch >= 0
            && a.microbatch < static_cast<int>(m_lastStageDone.size()))
            m_lastStageDone[a.microbatch] = t;
    }

    void optimizerStep(int d, const Action& a)
    {
        replica(d, a);
        const auto [t0, t1] = occupy(d, m_devices[d].compute_free, m_cost.optimizerStepSeconds(d, a.stage));
        compute(d, a, t0, t1);
        newVersion(d, a, t1);
        // The k-th optimizer step of a (device, stage) closes its batch k: a schedule that flushes every batch ends
        // the batch when the last of them ends (after its last W and its all-reduces), not at the last backward.
        const int batch = m_stepsDone[{d, a.stage}]++;
        if (batch >= static_cast<int>(m_batchStepEnds.size()))
            m_batchStepEnds.resize(static_cast<std::size_t>(batch) + 1, kUnset);
        auto& end = m_batchStepEnds[static_cast<std::size_t>(batch)];
        end = end == kUnset ? t1 : std::max(end, t1);
    }

    void send(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        const bool overlap = m_plan.schedule.overlap_communication;
        const bool streamed = m_traits.streams_transfers;
        const std::size_t key = transferKey(d, a, a.kind == ActionKind::SendGradient);
        auto& tr = m_transfers[key];
        // BaPipe's asynchronous mode (streamed): the output leaves while the op producing it runs; the last byte
        // leaves at max(op end, start + bytes / bandwidth). Never blocks the compute lane.
        const double start
            = streamed ? std::max(dev.compute_start, dev.send_free) : std::max(dev.compute_free, dev.send_free);
        double arrival = transferArrival(d, a.peer, a.bytes, start);
        if (m_groups.active()) // every member's slice on its own link; the group goes on with the last
            for (int j = 1; j < m_groups.size; ++j)
                arrival = std::max(
                    arrival, transferArrival(m_groups.member(d, j), m_groups.member(a.peer, j), a.bytes, start));
        if (streamed)
            arrival = std::max(arrival, dev.compute_free + m_cost.transferSeconds(d, a.peer, 0));
        tr.start = start;
        tr.arrival = arrival;
        const double occupied = a.bytes > 0 ? arrival - m_cost.link(d, a.peer).latency_s : start;
        dev.send_free = overlap || streamed ? std::max(start, occupied) : arrival;
        if (!overlap && !streamed)
            dev.compute_free = arrival;
        span(d, Lane::Send, a, dev.pc, start, arrival);
        int& waiter = m_waiter[key];
        if (waiter >= 0) {
            push(waiter);
            waiter = -1;
        }
    }

    bool receive(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        const std::size_t key = transferKey(d, a, a.kind == ActionKind::RecvGradient);
        const auto& tr = m_transfers[key];
        if (tr.arrival == kUnset) {
            m_waiter[key] = d;
            return false;
        }
        const double t0 = std::max(dev.compute_free, tr.start);
        if (tr.arrival > dev.compute_free)
            span(d, Lane::Recv, a, dev.pc, t0, tr.arrival);
        dev.compute_free = std::max(dev.compute_free, tr.arrival);
        return true;
    }

    /// HetPipe: the partition's aggregated update goes to the parameter servers on the send lane.
    void wavePush(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        const double start = std::max(dev.compute_free, dev.send_free);
        const double arrival
            = start + m_cost.parameterServerSeconds(d, a.bytes, m_plan.schedule.local_parameter_servers);
        dev.send_free = arrival;
        if (!m_plan.schedule.overlap_communication)
            dev.compute_free = arrival;
        span(d, Lane::Send, a, dev.pc, start, arrival);
        auto& w = m_waves[a.wave];
        w.pushed += 1;
        w.complete = std::max(w.complete, arrival);
        if (w.pushed == w.expected) {
            for (int waiter : w.waiters)
                push(waiter);
            w.waiters.clear();
        }
    }

    bool wavePull(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        auto& w = m_waves[a.wave];
        if (w.expected == 0)
            throw InputError(
                m_plan.cluster->deviceName(d) + ": " + actionLabel(a) + " pulls a wave that no device pushes");
        if (w.pushed < w.expected) {
            w.waiters.push_back(d);
            return false;
        }
        const double t0 = std::max(dev.compute_free, w.complete);
        const double t1 = t0 + m_cost.parameterServerSeconds(d, a.bytes, m_plan.schedule.local_parameter_servers);
        span(d, Lane::Recv, a, dev.pc, dev.compute_free, t1);
        dev.compute_free = t1;
        return true;
    }

    /// The first arrival at an all-reduce registers the device; the last one schedules it and releases the rest.
    bool allReduce(int d, const Action& a)
    {
        auto& dev = m_devices[d];
        if (a.group < 0 || a.group >= static_cast<int>(m_collectives.size()))
            throw InputError(m_plan.cluster->deviceName(d) + ": all-reduce without a valid group");
        auto& seqs = m_collectives[a.group];
        auto reached = std::find_if(dev.collective_seq.begin(), dev.collective_seq.end(),
            [&](const std::pair<int, int>& g) { return g.first == a.group; });
        if (reached == dev.collective_seq.end())
            reached = dev.collective_seq.insert(reached, {a.group, 0});
        const int seq = reached->second;
        if (static_cast<int>(seqs.size()) <= seq)
            seqs.resize(seq + 1);
        auto& c = seqs[seq];
        if (!dev.registered)
            arriveAtAllReduce(d, a, c);
        if (c.end == kUnset)
            return false;
        dev.registered = false;
        reached->second += 1;
        span(d, Lane::Collective, a, dev.pc, c.start, c.end);
        dev.collective_wait += std::max(0.0, c.end - dev.compute_free);
        dev.compute_free = std::max(dev.compute_free, c.end);
        return true;
    }

    void arriveAtAllReduce(int d, const Action& a, Collective& c)
    {
        auto& dev = m_devices[d];
        const auto& members = m_s.groups[a.group].devices;
        dev.registered = true;
        c.arrived += 1;
        c.ready = std::max(c.ready, dev.compute_free);
        if (a.stage < 0 || a.stage >= m_s.num_stages)
            throw InputError(
                m_plan.cluster->deviceName(d) + ": " + actionLabel(a) + " names a stage outside the schedule");
        // A stage's replicas sum its gradient buckets as they are ready; tied weights are summed whole, after them.
        const int stage = m_s.groups[a.group].purpose == CollectivePurpose::Replicas ? a.stage : -1;
        // Every member sums the same stage's gradients: a member that names another stage (a damaged schedule) would
        // sum buckets of another size (AddressSanitizer found the read past them).
        if (c.stage == -2)
            c.stage = stage;
        else if (c.stage != stage)
            throw InputError(m_plan.cluster->deviceName(d) + ": " + actionLabel(a) + " joins an all-reduce of stage "
                + std::to_string(c.stage) + "'s gradients as stage " + std::to_string(stage));
        if (overlapsAllReduce(stage))
            noteBuckets(c, d, stage);
        if (c.arrived < m_collectiveMembers[static_cast<std::size_t>(a.group)])
            return;
        const std::vector<int> group(members.begin(), members.end());
        scheduleAllReduce(c, group, stage, a.bytes);
        for (int member : members) {
            m_collectiveFree[member] = std::max(m_collectiveFree[member], c.end);
            if (member != d && m_groups.runs(member))
                push(member);
        }
    }

    int replica(int d, const Action& a) const
    {
        // A virtual stage's devices are its physical stage's (in a loop or a V), in the same order.
        const int r = m_replicaOf[d];
        if (r < 0 || a.stage < 0 || a.stage >= m_plan.stageCount()
            || r >= static_cast<int>(m_plan.stages[a.stage].devices.size()) || m_plan.stages[a.stage].devices[r] != d)
            throw InputError(m_plan.cluster->deviceName(d) + ": " + actionLabel(a) + " is not for a stage it holds");
        return r;
    }

    std::pair<double, double> occupy(int d, double t, double seconds) { return m_sharedGpus.occupy(d, t, seconds); }

    void compute(int d, const Action& a, double t0, double t1)
    {
        auto& dev = m_devices[d];
        dev.compute_start = t0;
        dev.compute_free = t1;
        dev.busy += t1 - t0;
        span(d, Lane::Compute, a, dev.pc, t0, t1);
    }

    /// Every member of a group run once gets its first device's state, spans and memory samples (its own peers).
    void copyToMembers()
    {
        if (!m_groups.active())
            return;
        const int D = m_s.num_devices, t = m_groups.size;
        for (int d = 0; d < D; ++d)
            if (m_groups.leader[d] != d) {
                m_devices[d] = m_devices[m_groups.leader[d]];
                m_memory.copy(d, m_groups.leader[d]);
            }
        const auto counterpart = [&](int peer, int j) {
            return peer >= 0 && peer < D && m_groups.leader[peer] == peer && m_groups.member(peer, 0) == peer
                ? m_groups.member(peer, j)
                : peer;
        };
        auto& spans = m_result.timeline.spans;
        const std::size_t simulated = spans.size();
        spans.reserve(simulated * t);
        for (int j = 1; j < t; ++j)
            for (std::size_t i = 0; i < simulated; ++i) {
                Span copy = spans[i];
                if (m_groups.member(copy.device, 0) != copy.device)
                    continue; // outside every group
                copy.device = m_groups.member(copy.device, j);
                copy.peer = counterpart(copy.peer, j);
                spans.push_back(copy);
            }
        if (m_o.record_memory) {
            auto& mem = m_result.timeline.counter(kMemoryCounter, "B").samples;
            const std::size_t recorded = mem.size();
            for (int j = 1; j < t; ++j)
                for (std::size_t i = 0; i < recorded; ++i) {
                    CounterSample copy = mem[i];
                    if (m_groups.member(copy.device, 0) != copy.device)
                        continue;
                    copy.device = m_groups.member(copy.device, j);
                    mem.push_back(copy);
                }
        }
    }

    std::string deadlockMessage() const
    {
        std::string msg = "the schedule deadlocks:";
        int shown = 0;
        for (int d = 0; d < m_s.num_devices && shown < 6; ++d) {
            if (!m_groups.runs(d))
                continue;
            const auto& dev = m_devices[d];
            if (dev.pc < m_s.devices[d].size()) {
                msg += " " + m_plan.cluster->deviceName(d) + " waits at action " + std::to_string(dev.pc) + " ("
                    + actionLabel(m_s.devices[d][dev.pc]) + ");";
                ++shown;
            }
        }
        return msg;
    }

    void metrics()
    {
        auto& r = m_result;
        const int D = m_s.num_devices;
        double makespan = 0;
        for (const auto& dev : m_devices)
            makespan = std::max({makespan, dev.compute_free, dev.send_free});
        r.makespan_s = makespan;
        r.devices.resize(D);
        std::vector<bool> used(D);
        for (int d = 0; d < D; ++d) {
            const auto& dev = m_devices[d];
            auto& m = r.devices[d];
            m.busy_s = dev.busy;
            m.collective_wait_s = dev.collective_wait;
            const auto& usage = m_memory.usage(d);
            m.peak_memory_bytes = usage.peak_memory;
            m.memory_capacity_bytes = m_cost.device_memory_capacity[d];
            m.peak_stashed_microbatches = usage.peak_stashed;
            m.peak_weight_versions = usage.peak_versions;
            used[d] = !m_s.devices[m_groups.active() ? m_groups.leader[d] : d].empty();
        }
        m_sharedGpus.shareMemory(r.devices);
        bubbleMetrics(r, used, m_sharedGpus.gpuOf());
        r.stages.resize(m_plan.stageCount());
        for (int s = 0; s < m_plan.stageCount(); ++s) {
            auto& sm = r.stages[s];
            if (!m_plan.stages[s].devices.empty())
                sm.charge = m_cost.charge(s, 0);
            sm.memory_capacity_bytes = std::numeric_limits<double>::infinity();
            for (int d : m_plan.stages[s].devices) {
                sm.peak_memory_bytes = std::max(sm.peak_memory_bytes, r.devices[d].peak_memory_bytes);
                sm.memory_capacity_bytes = std::min(sm.memory_capacity_bytes, r.devices[d].memory_capacity_bytes);
                sm.peak_stashed_microbatches
                    = std::max(sm.peak_stashed_microbatches, r.devices[d].peak_stashed_microbatches);
                sm.peak_weight_versions = std::max(sm.peak_weight_versions, r.devices[d].peak_weight_versions);
            }
        }
        const int perBatch = std::max(1, m_s.microbatches_per_batch);
        const int iterations = std::max(1, m_s.microbatches / perBatch);
        r.iteration_time_s = makespan / iterations;
        if (iterations >= 2 && m_traits.flush_per_batch && m_traits.synchronous
            && static_cast<int>(m_batchStepEnds.size()) == iterations
            && std::none_of(m_batchStepEnds.begin(), m_batchStepEnds.end(), [](double t) { return t == kUnset; }))
            r.batch_ends_s = m_batchStepEnds; // each batch's last optimizer step
        else if (iterations >= 2)
            for (int b = 0; b < iterations; ++b) {
                const int last = (b + 1) * perBatch - 1;
                if (last < static_cast<int>(m_lastStageDone.size()) && m_lastStageDone[last] != kUnset)
                    r.batch_ends_s.push_back(m_lastStageDone[last]);
            }
        if (m_traits.steady_state != SteadyState::Makespan) {
            const int K = m_s.microbatches;
            auto done = [&](int k) { return k >= 0 && k < K ? m_lastStageDone[k] : kUnset; };
            if (m_traits.steady_state == SteadyState::BatchToBatch) {
                // 2BW: whole batches, from the end of the first to the end of the last on the last stage, so
                // every batch in the window pays its weight update (all-reduce and optimizer step) once. One
                // batch has no steady state: its makespan (fill and drain included) stands.
                if (iterations >= 2 && done(perBatch - 1) != kUnset && done(K - 1) != kUnset
                    && done(K - 1) > done(perBatch - 1))
                    r.iteration_time_s = (done(K - 1) - done(perBatch - 1)) / (iterations - 1);
            } else {
                // PipeDream: pace of the last stage after the pipeline has filled (the drain is excluded
                // because the last stage finishes first).
                const int k1 = std::min(K - 1, m_plan.pipelineDepth()), k2 = K - 1;
                if (k2 > k1 && done(k1) != kUnset && done(k2) != kUnset && done(k2) > done(k1))
                    r.iteration_time_s = (done(k2) - done(k1)) / (k2 - k1) * perBatch;
            }
        }
        r.throughput_samples_per_s = throughput(m_plan, perBatch, r.iteration_time_s);
        r.timeline.label = m_plan.algorithm + " " + m_s.kind;
    }

    const Plan& m_plan;
    std::uint64_t m_executed = 0; ///< actions executed so far (stop requests are polled every 4096)
    const Schedule& m_s;
    const SimulationOptions& m_o;
    const CostModel& m_cost;
    ScheduleTraits m_traits;
    std::vector<int> m_replicaOf, m_tpRankOf;
    ModelParallelGroups m_groups; ///< run once each where the schedule and costs allow (modelParallelGroups)
    std::vector<int> m_collectiveMembers; ///< per collective group: the members that reach it (run)
    std::vector<LinkCalendar> m_uplinks; ///< per node: its inter-node uplink
    SharedGpus m_sharedGpus; ///< devices that take turns on one GPU and split its memory
    std::vector<double> m_collectiveFree; ///< per device: when its latest all-reduce has left the link
    std::vector<std::size_t> m_slotOffset; ///< per stage: its first (device, stage) slot; one past the last at the end
    std::vector<LastBackward> m_lastBackward; ///< per (device, stage) slot
    std::vector<Transfer> m_transfers;
    std::vector<int> m_waiter;
    std::vector<DeviceState> m_devices;
    std::vector<std::vector<Collective>> m_collectives;
    std::vector<VersionBook> m_books; ///< per (device, stage) slot
    std::vector<Wave> m_waves; ///< wsp: per wave index
    std::vector<double> m_lastStageDone;
    std::map<std::pair<int, int>, int> m_stepsDone; ///< (device, stage) -> optimizer steps done
    std::vector<double> m_batchStepEnds; ///< per batch: when its last optimizer step ended
    std::vector<int> m_ready;
    SimulationResult m_result;
    DeviceMemory m_memory {m_s.num_devices, m_o.record_memory ? &m_result.timeline : nullptr};
};

} // namespace

SimulationResult simulate(
    const Plan& plan, const Schedule& schedule, const CostModel& cost, const SimulationOptions& options)
{
    Simulation sim(plan, schedule, cost, options);
    return sim.run();
}

SimulationResult simulate(const Plan& plan, const Schedule& schedule, const SimulationOptions& options)
{
    return simulate(plan, schedule, CostModel::fromPlan(plan), options);
}

SimulationResult simulateGroupLeaders(
    const Plan& plan, const Schedule& leaders, const CostModel& cost, const SimulationOptions& options)
{
    Simulation sim(plan, leaders, cost, options, true);
    return sim.run();
}

SimulationResult simulate(const Plan& plan, const SimulationOptions& options)
{
    if (plan.modelParallel() > 1)
        return simulateGroupLeaders(plan, generateGroupLeaderSchedule(plan), CostModel::fromPlan(plan), options);
    return simulate(plan, generateSchedule(plan), options);
}

} // namespace pw::planner
