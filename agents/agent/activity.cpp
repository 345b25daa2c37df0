// SPDX-License-Identifier: MIT
// Each device's action in progress and its flight recorder (activity.h).
#include "activity.h"

namespace pw::agents {

DeviceActivity::DeviceActivity(const std::vector<int>& devices)
{
    for (int d : devices)
        m_devices[d].now.device = d;
}

void DeviceActivity::begin(const planner::Span& planned)
{
    std::lock_guard lock(m_mutex);
    auto it = m_devices.find(planned.device);
    if (it == m_devices.end())
        return;
    it->second.now.busy = true;
    it->second.now.action = planned;
    it->second.now.action.t1 = 0;
}

void DeviceActivity::end(const planner::Span& span)
{
    std::lock_guard lock(m_mutex);
    auto it = m_devices.find(span.device);
    if (it == m_devices.end())
        return;
    Device& d = it->second;
    ++d.now.finished;
    // A span may be reported after the next action began (a device's times known later, e.g. CUDA events): only
    // the action it ends stops being the one in progress.
    if (d.now.busy && d.now.action.action == span.action)
        d.now.busy = false;
    d.last.push_back(span);
    while (d.last.size() > kFlightRecorderActions)
        d.last.pop_front();
}

std::vector<DeviceProgress> DeviceActivity::progress() const
{
    std::lock_guard lock(m_mutex);
    std::vector<DeviceProgress> out;
    for (const auto& [device, d] : m_devices)
        out.push_back(d.now);
    return out;
}

std::vector<planner::Span> DeviceActivity::recorder() const
{
    std::lock_guard lock(m_mutex);
    std::vector<planner::Span> out;
    for (const auto& [device, d] : m_devices) {
        out.insert(out.end(), d.last.begin(), d.last.end());
        if (d.now.busy)
            out.push_back(d.now.action);
    }
    return out;
}

} // namespace pw::agents
