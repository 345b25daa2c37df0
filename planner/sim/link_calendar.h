// SPDX-License-Identifier: MIT
// LinkCalendar: when a shared link is busy, for the simulator and for generators that time their own runs (wsp);
// the simulator books a GPU that several devices share on one too.
// Internal to planner/: the simulator and the schedule generators use it; other layers go through simulator.h.
#pragma once

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "simulator.h"

namespace pw::planner {

/// When a node's uplink is busy: disjoint intervals [start, end) in time order. Transfers are booked as the
/// dataflow reaches them, which is not time order, so a transfer fills the free time from its start on (and may
/// be split around earlier bookings): the link carries one transfer at a time at full bandwidth.
class LinkCalendar
{
public:
    /// Books `seconds` of wire time from `t` on; returns when the last byte leaves.
    double book(double t, double seconds) { return reserve(t, seconds).second; }

    /// Books `seconds` of busy time from `t` on, in the free time left (split around earlier bookings when a gap is
    /// too short); returns when the first piece begins and the last ends.
    std::pair<double, double> reserve(double t, double seconds)
    {
        std::vector<std::pair<double, double>> pieces;
        auto it = m_busy.upper_bound(t);
        if (it != m_busy.begin())
            t = std::max(t, std::prev(it)->second);
        double at = t, end = t;
        while (it != m_busy.end() && it->first <= at) {
            at = std::max(at, it->second);
            ++it;
        }
        // Most transfers fit the first gap: booked at once, without splitting (the loop below does the rest).
        if (seconds > 0 && (it == m_busy.end() || seconds <= it->first - at)) {
            insert(at, at + seconds);
            return {at, at + seconds};
        }
        const double first = at;
        while (seconds > 0) {
            while (it != m_busy.end() && it->first <= at) {
                at = std::max(at, it->second);
                ++it;
            }
            const double gapEnd = it == m_busy.end() ? std::numeric_limits<double>::infinity() : it->first;
            const double use = std::min(seconds, gapEnd - at);
            pieces.emplace_back(at, at + use);
            seconds -= use;
            end = at + use;
            at = gapEnd;
        }
        for (auto [a, b] : pieces)
            insert(a, b);
        return {pieces.empty() ? first : pieces.front().first, end};
    }

    /// Books `seconds` in one piece: the first gap from `t` on that holds it whole (a computation on a shared GPU:
    /// its kernels run one after another); returns when it begins and ends.
    std::pair<double, double> reserveWhole(double t, double seconds)
    {
        auto it = m_busy.upper_bound(t);
        if (it != m_busy.begin())
            t = std::max(t, std::prev(it)->second);
        while (it != m_busy.end() && it->first < t + seconds) {
            t = std::max(t, it->second);
            ++it;
        }
        if (seconds > 0)
            insert(t, t + seconds);
        return {t, t + seconds};
    }

private:
    void insert(double a, double b)
    {
        auto it = m_busy.lower_bound(a);
        if (it != m_busy.begin() && std::prev(it)->second >= a) {
            auto prev = std::prev(it);
            a = prev->first;
            b = std::max(b, prev->second);
            it = m_busy.erase(prev);
        }
        while (it != m_busy.end() && it->first <= b) {
            b = std::max(b, it->second);
            it = m_busy.erase(it);
        }
        m_busy.emplace(a, b);
    }

    std::map<double, double> m_busy;
};

/// Arrival of `bytes` posted at `start` from device a to device b under `cost`: start + latency + bytes / bandwidth,
/// where an inter-node transfer books the sending node's uplink in `uplinks` (one calendar per node) when the model
/// shares it (CostModel::shared_node_uplink) and so waits for the transfers booked on it before.
inline double bookedArrival(
    const CostModel& cost, std::vector<LinkCalendar>& uplinks, int a, int b, double bytes, double start)
{
    const LinkCost& link = cost.link(a, b);
    const double arrival = start + link.seconds(bytes);
    if (!cost.shared_node_uplink || cost.sameNode(a, b) || bytes <= 0 || link.bandwidth_bytes_per_s <= 0)
        return arrival;
    const double wire = link.wireSeconds(bytes);
    const double booked = uplinks[cost.uplinkOf(a)].book(start, wire);
    if (booked <= start + wire)
        return arrival; // the uplink was free: exactly the uncontended time
    return booked + link.latency_s;
}

} // namespace pw::planner
