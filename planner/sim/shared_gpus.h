// SPDX-License-Identifier: MIT
// Internal to planner/sim/: devices that share one physical GPU in a simulation (planner::sharedGpus). Their
// computations take turns on the card, booked on its calendar, and they split its memory.
#pragma once

#include <utility>
#include <vector>

#include "link_calendar.h"
#include "simulator.h"

namespace pw::planner {

class SharedGpus
{
public:
    explicit SharedGpus(const Plan& plan);

    /// When `seconds` of computation that device d can begin at t run: at once on a GPU of its own; on a GPU that
    /// other devices of the plan share, in the first time their computations leave it free for the whole of it (they
    /// take turns: one stream's kernels fill the GPU), booked as the dataflow reaches them.
    std::pair<double, double> occupy(int d, double t, double seconds);
    /// Each sharing device's memory capacity becomes what the others' peaks leave of the card (their arenas keep what
    /// they reached), so a device fits exactly when their peaks together fit the GPU.
    void shareMemory(std::vector<DeviceMetrics>& devices) const;
    /// Per device: its GPU among those several devices share, or -1.
    const std::vector<int>& gpuOf() const { return m_gpuOf; }

private:
    std::vector<int> m_gpuOf;
    std::vector<LinkCalendar> m_calendars; ///< per shared GPU: when its devices' computations keep it busy
};

} // namespace pw::planner
