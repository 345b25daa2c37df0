// SPDX-License-Identifier: MIT
// Timeline to Chrome Trace Event JSON (Perfetto, chrome://tracing) and Schedule to a per-device CSV.
#include "chrome_trace.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
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
    int lastKey = -1;
    std::vector<std::int64_t>* current = nullptr; // rowEnds[lastKey]: spans come grouped by key
    for (std::size_t i : order) {
        int key = spans[i].device * kLaneCount + static_cast<int>(spans[i].lane);
        if (key != lastKey) {
            current = &rowEnds[key];
            lastKey = key;
        }
        auto& ends = *current;
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
    struct Key
    {
        int kind, stage, microbatch;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash
    {
        std::size_t operator()(const Key& k) const
        {
            const auto packed = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.stage)) << 32)
                ^ static_cast<std::uint32_t>(k.microbatch) ^ (static_cast<std::uint64_t>(k.kind) << 56);
            return std::hash<std::uint64_t> {}(packed);
        }
    };
    std::unordered_map<Key, std::vector<std::size_t>, KeyHash> targets;
    targets.reserve(spans.size());
    std::vector<std::size_t> sends;
    for (std::size_t i = 0; i < spans.size(); ++i) {
        const Span& s = spans[i];
        // A gradient flows into the fused backward, or into the input-gradient half of a split one (zero-bubble
        // schedules): both are keyed as Backward.
        const bool input = s.kind == ActionKind::BackwardInput;
        bool consumer
            = s.lane == Lane::Compute && (s.kind == ActionKind::Forward || s.kind == ActionKind::Backward || input);
        if (isRecv(s.kind) || consumer)
            targets[Key {static_cast<int>(input ? ActionKind::Backward : s.kind), s.stage, s.microbatch}].push_back(i);
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

/// @brief Writes JSON text straight to a stream through a fixed buffer: no document is built, so the memory
/// an export needs does not grow with the trace it writes.
class TraceWriter
{
public:
    explicit TraceWriter(std::ostream& out)
        : m_out(out)
    {
    }
    ~TraceWriter() { flush(); }
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    void raw(std::string_view text)
    {
        if (m_used + text.size() > sizeof m_buffer)
            flush();
        if (text.size() > sizeof m_buffer) {
            m_out.write(text.data(), static_cast<std::streamsize>(text.size()));
            return;
        }
        std::memcpy(m_buffer + m_used, text.data(), text.size());
        m_used += text.size();
    }
    void character(char c)
    {
        if (m_used == sizeof m_buffer)
            flush();
        m_buffer[m_used++] = c;
    }
    /// A JSON string literal, escaped.
    void string(std::string_view text)
    {
        character('"');
        for (char c : text) {
            const auto u = static_cast<unsigned char>(c);
            if (c == '"' || c == '\\') {
                character('\\');
                character(c);
            } else if (u < 0x20) {
                static constexpr char kHex[] = "0123456789abcdef";
                raw("\\u00");
                character(kHex[u >> 4]);
                character(kHex[u & 15]);
            } else {
                character(c);
            }
        }
        character('"');
    }
    void integer(long long v) { number(v); }
    /// The shortest text that reads back as the same double (as nlohmann writes it).
    void real(double v)
    {
        if (!std::isfinite(v)) {
            raw("null"); // as nlohmann writes non-finite numbers
            return;
        }
        if (v == std::floor(v) && std::fabs(v) < 1e15) {
            number(static_cast<long long>(v));
            raw(".0");
            return;
        }
        number(v);
    }
    /// `"key":` (keys are plain ASCII here).
    void key(std::string_view k)
    {
        character('"');
        raw(k);
        raw("\":");
    }
    void flush()
    {
        if (m_used > 0)
            m_out.write(m_buffer, static_cast<std::streamsize>(m_used));
        m_used = 0;
    }

private:
    template <typename T> void number(T v)
    {
        if (m_used + 32 > sizeof m_buffer)
            flush();
        auto [end, ec] = std::to_chars(m_buffer + m_used, m_buffer + sizeof m_buffer, v);
        m_used = static_cast<std::size_t>(end - m_buffer);
    }

    std::ostream& m_out;
    char m_buffer[1 << 16];
    std::size_t m_used = 0;
};

/// One "M" event: {"ph":"M","name":NAME,"pid":PID[,"tid":TID],"args":{ARG:VALUE}}.
template <typename Value>
void metadata(TraceWriter& w, bool& first, const char* name, int pid, int tid, const char* arg, const Value& value)
{
    w.raw(first ? "\n" : ",\n");
    first = false;
    w.raw("{\"ph\":\"M\",\"name\":\"");
    w.raw(name);
    w.raw("\",\"pid\":");
    w.integer(pid);
    if (tid >= 0) {
        w.raw(",\"tid\":");
        w.integer(tid);
    }
    w.raw(",\"args\":{");
    w.key(arg);
    if constexpr (std::is_integral_v<Value>)
        w.integer(value);
    else
        w.string(value);
    w.raw("}}");
}

} // namespace

void writeChromeTrace(std::ostream& out, const Timeline& timeline)
{
    std::map<int, int> rows;
    const std::vector<Placed> placed = placeSpans(timeline, rows);

    int devices = static_cast<int>(timeline.device_names.size());
    for (const auto& s : timeline.spans)
        devices = std::max(devices, s.device + 1);
    for (const auto& c : timeline.counters)
        for (const auto& m : c.samples)
            devices = std::max(devices, m.device + 1);

    TraceWriter w(out);
    bool first = true;
    w.raw("{\"traceEvents\":[");
    for (int d = 0; d < devices; ++d) {
        std::string name = d < static_cast<int>(timeline.device_names.size()) && !timeline.device_names[d].empty()
            ? timeline.device_names[d]
            : "device " + std::to_string(d);
        metadata(w, first, "process_name", d, -1, "name", name);
        metadata(w, first, "process_sort_index", d, -1, "sort_index", d);
        for (int lane = 0; lane < kLaneCount; ++lane) {
            auto it = rows.find(d * kLaneCount + lane);
            int laneRows = it == rows.end() ? 1 : it->second;
            for (int row = 0; row < laneRows; ++row) {
                int tid = lane + kLaneCount * row;
                metadata(w, first, "thread_name", d, tid, "name", laneName(lane, row));
                metadata(w, first, "thread_sort_index", d, tid, "sort_index", lane * 1000 + row);
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
        w.raw(first ? "\n" : ",\n");
        first = false;
        w.raw("{\"ph\":\"X\",\"name\":\""); // "F s2 mb5": kind, stage, microbatch
        w.raw(toString(s.kind));
        w.raw(" s");
        w.integer(s.stage);
        if (s.microbatch >= 0) {
            w.raw(" mb");
            w.integer(s.microbatch);
        }
        w.character('"');
        w.raw(",\"cat\":\"");
        w.raw(toString(s.lane));
        w.character(',');
        w.raw(toString(s.kind));
        w.raw("\",\"ts\":");
        w.real(nsToUs(placed[i].t0));
        w.raw(",\"dur\":");
        w.real(nsToUs(placed[i].t1 - placed[i].t0));
        w.raw(",\"pid\":");
        w.integer(s.device);
        w.raw(",\"tid\":");
        w.integer(placed[i].tid);
        w.raw(",\"args\":{\"stage\":");
        w.integer(s.stage);
        w.raw(",\"microbatch\":");
        w.integer(s.microbatch);
        w.raw(",\"kind\":\"");
        w.raw(toString(s.kind));
        w.raw("\",\"action\":");
        w.integer(s.action);
        w.raw("}}");
    }

    // Flow arrows: "s" on the send slice, "f" bound (bp "e") to the enclosing receive (or consuming) slice.
    // A receive is often posted before the send starts; the "f" then sits at the send's start inside the
    // receive slice, because a flow may not end before it begins.
    long long flowId = 0;
    for (const auto& [si, ri] : matchTransfers(timeline, placed)) {
        const Span& send = timeline.spans[si];
        const Span& recv = timeline.spans[ri];
        const char* name = send.kind == ActionKind::SendActivation ? "activation mb" : "gradient mb";
        ++flowId;
        for (bool start : {true, false}) {
            w.raw(first ? "\n" : ",\n");
            first = false;
            w.raw(start ? "{\"ph\":\"s\",\"id\":" : "{\"ph\":\"f\",\"bp\":\"e\",\"id\":");
            w.integer(flowId);
            w.raw(",\"name\":\"");
            w.raw(name);
            w.integer(send.microbatch);
            w.raw("\",\"cat\":\"p2p\",\"ts\":");
            w.real(nsToUs(start ? placed[si].t0 : std::max(placed[ri].t0, placed[si].t0)));
            w.raw(",\"pid\":");
            w.integer(start ? send.device : recv.device);
            w.raw(",\"tid\":");
            w.integer(start ? placed[si].tid : placed[ri].tid);
            w.character('}');
        }
    }

    // One counter track per (device, counter); its series is named after the unit ("bytes" for memory).
    for (const auto& c : timeline.counters) {
        const std::string series = c.unit == "B" ? "bytes" : c.unit.empty() ? "value" : c.unit;
        for (const auto& m : c.samples) {
            w.raw(first ? "\n" : ",\n");
            first = false;
            w.raw("{\"ph\":\"C\",\"name\":");
            w.string(c.name);
            w.raw(",\"ts\":");
            w.real(nsToUs(toNs(m.t)));
            w.raw(",\"pid\":");
            w.integer(m.device);
            w.raw(",\"args\":{");
            w.string(series);
            w.character(':');
            w.real(m.value);
            w.raw("}}");
        }
    }

    w.raw("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"label\":");
    w.string(timeline.label);
    w.raw(",\"source\":");
    w.string(timeline.source == Timeline::Source::Predicted ? "predicted" : "measured");
    w.raw("}}\n");
    w.flush();
}

void writeChromeTraceFile(const std::string& path, const Timeline& timeline)
{
    // Written beside the target and renamed at the end, so that an error cannot leave half a trace behind.
    const std::string partial = path + ".partial";
    {
        std::ofstream out(partial, std::ios::binary | std::ios::trunc);
        if (!out)
            throw InputError(path, 0, "", std::string("cannot write: ") + std::strerror(errno));
        try {
            writeChromeTrace(out, timeline);
        } catch (...) {
            out.close();
            std::remove(partial.c_str());
            throw;
        }
        out.flush();
        if (!out) {
            std::remove(partial.c_str());
            throw InputError(path, 0, "", std::string("cannot write: ") + std::strerror(errno));
        }
    }
    std::error_code ec;
    std::filesystem::rename(partial, path, ec);
    if (ec) {
        std::remove(partial.c_str());
        throw InputError(path, 0, "", "cannot write: " + ec.message());
    }
}

json chromeTrace(const Timeline& timeline)
{
    std::stringstream text;
    writeChromeTrace(text, timeline);
    return json::parse(text);
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
