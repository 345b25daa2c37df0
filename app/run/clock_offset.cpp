// SPDX-License-Identifier: MIT
#include "clock_offset.h"

namespace pw::app {

void ClockOffset::add(double sent, double agent, double received)
{
    if (!(received >= sent))
        return;
    m_samples.push_back({agent - (sent + received) / 2, (received - sent) / 2});
    while (m_samples.size() > m_window)
        m_samples.pop_front();
    ++m_count;
}

const ClockOffset::Sample* ClockOffset::best() const
{
    const Sample* b = nullptr;
    for (const auto& s : m_samples)
        if (!b || s.half_rtt < b->half_rtt)
            b = &s;
    return b;
}

double ClockOffset::offset() const
{
    const Sample* b = best();
    return b ? b->offset : 0.0;
}

double ClockOffset::uncertainty() const
{
    const Sample* b = best();
    return b ? b->half_rtt : 0.0;
}

} // namespace pw::app
