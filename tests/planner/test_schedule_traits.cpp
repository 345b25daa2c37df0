// SPDX-License-Identifier: MIT
// Every generator of the registry keeps the promises of its ScheduleTraits on the schedules it produces:
// weight versions and stashed microbatches counted in the action lists, flushes, updates, the simulator's
// steady-state window, the memory model, and the plans it accepts or rejects. (issue 10, item 9)
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// Two layers per stage (F 1 ms, B 2 ms per layer), one node; physical stage j on replicas[j] devices.
Plan makePlan(
    const ScheduleGenerator& g, const std::vector<int>& replicas, int microbatches, int chunks = 1, int iterations = 1)
{
    Plan plan;
    const int p = static_cast<int>(replicas.size());
    const int stages = p * chunks;
    for (int i = 0; i < 2 * stages; ++i) {
        Layer l;
        l.name = "layer" + std::to_string(i);
        l.forward_ms = 1;
        l.backward_ms = 2;
        l.activation_bytes = 1000;
        l.weight_bytes = 100'000;
        plan.model.edit().layers.push_back(l);
    }
    DeviceType gpu {"gpu", 80e9, 100, 0, std::nullopt, 0};
    gpu.streaming_execution = g.traits().streams_transfers;
    plan.cluster.edit().device_types.push_back(gpu);
    Node node;
    node.name = "n0";
    node.device_type = "gpu";
    node.count = std::accumulate(replicas.begin(), replicas.end(), 0);
    node.intra_bandwidth_bytes_per_s = 1e11;
    plan.cluster.edit().nodes.push_back(node);
    std::vector<std::vector<int>> owned(p);
    for (int j = 0, next = 0; j < p; ++j)
        for (int r = 0; r < replicas[j]; ++r)
            owned[j].push_back(next++);
    // Virtual stages in a loop, or in a V for a kind that runs two chunks so (ZBV).
    const bool v = g.traits().chunks == ChunkRule::V && chunks == 2;
    for (int s = 0; s < stages; ++s)
        plan.stages.push_back({2 * s, 2 * s + 1, owned[v && s >= p ? 2 * p - 1 - s : s % p]});
    plan.schedule.kind = std::string(g.name());
    plan.schedule.microbatches = microbatches;
    plan.schedule.chunks = chunks;
    plan.schedule.iterations = iterations;
    return plan;
}

/// What one (device, stage) does over the schedule, counted from its action list alone.
struct Counted
{
    int peak_versions = 0; ///< live weight versions (a version dies once superseded and used for the last time)
    int peak_in_flight = 0; ///< microbatches past F and not yet past B (or past W when the backward is split)
    int backwards = 0;
    int steps = 0;
};

Counted count(const Schedule& schedule, int device, int stage)
{
    const auto& list = schedule.devices[device];
    std::map<int, std::size_t> lastUse;
    for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i].stage == stage && (list[i].kind == ActionKind::Forward || isBackward(list[i].kind)))
            lastUse[list[i].weight_version] = i;
    Counted c;
    std::map<int, bool> alive = {{0, true}};
    int latest = 0, live = 1, inFlight = 0;
    c.peak_versions = 1;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& a = list[i];
        if (a.stage != stage)
            continue;
        if (a.kind == ActionKind::Forward) {
            c.peak_in_flight = std::max(c.peak_in_flight, ++inFlight);
        } else if (a.kind == ActionKind::BackwardInput) {
            continue; // its W ends the microbatch
        } else if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight) {
            --inFlight;
            ++c.backwards;
            if (a.weight_version != latest && lastUse[a.weight_version] == i && alive[a.weight_version]) {
                alive[a.weight_version] = false;
                --live;
            }
        } else if (a.kind == ActionKind::OptimizerStep) {
            ++c.steps;
            if (!lastUse.count(latest) || lastUse[latest] < i) {
                alive[latest] = false;
                --live;
            }
            alive[a.weight_version] = true;
            latest = a.weight_version;
            c.peak_versions = std::max(c.peak_versions, ++live);
        }
    }
    return c;
}

/// True when every device finishes all backwards of a batch before its first forward of the next batch.
bool flushesPerBatch(const Schedule& schedule)
{
    const int m = std::max(1, schedule.microbatches_per_batch);
    for (const auto& list : schedule.devices) {
        std::map<int, std::size_t> lastB, firstF;
        for (std::size_t i = 0; i < list.size(); ++i) {
            const int batch = list[i].microbatch / m;
            if (isBackward(list[i].kind))
                lastB[batch] = i;
            else if (list[i].kind == ActionKind::Forward && !firstF.count(batch))
                firstF[batch] = i;
        }
        for (const auto& [batch, at] : firstF)
            if (lastB.count(batch - 1) && lastB[batch - 1] > at)
                return false;
    }
    return true;
}

/// True when every F and B of batch b uses version b: the updates of all earlier batches and no other.
bool synchronousVersions(const Schedule& schedule)
{
    const int m = std::max(1, schedule.microbatches_per_batch);
    for (const auto& list : schedule.devices)
        for (const auto& a : list)
            if ((a.kind == ActionKind::Forward || isBackward(a.kind)) && a.weight_version != a.microbatch / m)
                return false;
    return true;
}

/// The in-flight count the traits give stage s of a straight pipeline of p stages.
int inFlightLimit(const ScheduleTraits& t, const Plan& plan, int s)
{
    const int p = plan.stageCount();
    switch (t.in_flight_limit) {
    case InFlightLimit::ConcurrentMinibatches:
        return plan.effectiveConcurrentMinibatches();
    case InFlightLimit::FirstStage:
        return t.in_flight_factor * p - (t.in_flight_factor - 1);
    case InFlightLimit::Warmup:
        break;
    }
    return t.in_flight_factor * (p - s);
}

int expectedInFlight(const ScheduleTraits& t, int limit, int m)
{
    switch (t.stash) {
    case StashDepth::Batch:
        return m;
    case StashDepth::InFlightInBatch:
        return std::min(limit, m);
    case StashDepth::InFlight:
        return limit;
    }
    return 0;
}

int expectedVersions(const ScheduleTraits& t, int inFlight)
{
    switch (t.weight_versions) {
    case WeightVersions::One:
        return 1;
    case WeightVersions::Two:
        return 2;
    case WeightVersions::InFlight:
        return inFlight;
    }
    return 0;
}

bool generates(const Plan& plan)
{
    try {
        generateSchedule(plan);
        return true;
    } catch (const InputError&) {
        return false;
    }
}

} // namespace

TEST_CASE("every generator keeps its traits on a straight pipeline", "[schedule-traits]")
{
    const int p = 4, m = 8;
    for (const auto* g : scheduleGenerators()) {
        const auto& t = g->traits();
        INFO("kind " << g->name());
        CHECK(findScheduleTraits(g->name()) == &t);
        CHECK(scheduleTraits(g->name()) == t);
        // A V kind runs its two chunks; its per-stage in-flight and memory promises are the device's (both chunks
        // together), which test_zero_bubble.cpp checks.
        const bool v = t.chunks == ChunkRule::V;
        auto plan = makePlan(*g, std::vector<int>(p, 1), m, v ? 2 : 1, std::max(3, t.min_iterations));
        plan.schedule.iterations = simulatedIterations(plan);
        CHECK(plan.schedule.iterations >= t.min_iterations);
        const auto schedule = generateSchedule(plan);
        REQUIRE(validate(schedule, plan).ok);
        const int batches = plan.schedule.iterations;

        CHECK(flushesPerBatch(schedule) == t.flush_per_batch);
        CHECK(synchronousVersions(schedule) == t.synchronous);
        bool waves = false;
        for (const auto& list : schedule.devices)
            for (const auto& a : list)
                waves = waves || isWaveSync(a.kind);
        CHECK(waves == t.wave_synchronous);
        bool split = false;
        for (const auto& list : schedule.devices)
            for (const auto& a : list)
                split = split || a.kind == ActionKind::BackwardInput || a.kind == ActionKind::BackwardWeight;
        CHECK(split == t.splits_backward);

        auto sim = simulate(plan, schedule);
        for (int s = 0; v && s < 2 * p; ++s)
            CHECK(count(schedule, s < p ? s : 2 * p - 1 - s, s).steps == batches);
        for (int s = 0; !v && s < p; ++s) {
            INFO("stage " << s);
            const auto c = count(schedule, s, s);
            const int limit = inFlightLimit(t, plan, s);
            const int inFlight = expectedInFlight(t, limit, m);
            // The first stage reaches the traits' bounds; later stages stay within them.
            if (s == 0) {
                CHECK(c.peak_in_flight == inFlight);
                CHECK(c.peak_versions == expectedVersions(t, inFlight));
            } else {
                CHECK(c.peak_in_flight <= inFlight);
                CHECK(c.peak_versions <= expectedVersions(t, inFlight));
            }
            CHECK(c.steps == (t.update_per_backward ? c.backwards : batches));
            CHECK(sim.stages[s].peak_stashed_microbatches == c.peak_in_flight);
            CHECK(sim.stages[s].peak_weight_versions == c.peak_versions);

            // The memory model (costs.h) follows the same traits as the simulated peak.
            auto totals = stageTotals(plan, s, plan.cluster->device_types[0]);
            StageMemoryInput in {totals.weight_bytes, totals.activation_bytes, totals.input_bytes,
                totals.optimizer_bytes, limit, m, false};
            const double model = stageMemoryBytes(t, in);
            CHECK(model == Approx(stageMemoryBytes(g->name(), in)));
            if (s == 0)
                CHECK(sim.stages[s].peak_memory_bytes == Approx(model));
            else
                CHECK(sim.stages[s].peak_memory_bytes <= Approx(model));
        }

        const double perBatch = sim.makespan_s / batches;
        if (t.steady_state == SteadyState::Makespan)
            CHECK(sim.iteration_time_s == Approx(perBatch));
        else
            CHECK(sim.iteration_time_s < perBatch);
    }
}

TEST_CASE("every generator accepts and rejects the plans its traits say", "[schedule-traits]")
{
    for (const auto* g : scheduleGenerators()) {
        const auto& t = g->traits();
        INFO("kind " << g->name());
        if (t.chunks == ChunkRule::V) {
            // Two chunks in a V, any microbatch count (from 2p per copy of the V where the traits say), equal replicas
            // per stage; not one chunk, not the loop.
            CHECK(generates(makePlan(*g, {1, 1}, 4, 2)));
            CHECK(generates(makePlan(*g, {1, 1, 1}, 2, 2)) == !t.batch_covers_virtual_stages);
            CHECK(generates(makePlan(*g, {2, 2}, 6, 2)) == !t.batch_covers_virtual_stages);
            CHECK(generates(makePlan(*g, {1, 1, 1}, 6, 2)));
            CHECK(generates(makePlan(*g, {2, 2}, 8, 2)));
            CHECK_FALSE(generates(makePlan(*g, {2, 2}, 5, 2)));
            CHECK_FALSE(generates(makePlan(*g, {2, 1}, 4, 2)));
            CHECK_FALSE(generates(makePlan(*g, {1, 1}, 4, 1)));
            CHECK_FALSE(generates(makePlan(*g, {1, 1}, 4, 3)));
            auto loop = makePlan(*g, {1, 1, 1}, 6, 2);
            for (int s = 3; s < 6; ++s)
                loop.stages[s].devices = loop.stages[s - 3].devices;
            CHECK_FALSE(generates(loop));
            auto plain = makePlan(*g, {1, 1}, 4, 2);
            plain.cluster.edit().device_types[0].streaming_execution = false;
            CHECK(generates(plain) == !t.streams_transfers);
            continue;
        }
        // Replicated stages; inputs that the replica counts do not divide.
        CHECK(generates(makePlan(*g, {2, 1}, 4)) == t.replicated_stages);
        if (t.replicated_stages)
            CHECK(generates(makePlan(*g, {2, 1}, 3)) == !t.replicas_divide_inputs);
        // A batch shorter than the pipeline.
        CHECK(generates(makePlan(*g, {1, 1, 1, 1}, 3)) == !t.batch_covers_pipeline);
        // Chunks: whole rounds of p microbatches, or not.
        CHECK(generates(makePlan(*g, {1, 1}, 4, 2)) == (t.chunks != ChunkRule::None));
        CHECK(generates(makePlan(*g, {1, 1}, 3, 2)) == (t.chunks == ChunkRule::Any));
        // Streamed transfers need streaming devices.
        auto plain = makePlan(*g, {1, 1}, 4);
        plain.cluster.edit().device_types[0].streaming_execution = false;
        CHECK(generates(plain) == !t.streams_transfers);
        // Several pipelines run only under wave synchronous parallel.
        auto two = makePlan(*g, {1, 1, 1, 1}, 4);
        two.stages = {{0, 3, {0}, 0}, {4, 7, {1}, 0}, {0, 3, {2}, 1}, {4, 7, {3}, 1}};
        CHECK(generates(two) == t.wave_synchronous);
    }
}

TEST_CASE("streamed kinds start a transfer with the op producing it", "[schedule-traits]")
{
    for (const auto* g : scheduleGenerators()) {
        INFO("kind " << g->name());
        auto plan = makePlan(*g, {1, 1}, 4, g->traits().chunks == ChunkRule::V ? 2 : 1);
        plan.schedule.iterations = simulatedIterations(plan);
        const auto r = simulate(plan);
        bool overlapped = false; // a send on device 0 begins before the forward it carries has ended
        double lastForwardEnd = 0;
        for (const auto& span : r.timeline.spans) {
            if (span.device != 0)
                continue;
            if (span.lane == Lane::Compute && span.kind == ActionKind::Forward)
                lastForwardEnd = span.t1;
            if (span.lane == Lane::Send && span.kind == ActionKind::SendActivation && span.t0 < lastForwardEnd)
                overlapped = true;
        }
        CHECK(overlapped == g->traits().streams_transfers);
    }
}

TEST_CASE("schedule traits compare by value and unknown kinds are named", "[schedule-traits]")
{
    CHECK(scheduleTraits("1f1b") == ScheduleTraits {.replicas_alike = true});
    CHECK_FALSE(scheduleTraits("gpipe") == scheduleTraits("1f1b"));
    CHECK_FALSE(scheduleTraits("2bw") == scheduleTraits("pipedream"));
    CHECK(findScheduleTraits("zigzag") == nullptr);
    CHECK_THROWS_WITH(scheduleTraits("zigzag"), Catch::Contains("unknown schedule kind 'zigzag'"));
    CHECK_THROWS_WITH(stageMemoryBytes("zigzag", {}), Catch::Contains("known: gpipe, 1f1b"));
}
