// SPDX-License-Identifier: MIT
// Timeline to Chrome Trace Event JSON (Perfetto, chrome://tracing) and Schedule to a per-device CSV.
#include "chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "../errors.h"

namespace pw::planner {

using nlohmann::json;

namespace {

constexpr int kLaneCount = 4;

// Times are rounded to whole nanoseconds before anything is compared, so that slices placed back to back
// by the simulator stay back to back (not overlapping by a rounding error) in the microseconds we write.
std::int64_t toNs(double seconds)
{
    return std::llround(seconds * 1e9);
}
double nsToUs(std::int64_t ns)
{
    return static_cast<double>(ns) / 1e3;
}

std::string laneName(int lane, int row)
{
    std::string name(toString(static_cast<Lane>(lane)));
    return row == 0 ? name : name + " " + std::to_string(row + 1);
}

std::string spanName(const Span& s)
{
    std::string name(toString(s.kind));
    name += " s" + std::to_string(s.stage);
    if (s.microbatch >= 0)
        name += " mb" + std::to_string(s.microbatch);
    return name;
}

json metadata(const char* name, int pid, int tid, json args)
{
    json e = {{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", std::move(args)}};
    if (tid >= 0)
        e["tid"] = tid;
    return e;
}

struct Placed
{
    std::int64_t t0 = 0;
    std::int64_t t1 = 0;
    int tid = 0;
};

/// Lanes may hold overlapping spans (a device can have sends to two peers in flight), but Perfetto does not
/// allow overlapping slices on one thread. Overlapping spans go to extra rows of their lane: row r of lane
/// k is tid k + 4r, named "send 2", "send 3", ...
std::vector<Placed> placeSpans(const Timeline& timeline, std::map<int, int>& rowsPerDeviceLane)
{
    const auto& spans = timeline.spans;
    std::vector<Placed> placed(spans.size());
    std::vector<std::size_t> order(spans.size());
    std::iota(order.begin(), order.end(), std::size_t {0});
    for (std::size_t i = 0; i < spans.size(); ++i) {
        placed[i].t0 = toNs(spans[i].t0);
        placed[i].t1 = toNs(spans[i].t1);
        if (spans[i].device < 0 || !std::isfinite(spans[i].t0) || !(spans[i].t1 >= spans[i].t0))
            throw InputError(
                "chrome trace: span " + std::to_string(i) + " has a negative device or ends before it starts");
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const auto& x = spans[a];
        const auto& y = spans[b];
        return std::tie(x.device, x.lane, placed[a].t0, placed[a].t1)
            < std::tie(y.device, y.lane, placed[b].t0, placed[b].t1);
    });
    std::map<int, std::vector<std::int64_t>> rowEnds; // key device * 4 + lane
    for (std::size_t i : order) {
        int key = spans[i].device * kLaneCount + static_cast<int>(spans[i].lane);
        auto& ends = rowEnds[key];
        std::size_t row = 0;
        while (row < ends.size() && ends[row] > placed[i].t0)
            ++row;
        if (row == ends.size())
            ends.push_back(placed[i].t1);
        else
            ends[row] = placed[i].t1;
        placed[i].tid = static_cast<int>(spans[i].lane) + kLaneCount * static_cast<int>(row);
    }
    for (const auto& [key, ends] : rowEnds)
        rowsPerDeviceLane[key] = static_cast<int>(ends.size());
    return placed;
}

/// Pairs every send with the slice its data lands in. That is its receive: same transfer kind, stage and
/// microbatch (the schedule labels both ends of a transfer with the stage that produced the tensor:
/// "2SEND_F5" on stage 2, "2RECV_F5" on stage 3), a different device, the peers when the spans know them.
/// A timeline has no receive slice when the data was there before the receiver asked for it (the simulator
/// records only waits); the arrow then ends on the compute that consumes the data: F of the next stage for
/// an activation, B of the previous stage for a gradient. Candidates are taken in time order, so repeated
/// transfers of one tensor between the same devices pair up first in, first out.
std::vector<std::pair<std::size_t, std::size_t>> matchTransfers(
    const Timeline& timeline, const std::vector<Placed>& placed)
{
    const auto& spans = timeline.spans;
    using Key = std::tuple<int, int, int>; // (kind, stage, microbatch)
    std::map<Key, std::vector<std::size_t>> targets;
    std::vector<std::size_t> sends;
    for (std::size_t i = 0; i < spans.size(); ++i) {
        const Span& s = spans[i];
        bool consumer = s.lane == Lane::Compute && (s.kind == ActionKind::Forward || s.kind == ActionKind::Backward);
        if (isRecv(s.kind) || consumer)
            targets[{static_cast<int>(s.kind), s.stage, s.microbatch}].push_back(i);
        else if (isSend(s.kind))
            sends.push_back(i);
    }
    auto byStart = [&](std::size_t a, std::size_t b) { return placed[a].t0 < placed[b].t0; };
    for (auto& [key, list] : targets)
        std::stable_sort(list.begin(), list.end(), byStart);
    std::stable_sort(sends.begin(), sends.end(), byStart);

    std::vector<bool> used(spans.size(), false);
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    for (std::size_t si : sends) {
        const Span& send = spans[si];
        const bool activation = send.kind == ActionKind::SendActivation;
        auto fits = [&](std::size_t ti) {
            const Span& target = spans[ti];
            return !used[ti] && target.device != send.device && (send.peer < 0 || send.peer == target.device)
                && (target.peer < 0 || target.peer == send.device) && placed[ti].t1 >= placed[si].t0;
        };
        const Key receive {static_cast<int>(activation ? ActionKind::RecvActivation : ActionKind::RecvGradient),
            send.stage, send.microbatch};
        const Key consume {static_cast<int>(activation ? ActionKind::Forward : ActionKind::Backward),
            send.stage + (activation ? 1 : -1), send.microbatch};
        for (const Key& key : {receive, consume}) {
            auto it = targets.find(key);
            if (it == targets.end())
                continue;
            auto found = std::find_if(it->second.begin(), it->second.end(), fits);
            if (found != it->second.end()) {
                used[*found] = true;
                pairs.emplace_back(si, *found);
                break;
            }
        }
    }
    return pairs;
}

} // namespace

json chromeTrace(const Timeline& timeline)
{
    std::map<int, int> rows;
    const std::vector<Placed> placed = placeSpans(timeline, rows);

    int devices = static_cast<int>(timeline.device_names.size());
    for (const auto& s : timeline.spans)
        devices = std::max(devices, s.device + 1);
    for (const auto& c : timeline.counters)
        for (const auto& m : c.samples)
            devices = std::max(devices, m.device + 1);

    json events = json::array();
    for (int d = 0; d < devices; ++d) {
        std::string name = d < static_cast<int>(timeline.device_names.size()) && !timeline.device_names[d].empty()
            ? timeline.device_names[d]
            : "device " + std::to_string(d);
        events.push_back(metadata("process_name", d, -1, {{"name", name}}));
        events.push_back(metadata("process_sort_index", d, -1, {{"sort_index", d}}));
        for (int lane = 0; lane < kLaneCount; ++lane) {
            auto it = rows.find(d * kLaneCount + lane);
            int laneRows = it == rows.end() ? 1 : it->second;
            for (int row = 0; row < laneRows; ++row) {
                int tid = lane + kLaneCount * row;
                events.push_back(metadata("thread_name", d, tid, {{"name", laneName(lane, row)}}));
                events.push_back(metadata("thread_sort_index", d, tid, {{"sort_index", lane * 1000 + row}}));
            }
        }
    }

    // Slices come before the flow events that bind to them: viewers that meet a flow and a slice at the same
    // timestamp handle them in file order.
    std::vector<std::size_t> order(timeline.spans.size());
    std::iota(order.begin(), order.end(), std::size_t {0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return std::tie(timeline.spans[a].device, placed[a].tid, placed[a].t0)
            < std::tie(timeline.spans[b].device, placed[b].tid, placed[b].t0);
    });
    for (std::size_t i : order) {
        const Span& s = timeline.spans[i];
        events.push_back({{"ph", "X"}, {"name", spanName(s)},
            {"cat", std::string(toString(s.lane)) + "," + std::string(toString(s.kind))}, {"ts", nsToUs(placed[i].t0)},
            {"dur", nsToUs(placed[i].t1 - placed[i].t0)}, {"pid", s.device}, {"tid", placed[i].tid},
            {"args",
                {{"stage", s.stage}, {"microbatch", s.microbatch}, {"kind", toString(s.kind)}, {"action", s.action}}}});
    }

    // Flow arrows: "s" on the send slice, "f" bound (bp "e") to the enclosing receive (or consuming) slice.
    // A receive is often posted before the send starts; the "f" then sits at the send's start inside the
    // receive slice, because a flow may not end before it begins.
    int flowId = 0;
    for (const auto& [si, ri] : matchTransfers(timeline, placed)) {
        const Span& send = timeline.spans[si];
        const Span& recv = timeline.spans[ri];
        std::string name = send.kind == ActionKind::SendActivation ? "activation" : "gradient";
        name += " mb" + std::to_string(send.microbatch);
        ++flowId;
        events.push_back({{"ph", "s"}, {"id", flowId}, {"name", name}, {"cat", "p2p"}, {"ts", nsToUs(placed[si].t0)},
            {"pid", send.device}, {"tid", placed[si].tid}});
        events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", flowId}, {"name", name}, {"cat", "p2p"},
            {"ts", nsToUs(std::max(placed[ri].t0, placed[si].t0))}, {"pid", recv.device}, {"tid", placed[ri].tid}});
    }

    // One counter track per (device, counter); its series is named after the unit ("bytes" for memory).
    for (const auto& c : timeline.counters) {
        const std::string series = c.unit == "B" ? "bytes" : c.unit.empty() ? "value" : c.unit;
        for (const auto& m : c.samples)
            events.push_back({{"ph", "C"}, {"name", c.name}, {"ts", nsToUs(toNs(m.t))}, {"pid", m.device},
                {"args", {{series, m.value}}}});
    }

    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"},
        {"otherData",
            {{"label", timeline.label},
                {"source", timeline.source == Timeline::Source::Predicted ? "predicted" : "measured"}}}};
}

std::string actionsCsv(const Schedule& schedule)
{
    std::string out;
    for (std::size_t d = 0; d < schedule.devices.size(); ++d) {
        out += std::to_string(d);
        for (const auto& action : schedule.devices[d]) {
            out += ',';
            out += actionLabel(action);
        }
        out += '\n';
    }
    return out;
}

} // namespace pw::planner
