// SPDX-License-Identifier: MIT
// V-Half and V-Min (issue 35; Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): validator-clean over
// depths and batch sizes, their peak activations the authors' (p + 2) // 2 and (p + 4) // 3 microbatches of 1F1B's
// p, their bubble at equal pass times the closed forms below, exactly in the simulator; the Megatron search's
// estimate replays the same order.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fixtures.h"
#include "planner/partition/megatron.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "zero_bubble_fixtures.h"

using namespace pw::planner;

namespace {

using pw::test::ChunkTimes;
using pw::test::validatedRun;
using pw::test::vPlan;

/// The bubble at equal pass times T (per chunk), in T: derived from the construction (the warm-up's and cool-down's
/// passes that the squeeze cannot fill) and the paper's rates, about p / 2m (V-Half) and 2p / 3m (V-Min) of the
/// 6mT a device works.
int equalTimesBubble(const std::string& kind, int p)
{
    if (p == 1)
        return 0;
    if (kind == "v-half")
        return p == 2 ? 1 : 6 * ((p - 1) / 2) - 1;
    return p % 3 == 0 ? 4 * p - 7 : 4 * p - 5;
}

/// Peak chunk stashes once m is large enough: twice the authors' microbatch counts; at most 2m.
int peakChunkStashes(const std::string& kind, int p, int m)
{
    const int microbatches = kind == "v-half" ? (p + 2) / 2 : (p + 4) / 3;
    return std::min(2 * microbatches, 2 * m);
}

} // namespace

TEST_CASE("V-Half and V-Min are validator-clean at every depth and batch size", "[controllable-memory]")
{
    for (const std::string kind : {"v-half", "v-min"})
        for (int p = 1; p <= 9; ++p)
            for (int m = 1; m <= 3 * p + 2; ++m) {
                INFO(kind << " p = " << p << " m = " << m);
                const auto plan = vPlan(p, m, kind);
                const auto schedule = generateSchedule(plan);
                const auto report = validate(schedule, plan);
                INFO((report.errors.empty() ? std::string() : report.errors.front()));
                CHECK(report.ok);
            }
}

TEST_CASE("V-Half and V-Min hold the authors' fraction of 1F1B's activations", "[controllable-memory]")
{
    // 1F1B on the same layers stashes p microbatches of a device's two chunks at its first device: 2p chunk stashes.
    // V-Half (p + 2) // 2 and V-Min (p + 4) // 3 of them (the authors' table), on every device; with I and W split,
    // each I also keeps its output gradients until its W (here 0.25 MB per chunk), which the replay counts alike.
    for (const std::string kind : {"v-half", "v-min"})
        for (int p = 1; p <= 12; ++p)
            for (int m : {1, 2, p, 2 * p, 3 * p + 1}) {
                INFO(kind << " p = " << p << " m = " << m);
                const auto r = validatedRun(vPlan(p, m, kind));
                int peak = 0;
                for (int rank = 0; rank < p; ++rank) {
                    const double bytes = r.devices[rank].peak_memory_bytes;
                    peak = std::max(peak, static_cast<int>(bytes / 1e6 + 0.5));
                    CHECK(megatron::kindPeakActivationBytes(kind, p, 2, m, rank, 1e6, 0) == Approx(bytes));
                }
                CHECK(peak == peakChunkStashes(kind, p, m));
                CHECK(megatron::kindPeakStashes(kind, p, 2, m, 0) <= peak);
                const auto kept = validatedRun(vPlan(p, m, kind, {}, 1, 0.25e6));
                for (int rank = 0; rank < p; ++rank)
                    CHECK(megatron::kindPeakActivationBytes(kind, p, 2, m, rank, 1e6, 0.25e6)
                        == Approx(kept.devices[rank].peak_memory_bytes));
            }
}

TEST_CASE("V-Half's and V-Min's bubble at equal pass times is their closed form", "[controllable-memory]")
{
    // V-Half: T for p = 2, (6 floor((p - 1) / 2) - 1) T from p = 3 (3p - 4 for odd p, 3p - 7 for even p); V-Min:
    // (4p - 5) T, or (4p - 7) T when 3 divides p. Independent of m once m >= 2p: the stable phase has no bubble.
    for (const std::string kind : {"v-half", "v-min"})
        for (const double unit : {1.0, 0.5})
            for (int p = 1; p <= 10; ++p)
                for (int m : {2 * p, 2 * p + 1, 3 * p + 2}) {
                    INFO(kind << " p = " << p << " m = " << m << " T = " << unit);
                    const auto r = validatedRun(vPlan(p, m, kind, {unit, unit, unit}));
                    const double closed = equalTimesBubble(kind, p) * unit * 1e-3;
                    for (std::size_t d = 0; d < r.devices.size(); ++d) {
                        INFO("device " << d);
                        CHECK(r.makespan_s - r.devices[d].busy_s == Approx(closed).margin(1e-12));
                        CHECK(r.devices[d].busy_s == Approx(6 * m * unit * 1e-3));
                    }
                    CHECK(megatron::pipelineBubble(kind, p, 2, m, 2e-3 * unit, 2e-3 * unit, 2e-3 * unit)
                        == Approx(closed).margin(1e-12));
                }
}

TEST_CASE("The Megatron estimate replays V-Half's and V-Min's order when F, I and W differ", "[controllable-memory]")
{
    // No closed form here: V-Min idles 6 max(F, I, W) - 2(F + I + W) per microbatch in its stable phase and V-Half
    // max(0, 2I - 2F - W, 2F - 2I - W) (the authors' zero-bubble condition), so the bubble grows with m; the
    // search's estimate replays the order with uniform times, which is what the simulator finds.
    for (const std::string kind : {"v-half", "v-min"})
        for (const ChunkTimes t : {ChunkTimes {2, 2, 1}, ChunkTimes {1, 2, 1}, ChunkTimes {3, 4, 2}})
            for (int p : {2, 3, 4, 6})
                for (int m : {p, 2 * p, 4 * p}) {
                    INFO(kind << " F " << t.f << " I " << t.i << " W " << t.w << " p = " << p << " m = " << m);
                    const auto r = validatedRun(vPlan(p, m, kind, t));
                    const double bubble = r.makespan_s - r.devices[0].busy_s;
                    CHECK(megatron::pipelineBubble(kind, p, 2, m, 2e-3 * t.f, 2e-3 * t.i, 2e-3 * t.w)
                        == Approx(bubble).margin(1e-12));
                }
    // The stable phase's idle per microbatch: the bubble's slope in m.
    const auto slope = [](const std::string& kind, int p, ChunkTimes t) {
        const auto at
            = [&](int m) { return megatron::pipelineBubble(kind, p, 2, m, 2e-3 * t.f, 2e-3 * t.i, 2e-3 * t.w) * 1e3; };
        return at(4 * p + 1) - at(4 * p);
    };
    CHECK(slope("v-min", 4, {1, 2, 1}) == Approx(6 * 2 - 2 * 4));
    CHECK(slope("v-min", 4, {2, 2, 1}) == Approx(6 * 2 - 2 * 5));
    CHECK(slope("v-half", 4, {1, 2, 1}) == Approx(2 * 2 - 2 * 1 - 1));
    CHECK(slope("v-half", 4, {3, 4, 2}) == Approx(0).margin(1e-12));
}

TEST_CASE("V-Half and V-Min refuse the plans a V cannot run", "[controllable-memory]")
{
    auto straight = pw::test::chainPlan(4, 8, "v-half");
    CHECK_THROWS_WITH(generateSchedule(straight), Catch::Contains("two chunks per device in a V"));
    CHECK(scheduleTraits("v-min").chunks == ChunkRule::V);
    CHECK(scheduleTraits("v-half").splits_backward);
}
