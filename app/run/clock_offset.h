// SPDX-License-Identifier: MIT
// One clock for a run over several hosts: each agent host's monotonic clock (the clock of its spans) against the
// controller's, estimated from timestamped round trips as NTP's minimum-delay filter does.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>

namespace pw::app {

/// @brief An agent host's clock against the controller's. A round trip sent at controller time `sent`, stamped
/// `agent` by the agent and received at `received` bounds the offset (agent - controller) to
/// [agent - received, agent - sent]: the estimate is that interval's middle, its uncertainty half the round trip,
/// whatever the path's asymmetry. Of the last `window` samples the one with the smallest round trip is used (the
/// least delayed: queueing only ever adds), so a refreshed window follows the clocks' drift (below 1e-4 between
/// hosts' crystals, i.e. 100 µs per second of window) without ever trusting a slow sample over a fast one.
class ClockOffset
{
public:
    explicit ClockOffset(std::size_t window = 32)
        : m_window(window)
    {
    }

    /// One round trip, all three times in seconds; a sample with received < sent is ignored.
    void add(double sent, double agent, double received);
    bool known() const { return !m_samples.empty(); }
    std::size_t samples() const { return m_count; }
    /// The agent's clock minus the controller's (0 until known).
    double offset() const;
    /// Half the chosen sample's round trip: the true offset is within offset() ± this (0 until known).
    double uncertainty() const;
    /// A time of the agent's clock on the controller's.
    double toController(double agentTime) const
    {
        m_worstUsed = std::max(m_worstUsed, uncertainty());
        return agentTime - offset();
    }
    /// The largest uncertainty() of the estimates toController() used so far: every time it converted is within
    /// this of the true controller time (an early estimate, from fewer or slower round trips, may be wider than the
    /// last one).
    double convertedWithin() const { return std::max(m_worstUsed, uncertainty()); }

private:
    struct Sample
    {
        double offset;
        double half_rtt;
    };
    const Sample* best() const;

    std::size_t m_window;
    std::deque<Sample> m_samples;
    std::size_t m_count = 0;
    mutable double m_worstUsed = 0; ///< what toController's conversions are bounded by
};

} // namespace pw::app
