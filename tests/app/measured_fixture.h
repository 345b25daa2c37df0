// SPDX-License-Identifier: MIT
// Internal to tests/: a simulated timeline made to look measured, for the comparisons per action kind (tests/app,
// tests/ui).
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "planner/timeline.h"

namespace pw::test {

/// The timeline as the engine would record it: every receive has a span, and those that did not wait are 0 s long
/// (the simulator leaves them out). One is added on the receiving device of each send without a receive span.
inline planner::Timeline asMeasured(planner::Timeline t)
{
    using planner::ActionKind;
    std::map<std::tuple<int, bool, int>, int> receives; // (device, gradient, microbatch) -> receive spans
    for (const auto& s : t.spans)
        if (planner::isRecv(s.kind))
            receives[{s.device, s.kind == ActionKind::RecvGradient, s.microbatch}] += 1;
    std::vector<planner::Span> added;
    for (const auto& s : t.spans) {
        if (!planner::isSend(s.kind))
            continue;
        const bool gradient = s.kind == ActionKind::SendGradient;
        if (int& n = receives[{s.peer, gradient, s.microbatch}]; n > 0) {
            n -= 1;
            continue;
        }
        planner::Span r = s;
        r.device = s.peer;
        r.peer = s.device;
        r.lane = planner::Lane::Recv;
        r.kind = gradient ? ActionKind::RecvGradient : ActionKind::RecvActivation;
        r.t0 = r.t1 = s.t1;
        added.push_back(r);
    }
    t.spans.insert(t.spans.end(), added.begin(), added.end());
    t.source = planner::Timeline::Source::Measured;
    return t;
}

} // namespace pw::test
