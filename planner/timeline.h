// SPDX-License-Identifier: MIT
// Timeline: what happened (or is predicted to happen) on every device, as spans on lanes and counters.
// The simulator, live telemetry and the history all produce this one type; a live run grows it by appending.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schedule.h"

namespace pw::planner {

/// 2: run_id, clock, epoch_unix_s, named counters with units (1: a "memory" table only; still read).
inline constexpr int kTimelineFormatVersion = 2;

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
    std::int32_t weight_version = 0; ///< the weight version a forward/backward used (the schedule's; measured runs)
    double bytes = 0; ///< payload of a transfer or collective (0 for compute)

    bool operator==(const Span&) const = default;
};

/// @brief A counter's value on a device from time t on (a step function).
struct CounterSample
{
    std::int32_t device = 0;
    double t = 0;
    double value = 0;

    bool operator==(const CounterSample&) const = default;
};

/// @brief A named series of per-device samples with its unit: memory in use ("memory", bytes), training loss,
/// utilisation, anything an agent reports. Samples are in order of (device, t) once the timeline is complete;
/// while it grows, samples arrive per device in order of time.
struct Counter
{
    std::string name;
    std::string unit; ///< "B", "%", "" (dimensionless: loss), ...
    std::vector<CounterSample> samples;

    bool operator==(const Counter&) const = default;
};

/// The counter every producer writes: bytes in use per device, the memory plot's data.
inline constexpr std::string_view kMemoryCounter = "memory";
/// Measured per device by the engine's backend, in bytes: its buffers allocated now, and the most allocated so far.
inline constexpr std::string_view kDeviceMemoryCounter = "device_memory";
inline constexpr std::string_view kDeviceMemoryPeakCounter = "device_memory_peak";

/// @brief Which clock the times of a Timeline are on. Times are always seconds from the run's t = 0.
enum class ClockDomain : std::uint8_t {
    Simulated, ///< the simulator's time: exact, no clock involved
    Host, ///< one host's monotonic clock (a single-host run: every device shares it)
    Aligned, ///< several hosts' monotonic clocks, each shifted onto the coordinator's by a measured offset
};
std::string_view toString(ClockDomain clock);

/// @brief What happened (or is predicted to happen) on every device of one run: spans on lanes, counters.
/// A Timeline only ever grows by appending (spans and samples as they arrive from a run), never by editing what
/// it holds, so that views can index it incrementally (ui/gantt/geometry.h) and share it as a
/// `std::shared_ptr<const Timeline>` snapshot: its owner appends, then tells the views how far it grew.
struct Timeline
{
    enum class Source : std::uint8_t { Predicted, Measured };
    Source source = Source::Predicted;
    std::string run_id; ///< the run it belongs to (history id); empty for a prediction not saved as a run
    std::string label; ///< plan or run it belongs to, for people
    ClockDomain clock = ClockDomain::Simulated;
    double epoch_unix_s = 0; ///< wall-clock time (Unix seconds) of t = 0; 0 when simulated
    std::vector<std::string> device_names;
    std::vector<Span> spans; ///< in order of arrival: per device in order of start, devices interleaved
    std::vector<Counter> counters;

    double endTime() const;

    /// Appends spans as a run reports them: in any order across devices. Devices beyond device_names get
    /// placeholder names ("device N") until named.
    void append(std::span<const Span> more);
    /// The counter called `name`, or nullptr.
    const Counter* counter(std::string_view name) const;
    /// The counter called `name`, created with `unit` when missing.
    Counter& counter(std::string_view name, std::string_view unit);
    /// The memory counter's samples (empty when there is none).
    std::span<const CounterSample> memory() const;

    bool operator==(const Timeline&) const = default;
};

nlohmann::json toJson(const Timeline& timeline);
Timeline timelineFromJson(const nlohmann::json& j);

} // namespace pw::planner
