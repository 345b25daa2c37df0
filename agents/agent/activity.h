// SPDX-License-Identifier: MIT
// Internal to agents/: what each of an agent's devices is doing now and its flight recorder (the last actions it
// ran), fed by the executors' begin and span hooks and read by the heartbeat and by a FlightRecorderAsk.
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "agents/protocol/messages.h"
#include "planner/timeline.h"

namespace pw::agents {

/// @brief Per device: the action in progress, the actions finished, and the last kFlightRecorderActions of them.
/// The executors' threads write it, the heartbeat and the reader threads read it (one lock: a few microseconds
/// per action against actions of milliseconds).
class DeviceActivity
{
public:
    explicit DeviceActivity(const std::vector<int>& devices);

    /// An action begins (`planned`: its span with t0 = now on this host's monotonic clock, t1 = 0).
    void begin(const planner::Span& planned);
    /// An action ended (the executor's span, t0 and t1 on the same clock).
    void end(const planner::Span& span);
    /// Every device's progress, in the order of the constructor's devices.
    std::vector<DeviceProgress> progress() const;
    /// Every device's recorder, by device then start; an action in progress last, with t1 = 0.
    std::vector<planner::Span> recorder() const;

private:
    struct Device
    {
        DeviceProgress now;
        std::deque<planner::Span> last;
    };
    mutable std::mutex m_mutex;
    std::map<int, Device> m_devices;
};

} // namespace pw::agents
