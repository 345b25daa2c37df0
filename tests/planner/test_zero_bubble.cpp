// SPDX-License-Identifier: MIT
// Zero-bubble schedules (Qi et al. 2024, issue 23): ZB-H1 and ZB-H2 are validator-clean over a sweep of pipeline
// depths and batch sizes, give the paper's bubble closed forms exactly in the simulator (T_F = T_B = T_W and the
// general case, no transfer cost), and keep the paper's activation-memory ratios; the validator refuses W out of
// place, profiles split the backward, and the engine refuses what it cannot run yet.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/io/transformer.h"
#include "planner/model_profile.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "zero_bubble_fixtures.h"

using namespace pw::planner;

namespace {

/// @brief The per-stage times of the paper's analysis, in ms: forward, input gradient (its T_B), weight gradient.
struct Times
{
    double f = 1, b = 1, w = 1;
};

/// p stages of one layer each, one device per stage, nothing transferred and no latency (the paper's assumption),
/// the optimizer step free (no memory bandwidth given). Each layer stashes 1 MB and has no weights, so a stage's
/// peak memory is its stashed activations alone.
Plan zbPlan(int p, int m, const std::string& kind, Times t = {}, int iterations = 1)
{
    Plan plan = pw::test::chainPlan(p, m, kind, {t.f, t.b + t.w, 0, 0, 1e6}, {80e9, 100, 1e11, 0, 0, 0});
    for (auto& layer : plan.model.edit().layers) {
        layer.backward_input_ms = t.b;
        layer.backward_weight_ms = t.w;
    }
    plan.schedule.iterations = iterations;
    return plan;
}

SimulationResult zeroBubbleRun(const Plan& plan)
{
    return pw::test::validatedRun(plan);
}

int peakStashed(const SimulationResult& r)
{
    int peak = 0;
    for (const auto& s : r.stages)
        peak = std::max(peak, s.peak_stashed_microbatches);
    return peak;
}

} // namespace

TEST_CASE("zero-bubble schedules are validator-clean over depths and batch sizes", "[zero-bubble]")
{
    for (const std::string kind : {"zb-h1", "zb-h2"})
        for (int p = 2; p <= 8; ++p)
            for (int m : {1, p - 1, p, p + 1, 2 * p - 1, 2 * p, 3 * p, 4 * p}) {
                INFO(kind << " p = " << p << " m = " << m);
                auto plan = zbPlan(p, m, kind, {1, 1, 1}, 2);
                const auto schedule = generateSchedule(plan);
                const auto report = validate(schedule, plan);
                INFO((report.errors.empty() ? std::string() : report.errors.front()));
                CHECK(report.ok);
                std::size_t inputs = 0, weights = 0, fused = 0;
                for (const auto& list : schedule.devices)
                    for (const auto& a : list) {
                        inputs += a.kind == ActionKind::BackwardInput;
                        weights += a.kind == ActionKind::BackwardWeight;
                        fused += a.kind == ActionKind::Backward;
                    }
                CHECK(inputs == static_cast<std::size_t>(p * m * 2));
                CHECK(weights == inputs);
                CHECK(fused == 0);
                CHECK_NOTHROW(simulate(plan, schedule));
            }
}

TEST_CASE("zero-bubble schedules with replicated stages are validator-clean", "[zero-bubble]")
{
    for (const std::string kind : {"zb-h1", "zb-h2"}) {
        INFO(kind);
        auto plan = zbPlan(3, 8, kind);
        plan.cluster.edit().nodes[0].count = 5;
        plan.stages[0].devices = {0, 3};
        plan.stages[2].devices = {2, 4};
        CHECK(validate(generateSchedule(plan), plan).ok);
    }
}

TEST_CASE("ZB-H1 has a third of 1F1B's bubble when T_F = T_B = T_W", "[zero-bubble]")
{
    for (int p = 2; p <= 8; ++p)
        for (int m : {p, 2 * p, 4 * p}) {
            INFO("p = " << p << " m = " << m);
            const double work = 3.0 * m * 1e-3;
            // 1F1B's backward is the fused B = T_B + T_W.
            const double oneF = zeroBubbleRun(zbPlan(p, m, "1f1b")).iteration_time_s - work;
            const double h1 = zeroBubbleRun(zbPlan(p, m, "zb-h1")).iteration_time_s - work;
            CHECK(oneF == Approx((p - 1) * 3e-3));
            CHECK(h1 == Approx((p - 1) * 1e-3));
            CHECK(h1 == Approx(oneF / 3));
        }
}

TEST_CASE("ZB-H2 has no bubble when T_F = T_B = T_W", "[zero-bubble]")
{
    for (int p = 2; p <= 8; ++p)
        for (int m : {2 * p - 1, 2 * p, 4 * p}) {
            INFO("p = " << p << " m = " << m);
            // Batch to batch: a batch's fill overlaps the previous batch's drain (no stage waits for another's
            // step), which is where the parallelogram has no bubble.
            const auto r = zeroBubbleRun(zbPlan(p, m, "zb-h2", {}, 3));
            CHECK(r.iteration_time_s == Approx(3.0 * m * 1e-3));
        }
}

TEST_CASE("the zero-bubble closed forms hold in the general case", "[zero-bubble]")
{
    // The paper's ZB-H1 bubble (p-1)(T_F + T_B - T_W) (the W fit into the cool-down: T_W <= T_F), ZB-H2's
    // (p-1) max(0, T_F + T_B - 2 T_W).
    for (const Times t :
        {Times {2, 1.5, 1}, Times {1, 1, 0.6}, Times {1.5, 1, 0.7}, Times {1, 2, 0.5}, Times {1, 1, 1.2}})
        for (int p : {2, 4, 7})
            for (int m : {2 * p - 1, 3 * p}) {
                INFO("T = " << t.f << ", " << t.b << ", " << t.w << " p = " << p << " m = " << m);
                const double work = m * (t.f + t.b + t.w) * 1e-3;
                if (t.w <= t.f) {
                    const double h1 = zeroBubbleRun(zbPlan(p, m, "zb-h1", t)).iteration_time_s - work;
                    CHECK(h1 == Approx((p - 1) * (t.f + t.b - t.w) * 1e-3));
                }
                const double h2 = zeroBubbleRun(zbPlan(p, m, "zb-h2", t, 3)).iteration_time_s - work;
                CHECK(h2 == Approx((p - 1) * std::max(0.0, t.f + t.b - 2 * t.w) * 1e-3).margin(1e-12));
            }
}

TEST_CASE("zero-bubble schedules keep the paper's activation memory", "[zero-bubble]")
{
    for (int p = 2; p <= 8; ++p) {
        INFO("p = " << p);
        const int m = 3 * p;
        const auto oneF = zeroBubbleRun(zbPlan(p, m, "1f1b"));
        const auto h1 = zeroBubbleRun(zbPlan(p, m, "zb-h1"));
        const auto h2 = zeroBubbleRun(zbPlan(p, m, "zb-h2", {}, 3));
        // The first stage stashes the most: p microbatches under 1F1B and ZB-H1, 2p - 1 under ZB-H2.
        CHECK(peakStashed(oneF) == p);
        CHECK(peakStashed(h1) == p);
        CHECK(peakStashed(h2) == 2 * p - 1);
        CHECK(h1.stages[0].peak_memory_bytes == Approx(oneF.stages[0].peak_memory_bytes));
        CHECK(h2.stages[0].peak_memory_bytes / oneF.stages[0].peak_memory_bytes == Approx((2.0 * p - 1) / p));
    }
}

TEST_CASE("the simulator times I and W from the profile's split", "[zero-bubble]")
{
    auto plan = zbPlan(2, 2, "zb-h1", {1, 3, 1});
    const auto schedule = generateSchedule(plan);
    const auto r = simulate(plan, schedule, {.record_spans = true});
    int seen = 0;
    for (const auto& s : r.timeline.spans) {
        if (s.kind == ActionKind::BackwardInput) {
            CHECK(s.t1 - s.t0 == Approx(3e-3));
            ++seen;
        } else if (s.kind == ActionKind::BackwardWeight) {
            CHECK(s.t1 - s.t0 == Approx(1e-3));
            ++seen;
        }
    }
    CHECK(seen == 8);
    // Without a split a layer with weights halves its backward; one without has no weight gradient.
    Layer layer;
    layer.backward_ms = 4;
    layer.weight_bytes = 10;
    CHECK(backwardWeightShare(layer) == 0.5);
    layer.weight_bytes = 0;
    CHECK(backwardWeightShare(layer) == 0);
    layer.backward_input_ms = 3;
    layer.backward_weight_ms = 1;
    CHECK(backwardWeightShare(layer) == 0.25);
}

TEST_CASE("the validator knows where W belongs", "[zero-bubble]")
{
    auto plan = zbPlan(2, 2, "zb-h1");
    const auto good = generateSchedule(plan);
    REQUIRE(validate(good, plan).ok);
    auto find = [](std::vector<Action>& list, ActionKind kind, int mb) {
        return std::find_if(
            list.begin(), list.end(), [&](const Action& a) { return a.kind == kind && a.microbatch == mb; });
    };
    SECTION("W before its I")
    {
        auto s = good;
        auto& list = s.devices[1];
        auto i = find(list, ActionKind::BackwardInput, 0), w = find(list, ActionKind::BackwardWeight, 0);
        std::iter_swap(i, w);
        const auto report = validate(s, plan);
        CHECK_FALSE(report.ok);
    }
    SECTION("W after the optimizer step")
    {
        auto s = good;
        auto& list = s.devices[0];
        auto w = find(list, ActionKind::BackwardWeight, 1);
        const Action moved = *w;
        list.erase(w);
        list.push_back(moved);
        const auto report = validate(s, plan);
        REQUIRE_FALSE(report.ok);
        CHECK(report.errors.front().find("before its batch's step") != std::string::npos);
    }
    SECTION("a missing W")
    {
        auto s = good;
        auto& list = s.devices[0];
        list.erase(find(list, ActionKind::BackwardWeight, 0));
        CHECK_FALSE(validate(s, plan).ok);
    }
    SECTION("a W beside a fused B")
    {
        auto p1 = zbPlan(2, 2, "1f1b");
        auto s = generateSchedule(p1);
        s.devices[0].insert(s.devices[0].end() - 1, Action {ActionKind::BackwardWeight, 0, 0, -1, 0, -1, 0.0});
        CHECK_FALSE(validate(s, p1).ok);
    }
}

TEST_CASE("transformer profiles split the backward by FLOPs", "[zero-bubble]")
{
    TransformerConfig c {2, 1024, 16, 1024, 50257, 4, 2};
    DeviceType gpu {"gpu", 80e9, 100, 0, std::nullopt, 0};
    const auto model = transformerProfile(c, gpu, {});
    const double B = 4, s = 1024, h = 1024;
    for (const auto& layer : model.layers) {
        INFO(layer.name);
        REQUIRE(layer.backward_input_ms);
        REQUIRE(layer.backward_weight_ms);
        CHECK(*layer.backward_input_ms + *layer.backward_weight_ms == Approx(layer.backward_ms));
        if (layer.kind == "transformer_layer")
            // Weight gradient 24Bsh^2 of the input gradient's 24Bsh^2 + 8Bs^2h (attention has no weights).
            CHECK(*layer.backward_weight_ms / *layer.backward_input_ms
                == Approx(24 * B * s * h * h / (24 * B * s * h * h + 8 * B * s * s * h)));
        else if (layer.kind == "head")
            CHECK(*layer.backward_weight_ms == Approx(*layer.backward_input_ms));
        else
            CHECK(*layer.backward_input_ms == 0);
    }
    // The split survives the profile's JSON.
    CHECK(modelFromJson(toJson(model)) == model);
    auto j = toJson(model);
    j["layers"][1].erase("backward_weight_ms");
    CHECK_THROWS_AS(modelFromJson(j), InputError);
}

namespace {

/// ZBV's plan for the comparison with 1F1B: the 2p layers of zbPlan(p, ..., {2 T}) cut in 2p virtual stages of one
/// layer (half a 1F1B stage each), virtual stage s on device s for s < p and on device 2p - 1 - s after.
Plan zbvPlan(int p, int m, Times t = {}, int iterations = 1)
{
    return pw::test::vPlan(p, m, "zbv", {t.f / 2, t.b / 2, t.w / 2}, iterations, 0, 0.5e6);
}

/// 1F1B over the same layers: p stages of two layers.
Plan oneFOneBPlan(int p, int m)
{
    Plan plan = pw::test::chainPlan(2 * p, m, "1f1b", {0.5, 1, 0, 0, 0.5e6}, {80e9, 100, 1e11, 0, 0, 0});
    plan.cluster.edit().nodes[0].count = p;
    plan.stages.clear();
    for (int s = 0; s < p; ++s)
        plan.stages.push_back({2 * s, 2 * s + 1, {s}});
    return plan;
}

} // namespace

TEST_CASE("ZBV is validator-clean over depths and batch sizes", "[zero-bubble]")
{
    for (int p = 2; p <= 8; ++p)
        for (int m : {1, p - 1, p, 2 * p - 1, 2 * p, 3 * p, 4 * p}) {
            INFO("p = " << p << " m = " << m);
            auto plan = zbvPlan(p, m, {}, 2);
            const auto schedule = generateSchedule(plan);
            const auto report = validate(schedule, plan);
            INFO((report.errors.empty() ? std::string() : report.errors.front()));
            CHECK(report.ok);
            CHECK_NOTHROW(simulate(plan, schedule));
        }
    // Equal replicas per stage: copies of the V.
    auto plan = zbvPlan(2, 8);
    plan.cluster.edit().nodes[0].count = 4;
    plan.stages[0].devices = plan.stages[3].devices = {0, 2};
    plan.stages[1].devices = plan.stages[2].devices = {1, 3};
    CHECK(validate(generateSchedule(plan), plan).ok);
}

TEST_CASE("ZBV has no bubble at 1F1B's memory when T_F = T_B = T_W", "[zero-bubble]")
{
    for (int p = 2; p <= 8; ++p)
        for (int m : {2 * p - 1, 2 * p, 4 * p}) {
            INFO("p = " << p << " m = " << m);
            const auto zbv = zeroBubbleRun(zbvPlan(p, m, {}, 3));
            CHECK(zbv.iteration_time_s == Approx(3.0 * m * 1e-3));
            // Each device stashes 2p chunk-microbatches of half a stage: 1F1B's p on its first stage.
            const auto oneF = zeroBubbleRun(oneFOneBPlan(p, m));
            double zbvPeak = 0, oneFPeak = 0;
            for (const auto& d : zbv.devices)
                zbvPeak = std::max(zbvPeak, d.peak_memory_bytes);
            for (const auto& d : oneF.devices)
                oneFPeak = std::max(oneFPeak, d.peak_memory_bytes);
            CHECK(oneFPeak == Approx(p * 1e6));
            CHECK(zbvPeak == Approx(oneFPeak));
        }
}

TEST_CASE("the uniform partitioner places ZBV's chunks in a V", "[zero-bubble]")
{
    PartitionRequest request;
    request.model = pw::test::uniformChain(8);
    request.cluster = pw::test::uniformCluster(1, 4);
    request.options.schedule.kind = "zbv";
    request.options.schedule.chunks = 2;
    request.options.stages = 4; // physical stages: 8 virtual ones with two chunks
    request.options.straight = true;
    const auto result = findPartitioner("uniform")->partition(request, {}, {});
    INFO(result.errorText());
    REQUIRE(result.plan);
    for (int s = 0; s < 8; ++s)
        CHECK(result.plan->stages[s].devices == std::vector<int> {s < 4 ? s : 7 - s});
    CHECK(validate(generateSchedule(*result.plan), *result.plan).ok);
}

TEST_CASE("zero bubble: a batch ends when its last optimizer step does, after its last W", "[zero-bubble]")
{
    // issue 30 item 12: the Gantt's dashed batch-end line sat before batch 1's last W and optimizer step (it was the
    // last stage's last backward).
    for (const std::string kind : {"zb-h2", "1f1b", "zb-h1"}) {
        INFO(kind);
        Plan plan = pw::test::chainPlan(4, 8, kind, {1, 2, 1e6, 1e6, {}}, {80e9, 100, 1e10, 5e-6, 0, 0});
        plan.cluster.edit().device_types[0].memory_bandwidth_bytes_per_s = 1e11; // steps take time
        plan.schedule.iterations = 3;
        plan.validate();
        const auto r = simulate(plan);
        REQUIRE(r.batch_ends_s.size() == 3);
        std::map<std::pair<int, int>, int> steps;
        std::vector<double> lastStep(3, 0), lastWork(3, 0);
        const int perBatch = plan.schedule.microbatches;
        for (const auto& s : r.timeline.spans) {
            if (s.lane != Lane::Compute)
                continue;
            if (s.kind == ActionKind::OptimizerStep) {
                const int b = steps[{s.device, s.stage}]++;
                lastStep[static_cast<std::size_t>(b)] = std::max(lastStep[static_cast<std::size_t>(b)], s.t1);
            } else if (s.microbatch >= 0) {
                const auto b = static_cast<std::size_t>(s.microbatch / perBatch);
                lastWork[b] = std::max(lastWork[b], s.t1);
            }
        }
        for (std::size_t b = 0; b < 3; ++b) {
            INFO("batch " << b);
            CHECK(r.batch_ends_s[b] == Approx(lastStep[b]));
            CHECK(r.batch_ends_s[b] >= lastWork[b]); // every F, B, I and W of the batch is before its end
        }
    }
}
