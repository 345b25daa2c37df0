// SPDX-License-Identifier: MIT
// Internal to planner/sim/: the simulator's memory ledger. Per device: bytes in use and their peak (each change
// recorded, when asked, as the timeline's memory counter), microbatches stashed and weight versions alive, with
// their peaks. The simulator decides what each action holds and frees (simulator.cpp); this keeps the books.
#pragma once

#include <vector>

#include "../timeline.h"

namespace pw::planner {

/// @brief One device's memory as the simulation has it at a moment, and its peaks so far.
struct DeviceUsage
{
    double memory = 0;
    double peak_memory = 0;
    int stashed = 0;
    int peak_stashed = 0;
    int versions = 0;
    int peak_versions = 0;

    bool operator==(const DeviceUsage&) const = default;
};

class DeviceMemory
{
public:
    /// `devices` devices with nothing in use; `record`: the timeline whose memory counter gets every change, or null.
    DeviceMemory(int devices, Timeline* record);

    /// `delta` bytes taken (> 0) or freed (< 0) on device d at time t.
    void change(int d, double t, double delta);
    void stash(int d, int delta); ///< microbatches stashed on d: +1 at a forward, -1 when freed
    void version(int d, int delta); ///< weight versions alive on d
    const DeviceUsage& usage(int d) const { return m_usage[static_cast<std::size_t>(d)]; }
    /// Device d's books as `from`'s (a model-parallel group's member after its leader was simulated).
    void copy(int d, int from) { m_usage[static_cast<std::size_t>(d)] = m_usage[static_cast<std::size_t>(from)]; }

private:
    std::vector<DeviceUsage> m_usage;
    Timeline* m_record;
};

} // namespace pw::planner
