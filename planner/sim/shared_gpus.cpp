// SPDX-License-Identifier: MIT
#include "shared_gpus.h"

#include <algorithm>

#include "../physical_gpu.h"

namespace pw::planner {

SharedGpus::SharedGpus(const Plan& plan)
    : m_gpuOf(sharedGpus(*plan.cluster, plan.devicesUsed()))
{
    for (int gpu : m_gpuOf)
        m_calendars.resize(std::max(m_calendars.size(), static_cast<std::size_t>(gpu + 1)));
}

std::pair<double, double> SharedGpus::occupy(int d, double t, double seconds)
{
    const int gpu = m_gpuOf[static_cast<std::size_t>(d)];
    if (gpu < 0 || seconds <= 0)
        return {t, t + seconds};
    return m_calendars[static_cast<std::size_t>(gpu)].reserveWhole(t, seconds);
}

void SharedGpus::shareMemory(std::vector<DeviceMetrics>& devices) const
{
    for (std::size_t d = 0; d < devices.size(); ++d)
        if (const int gpu = m_gpuOf[d]; gpu >= 0)
            for (std::size_t other = 0; other < devices.size(); ++other)
                if (other != d && m_gpuOf[other] == gpu)
                    devices[d].memory_capacity_bytes -= devices[other].peak_memory_bytes;
}

} // namespace pw::planner
