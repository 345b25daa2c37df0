// SPDX-License-Identifier: MIT
// Timeline: what happened (or is predicted to happen) on every device, as spans on lanes and counters.
// The simulator, live telemetry and the history all produce this one type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schedule.h"

namespace pw::planner {

inline constexpr int kTimelineFormatVersion = 1;

enum class Lane : std::uint8_t { Compute, Send, Recv, Collective };
std::string_view toString(Lane lane);

/// @brief One action's execution on one lane of a device, in seconds from the start of the run.
struct Span
{
    std::int32_t device = 0;
    Lane lane = Lane::Compute;
    ActionKind kind = ActionKind::Forward;
    std::int32_t stage = 0;
    std::int32_t microbatch = 0;
    std::int32_t action = 0; ///< index into the device's action list
    double t0 = 0;
    double t1 = 0;
    std::int32_t peer = -1; ///< send/receive: the device at the other end (-1 when unknown)
};

/// @brief Memory in use on a device from time t on.
struct MemorySample
{
    std::int32_t device = 0;
    double t = 0;
    double bytes = 0;
};

struct Timeline
{
    enum class Source : std::uint8_t { Predicted, Measured };
    Source source = Source::Predicted;
    std::string label; ///< plan or run it belongs to
    std::vector<std::string> device_names;
    std::vector<Span> spans;
    std::vector<MemorySample> memory; ///< sorted by (device, t)

    double endTime() const;
};

nlohmann::json toJson(const Timeline& timeline);
Timeline timelineFromJson(const nlohmann::json& j);

} // namespace pw::planner
