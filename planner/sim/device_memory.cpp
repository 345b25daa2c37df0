// SPDX-License-Identifier: MIT
#include "device_memory.h"

#include <algorithm>

namespace pw::planner {

DeviceMemory::DeviceMemory(int devices, Timeline* record)
    : m_usage(static_cast<std::size_t>(std::max(0, devices)))
    , m_record(record)
{
}

void DeviceMemory::change(int d, double t, double delta)
{
    auto& u = m_usage[static_cast<std::size_t>(d)];
    u.memory += delta;
    u.peak_memory = std::max(u.peak_memory, u.memory);
    if (!m_record)
        return;
    auto& mem = m_record->counter(kMemoryCounter, "B").samples;
    if (!mem.empty() && mem.back().device == d && mem.back().t == t)
        mem.back().value = u.memory;
    else
        mem.push_back({d, t, u.memory});
}

void DeviceMemory::stash(int d, int delta)
{
    auto& u = m_usage[static_cast<std::size_t>(d)];
    u.stashed += delta;
    u.peak_stashed = std::max(u.peak_stashed, u.stashed);
}

void DeviceMemory::version(int d, int delta)
{
    auto& u = m_usage[static_cast<std::size_t>(d)];
    u.versions += delta;
    u.peak_versions = std::max(u.peak_versions, u.versions);
}

} // namespace pw::planner
