// SPDX-License-Identifier: MIT
#include "schedule.h"

#include <array>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_fields.h"

namespace pw::planner {

using nlohmann::json;

namespace {
constexpr std::array<std::string_view, 12> kKindNames = {
    "F",
    "B",
    "W",
    "SEND_F",
    "RECV_F",
    "SEND_B",
    "RECV_B",
    "ALLREDUCE",
    "OPTIMIZER_STEP",
    "WAVE_PUSH",
    "WAVE_PULL",
    "I",
};
}

std::string_view toString(ActionKind kind)
{
    return kKindNames[static_cast<std::size_t>(kind)];
}

ActionKind actionKindFromString(std::string_view name)
{
    for (std::size_t i = 0; i < kKindNames.size(); ++i)
        if (kKindNames[i] == name)
            return static_cast<ActionKind>(i);
    throw InputError("unknown action kind '" + std::string(name) + "'");
}

bool isCompute(ActionKind kind)
{
    return kind == ActionKind::Forward || isBackward(kind) || kind == ActionKind::OptimizerStep;
}

bool isBackward(ActionKind kind)
{
    return kind == ActionKind::Backward || kind == ActionKind::BackwardInput || kind == ActionKind::BackwardWeight;
}

bool isSend(ActionKind kind)
{
    return kind == ActionKind::SendActivation || kind == ActionKind::SendGradient;
}
bool isRecv(ActionKind kind)
{
    return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGradient;
}

bool isWaveSync(ActionKind kind)
{
    return kind == ActionKind::WavePush || kind == ActionKind::WavePull;
}

std::size_t Schedule::actionCount() const
{
    std::size_t n = 0;
    for (const auto& d : devices)
        n += d.size();
    return n;
}

std::string actionLabel(const Action& a)
{
    std::string s = std::to_string(a.stage);
    s += toString(a.kind);
    if (a.microbatch >= 0 && a.kind != ActionKind::AllReduce && a.kind != ActionKind::OptimizerStep)
        s += std::to_string(a.microbatch);
    if (isWaveSync(a.kind))
        s += "_W" + std::to_string(a.wave);
    return s;
}

json toJson(const Schedule& s)
{
    json groups = json::array();
    for (const auto& g : s.groups) {
        json jg = {{"stage", g.stage}, {"devices", g.devices}};
        if (g.purpose == CollectivePurpose::TiedWeights)
            jg["purpose"] = "tied_weights"; // absent: the replicas of the stage
        groups.push_back(std::move(jg));
    }
    json devices = json::array();
    for (const auto& list : s.devices) {
        json actions = json::array();
        for (const auto& a : list) {
            json ja = {{"kind", toString(a.kind)}, {"stage", a.stage}, {"microbatch", a.microbatch},
                {"weight_version", a.weight_version}};
            if (a.peer >= 0)
                ja["peer"] = a.peer;
            if (a.group >= 0)
                ja["group"] = a.group;
            if (a.bytes > 0)
                ja["bytes"] = a.bytes;
            if (a.wave >= 0)
                ja["wave"] = a.wave;
            if (a.overlaps_next)
                ja["overlaps_next"] = true;
            actions.push_back(std::move(ja));
        }
        devices.push_back(std::move(actions));
    }
    return {{"format_version", kScheduleFormatVersion}, {"kind", s.kind}, {"num_devices", s.num_devices},
        {"num_stages", s.num_stages}, {"microbatches", s.microbatches},
        {"microbatches_per_batch", s.microbatches_per_batch}, {"chunks", s.chunks}, {"groups", std::move(groups)},
        {"devices", std::move(devices)}};
}

Schedule scheduleFromJson(const json& j)
{
    namespace f = fields;
    f::object(j, "");
    f::checkVersion(j, "schedule", kScheduleFormatVersion);
    Schedule s;
    s.kind = f::string(j, "kind", "");
    s.num_devices = f::integer(j, "num_devices", "");
    s.num_stages = f::integer(j, "num_stages", "");
    s.microbatches = f::integer(j, "microbatches", "");
    s.microbatches_per_batch = f::integerOr(j, "microbatches_per_batch", "", s.microbatches);
    s.chunks = f::integerOr(j, "chunks", "", 1);
    if (j.contains("groups")) {
        const auto& groups = f::array(j, "groups", "");
        for (std::size_t i = 0; i < groups.size(); ++i) {
            auto path = f::child("/groups", i);
            CollectiveGroup g;
            f::object(groups[i], path);
            g.stage = f::integer(groups[i], "stage", path);
            const auto& devices = f::array(groups[i], "devices", path);
            for (std::size_t k = 0; k < devices.size(); ++k) {
                g.devices.push_back(f::index(devices[k], f::child(f::child(path, "devices"), k)));
            }
            const std::string purpose = f::stringOr(groups[i], "purpose", path, "replicas");
            if (purpose == "tied_weights")
                g.purpose = CollectivePurpose::TiedWeights;
            else if (purpose != "replicas")
                f::fail(f::child(path, "purpose"), "'" + purpose + "' is not replicas or tied_weights");
            s.groups.push_back(std::move(g));
        }
    }
    const auto& devices = f::array(j, "devices", "");
    if (static_cast<int>(devices.size()) != s.num_devices)
        f::fail("/devices", "expected " + std::to_string(s.num_devices) + " device lists");
    for (std::size_t d = 0; d < devices.size(); ++d) {
        auto dpath = f::child("/devices", d);
        if (!devices[d].is_array())
            f::fail(dpath, "expected an array of actions");
        std::vector<Action> list;
        list.reserve(devices[d].size());
        for (std::size_t i = 0; i < devices[d].size(); ++i) {
            auto path = f::child(dpath, i);
            const auto& ja = f::object(devices[d][i], path);
            Action a;
            try {
                a.kind = actionKindFromString(f::string(ja, "kind", path));
            } catch (const InputError& e) {
                f::fail(f::child(path, "kind"), e.message());
            }
            a.stage = f::integer(ja, "stage", path);
            a.microbatch = f::integerOr(ja, "microbatch", path, -1);
            a.peer = f::integerOr(ja, "peer", path, -1);
            a.group = f::integerOr(ja, "group", path, -1);
            a.weight_version = f::integerOr(ja, "weight_version", path, 0);
            a.bytes = f::nonNegativeOr(ja, "bytes", path, 0);
            a.wave = f::integerOr(ja, "wave", path, -1);
            a.overlaps_next = f::booleanOr(ja, "overlaps_next", path, false);
            list.push_back(a);
        }
        s.devices.push_back(std::move(list));
    }
    return s;
}

} // namespace pw::planner
