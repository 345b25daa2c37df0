// SPDX-License-Identifier: MIT
// DualPipeV (issue 35): torch.distributed.pipelining's ScheduleDualPipeV order, validator-clean over depths and batch
// sizes, its bubble equal to DeepSeek's closed form in the simulator, its activations, and its refusals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "fixtures.h"
#include "planner/errors.h"
#include "planner/partition/megatron.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "zero_bubble_fixtures.h"

using namespace pw::planner;

namespace {

using pw::test::ChunkTimes;
using pw::test::validatedRun;
using pw::test::vPlan;

/// One device's compute actions as torch prints them ({stage}{F|B|I|W}{microbatch}, an F&B pair in parentheses).
std::string order(const Schedule& schedule, int device)
{
    std::string out;
    bool pair = false;
    for (const auto& a : schedule.devices[device]) {
        if (!isCompute(a.kind) || a.kind == ActionKind::OptimizerStep)
            continue;
        const std::string cell
            = std::to_string(a.stage) + std::string(toString(a.kind)).substr(0, 1) + std::to_string(a.microbatch);
        if (pair) {
            out += ";" + cell + ")";
            pair = false;
            continue;
        }
        out += (out.empty() ? "" : ",") + std::string(a.overlaps_next ? "(" : "") + cell;
        pair = a.overlaps_next;
    }
    return out;
}

} // namespace

TEST_CASE("DualPipeV follows torch's ScheduleDualPipeV order", "[dualpipev]")
{
    // Traced by hand from torch.distributed.pipelining's _calculate_single_rank_operations (p = 2, 4 microbatches):
    // rank 0 warms up with three chunk-0 forwards, the last rank runs its first pair apart, the tail splits.
    const auto schedule = generateSchedule(vPlan(2, 4, "dualpipev"));
    CHECK(order(schedule, 0) == "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1),(3F2;0B0),3B2,(3F3;0B1),3B3,0I2,0W2,0I3,0W3");
    CHECK(order(schedule, 1) == "1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0),(1F3;2B1),(2F3;1B1),2B2,1B2,2I3,1I3,2W3,1W3");
}

TEST_CASE("DualPipeV is validator-clean over depths and batch sizes", "[dualpipev]")
{
    for (int p = 1; p <= 8; ++p)
        for (int m : {2 * p, 2 * p + 1, 3 * p, 4 * p + 3}) {
            INFO("p = " << p << " m = " << m);
            auto plan = vPlan(p, m, "dualpipev", {}, 2);
            const auto schedule = generateSchedule(plan);
            const auto report = validate(schedule, plan);
            INFO((report.errors.empty() ? std::string() : report.errors.front()));
            CHECK(report.ok);
            // Every microbatch's backward once per stage: fused, or I then W.
            int forwards = 0, fused = 0, inputs = 0, weights = 0, pairs = 0;
            for (const auto& list : schedule.devices)
                for (const auto& a : list) {
                    forwards += a.kind == ActionKind::Forward;
                    fused += a.kind == ActionKind::Backward;
                    inputs += a.kind == ActionKind::BackwardInput;
                    weights += a.kind == ActionKind::BackwardWeight;
                    pairs += a.overlaps_next;
                }
            CHECK(forwards == 2 * p * m * 2);
            CHECK(fused + inputs == forwards);
            CHECK(weights == inputs);
            // The pairs of steps 4 and 5: 2 (m - 2p + r + 1) + (p - r - 1) on rank r, the last rank's first apart;
            // two batches.
            int expected = -1;
            for (int r = 0; r < p; ++r)
                expected += 2 * (m - 2 * p + r + 1) + (p - r - 1);
            CHECK(pairs == 2 * expected);
        }
    // Equal replicas per stage: copies of the V.
    auto plan = vPlan(2, 8, "dualpipev");
    plan.cluster.edit().nodes[0].count = 4;
    plan.stages[0].devices = plan.stages[3].devices = {0, 2};
    plan.stages[1].devices = plan.stages[2].devices = {1, 3};
    CHECK(validate(generateSchedule(plan), plan).ok);
}

TEST_CASE("DualPipeV refuses what it cannot run, naming the field", "[dualpipev]")
{
    auto few = vPlan(3, 5, "dualpipev");
    CHECK_THROWS_WITH(generateSchedule(few),
        Catch::Contains("/schedule/microbatches") && Catch::Contains("2p = 6") && Catch::Contains("not 5"));
    auto straight = pw::test::chainPlan(4, 8, "dualpipev");
    straight.cluster.edit().nodes[0].count = 4;
    CHECK_THROWS_WITH(generateSchedule(straight), Catch::Contains("chunks"));
    // A forward marked as paired must be followed by another stage's backward.
    auto plan = vPlan(2, 4, "dualpipev");
    auto schedule = generateSchedule(plan);
    for (auto& a : schedule.devices[0])
        if (a.kind == ActionKind::Forward) {
            a.overlaps_next = true; // 0F0's next compute is 0F1
            break;
        }
    const auto report = validate(schedule, plan);
    CHECK_FALSE(report.ok);
    CHECK_THAT(report.errors.front(), Catch::Contains("overlaps the next compute action"));
}

TEST_CASE("DualPipeV's bubble is DeepSeek's closed form (PP/2 - 1)(F&B + B - 3W)", "[dualpipev]")
{
    // DeepSeek-V3 Table 2 on PP/2 = p devices, F, B and W per chunk, B the full backward (I + W). Pipewright runs
    // an F&B pair one action after the other as one unit (both inputs received before it), so F&B = F + B:
    // (p - 1)(F + 2I - W) of idle per device and batch, on every device, at any batch size from 2p, whenever F = I
    // (the transformer's case the table assumes: a chunk's forward and its input gradient cost alike).
    for (const double w : {1.0, 0.6, 0.25, 0.9})
        for (const double f : {1.0, 2.0, 0.5})
            for (int p : {1, 2, 3, 4, 7})
                for (int m : {2 * p, 2 * p + 1, 3 * p + 2}) {
                    const ChunkTimes t {f, f, w * f};
                    INFO("F " << t.f << " I " << t.i << " W " << t.w << " p = " << p << " m = " << m);
                    const auto r = validatedRun(vPlan(p, m, "dualpipev", t));
                    const double b = t.i + t.w, fb = t.f + b;
                    const double closed = (p - 1) * (fb + b - 3 * t.w) * 1e-3;
                    const double work = 2 * m * (t.f + b) * 1e-3; // two chunks per device
                    for (std::size_t d = 0; d < r.devices.size(); ++d) {
                        INFO("device " << d);
                        CHECK(r.makespan_s - r.devices[d].busy_s == Approx(closed).margin(1e-12));
                        CHECK(r.devices[d].busy_s == Approx(work));
                    }
                    CHECK(megatron::pipelineBubble("dualpipev", p, 2, m, 2e-3 * t.f, 2e-3 * t.i, 2e-3 * t.w)
                        == Approx(closed).margin(1e-12));
                }
}

TEST_CASE("DualPipeV's bubble when a chunk's forward and input gradient differ", "[dualpipev]")
{
    // torch's order gives (p - 1)(2F + I - W) + (p - 2) max(0, I - F) for W <= F: DeepSeek's form plus
    // (p - 1)(F - I) (the warm-up's chunk-0 forwards set the pace of the first pairs when F > I; the drain's
    // input gradients when I > F), the closed form the Megatron search estimates DualPipeV with.
    for (const ChunkTimes t : {ChunkTimes {2, 1.5, 1}, ChunkTimes {1, 1, 0.6}, ChunkTimes {1.5, 1, 0.7},
             ChunkTimes {1, 2, 0.5}, ChunkTimes {2, 1, 1}, ChunkTimes {1, 2, 1}})
        for (int p : {1, 2, 3, 4, 7})
            for (int m : {2 * p, 2 * p + 1, 3 * p + 2}) {
                INFO("F " << t.f << " I " << t.i << " W " << t.w << " p = " << p << " m = " << m);
                const auto r = validatedRun(vPlan(p, m, "dualpipev", t));
                const double b = t.i + t.w;
                const double closed
                    = ((p - 1) * (2 * t.f + t.i - t.w) + std::max(0, p - 2) * std::max(0.0, t.i - t.f)) * 1e-3;
                const double work = 2 * m * (t.f + b) * 1e-3; // two chunks per device
                for (std::size_t d = 0; d < r.devices.size(); ++d) {
                    INFO("device " << d);
                    CHECK(r.makespan_s - r.devices[d].busy_s == Approx(closed).margin(1e-12));
                    CHECK(r.devices[d].busy_s == Approx(work));
                }
                CHECK(megatron::pipelineBubble("dualpipev", p, 2, m, 2e-3 * t.f, 2e-3 * t.i, 2e-3 * t.w)
                    == Approx(closed).margin(1e-12));
            }
}

TEST_CASE("DualPipeV stashes 2p + 1 chunk activations at its peak", "[dualpipev]")
{
    // Steps 1-2 admit 2p forwards on every device; the steady state's pair runs its forward before its backward
    // frees one: 2p + 1 chunk stashes (each half of a 1F1B stage on the same layers: about 1F1B's p + 1/2).
    for (int p = 2; p <= 6; ++p)
        for (int m : {2 * p, 4 * p}) {
            INFO("p = " << p << " m = " << m);
            const auto r = validatedRun(vPlan(p, m, "dualpipev"));
            for (int rank = 0; rank < p; ++rank) {
                INFO("rank " << rank);
                // Per device: the sum over its two chunks of the stashed microbatches at the device's peak, which
                // the simulator reports in bytes (1 MB per chunk and microbatch, plus what an I keeps for its W:
                // nothing here).
                CHECK(r.devices[rank].peak_memory_bytes == Approx((2 * p + 1) * 1e6));
            }
            CHECK(megatron::kindPeakStashes("dualpipev", p, 2, m, 0) == 2 * p + 1);
        }
}
