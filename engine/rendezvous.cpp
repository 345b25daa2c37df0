// SPDX-License-Identifier: MIT
// The in-process rendezvous store (engine/rendezvous.h).
#include "rendezvous.h"

#include <stdexcept>

namespace pw::engine {

void MemoryRendezvous::set(const std::string& key, const std::vector<std::uint8_t>& value)
{
    std::lock_guard lock(m_mutex);
    m_values[key] = value;
    m_changed.notify_all();
}

std::vector<std::uint8_t> MemoryRendezvous::get(const std::string& key, std::chrono::milliseconds timeout)
{
    std::unique_lock lock(m_mutex);
    if (!m_changed.wait_for(lock, timeout, [&] { return m_values.count(key) > 0; }))
        throw std::runtime_error("no value for '" + key + "' within " + std::to_string(timeout.count()) + " ms");
    return m_values[key];
}

} // namespace pw::engine
