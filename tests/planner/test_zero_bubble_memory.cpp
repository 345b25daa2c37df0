// SPDX-License-Identifier: MIT
// What a split backward keeps from I to W (issue 23): a layer's weight_gradient_bytes (JSON, transformer estimate),
// held by the simulator from the end of a microbatch's I to the end of its W, counted by stageMemoryBytes and by
// Megatron's estimate for zb-h1, zb-h2 and zbv, which meet the simulator's peaks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/io/transformer.h"
#include "planner/model_profile.h"
#include "planner/partition/megatron.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "zero_bubble_fixtures.h"

using namespace pw::planner;

namespace {

/// p stages of one layer each (F = I = W = 1 ms), one device per stage, free links; every layer stashes 1 MB, holds
/// 1 MB of weights and keeps `kept` bytes from its I to its W.
Plan keptPlan(int p, int m, const std::string& kind, double kept, bool recompute = false)
{
    Plan plan = pw::test::chainPlan(p, m, kind, {1, 2, 1e6, 1e6, {}}, {80e9, 100, 1e11, 0, 0, 0});
    for (auto& layer : plan.model.edit().layers) {
        layer.backward_input_ms = 1;
        layer.backward_weight_ms = 1;
        layer.weight_gradient_bytes = kept;
    }
    plan.schedule.recompute = recompute ? Recompute::Full : Recompute::None;
    return plan;
}

SimulationResult zeroBubbleMemoryRun(const Plan& plan)
{
    return pw::test::validatedRun(plan);
}

/// `layers` equal layers (F = I = W = 1 ms, 1 MB stashed, 1 MB of weights, `kept` bytes from I to W) for Megatron's
/// configPlan on p devices.
PartitionRequest keptChain(int layers, int p, double kept)
{
    PartitionRequest request;
    auto model = pw::test::uniformChain(layers, {1, 2, 1e6, 1e6, {}});
    for (auto& layer : model.layers) {
        layer.backward_input_ms = 1;
        layer.backward_weight_ms = 1;
        layer.weight_gradient_bytes = kept;
    }
    request.model = model;
    request.cluster = pw::test::uniformCluster(1, p, {80e9, 100, 1e15, 0, 0, 0});
    return request;
}

double peak(const SimulationResult& sim)
{
    double most = 0;
    for (const auto& d : sim.devices)
        most = std::max(most, d.peak_memory_bytes);
    return most;
}

} // namespace

TEST_CASE("a layer's weight-gradient bytes round-trip and default to 0", "[zero-bubble][zero-bubble-memory]")
{
    auto model = pw::test::uniformChain(2);
    model.layers[1].weight_gradient_bytes = 5e5;
    auto j = toJson(model);
    CHECK_FALSE(j["layers"][0].contains("weight_gradient_bytes")); // 0 is what an absent field reads as
    CHECK(j["layers"][1]["weight_gradient_bytes"] == 5e5);
    CHECK(modelFromJson(j) == model);
    j["layers"][1].erase("weight_gradient_bytes");
    CHECK(modelFromJson(j).layers[1].weight_gradient_bytes == 0);
    j["layers"][1]["weight_gradient_bytes"] = -1;
    CHECK_THROWS_WITH(modelFromJson(j), Catch::Contains("/layers/1/weight_gradient_bytes"));
    model.layers[0].weight_gradient_bytes = -1;
    CHECK_THROWS_WITH(model.validate(), Catch::Contains("/layers/0/weight_gradient_bytes"));
}

TEST_CASE("a transformer profile keeps 11 B s h values per block from I to W", "[zero-bubble][zero-bubble-memory]")
{
    // The output gradients of a block's QKV (3h), attention projection (h), MLP up (4h) and down (h) products and of
    // its two layer norms (2h): what the engine's backwardInput leaves for backwardWeight.
    for (int bpe : {2, 4}) {
        TransformerConfig config;
        config.layers = 3;
        config.hidden = 64;
        config.heads = 4;
        config.sequence = 32;
        config.vocab = 100;
        config.microbatch = 2;
        config.bytes_per_element = bpe;
        const auto model = transformerProfile(config, {"gpu", 80e9, 100, 0, {}, 0});
        const double bsh = 2.0 * 32 * 64 * bpe;
        REQUIRE(model.layerCount() == 5);
        CHECK(model.layers.front().weight_gradient_bytes == bsh); // the embedding's output gradient
        for (int l = 1; l <= 3; ++l)
            CHECK(model.layers[l].weight_gradient_bytes == 11 * bsh);
        CHECK(model.layers.back().weight_gradient_bytes == bsh); // the final layer norm's (the logits' is stashed)
        CHECK(modelFromJson(toJson(model)) == model);
        // Tensor parallelism splits the column-parallel products' 7 of the 11.
        CHECK(tensorParallelWeightGradient(model.layers[1], 1, 2) == Approx(4 * bsh + 7 * bsh / 2));
        CHECK(tensorParallelWeightGradient(model.layers[0], 1, 2) == bsh);
    }
}

TEST_CASE("zb-h1's simulated peak rises by the weight-gradient bytes of the microbatches waiting for their W",
    "[zero-bubble][zero-bubble-memory]")
{
    // zeroBubbleOrder on stage s of p: after an I, s deferred W and the I's own wait (min(s + 1, m) in a short batch),
    // while p microbatches are stashed: the peak rises by exactly that many times the kept bytes. ZB-H2 defers
    // 2s: 2s + 1 wait. A fused B keeps nothing past it, and holds one layer's gradients while it runs.
    const double kept = 3e5;
    struct Case
    {
        std::string kind;
        int p, m;
    };
    for (const Case& c : {Case {"zb-h1", 4, 8}, Case {"zb-h1", 4, 3}, Case {"zb-h1", 6, 12}, Case {"zb-h2", 4, 8},
             Case {"zb-h2", 3, 12}, Case {"1f1b", 4, 8}}) {
        INFO(c.kind << " p = " << c.p << " m = " << c.m);
        const auto with = zeroBubbleMemoryRun(keptPlan(c.p, c.m, c.kind, kept));
        const auto without = zeroBubbleMemoryRun(keptPlan(c.p, c.m, c.kind, 0));
        REQUIRE(with.devices.size() == static_cast<std::size_t>(c.p));
        const int factor = c.kind == "zb-h2" ? 2 : 1;
        for (int s = 0; s < c.p; ++s) {
            INFO("stage " << s);
            const int warm = std::min(factor * (c.p - s - 1), c.m);
            const int waiting = c.kind == "1f1b" ? 0 : std::max(1, std::min({factor * s + 1, c.m - warm + 1, c.m}));
            const double rise = c.kind == "1f1b" ? kept : waiting * kept;
            CHECK(
                with.devices[s].peak_memory_bytes - without.devices[s].peak_memory_bytes == Approx(rise).margin(1e-3));
            CHECK(with.devices[s].peak_stashed_microbatches == without.devices[s].peak_stashed_microbatches);
        }
    }
    // The straight-pipeline case the brief spells out: ZB-H1's stage s holds s + 1 outputs' gradients at its peak.
    const auto with = zeroBubbleMemoryRun(keptPlan(4, 8, "zb-h1", kept));
    const auto without = zeroBubbleMemoryRun(keptPlan(4, 8, "zb-h1", 0));
    for (int s = 0; s < 4; ++s)
        CHECK(with.devices[s].peak_memory_bytes == Approx(without.devices[s].peak_memory_bytes + (s + 1) * kept));
}

TEST_CASE("stageMemoryBytes counts the microbatches waiting for their W", "[zero-bubble][zero-bubble-memory]")
{
    const double kept = 3e5;
    const int p = 4, m = 8;
    for (const std::string kind : {"zb-h1", "zb-h2"}) {
        INFO(kind);
        const auto plan = keptPlan(p, m, kind, kept);
        const auto sim = zeroBubbleMemoryRun(plan);
        const int factor = kind == "zb-h2" ? 2 : 1;
        for (int s = 0; s < p; ++s) {
            INFO("stage " << s);
            const auto totals = stageTotals(plan, s, plan.cluster->device_types[0]);
            CHECK(totals.weight_gradient_bytes == kept);
            StageMemoryInput in {totals.weight_bytes, totals.activation_bytes, totals.input_bytes,
                totals.optimizer_bytes, factor * p - (factor - 1), m, false};
            in.weight_gradient_bytes = totals.weight_gradient_bytes;
            in.awaiting_weight = factor * s + 1;
            CHECK(stageMemoryBytes(kind, in) == Approx(sim.devices[s].peak_memory_bytes));
            // Not told how many wait: every stash, the last stage's count, an upper bound everywhere.
            in.awaiting_weight.reset();
            CHECK(stageMemoryBytes(kind, in) >= sim.devices[s].peak_memory_bytes);
            if (s == p - 1)
                CHECK(stageMemoryBytes(kind, in) == Approx(sim.devices[s].peak_memory_bytes));
            // A fused backward holds nothing of it.
            CHECK(stageMemoryBytes("1f1b", in)
                == Approx(stageMemoryBytes("1f1b",
                    {in.weight_bytes, in.activation_bytes, in.input_bytes, in.optimizer_bytes, in.in_flight,
                        in.microbatches, false})));
        }
    }
}

TEST_CASE("megatron's zero-bubble memory estimate counts what W keeps and meets the simulator",
    "[zero-bubble][zero-bubble-memory][megatron]")
{
    // Exact for zb-h1 and zb-h2 (the peak after an I) and for zbv on equal chunks (the steady state's one waiting
    // microbatch at 2p chunk stashes, or the cool-down's 2 rank + 1 at p + rank); with recomputation every waiting
    // microbatch holds its recomputed activations too (zbv: an upper bound, its chunks' inputs differ).
    for (const double kept : {0.0, 2e5, 1e6})
        for (int p : {2, 4})
            for (int m : {2 * p - 1, 3 * p})
                for (const std::string kind : {"zb-h1", "zb-h2", "zbv"})
                    for (const bool recompute : {false, true}) {
                        INFO(kind << " p = " << p << " m = " << m << " kept = " << kept << " recompute " << recompute);
                        const auto request = keptChain(4 * p, p, kept);
                        const megatron::Config config {
                            p, 1, 1, 1, kind == "zbv" ? 2 : 1, recompute ? Recompute::Full : Recompute::None, m, kind};
                        const Plan plan = megatron::configPlan(request, config);
                        const auto sim = zeroBubbleMemoryRun(plan);
                        const auto est = megatron::estimate(plan, config);
                        if (kind == "zbv" && recompute) // the first chunk's input (none) is under the largest
                            CHECK(est.peak_memory_bytes >= peak(sim));
                        else
                            CHECK(est.peak_memory_bytes == Approx(peak(sim)).epsilon(1e-9));
                        if (recompute || kept == 0)
                            continue;
                        // Per device too: what the kept bytes add to each device's peak is the estimate's formula
                        // on that rank (4 layers a stage, 2 a chunk of the V).
                        const auto without = zeroBubbleMemoryRun(megatron::configPlan(keptChain(4 * p, p, 0), config));
                        const double chunks = kind == "zbv" ? 2 : 1;
                        const double stash = 4e6 / chunks, keptStage = 4 * kept / chunks;
                        for (int r = 0; r < p; ++r) {
                            INFO("rank " << r);
                            CHECK(sim.devices[r].peak_memory_bytes - without.devices[r].peak_memory_bytes
                                == Approx(megatron::kindPeakActivationBytes(kind, p, config.v, m, r, stash, keptStage)
                                    - megatron::kindPeakActivationBytes(kind, p, config.v, m, r, stash, 0))
                                       .margin(1e-3));
                        }
                    }
}
