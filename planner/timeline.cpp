// SPDX-License-Identifier: MIT
#include "timeline.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_fields.h"

namespace pw::planner {

using nlohmann::json;

namespace {
constexpr std::array<std::string_view, 4> kLaneNames = {"compute", "send", "recv", "collective"};

Lane laneFromString(const std::string& name, const std::string& path)
{
    for (std::size_t i = 0; i < kLaneNames.size(); ++i)
        if (kLaneNames[i] == name)
            return static_cast<Lane>(i);
    fields::fail(path, "unknown lane '" + name + "'");
}
} // namespace

std::string_view toString(Lane lane)
{
    return kLaneNames[static_cast<std::size_t>(lane)];
}

double Timeline::endTime() const
{
    double end = 0;
    for (const auto& s : spans)
        end = std::max(end, s.t1);
    return end;
}

json toJson(const Timeline& t)
{
    // Spans as rows of a table keep the file compact: [device, lane, kind, stage, microbatch, action, t0, t1, peer].
    json spans = json::array();
    for (const auto& s : t.spans)
        spans.push_back(
            {s.device, toString(s.lane), toString(s.kind), s.stage, s.microbatch, s.action, s.t0, s.t1, s.peer});
    json memory = json::array();
    for (const auto& m : t.memory)
        memory.push_back({m.device, m.t, m.bytes});
    return {{"format_version", kTimelineFormatVersion},
        {"source", t.source == Timeline::Source::Predicted ? "predicted" : "measured"}, {"label", t.label},
        {"device_names", t.device_names},
        {"span_columns", {"device", "lane", "kind", "stage", "microbatch", "action", "t0_s", "t1_s", "peer"}},
        {"spans", std::move(spans)}, {"memory_columns", {"device", "t_s", "bytes"}}, {"memory", std::move(memory)}};
}

Timeline timelineFromJson(const json& j)
{
    namespace f = fields;
    f::object(j, "");
    f::checkVersion(j, "timeline", kTimelineFormatVersion);
    Timeline t;
    auto source = f::stringOr(j, "source", "", "predicted");
    if (source != "predicted" && source != "measured")
        f::fail("/source", "must be 'predicted' or 'measured'");
    t.source = source == "predicted" ? Timeline::Source::Predicted : Timeline::Source::Measured;
    t.label = f::stringOr(j, "label", "", "");
    if (j.contains("device_names"))
        for (const auto& n : f::array(j, "device_names", "")) {
            if (!n.is_string())
                f::fail("/device_names", "expected strings");
            t.device_names.push_back(n.get<std::string>());
        }
    const auto& spans = f::array(j, "spans", "");
    for (std::size_t i = 0; i < spans.size(); ++i) {
        auto path = f::child("/spans", i);
        const auto& r = spans[i];
        if (!r.is_array() || (r.size() != 8 && r.size() != 9))
            f::fail(path, "expected [device, lane, kind, stage, microbatch, action, t0_s, t1_s, peer]");
        for (std::size_t c = 0; c < r.size(); ++c)
            if ((c == 1 || c == 2) ? !r[c].is_string() : !r[c].is_number())
                f::fail(f::child(path, c), c == 1 || c == 2 ? "expected a string" : "expected a number");
        Span s;
        s.device = r[0].get<int>();
        s.lane = laneFromString(r[1].get<std::string>(), f::child(path, 1));
        try {
            s.kind = actionKindFromString(r[2].get<std::string>());
        } catch (const InputError& e) {
            f::fail(f::child(path, 2), e.message());
        }
        s.stage = r[3].get<int>();
        s.microbatch = r[4].get<int>();
        s.action = r[5].get<int>();
        s.t0 = r[6].get<double>();
        s.t1 = r[7].get<double>();
        if (r.size() == 9)
            s.peer = r[8].get<int>();
        if (!(s.t1 >= s.t0))
            f::fail(f::child(path, 7), "span ends before it starts");
        t.spans.push_back(s);
    }
    if (j.contains("memory")) {
        const auto& mem = f::array(j, "memory", "");
        for (std::size_t i = 0; i < mem.size(); ++i) {
            const auto& r = mem[i];
            if (!r.is_array() || r.size() != 3 || !r[0].is_number() || !r[1].is_number() || !r[2].is_number())
                f::fail(f::child("/memory", i), "expected [device, t_s, bytes]");
            t.memory.push_back({r[0].get<int>(), r[1].get<double>(), r[2].get<double>()});
        }
    }
    return t;
}

} // namespace pw::planner
