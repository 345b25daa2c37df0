// SPDX-License-Identifier: MIT
// HetPipe's WSP checked on a run's measured spans (in-process or through agents): backwards use their forward's
// weights; a pull returns only after the other pipelines pushed its wave; and no forward of minibatch k runs before
// waves 0 .. floor((k+1)/N_m) - 2 - D of every other pipeline were pushed and pulled (the staleness bound D).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "planner/plan.h"
#include "planner/timeline.h"

namespace pw::test {

/// The stage of each device, from the plan (one device per stage under wsp).
inline std::map<int, planner::PlanStage> stageOf(const planner::Plan& plan)
{
    std::map<int, planner::PlanStage> p;
    for (const auto& s : plan.stages)
        for (int d : s.devices)
            p[d] = s;
    return p;
}

/// Whether device `a`'s weights take updates from device `b` of another pipeline: they hold a layer in common,
/// or `a` holds the head, whose token embedding is tied to the embedding `b` holds.
inline bool takesFrom(const planner::PlanStage& a, const planner::PlanStage& b, int headLayer)
{
    const bool common = a.first_layer <= b.last_layer && b.first_layer <= a.last_layer;
    return common || (a.last_layer == headLayer && b.first_layer == 0);
}

struct WaveCounts
{
    int forwards = 0, pulls = 0, stale = 0; ///< stale: backwards on weights older than the stage's newest
};

/// CHECKs the rules above on `spans` (WavePush / WavePull spans carry their wave in weight_version).
inline WaveCounts checkWaveSemantics(const planner::Plan& plan, const std::vector<planner::Span>& spans)
{
    using planner::ActionKind;
    const int D = plan.schedule.staleness;
    const int nm = plan.effectiveConcurrentMinibatches();
    const auto stage = stageOf(plan);
    const int head = plan.model->layerCount() - 1;
    // Spans per device in action order, and when each device began pushing each wave.
    std::map<int, std::vector<planner::Span>> byDevice;
    std::map<std::pair<int, int>, double> pushed; // (device, wave) -> t0
    for (const auto& s : spans) {
        byDevice[s.device].push_back(s);
        if (s.kind == ActionKind::WavePush)
            CHECK(pushed.emplace(std::pair {s.device, s.weight_version}, s.t0).second);
    }
    // Every device of another pipeline this device takes updates from had begun pushing wave w by time t.
    const auto allPushed = [&](int device, int w, double t) {
        int sources = 0;
        for (const auto& [other, st] : stage)
            if (st.pipeline != stage.at(device).pipeline && takesFrom(stage.at(device), st, head)) {
                ++sources;
                auto it = pushed.find({other, w});
                if (it == pushed.end() || it->second > t)
                    return false;
            }
        return sources > 0;
    };
    WaveCounts n;
    for (auto& [device, spans] : byDevice) {
        std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.action < b.action; });
        std::map<int, int> forwardVersion;
        int pulledWave = -1;
        int version = 0;
        for (const auto& s : spans) {
            INFO("device " << device << ", action " << s.action << ", minibatch " << s.microbatch);
            if (s.kind == ActionKind::WavePull) {
                ++n.pulls;
                pulledWave = std::max(pulledWave, s.weight_version);
                // The pull returned only after the other pipelines had pushed the wave.
                CHECK(allPushed(device, s.weight_version, s.t1));
            } else if (s.kind == ActionKind::Forward) {
                ++n.forwards;
                forwardVersion[s.microbatch] = s.weight_version;
                // Staleness bound: waves 0 .. floor((k+1)/N_m) - 2 - D of every other pipeline are in the
                // weights (pulled), and were pushed before this forward began.
                const int need = (s.microbatch + 1) / nm - 2 - D;
                CHECK(pulledWave >= need);
                for (int w = 0; w <= need; ++w)
                    CHECK(allPushed(device, w, s.t0));
            } else if (s.kind == ActionKind::Backward) {
                CHECK(s.weight_version == forwardVersion.at(s.microbatch));
                n.stale += s.weight_version < version ? 1 : 0;
            } else if (s.kind == ActionKind::OptimizerStep) {
                version = s.weight_version;
            }
        }
    }
    return n;
}

} // namespace pw::test
