// SPDX-License-Identifier: MIT
// validate(): proves a schedule complete, consistent and deadlock-free by executing it abstractly.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "builder.h"
#include "generator.h"

namespace pw::planner {
namespace {

constexpr std::size_t kMaxErrors = 40;
constexpr std::size_t kMaxStuckListed = 8;

/// Where the F and B of one (stage, microbatch) are, and how often they occur. A split backward (zero-bubble
/// schedules) is an I, recorded in the b_ fields (it is what the previous stage waits for), and a W (WeightSlot).
struct ComputeSlot
{
    std::int32_t f_device = -1, f_index = -1, b_device = -1, b_index = -1;
    std::int32_t f_version = 0, b_version = 0;
    std::int32_t f_count = 0, b_count = 0;
    std::int32_t f_pulled = -1; ///< wsp: the newest wave its device pulled before the forward
};

/// The W of one (stage, microbatch), and how many of its backwards were I: kept apart from ComputeSlot, and only for
/// schedules that split the backward, so that the other schedules' slots stay as small as they were.
struct WeightSlot
{
    std::int32_t w_device = -1, w_index = -1, w_version = 0, w_count = 0;
    std::int32_t split = 0; ///< I actions among the slot's b_count (the rest are fused B)
};

/// One transfer (activation or gradient of a stage's microbatch): its send and its receive.
struct TransferSlot
{
    std::int32_t send_device = -1, send_index = -1, send_peer = -1, send_count = 0;
    std::int32_t recv_device = -1, recv_index = -1, recv_peer = -1, recv_count = 0;
    std::int32_t available = 0; ///< executed sends not yet received (abstract execution)
    std::int32_t waiter = -1; ///< device blocked on this receive
};

class Validator
{
public:
    Validator(const Schedule& schedule, const Plan& plan)
        : m_s(schedule)
        , m_plan(plan)
    {
    }

    ValidationReport run()
    {
        if (shape()) {
            collect();
            checkCompute();
            checkTransfers();
            checkGroups();
            checkWaves();
            execute();
        }
        if (m_dropped > 0)
            m_report.errors.push_back("... and " + std::to_string(m_dropped) + " more errors");
        m_report.ok = m_report.errors.empty();
        return std::move(m_report);
    }

private:
    void error(std::string message)
    {
        if (m_report.errors.size() < kMaxErrors)
            m_report.errors.push_back(std::move(message));
        else
            ++m_dropped;
    }

    std::string where(int d, int index) const
    {
        return "device " + std::to_string(d) + " action #" + std::to_string(index) + " ("
            + actionLabel(m_s.devices[d][index]) + ")";
    }

    static std::string fb(int stage, int mb, bool backward)
    {
        return std::string(backward ? "B" : "F") + "(stage " + std::to_string(stage) + ", microbatch "
            + std::to_string(mb) + ")";
    }

    bool shape()
    {
        m_stages = m_plan.stageCount();
        m_devices = static_cast<int>(m_s.devices.size());
        m_microbatches = m_s.microbatches;
        bool ok = true;
        if (m_s.num_stages != m_stages) {
            error(
                "the schedule has " + std::to_string(m_s.num_stages) + " stages, the plan " + std::to_string(m_stages));
            ok = false;
        }
        if (m_s.num_devices != m_devices)
            error("num_devices is " + std::to_string(m_s.num_devices) + " but there are " + std::to_string(m_devices)
                + " device lists");
        if (m_devices != m_plan.cluster->deviceCount()) {
            error("the schedule has " + std::to_string(m_devices) + " device lists, the cluster "
                + std::to_string(m_plan.cluster->deviceCount()) + " devices");
            ok = false;
        }
        if (m_microbatches < 0) {
            error("microbatches is negative");
            ok = false;
        }
        // A complete schedule holds an F and a B per (stage, microbatch); this also bounds the tables below.
        const auto needed
            = 2 * static_cast<std::uint64_t>(m_stages) * static_cast<std::uint64_t>(std::max(0, m_microbatches));
        if (ok && needed > m_s.actionCount()) {
            error("the schedule has " + std::to_string(m_s.actionCount()) + " actions, fewer than the "
                + std::to_string(needed) + " forwards and backwards of " + std::to_string(m_stages) + " stages x "
                + std::to_string(m_microbatches) + " microbatches");
            ok = false;
        }
        for (int s = 0; s < m_stages && ok; ++s) {
            for (int d : m_plan.stages[s].devices)
                if (d < 0 || d >= m_devices) {
                    error("plan stage " + std::to_string(s) + " uses device " + std::to_string(d)
                        + ", which the schedule does not have");
                    ok = false;
                }
            if (m_plan.stages[s].devices.empty()) {
                error("plan stage " + std::to_string(s) + " has no devices");
                ok = false;
            }
        }
        for (std::size_t g = 0; g < m_s.groups.size() && ok; ++g)
            for (int d : m_s.groups[g].devices)
                if (d < 0 || d >= m_devices) {
                    error("all-reduce group " + std::to_string(g) + " names device " + std::to_string(d));
                    ok = false;
                }
        return ok;
    }

    int expectedDevice(int stage, int mb) const
    {
        const auto& d = m_plan.stages[stage].devices;
        return d[static_cast<std::size_t>(mb) % d.size()];
    }

    std::size_t slot(int stage, int mb) const { return static_cast<std::size_t>(stage) * m_microbatches + mb; }
    std::size_t transfer(bool gradient, int stage, int mb) const
    {
        return (static_cast<std::size_t>(gradient) * m_stages + stage) * m_microbatches + mb;
    }

    /// False for actions whose stage, microbatch, peer or group cannot be placed (reported once, in collect()).
    bool wellFormed(int d, const Action& a) const
    {
        switch (a.kind) {
        case ActionKind::AllReduce:
            return a.group >= 0 && a.group < static_cast<int>(m_s.groups.size());
        case ActionKind::OptimizerStep:
            return a.stage >= 0 && a.stage < m_stages;
        case ActionKind::WavePush:
        case ActionKind::WavePull:
            // A wave holds at least one microbatch, which bounds the wave table.
            return a.stage >= 0 && a.stage < m_stages && a.wave >= 0 && a.wave < std::max(1, m_microbatches);
        default:
            break;
        }
        if (a.stage < 0 || a.stage >= m_stages || a.microbatch < 0 || a.microbatch >= m_microbatches)
            return false;
        if (isSend(a.kind) || isRecv(a.kind))
            return a.peer >= 0 && a.peer < m_devices && a.peer != d;
        return true;
    }

    /// An F&B pair (Action::overlaps_next): the forward's next compute action is a backward of another stage.
    void checkOverlapPair(int d, int i)
    {
        const auto& list = m_s.devices[d];
        auto next = std::find_if(list.begin() + i + 1, list.end(), [](const Action& a) { return isCompute(a.kind); });
        if (next == list.end() || !(next->kind == ActionKind::Backward || next->kind == ActionKind::BackwardInput)
            || next->stage == list[i].stage)
            error(where(d, i) + " overlaps the next compute action, which must be a backward of another stage");
    }

    void collect()
    {
        m_compute.assign(static_cast<std::size_t>(m_stages) * m_microbatches, {});
        m_transfers.assign(static_cast<std::size_t>(2) * m_stages * m_microbatches, {});
        m_allReduces.assign(static_cast<std::size_t>(m_devices) * m_s.groups.size(), 0);
        m_wavePushes.assign(std::max(1, m_microbatches), 0);
        std::vector<std::int32_t> latest(m_stages, 0); // weight version per stage on the current device
        for (int d = 0; d < m_devices; ++d) {
            const auto& list = m_s.devices[d];
            std::fill(latest.begin(), latest.end(), 0);
            std::int32_t pulled = -1;
            for (int i = 0; i < static_cast<int>(list.size()); ++i) {
                const Action& a = list[i];
                if (!wellFormed(d, a)) {
                    error(where(d, i) + ": stage, microbatch, peer or group out of range");
                    continue;
                }
                switch (a.kind) {
                case ActionKind::Forward: {
                    auto& c = m_compute[slot(a.stage, a.microbatch)];
                    if (++c.f_count == 1)
                        c.f_device = d, c.f_index = i, c.f_version = a.weight_version, c.f_pulled = pulled;
                    if (a.weight_version < 0 || a.weight_version > latest[a.stage])
                        error(where(d, i) + " uses weight version " + std::to_string(a.weight_version)
                            + ", which does not exist yet (latest is " + std::to_string(latest[a.stage]) + ")");
                    if (a.overlaps_next)
                        checkOverlapPair(d, i);
                    break;
                }
                case ActionKind::OptimizerStep:
                    if (a.weight_version <= latest[a.stage])
                        error(where(d, i) + " produces version " + std::to_string(a.weight_version)
                            + ", not newer than version " + std::to_string(latest[a.stage]));
                    else
                        latest[a.stage] = a.weight_version;
                    break;
                case ActionKind::Backward:
                case ActionKind::BackwardInput: {
                    auto& c = m_compute[slot(a.stage, a.microbatch)];
                    if (++c.b_count == 1)
                        c.b_device = d, c.b_index = i, c.b_version = a.weight_version;
                    if (a.kind == ActionKind::BackwardInput)
                        weightSlot(a.stage, a.microbatch).split += 1;
                    break;
                }
                case ActionKind::BackwardWeight: {
                    auto& c = weightSlot(a.stage, a.microbatch);
                    if (++c.w_count == 1)
                        c.w_device = d, c.w_index = i, c.w_version = a.weight_version;
                    // Its gradients go into the update of its version: a step of the stage before it would
                    // leave them out.
                    if (a.weight_version != latest[a.stage])
                        error(where(d, i) + " runs after the optimizer step producing version "
                            + std::to_string(latest[a.stage]) + " of stage " + std::to_string(a.stage)
                            + " (a weight gradient must come before its batch's step)");
                    break;
                }
                case ActionKind::SendActivation:
                case ActionKind::SendGradient: {
                    auto& t = m_transfers[transfer(a.kind == ActionKind::SendGradient, a.stage, a.microbatch)];
                    if (++t.send_count == 1)
                        t.send_device = d, t.send_index = i, t.send_peer = a.peer;
                    break;
                }
                case ActionKind::RecvActivation:
                case ActionKind::RecvGradient: {
                    auto& t = m_transfers[transfer(a.kind == ActionKind::RecvGradient, a.stage, a.microbatch)];
                    if (++t.recv_count == 1)
                        t.recv_device = d, t.recv_index = i, t.recv_peer = a.peer;
                    break;
                }
                case ActionKind::WavePush:
                    ++m_wavePushes[a.wave];
                    break;
                case ActionKind::WavePull:
                    pulled = std::max(pulled, a.wave);
                    m_pulls.push_back({d, i});
                    break;
                case ActionKind::AllReduce: {
                    ++m_allReduces[static_cast<std::size_t>(a.group) * m_devices + d];
                    const auto& members = m_s.groups[a.group].devices;
                    if (std::find(members.begin(), members.end(), d) == members.end())
                        error(where(d, i) + ": device " + std::to_string(d) + " is not in all-reduce group "
                            + std::to_string(a.group));
                    break;
                }
                default:
                    break;
                }
            }
        }
    }

    /// The data F(s,k) or B(s,k) needs from `from` (the stage that produced it) is available in time.
    void checkInput(const ComputeSlot& producer, bool producerIsBackward, bool gradient, int stage, int mb, int d,
        int index, bool backward)
    {
        const int pd = producerIsBackward ? producer.b_device : producer.f_device;
        const int pi = producerIsBackward ? producer.b_index : producer.f_index;
        if (pd < 0)
            return; // the missing producer is reported on its own
        const int fromStage = gradient ? stage + 1 : stage - 1;
        if (pd == d) {
            if (pi > index)
                error(where(d, index) + " runs before " + fb(fromStage, mb, producerIsBackward)
                    + " on the same device, whose output it needs");
            return;
        }
        const auto& t = m_transfers[transfer(gradient, fromStage, mb)];
        const bool received = t.recv_count > 0 && t.recv_device == d && t.recv_index <= index;
        const bool sent = t.send_count > 0 && t.send_device == pd && t.send_index >= pi;
        if (received && sent && t.send_peer == d)
            return; // the common case: no text built
        const std::string what
            = std::string(gradient ? "gradient" : "activation") + " of " + fb(fromStage, mb, producerIsBackward);
        if (!received)
            error(where(d, index) + " has no receive of the " + what + " before it");
        if (!sent)
            error(fb(stage, mb, backward) + " on device " + std::to_string(d) + ": device " + std::to_string(pd)
                + " does not send the " + what + " after computing it");
        else if (t.send_peer != d)
            error(where(t.send_device, t.send_index) + " sends to device " + std::to_string(t.send_peer) + " but "
                + fb(stage, mb, backward) + " runs on device " + std::to_string(d));
    }

    void checkCompute()
    {
        for (int s = 0; s < m_stages; ++s) {
            for (int k = 0; k < m_microbatches; ++k) {
                const auto& c = m_compute[slot(s, k)];
                const int want = expectedDevice(s, k);
                for (int backward = 0; backward < 2; ++backward) {
                    const int count = backward ? c.b_count : c.f_count;
                    const int dev = backward ? c.b_device : c.f_device;
                    if (count == 1 && dev == want)
                        continue; // the common case: no text built
                    const std::string name = fb(s, k, backward);
                    if (count == 0)
                        error(name + " is missing (expected on device " + std::to_string(want) + ")");
                    else if (count > 1)
                        error(name + " occurs " + std::to_string(count) + " times");
                    else
                        error(name + " runs on device " + std::to_string(dev) + ", but microbatch " + std::to_string(k)
                            + " belongs to device " + std::to_string(want) + " (replica "
                            + std::to_string(k % m_plan.stages[s].replicas()) + " of stage " + std::to_string(s) + ")");
                }
                if (c.f_count == 0 || c.b_count == 0)
                    continue;
                if (c.f_device != c.b_device)
                    error(fb(s, k, false) + " and its backward run on different devices (" + std::to_string(c.f_device)
                        + " and " + std::to_string(c.b_device) + ")");
                else if (c.b_index < c.f_index)
                    error(where(c.b_device, c.b_index) + " comes before its forward (action #"
                        + std::to_string(c.f_index) + ")");
                if (c.b_version != c.f_version)
                    error(fb(s, k, true) + " uses weight version " + std::to_string(c.b_version)
                        + " but its forward used " + std::to_string(c.f_version)
                        + " (the backward must use the stashed version)");
                checkWeightGradient(c, s, k);
                if (!m_plan.firstInPipeline(s))
                    checkInput(m_compute[slot(s - 1, k)], false, false, s, k, c.f_device, c.f_index, false);
                if (!m_plan.lastInPipeline(s))
                    checkInput(m_compute[slot(s + 1, k)], true, true, s, k, c.b_device, c.b_index, true);
            }
        }
    }

    /// A split backward: one I and one W, the W after its I on the same device with the same version (its stashed
    /// inputs are kept until then); a fused B has no W.
    void checkWeightGradient(const ComputeSlot& b, int s, int k)
    {
        if (m_weight.empty())
            return; // no I and no W anywhere: every backward is fused
        const WeightSlot& c = m_weight[slot(s, k)];
        if (c.split == 0 && c.w_count == 0)
            return;
        const std::string name = "W(stage " + std::to_string(s) + ", microbatch " + std::to_string(k) + ")";
        if (c.split == 0) {
            if (c.w_count > 0)
                error(name + " has no input gradient I before it (the backward is fused: B)");
            return;
        }
        if (c.split != b.b_count) {
            error("stage " + std::to_string(s) + " microbatch " + std::to_string(k) + " mixes a fused B with I");
            return;
        }
        if (c.w_count == 0)
            error(name + " is missing (its I runs on device " + std::to_string(b.b_device) + ")");
        else if (c.w_count > 1)
            error(name + " occurs " + std::to_string(c.w_count) + " times");
        else if (c.w_device != b.b_device)
            error(name + " runs on device " + std::to_string(c.w_device) + ", its I on device "
                + std::to_string(b.b_device));
        else if (c.w_index < b.b_index)
            error(where(c.w_device, c.w_index) + " comes before its input gradient (action #"
                + std::to_string(b.b_index) + ")");
        else if (c.w_version != b.b_version)
            error(name + " uses weight version " + std::to_string(c.w_version) + " but its I used "
                + std::to_string(b.b_version));
    }

    void checkTransfers()
    {
        for (std::size_t i = 0; i < m_transfers.size(); ++i) {
            const auto& t = m_transfers[i];
            if (t.send_count == 0 && t.recv_count == 0)
                continue;
            if (t.send_count > 1)
                error(where(t.send_device, t.send_index) + " is sent " + std::to_string(t.send_count) + " times");
            if (t.recv_count > 1)
                error(where(t.recv_device, t.recv_index) + " is received " + std::to_string(t.recv_count) + " times");
            if (t.recv_count == 0)
                error(where(t.send_device, t.send_index) + " has no matching receive on device "
                    + std::to_string(t.send_peer));
            else if (t.send_count == 0)
                error(where(t.recv_device, t.recv_index) + " has no matching send on device "
                    + std::to_string(t.recv_peer));
            else if (t.send_peer != t.recv_device || t.recv_peer != t.send_device)
                error(where(t.send_device, t.send_index) + " and " + where(t.recv_device, t.recv_index)
                    + " do not name each other as peers");
        }
    }

    void checkGroups()
    {
        const auto& count = m_allReduces;
        for (std::size_t g = 0; g < m_s.groups.size(); ++g) {
            const auto& members = m_s.groups[g].devices;
            if (members.empty())
                continue;
            const auto first = count[g * m_devices + members[0]];
            for (int d : members)
                if (count[g * m_devices + d] != first) {
                    error("all-reduce group " + std::to_string(g) + " (stage " + std::to_string(m_s.groups[g].stage)
                        + "): device " + std::to_string(members[0]) + " reaches " + std::to_string(first)
                        + " all-reduces but device " + std::to_string(d) + " reaches "
                        + std::to_string(count[g * m_devices + d]));
                    break;
                }
        }
    }

    /// HetPipe (wsp): every pulled wave is pushed by someone; each pipeline admits minibatch k only after
    /// k - N_m finished its backward on the first stage, and only after pulling wave floor((k+1)/N_m) - 2 - D
    /// (digest §1.2.4 and §1.2.5, 1-based p = k + 1).
    void checkWaves()
    {
        for (const auto& [d, i] : m_pulls)
            if (m_wavePushes[m_s.devices[d][i].wave] == 0)
                error(where(d, i) + " pulls a wave that no device pushes");
        const auto* traits = findScheduleTraits(m_s.kind);
        if (!traits || !traits->wave_synchronous)
            return;
        const int D = m_plan.schedule.staleness;
        const int nm = m_plan.effectiveConcurrentMinibatches();
        for (int first = 0; first < m_stages; first = m_plan.pipelineEnd(first)) {
            for (int k = 0; k < m_microbatches; ++k) {
                const auto& c = m_compute[slot(first, k)];
                if (c.f_count != 1)
                    continue; // reported by checkCompute
                const int need = (k + 1) / nm - 2 - D;
                if (need >= 0 && c.f_pulled < need)
                    error(where(c.f_device, c.f_index) + " starts minibatch " + std::to_string(k)
                        + " before pulling wave " + std::to_string(need) + " (staleness " + std::to_string(D) + ", "
                        + std::to_string(nm) + " minibatches per wave)");
                if (k >= nm) {
                    const auto& done = m_compute[slot(first, k - nm)];
                    if (done.b_count == 1 && (done.b_device != c.f_device || done.b_index > c.f_index))
                        error(where(c.f_device, c.f_index) + " starts minibatch " + std::to_string(k)
                            + " before minibatch " + std::to_string(k - nm) + " completed (at most "
                            + std::to_string(nm) + " in flight)");
                }
            }
        }
    }

    /// Runs every device until it blocks (sends complete at once; a receive waits for its send; an
    /// all-reduce waits for every member of its group; a wave pull for every push of its wave). Devices left
    /// unfinished are deadlocked.
    void execute()
    {
        const int groups = static_cast<int>(m_s.groups.size());
        std::vector<std::size_t> pc(m_devices, 0);
        std::vector<std::int64_t> outstanding(m_devices, 0);
        std::vector<char> registered(m_devices, 0);
        std::vector<int> arrived(groups, 0);
        std::vector<std::vector<int>> waiting(groups);
        std::vector<std::int64_t> pushed(m_wavePushes.size(), 0);
        std::vector<std::vector<int>> waveWaiters(m_wavePushes.size());
        std::vector<int> ready;
        ready.reserve(m_devices);
        for (int d = m_devices - 1; d >= 0; --d)
            ready.push_back(d);
        std::int64_t peak = 0;
        while (!ready.empty()) {
            const int d = ready.back();
            ready.pop_back();
            const auto& list = m_s.devices[d];
            std::size_t i = pc[d];
            for (; i < list.size(); ++i) {
                const Action& a = list[i];
                if (!wellFormed(d, a))
                    continue;
                if (isSend(a.kind)) {
                    auto& t = m_transfers[transfer(a.kind == ActionKind::SendGradient, a.stage, a.microbatch)];
                    t.available += 1;
                    peak = std::max(peak, ++outstanding[d]);
                    if (t.waiter >= 0) {
                        ready.push_back(t.waiter);
                        t.waiter = -1;
                    }
                } else if (isRecv(a.kind)) {
                    auto& t = m_transfers[transfer(a.kind == ActionKind::RecvGradient, a.stage, a.microbatch)];
                    if (t.available == 0) {
                        t.waiter = d;
                        break;
                    }
                    t.available -= 1;
                    if (t.send_device >= 0)
                        outstanding[t.send_device] -= 1;
                } else if (a.kind == ActionKind::WavePush) {
                    if (++pushed[a.wave] == m_wavePushes[a.wave]) {
                        for (int w : waveWaiters[a.wave])
                            ready.push_back(w);
                        waveWaiters[a.wave].clear();
                    }
                } else if (a.kind == ActionKind::WavePull) {
                    if (pushed[a.wave] < m_wavePushes[a.wave]) {
                        waveWaiters[a.wave].push_back(d);
                        break;
                    }
                } else if (a.kind == ActionKind::AllReduce) {
                    const int g = a.group;
                    const int size = static_cast<int>(m_s.groups[g].devices.size());
                    if (!registered[d]) {
                        registered[d] = 1;
                        arrived[g] += 1;
                    }
                    if (arrived[g] < size) {
                        waiting[g].push_back(d);
                        break;
                    }
                    arrived[g] = 0;
                    registered[d] = 0;
                    for (int w : waiting[g]) {
                        registered[w] = 0;
                        pc[w] += 1;
                        ready.push_back(w);
                    }
                    waiting[g].clear();
                }
            }
            pc[d] = i;
        }
        m_report.max_outstanding_sends = static_cast<std::size_t>(peak);
        reportStuck(pc, arrived);
    }

    void reportStuck(const std::vector<std::size_t>& pc, const std::vector<int>& arrived)
    {
        std::string stuck;
        int count = 0;
        for (int d = 0; d < m_devices; ++d) {
            if (pc[d] >= m_s.devices[d].size())
                continue;
            if (++count > static_cast<int>(kMaxStuckListed))
                continue;
            const Action& a = m_s.devices[d][pc[d]];
            stuck += (stuck.empty() ? "" : "; ") + where(d, static_cast<int>(pc[d]));
            if (isRecv(a.kind))
                stuck += " waits for device " + std::to_string(a.peer) + " to send";
            else if (a.kind == ActionKind::WavePull)
                stuck += " waits for every push of wave " + std::to_string(a.wave);
            else if (a.kind == ActionKind::AllReduce)
                stuck += " waits in all-reduce group " + std::to_string(a.group) + " ("
                    + std::to_string(arrived[a.group]) + " of " + std::to_string(m_s.groups[a.group].devices.size())
                    + " members arrived)";
        }
        if (count > 0)
            error("deadlock: " + std::to_string(count) + " device(s) cannot finish: " + stuck
                + (count > static_cast<int>(kMaxStuckListed) ? "; ..." : ""));
    }

    const Schedule& m_s;
    const Plan& m_plan;
    ValidationReport m_report;
    std::size_t m_dropped = 0;
    int m_stages = 0;
    int m_devices = 0;
    int m_microbatches = 0;
    std::vector<ComputeSlot> m_compute;
    std::vector<WeightSlot> m_weight; ///< empty unless the schedule has an I or a W

    WeightSlot& weightSlot(int stage, int microbatch)
    {
        if (m_weight.empty())
            m_weight.assign(m_compute.size(), {});
        return m_weight[slot(stage, microbatch)];
    }
    std::vector<TransferSlot> m_transfers;
    std::vector<std::int64_t> m_allReduces; ///< [group][device]: all-reduces the device reaches
    std::vector<std::int64_t> m_wavePushes; ///< [wave]: WavePush actions in the schedule
    std::vector<std::pair<int, int>> m_pulls; ///< (device, index) of every WavePull
};

} // namespace

namespace {

/// Tensor parallelism (builder.h): each rank's view must be a valid schedule of its rank plan, and the ranks
/// of a group must run the same compute sequence, or their all-reduces inside F and B would not meet.
ValidationReport validateTensorParallel(const Schedule& schedule, const Plan& plan)
{
    const int t = plan.modelParallel();
    ValidationReport report;
    const int D = static_cast<int>(schedule.devices.size());
    std::vector<int> rankOf(D, -1);
    for (int s = 0; s < plan.pipelineDepth(); ++s)
        for (std::size_t i = 0; i < plan.stages[s].devices.size(); ++i)
            if (int d = plan.stages[s].devices[i]; d >= 0 && d < D)
                rankOf[d] = static_cast<int>(i % t);
    // A device outside every stage is in no rank's view: it must have nothing to do.
    for (int d = 0; d < D; ++d)
        if (rankOf[d] < 0 && !schedule.devices[d].empty())
            report.errors.push_back("device " + std::to_string(d) + " holds no stage but has "
                + std::to_string(schedule.devices[d].size()) + " action(s)");
    for (int j = 0; j < t && report.errors.size() < kMaxErrors; ++j) {
        Schedule view = schedule;
        for (int d = 0; d < D; ++d)
            if (rankOf[d] != j)
                view.devices[d].clear();
        // With context parallelism a gradient group spans the context ranks; the rank's view keeps its own members.
        for (auto& g : view.groups)
            std::erase_if(g.devices, [&](int d) { return d < 0 || d >= D || rankOf[d] != j; });
        auto sub = Validator(view, tensorParallelRankPlan(plan, j)).run();
        for (auto& e : sub.errors)
            report.errors.push_back("tensor-parallel rank " + std::to_string(j) + ": " + e);
        report.max_outstanding_sends = std::max(report.max_outstanding_sends, sub.max_outstanding_sends);
        if (report.errors.size() >= kMaxErrors)
            break;
    }
    const auto sameCompute = [](const std::vector<Action>& a, const std::vector<Action>& b) {
        std::size_t i = 0, k = 0;
        while (true) {
            while (i < a.size() && !isCompute(a[i].kind))
                ++i;
            while (k < b.size() && !isCompute(b[k].kind))
                ++k;
            if (i == a.size() || k == b.size())
                return i == a.size() && k == b.size();
            if (a[i].kind != b[k].kind || a[i].stage != b[k].stage || a[i].microbatch != b[k].microbatch)
                return false;
            ++i, ++k;
        }
    };
    for (int s = 0; s < plan.pipelineDepth() && report.errors.size() < kMaxErrors; ++s) {
        const auto& devices = plan.stages[s].devices;
        for (std::size_t g = 0; g + t <= devices.size(); g += t)
            for (int j = 1; j < t; ++j) {
                const int lead = devices[g], other = devices[g + j];
                if (lead < 0 || lead >= D || other < 0 || other >= D)
                    continue;
                if (!sameCompute(schedule.devices[lead], schedule.devices[other]))
                    report.errors.push_back("tensor-parallel group of stage " + std::to_string(s) + ": device "
                        + std::to_string(other) + " (rank " + std::to_string(j) + ") does not run the same forwards, "
                        + "backwards and steps in the same order as device " + std::to_string(lead) + " (rank 0)");
            }
    }
    report.ok = report.errors.empty();
    return report;
}

} // namespace

ValidationReport validate(const Schedule& schedule, const Plan& plan)
{
    if (plan.modelParallel() > 1 && schedule.devices.size() == static_cast<std::size_t>(plan.cluster->deviceCount()))
        return validateTensorParallel(schedule, plan);
    return Validator(schedule, plan).run();
}

} // namespace pw::planner
