// SPDX-License-Identifier: MIT
// Time by cause and stragglers (time_by_cause.h): each device's steps swept as elementary intervals, each interval
// given to one cause in order compute, then the earliest blocking action covering it (waiting for its peer until
// the data was sent or the last member arrived, exposed communication after), else a host gap.
#include "time_by_cause.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

namespace pw::planner {

TimeCauses& TimeCauses::operator+=(const TimeCauses& o)
{
    compute_s += o.compute_s;
    p2p_exposed_s += o.p2p_exposed_s;
    collective_exposed_s += o.collective_exposed_s;
    bubble_s += o.bubble_s;
    late_s += o.late_s;
    host_gap_s += o.host_gap_s;
    return *this;
}

std::span<const CauseField> causeFields()
{
    static const CauseField fields[] = {
        {"compute", &TimeCauses::compute_s},
        {"p2p exposed", &TimeCauses::p2p_exposed_s},
        {"all-reduce exposed", &TimeCauses::collective_exposed_s},
        {"bubble (planned)", &TimeCauses::bubble_s},
        {"late peer", &TimeCauses::late_s},
        {"host gap", &TimeCauses::host_gap_s},
    };
    return fields;
}

double CommOverlap::percent() const
{
    const double total = exposed_s + overlapped_s;
    return total > 0 ? 100.0 * overlapped_s / total : 0.0;
}

std::string_view toString(CommOverlap::Kind kind)
{
    return kind == CommOverlap::Kind::PointToPoint ? "p2p" : "all-reduce";
}

TimeCauses TimeByCause::device(int device) const
{
    TimeCauses sum;
    for (const auto& s : steps)
        if (s.device == device)
            sum += s.causes;
    return sum;
}

int TimeByCause::deviceCount() const
{
    int n = 0;
    for (const auto& s : steps)
        n = std::max(n, s.device + 1);
    return n;
}

int TimeByCause::stepCount() const
{
    int n = 0;
    for (const auto& s : steps)
        n = std::max(n, s.step + 1);
    return n;
}

namespace {

bool blocking(const Span& s)
{
    return s.lane == Lane::Recv || s.lane == Lane::Collective;
}

double lowerMedian(std::vector<double> v)
{
    if (v.empty())
        return 0;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
}

/// A timeline's spans by device and action index (nullptr where none is there yet).
struct SpanIndex
{
    std::vector<std::vector<const Span*>> byAction;
    /// (gradient, producing stage, microbatch, sender) -> the send's start: when the data left.
    std::map<std::tuple<bool, int, int, int>, double> sent;

    /// Per device and blocking action: when the device reached it (the end of its previous compute or blocking
    /// action in program order; the simulator's receive spans start when the transfer does, the engine's when the
    /// device begins to wait).
    std::vector<std::vector<double>> reached;

    SpanIndex(const Timeline& t, const Schedule& schedule)
    {
        byAction.resize(schedule.devices.size());
        for (std::size_t d = 0; d < schedule.devices.size(); ++d)
            byAction[d].assign(schedule.devices[d].size(), nullptr);
        for (const auto& s : t.spans) {
            if (s.device < 0 || s.device >= static_cast<int>(byAction.size()) || s.action < 0
                || s.action >= static_cast<int>(byAction[static_cast<std::size_t>(s.device)].size()))
                continue;
            byAction[static_cast<std::size_t>(s.device)][static_cast<std::size_t>(s.action)] = &s;
            if (s.kind == ActionKind::SendActivation || s.kind == ActionKind::SendGradient)
                sent[{s.kind == ActionKind::SendGradient, s.stage, s.microbatch, s.device}] = s.t0;
        }
        // A device is ready from the run's first action on (its first receive waits from there).
        double start = t.spans.empty() ? 0.0 : t.spans.front().t0;
        for (const auto& s : t.spans)
            start = std::min(start, s.t0);
        reached.resize(byAction.size());
        for (std::size_t d = 0; d < byAction.size(); ++d) {
            reached[d].assign(byAction[d].size(), 0.0);
            double last = start;
            for (std::size_t i = 0; i < byAction[d].size(); ++i) {
                const Span* s = byAction[d][i];
                if (!s || !(s->lane == Lane::Compute || blocking(*s)))
                    continue;
                reached[d][i] = std::min(s->t0, last);
                last = std::max(last, s->t1);
            }
        }
    }
    double reachedAt(const Span& s) const
    {
        return reached[static_cast<std::size_t>(s.device)][static_cast<std::size_t>(s.action)];
    }
    const Span* at(int device, std::size_t action) const
    {
        const auto& v = byAction[static_cast<std::size_t>(device)];
        return action < v.size() ? v[action] : nullptr;
    }
};

/// The all-reduces' occurrences: per device and action, the n-th action of its group on that device, and back.
struct Collectives
{
    std::vector<std::vector<int>> occurrence; ///< per device and action: n, or -1
    std::vector<std::map<std::pair<int, int>, int>> action; ///< per device: (group, n) -> action
    explicit Collectives(const Schedule& s)
    {
        occurrence.resize(s.devices.size());
        action.resize(s.devices.size());
        for (std::size_t d = 0; d < s.devices.size(); ++d) {
            std::map<int, int> seen;
            occurrence[d].assign(s.devices[d].size(), -1);
            for (std::size_t i = 0; i < s.devices[d].size(); ++i)
                if (const auto& a = s.devices[d][i]; a.kind == ActionKind::AllReduce) {
                    occurrence[d][i] = seen[a.group]++;
                    action[d][{a.group, occurrence[d][i]}] = static_cast<int>(i);
                }
        }
    }
    /// The action index of the `n`-th action of `group` on `device`, or -1.
    int find(int device, int group, int n) const
    {
        const auto& m = action[static_cast<std::size_t>(device)];
        const auto it = m.find({group, n});
        return it == m.end() ? -1 : it->second;
    }
};

/// @brief When a blocking span's wait for its peer ended, and who it waited for.
struct Ready
{
    double t = 0; ///< the data was sent / the last member arrived (clamped to the span)
    int peer = -1;
};

class Analysis
{
public:
    Analysis(const Timeline& measured, const Timeline& predicted, const Schedule& schedule)
        : m_schedule(schedule)
        , m_measured(measured, schedule)
        , m_predicted(predicted, schedule)
        , m_collectives(schedule)
        , m_hasPrediction(!predicted.spans.empty())
    {
        const int perBatch = std::max(1, schedule.microbatches_per_batch);
        const auto batches = static_cast<std::size_t>(std::max(1, schedule.microbatches / perBatch));
        for (const auto& list : schedule.devices)
            m_period.push_back(list.size() % batches == 0 ? list.size() / batches : 0);
    }

    /// When blocking span `s` of timeline `index` stopped waiting for its peer.
    Ready ready(const SpanIndex& index, const Span& s) const
    {
        const double from = index.reachedAt(s);
        Ready r {from, s.peer};
        if (s.lane == Lane::Recv) {
            const auto it = index.sent.find({s.kind == ActionKind::RecvGradient, s.stage, s.microbatch, s.peer});
            if (it != index.sent.end())
                r.t = it->second;
        } else {
            const auto& a = m_schedule.devices[static_cast<std::size_t>(s.device)][static_cast<std::size_t>(s.action)];
            const int n
                = m_collectives.occurrence[static_cast<std::size_t>(s.device)][static_cast<std::size_t>(s.action)];
            if (a.group >= 0 && n >= 0)
                for (int member : m_schedule.groups[static_cast<std::size_t>(a.group)].devices) {
                    if (member == s.device)
                        continue;
                    const int i = m_collectives.find(member, a.group, n);
                    const Span* other = i >= 0 ? index.at(member, static_cast<std::size_t>(i)) : nullptr;
                    if (other && other->t0 > r.t)
                        r = {other->t0, member};
                }
        }
        r.t = std::clamp(r.t, from, s.t1);
        return r;
    }

    /// The prediction of the same action; for a step past the predicted ones (a run predicts its first few), the
    /// same action of the last predicted step (a flushed schedule repeats its steps).
    const Span* predictedOf(const Span& s) const
    {
        if (!m_hasPrediction)
            return nullptr;
        auto action = static_cast<std::size_t>(s.action);
        const Span* p = m_predicted.at(s.device, action);
        const std::size_t period = m_period[static_cast<std::size_t>(s.device)];
        while (!p && period > 0 && action >= period) {
            action -= period;
            p = m_predicted.at(s.device, action);
        }
        return p;
    }
    /// The prediction's wait for the peer in the same action (0 without one).
    double predictedWait(const Span& s) const
    {
        const Span* p = predictedOf(s);
        return p ? ready(m_predicted, *p).t - m_predicted.reachedAt(*p) : 0.0;
    }
    /// The prediction's duration of the same action (0 without one).
    double predictedDuration(const Span& s) const
    {
        const Span* p = predictedOf(s);
        return p ? p->t1 - p->t0 : 0.0;
    }
    /// The prediction's wire time of the transfer `recv` completes (from both ends ready to delivered).
    double predictedWire(const Span& recv) const
    {
        const Span* p = predictedOf(recv);
        return p ? p->t1 - ready(m_predicted, *p).t : 0.0;
    }

    /// Per device, the end of each complete step (the action index of its last optimizer step and its span).
    std::vector<std::vector<const Span*>> stepEnds() const
    {
        const int perBatch = std::max(1, m_schedule.microbatches_per_batch);
        const int batches = std::max(1, m_schedule.microbatches / perBatch);
        std::vector<std::vector<const Span*>> ends(m_schedule.devices.size());
        for (std::size_t d = 0; d < m_schedule.devices.size(); ++d) {
            std::vector<std::size_t> steps;
            for (std::size_t i = 0; i < m_schedule.devices[d].size(); ++i)
                if (m_schedule.devices[d][i].kind == ActionKind::OptimizerStep)
                    steps.push_back(i);
            if (steps.empty() || steps.size() % static_cast<std::size_t>(batches) != 0)
                continue;
            const std::size_t per = steps.size() / static_cast<std::size_t>(batches);
            for (int b = 0; b < batches; ++b) {
                const Span* end = m_measured.at(static_cast<int>(d), steps[(b + 1) * per - 1]);
                if (!end)
                    break;
                ends[d].push_back(end);
            }
        }
        return ends;
    }

    const Schedule& m_schedule;
    SpanIndex m_measured;
    SpanIndex m_predicted;
    Collectives m_collectives;
    bool m_hasPrediction = false;
    std::vector<std::size_t> m_period; ///< per device: actions per step (0: the steps differ)
};

/// Measured over predicted compute per device over the spans that have both (of kind `kind` only, where given); the
/// median device's.
double speedScale(const Analysis& a, const Timeline& measured, std::optional<ActionKind> kind = std::nullopt)
{
    std::map<int, std::pair<double, double>> perDevice;
    for (const auto& s : measured.spans)
        if (s.lane == Lane::Compute && isCompute(s.kind) && (!kind || s.kind == *kind)) {
            const double p = a.predictedDuration(s);
            if (p > 0) {
                perDevice[s.device].first += s.t1 - s.t0;
                perDevice[s.device].second += p;
            }
        }
    std::vector<double> ratios;
    for (const auto& [d, v] : perDevice)
        ratios.push_back(v.first / v.second);
    if (ratios.empty())
        return 1.0;
    // The median (of an even count, the mean of the middle two).
    std::sort(ratios.begin(), ratios.end());
    const std::size_t n = ratios.size();
    const double m = n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    return m > 0 ? m : 1.0;
}

/// The device's spans by start, and the longest duration (to find the ones overlapping a window).
struct DeviceSpans
{
    std::vector<const Span*> spans;
    double longest = 0;
};

std::vector<DeviceSpans> byDevice(const Timeline& t, std::size_t devices)
{
    std::vector<DeviceSpans> out(devices);
    for (const auto& s : t.spans)
        if (s.device >= 0 && static_cast<std::size_t>(s.device) < devices) {
            auto& d = out[static_cast<std::size_t>(s.device)];
            d.spans.push_back(&s);
            d.longest = std::max(d.longest, s.t1 - s.t0);
        }
    for (auto& d : out)
        std::sort(d.spans.begin(), d.spans.end(), [](const Span* x, const Span* y) { return x->t0 < y->t0; });
    return out;
}

/// @brief The plan as this run's ordinary variation runs it: the schedule replayed in program order on every device,
/// each compute action as long as it measured but at most `cap` x its prediction at the run's pace (beyond that it is
/// late), each transfer and all-reduce as long as it measured once its data was sent / its members arrived, no host
/// gaps. The waits of the replay for peers are the plan's bubble: jitter the schedule absorbs is planned, a straggler's
/// excess is not.
class Replay
{
public:
    Replay(const Analysis& a, const Timeline& measured, double cap)
        : m_a(a)
        , m_cap(cap)
    {
        // The run's pace per kind of compute (the median device's measured over predicted): a forward, a backward and
        // an optimizer step can each be off the prediction by their own factor on every device alike, which is the
        // model's error, not a late device.
        for (const auto& s : measured.spans)
            if (s.lane == Lane::Compute && isCompute(s.kind) && !m_pace.count(s.kind))
                m_pace[s.kind] = speedScale(a, measured, s.kind);
        const auto& s = a.m_schedule;
        const std::size_t n = s.devices.size();
        m_wait.resize(n);
        for (std::size_t d = 0; d < n; ++d)
            m_wait[d].assign(s.devices[d].size(), 0.0);
        double start = std::numeric_limits<double>::infinity();
        for (std::size_t d = 0; d < n; ++d)
            for (const Span* sp : a.m_measured.byAction[d])
                if (sp)
                    start = std::min(start, sp->t0);
        m_cursor.assign(n, std::isfinite(start) ? start : 0.0);
        // How far each device ran: an action before its last measured one that has no span took no time (the
        // simulator records no receive that did not wait).
        m_end.assign(n, 0);
        for (std::size_t d = 0; d < n; ++d)
            for (std::size_t i = 0; i < a.m_measured.byAction[d].size(); ++i)
                if (a.m_measured.byAction[d][i])
                    m_end[d] = i + 1;
        m_pc.assign(n, 0);
        run();
    }

    /// The replay's wait for its peer at action `action` of `device` (0 when it did not reach it).
    double wait(int device, int action) const
    {
        return m_wait[static_cast<std::size_t>(device)][static_cast<std::size_t>(action)];
    }

private:
    void run()
    {
        const auto& s = m_a.m_schedule;
        for (bool progress = true; progress;) {
            progress = false;
            for (std::size_t d = 0; d < s.devices.size(); ++d)
                while (step(static_cast<int>(d)))
                    progress = true;
        }
    }

    /// Runs device `d`'s next action; false when it must wait (or has nothing measured left).
    bool step(int d)
    {
        const auto& list = m_a.m_schedule.devices[static_cast<std::size_t>(d)];
        auto& pc = m_pc[static_cast<std::size_t>(d)];
        auto& cursor = m_cursor[static_cast<std::size_t>(d)];
        if (pc >= m_end[static_cast<std::size_t>(d)])
            return false;
        const Span* sp = m_a.m_measured.at(d, pc);
        const Action& a = list[pc];
        if (isSend(a.kind)) {
            m_sent[{a.kind == ActionKind::SendGradient, a.stage, a.microbatch}] = cursor;
        } else if (isRecv(a.kind)) {
            const auto it = m_sent.find({a.kind == ActionKind::RecvGradient, a.stage, a.microbatch});
            if (it == m_sent.end())
                return false;
            m_wait[static_cast<std::size_t>(d)][pc] = std::max(0.0, it->second - cursor);
            cursor = std::max(cursor, it->second) + (sp ? sp->t1 - m_a.ready(m_a.m_measured, *sp).t : 0.0);
        } else if (a.kind == ActionKind::AllReduce) {
            // Every member's arrival at this occurrence of the group's all-reduce; it ends after the last.
            const int n = m_a.m_collectives.occurrence[static_cast<std::size_t>(d)][pc];
            auto& arrivals = m_arrivals[{a.group, n}];
            arrivals.try_emplace(d, cursor);
            const auto& members = a.group >= 0 ? m_a.m_schedule.groups[static_cast<std::size_t>(a.group)].devices
                                               : std::vector<std::int32_t> {};
            double last = arrivals.at(d);
            for (int member : members) {
                const auto it = arrivals.find(member);
                if (it == arrivals.end())
                    return false;
                last = std::max(last, it->second);
            }
            m_wait[static_cast<std::size_t>(d)][pc] = last - arrivals.at(d);
            cursor = last + (sp ? sp->t1 - m_a.ready(m_a.m_measured, *sp).t : 0.0);
        } else if (sp && sp->lane == Lane::Compute) {
            double duration = sp->t1 - sp->t0;
            if (const double p = m_a.predictedDuration(*sp); p > 0)
                if (const auto pace = m_pace.find(sp->kind); pace != m_pace.end())
                    duration = std::min(duration, m_cap * pace->second * p);
            cursor += duration;
        }
        ++pc;
        return true;
    }

    const Analysis& m_a;
    double m_cap = 1.5;
    std::map<ActionKind, double> m_pace; ///< per compute kind: the run's measured over predicted
    std::vector<std::vector<double>> m_wait;
    std::vector<double> m_cursor;
    std::vector<std::size_t> m_pc;
    std::vector<std::size_t> m_end; ///< per device: one past its last measured action
    std::map<std::pair<int, int>, std::map<int, double>> m_arrivals; ///< (group, occurrence) -> device -> arrival
    std::map<std::tuple<bool, int, int>, double> m_sent;
};

} // namespace

TimeByCause timeByCause(const Timeline& measured, const Timeline& predicted, const Schedule& schedule)
{
    TimeByCause out;
    if (measured.spans.empty())
        return out;
    const Analysis a(measured, predicted, schedule);
    out.scale = a.m_hasPrediction ? speedScale(a, measured) : 1.0;
    std::optional<Replay> replay;
    if (a.m_hasPrediction)
        replay.emplace(a, measured, StragglerRule {}.threshold);
    const auto ends = a.stepEnds();
    const auto spans = byDevice(measured, schedule.devices.size());
    // How far a blocking span waited beyond the plan (0 without a prediction: nothing to follow).
    const auto excessOf = [&](const Span& s) {
        if (!replay)
            return 0.0;
        const double waited = a.ready(a.m_measured, s).t - a.m_measured.reachedAt(s);
        return std::max(0.0, waited - replay->wait(s.device, s.action));
    };
    // Of the device's last few blocking spans that ended by `t`, the one that waited furthest beyond the plan, and by
    // how much (1F1B's forward follows a receive on time, after a backward whose gradient came late).
    const auto lateBefore = [&](int device, double t) -> std::pair<const Span*, double> {
        const auto& ds = spans[static_cast<std::size_t>(device)].spans;
        auto it = std::upper_bound(ds.begin(), ds.end(), t, [](double x, const Span* s) { return x < s->t0; });
        std::pair<const Span*, double> most {nullptr, 0.0};
        for (int looked = 0, found = 0; it != ds.begin() && looked < 64 && found < 4; ++looked) {
            const Span* s = *--it;
            if (!blocking(*s) || s->t1 > t)
                continue;
            ++found;
            if (const double e = excessOf(*s); e > most.second)
                most = {s, e};
        }
        return most;
    };
    // `amount` of device `origin`'s waiting beyond the plan on `peer`, ready at `t`, goes to the device that made it
    // late: the peer, unless the peer was itself waiting beyond the plan just before; then as much as that wait's
    // excess goes on to whom it waited for, and so on (a chain of stages behind a straggler names the straggler),
    // short of `origin` itself (a wait that went round comes back to the peer that passed it on).
    const auto blame = [&](int origin, int peer, double t, double amount, std::map<int, double>& late) {
        for (std::size_t hops = 0; amount > 0 && hops < schedule.devices.size(); ++hops) {
            const auto [before, excess] = peer >= 0 ? lateBefore(peer, t) : std::pair<const Span*, double> {};
            const double passed = std::min(amount, excess);
            const Ready r = passed > 0 ? a.ready(a.m_measured, *before) : Ready {};
            if (passed <= 0 || r.peer < 0 || r.peer == peer || r.peer == origin) {
                late[peer] += amount;
                return;
            }
            late[peer] += amount - passed;
            peer = r.peer;
            t = r.t;
            amount = passed;
        }
        late[peer] += amount;
    };
    double runStart = measured.spans.front().t0;
    for (const auto& s : measured.spans)
        runStart = std::min(runStart, s.t0);
    CommOverlap p2p {CommOverlap::Kind::PointToPoint}, collective {CommOverlap::Kind::Collective};
    bool anyP2p = false, anyCollective = false;

    for (std::size_t d = 0; d < ends.size(); ++d) {
        double t0 = runStart;
        for (std::size_t b = 0; b < ends[d].size(); ++b) {
            const double t1 = ends[d][b]->t1;
            DeviceStep step {static_cast<int>(d), static_cast<int>(b), t0, t1, {}, {}};
            // The spans overlapping [t0, t1].
            const auto& ds = spans[d];
            auto first = std::lower_bound(
                ds.spans.begin(), ds.spans.end(), t0 - ds.longest, [](const Span* s, double t) { return s->t0 < t; });
            std::vector<const Span*> compute, blocked;
            std::vector<double> cuts {t0, t1};
            for (auto it = first; it != ds.spans.end() && (*it)->t0 < t1; ++it) {
                const Span* s = *it;
                if (s->t1 <= t0 || s->t1 <= s->t0)
                    continue;
                if (s->lane == Lane::Compute)
                    compute.push_back(s);
                else if (blocking(*s))
                    blocked.push_back(s);
                else
                    continue;
                cuts.push_back(std::clamp(s->t0, t0, t1));
                cuts.push_back(std::clamp(s->t1, t0, t1));
            }
            // A blocking action blocks from when the device reached it.
            std::vector<Ready> ready;
            std::vector<double> from;
            ready.reserve(blocked.size());
            for (const Span* s : blocked) {
                ready.push_back(a.ready(a.m_measured, *s));
                from.push_back(a.m_measured.reachedAt(*s));
                cuts.push_back(std::clamp(ready.back().t, t0, t1));
                cuts.push_back(std::clamp(from.back(), t0, t1));
            }
            std::sort(cuts.begin(), cuts.end());
            cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
            std::vector<double> wait(blocked.size(), 0.0), exposed(blocked.size(), 0.0),
                computeUnder(blocked.size(), 0.0);
            for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
                const double x = cuts[i], y = cuts[i + 1], mid = (x + y) / 2, len = y - x;
                const bool computing = std::any_of(
                    compute.begin(), compute.end(), [&](const Span* s) { return s->t0 <= mid && mid < s->t1; });
                if (computing) {
                    step.causes.compute_s += len;
                    for (std::size_t j = 0; j < blocked.size(); ++j) // communication hidden under compute
                        if (blocked[j]->t0 <= mid && mid < blocked[j]->t1)
                            computeUnder[j] += len;
                    continue;
                }
                std::size_t cover = blocked.size();
                for (std::size_t j = 0; j < blocked.size(); ++j)
                    if (from[j] <= mid && mid < blocked[j]->t1 && (cover == blocked.size() || from[j] < from[cover]))
                        cover = j;
                if (cover == blocked.size())
                    step.causes.host_gap_s += len;
                else if (mid < ready[cover].t)
                    wait[cover] += len;
                else {
                    exposed[cover] += len;
                    (blocked[cover]->lane == Lane::Recv ? step.causes.p2p_exposed_s : step.causes.collective_exposed_s)
                        += len;
                }
            }
            // Waits: the plan's share of the step's waits (its prediction of them at the run's pace: a wait shorter
            // than planned makes up for a longer one in the same step), the rest on the peers that were late, in
            // proportion to how far each wait went beyond its plan.
            std::map<int, double> late;
            double waited = 0, planned = 0, beyond = 0;
            std::vector<double> excess(blocked.size(), 0.0);
            for (std::size_t j = 0; j < blocked.size(); ++j) {
                const double plan = replay ? replay->wait(blocked[j]->device, blocked[j]->action) : 0.0;
                waited += wait[j];
                planned += plan;
                excess[j] = std::max(0.0, wait[j] - plan);
                beyond += excess[j];
            }
            step.causes.bubble_s = std::min(waited, planned);
            step.causes.late_s = waited - step.causes.bubble_s;
            for (std::size_t j = 0; j < blocked.size() && step.causes.late_s > 0 && beyond > 0; ++j)
                if (excess[j] > 0)
                    blame(
                        static_cast<int>(d), ready[j].peer, ready[j].t, step.causes.late_s * excess[j] / beyond, late);
            for (const auto& [peer, seconds] : late)
                if (seconds > 1e-9) // what a chain passes on whole leaves rounding behind (clocks tick in us)
                    step.late_by.push_back({peer, seconds});
            std::sort(step.late_by.begin(), step.late_by.end(),
                [](const LatePeer& x, const LatePeer& y) { return x.seconds > y.seconds; });
            // Overlap per kind: the exposed parts swept in this step, the hidden parts of the actions ending in it.
            for (std::size_t j = 0; j < blocked.size(); ++j) {
                const Span& s = *blocked[j];
                (s.lane == Lane::Recv ? p2p : collective).exposed_s += exposed[j];
                if (s.t1 > t1)
                    continue;
                if (s.lane == Lane::Recv) {
                    anyP2p = true;
                    // In flight while this device computed: from the send to the receive being reached, at most the
                    // wire time the prediction gives the transfer.
                    const auto it
                        = a.m_measured.sent.find({s.kind == ActionKind::RecvGradient, s.stage, s.microbatch, s.peer});
                    if (it != a.m_measured.sent.end())
                        p2p.overlapped_s += std::min(std::max(0.0, s.t0 - it->second), a.predictedWire(s));
                } else {
                    anyCollective = true;
                    collective.overlapped_s += computeUnder[j];
                }
            }
            out.steps.push_back(std::move(step));
            t0 = t1;
        }
    }
    std::sort(out.steps.begin(), out.steps.end(), [](const DeviceStep& x, const DeviceStep& y) {
        return std::tie(x.step, x.device) < std::tie(y.step, y.device);
    });
    if (anyP2p)
        out.overlap.push_back(p2p);
    if (anyCollective)
        out.overlap.push_back(collective);
    return out;
}

std::string Straggler::text() const
{
    char buf[256];
    const std::string what = peer >= 0 ? "link " + std::to_string(device) + " -> " + std::to_string(peer) + " transfers"
                                       : "device " + std::to_string(device) + " runs " + std::string(toString(kind));
    std::snprintf(buf, sizeof buf, "%s %.1fx slower than its peers and its plan since step %d (+%.0f ms per step)",
        what.c_str(), slowdown, since_step, extra_s * 1e3);
    return buf;
}

std::vector<Straggler> findStragglers(
    const Timeline& measured, const Timeline& predicted, const Schedule& schedule, StragglerRule rule)
{
    std::vector<Straggler> out;
    if (measured.spans.empty() || predicted.spans.empty())
        return out;
    const Analysis a(measured, predicted, schedule);
    const auto ends = a.stepEnds();
    // The steps every device completed.
    std::size_t steps = SIZE_MAX;
    for (std::size_t d = 0; d < ends.size(); ++d)
        if (!schedule.devices[d].empty())
            steps = std::min(steps, ends[d].size());
    if (steps == SIZE_MAX || steps == 0)
        return out;
    // The step each span ends in, on its own device (a transfer: its receiver's): the first step ending after it.
    std::vector<std::vector<double>> endTimes(ends.size());
    for (std::size_t d = 0; d < ends.size(); ++d)
        for (std::size_t b = 0; b < steps && b < ends[d].size(); ++b)
            endTimes[d].push_back(ends[d][b]->t1);
    const auto stepOf = [&](const Span& s) -> int {
        const auto& e = endTimes[static_cast<std::size_t>(s.device)];
        const auto it = std::lower_bound(e.begin(), e.end(), s.t1);
        return it == e.end() ? -1 : static_cast<int>(it - e.begin());
    };
    // (key, step) -> measured, predicted; keys: (device, kind, -1) for compute, (sender, SendActivation, receiver).
    using Key = std::tuple<int, ActionKind, int>;
    std::map<Key, std::vector<std::pair<double, double>>> sums;
    std::vector<double> stepTime(steps, 0.0);
    for (std::size_t d = 0; d < ends.size(); ++d)
        for (std::size_t b = 0; b < steps && b < ends[d].size(); ++b)
            stepTime[b] = std::max(stepTime[b], ends[d][b]->t1 - (b > 0 ? ends[d][b - 1]->t1 : 0.0));
    for (const auto& s : measured.spans) {
        Key key;
        double got = 0, want = 0;
        if (s.lane == Lane::Compute && isCompute(s.kind) && s.kind != ActionKind::OptimizerStep) {
            key = {s.device, s.kind, -1};
            got = s.t1 - s.t0;
            want = a.predictedDuration(s);
        } else if (s.lane == Lane::Recv && s.peer >= 0) {
            key = {s.peer, ActionKind::SendActivation, s.device};
            const auto it = a.m_measured.sent.find({s.kind == ActionKind::RecvGradient, s.stage, s.microbatch, s.peer});
            if (it == a.m_measured.sent.end())
                continue;
            got = s.t1 - std::max(s.t0, it->second);
            want = a.predictedWire(s);
        } else {
            continue;
        }
        const int b = stepOf(s);
        if (b < 0 || want <= 0)
            continue;
        auto& v = sums[key];
        v.resize(steps, {0.0, 0.0});
        v[static_cast<std::size_t>(b)].first += got;
        v[static_cast<std::size_t>(b)].second += want;
    }
    // The pace of the median device (link) per kind and step: measured over predicted.
    const auto pace = [&](bool link, ActionKind kind, std::size_t b) {
        std::vector<double> ratios;
        for (const auto& [key, v] : sums)
            if ((std::get<2>(key) >= 0) == link && (link || std::get<1>(key) == kind) && v[b].second > 0)
                ratios.push_back(v[b].first / v[b].second);
        return lowerMedian(ratios);
    };
    // Slow by `factor` x the rule (1: the rule; 2: twice its threshold and share, what one step alone must show).
    const auto slow = [&](const Key& key, std::size_t b, double& ratio, double& extra, double factor = 1) {
        const auto& v = sums.at(key)[b];
        const double p = pace(std::get<2>(key) >= 0, std::get<1>(key), b);
        if (v.second <= 0 || p <= 0)
            return false;
        ratio = v.first / (v.second * p);
        extra = v.first - v.second * p;
        return ratio > factor * rule.threshold && extra >= factor * rule.min_share * stepTime[b];
    };
    const std::size_t last = steps - 1;
    for (const auto& [key, v] : sums) {
        double ratio = 0, extra = 0, r = 0, e = 0;
        // Slow in the latest step, and in the one before or (a device) by twice the rule: one slow step alone is
        // noise, and a link's transfers, short and at the mercy of both hosts' schedulers, always need two.
        const bool link = std::get<2>(key) >= 0;
        if (!slow(key, last, ratio, extra)
            || !((!link && slow(key, last, r, e, 2)) || (last > 0 && slow(key, last - 1, r, e))))
            continue;
        Straggler s;
        s.device = std::get<0>(key);
        s.kind = std::get<1>(key);
        s.peer = std::get<2>(key);
        s.slowdown = ratio;
        s.extra_s = extra;
        s.last_step = static_cast<int>(last);
        s.since_step = static_cast<int>(last);
        while (s.since_step > 0 && slow(key, static_cast<std::size_t>(s.since_step - 1), r, e))
            --s.since_step;
        out.push_back(s);
    }
    std::sort(out.begin(), out.end(), [](const Straggler& x, const Straggler& y) { return x.extra_s > y.extra_s; });
    return out;
}

std::string timeByCauseText(const TimeByCause& t, const std::vector<Straggler>& stragglers)
{
    std::string out;
    char buf[512];
    const int steps = t.stepCount();
    if (steps == 0)
        return "time by cause: no complete step measured\n";
    std::snprintf(buf, sizeof buf,
        "time by cause, per step (mean of %d complete steps; the plan replayed at the run's pace, %.2fx the "
        "prediction):\n",
        steps, t.scale);
    out += buf;
    std::snprintf(buf, sizeof buf, "  %-7s %10s %14s %14s %14s %14s %14s %14s\n", "device", "step (ms)", "compute",
        "p2p exposed", "coll. exposed", "bubble", "late", "host gap");
    out += buf;
    const auto cell = [&](double s, double step) {
        char c[32];
        std::snprintf(c, sizeof c, "%7.2f %5.1f%%", s * 1e3 / steps, step > 0 ? 100.0 * s / step : 0.0);
        return std::string(c);
    };
    for (int d = 0; d < t.deviceCount(); ++d) {
        const TimeCauses c = t.device(d);
        const double total = c.total();
        std::snprintf(buf, sizeof buf, "  %-7d %10.2f %14s %14s %14s %14s %14s %14s\n", d, total * 1e3 / steps,
            cell(c.compute_s, total).c_str(), cell(c.p2p_exposed_s, total).c_str(),
            cell(c.collective_exposed_s, total).c_str(), cell(c.bubble_s, total).c_str(), cell(c.late_s, total).c_str(),
            cell(c.host_gap_s, total).c_str());
        out += buf;
        std::map<int, double> late;
        for (const auto& s : t.steps)
            if (s.device == d)
                for (const auto& l : s.late_by)
                    late[l.peer] += l.seconds;
        for (const auto& [peer, seconds] : late) {
            std::snprintf(buf, sizeof buf, "          late: waited %.2f ms per step beyond the plan on device %d\n",
                seconds * 1e3 / steps, peer);
            out += buf;
        }
    }
    for (const auto& o : t.overlap) {
        std::snprintf(buf, sizeof buf,
            "  %s: %.2f ms exposed, %.2f ms overlapped with compute per step (%.0f%% overlap)\n",
            std::string(toString(o.kind)).c_str(), o.exposed_s * 1e3 / steps, o.overlapped_s * 1e3 / steps,
            o.percent());
        out += buf;
    }
    out += "  tensor-parallel collectives run inside F and B and are counted as compute\n";
    if (stragglers.empty())
        out += "stragglers: none\n";
    for (const auto& s : stragglers)
        out += "straggler: " + s.text() + "\n";
    return out;
}

} // namespace pw::planner
