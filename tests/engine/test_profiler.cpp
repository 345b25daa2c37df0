// SPDX-License-Identifier: MIT
// The measured profile (engine/profiler.h): the planner's format, the engine's own sizes, times that are real
// measurements, a profile a plan can be made from and trained with.
#include <catch2/catch.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/executor.h"
#include "engine/model.h"
#include "engine/profiler.h"
#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/transformer_shape.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;
using namespace pw::engine;
using Catch::Contains;

namespace {

ProfileOptions profilerSmallModel(int hidden = 32)
{
    ProfileOptions o;
    o.shape = {3, hidden, 4, 16, 100, 2, 4}; // blocks, hidden, heads, sequence, vocab, microbatch, bytes
    o.repeats = 3;
    o.warmup = 1;
    o.threads = 1;
    return o;
}

} // namespace

TEST_CASE("profile: median of odd and even counts", "[engine][profiler]")
{
    CHECK(median({}) == 0);
    CHECK(median({3.0}) == 3.0);
    CHECK(median({5.0, 1.0, 3.0}) == 3.0);
    CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
    CHECK(median({1.0, 100.0, 2.0}) == 2.0); // one outlier does not move it
}

TEST_CASE(
    "profile: a measured profile is the planner's format with the engine's layers and sizes", "[engine][profiler]")
{
    const auto o = profilerSmallModel();
    std::vector<LayerSamples> samples;
    const auto profile = measureProfile(o, &samples);
    const ModelConfig config = ModelConfig::fromTransformer(o.shape);
    const BatchShape shape {o.shape.microbatch, o.shape.sequence};

    REQUIRE(profile.layerCount() == o.shape.layers + 2);
    CHECK(profile.profiled_device == "cpu");
    CHECK(planner::devicePreset(profile.profiled_device).has_value());
    CHECK(profile.microbatch_size == 2);
    REQUIRE(profile.architecture.has_value());
    CHECK(profile.architecture->layers == 3);
    CHECK(profile.architecture->hidden == 32);
    CHECK(profile.architecture->bytes_per_element == 4);
    CHECK(planner::modelFromJson(planner::toJson(profile)) == profile); // what the profile loader reads back

    REQUIRE(samples.size() == profile.layers.size());
    double weights = 0;
    for (int l = 0; l < profile.layerCount(); ++l) {
        INFO("layer " << l << " " << profile.layers[l].name);
        const auto& layer = profile.layers[l];
        CHECK(layer.forward_ms > 0);
        CHECK(layer.backward_ms > 0);
        CHECK(samples[l].forward_s.size() == 3);
        CHECK(samples[l].backward_s.size() == 3);
        CHECK(layer.forward_ms == Approx(median(samples[l].forward_s) * 1e3));
        // The backward split as zero-bubble schedules run it: I and W measured apart, the planner's two fields.
        CHECK(samples[l].backward_input_s.size() == 3);
        CHECK(samples[l].backward_weight_s.size() == 3);
        REQUIRE(layer.backward_input_ms.has_value());
        REQUIRE(layer.backward_weight_ms.has_value());
        CHECK(*layer.backward_input_ms == Approx(median(samples[l].backward_input_s) * 1e3));
        CHECK(*layer.backward_weight_ms == Approx(median(samples[l].backward_weight_s) * 1e3));
        CHECK(*layer.backward_weight_ms > 0); // every layer has weights (the embedding's are all of its backward)
        if (l > 0)
            CHECK(*layer.backward_input_ms > 0);
        // Exactly what a stage holding the layer stores, in fp32.
        CHECK(layer.weight_bytes == 4.0 * static_cast<double>(StageModel(config, shape, l, l).parameterCount()));
        weights += layer.weight_bytes;
        REQUIRE(layer.stashed_bytes.has_value());
        CHECK(*layer.stashed_bytes >= layer.activation_bytes);
    }
    CHECK(profile.layers.front().name == "embedding");
    CHECK(profile.layers[1].kind == "transformer_layer");
    CHECK(profile.layers.back().name == "head");
    // Every parameter of the model once, plus the head's tied copy of the token embedding.
    const double Vp = config.padded_vocab, C = config.channels;
    CHECK(weights == 4.0 * (static_cast<double>(parameterCount(config)) + Vp * C));
    CHECK(profile.layers[1].weight_bytes == 4.0 * (12 * C * C + 13 * C));
    // Outputs: B T C floats between layers; the head's logits B T V.
    CHECK(profile.layers[0].activation_bytes == 4.0 * 2 * 16 * 32);
    CHECK(profile.layers.back().activation_bytes == 4.0 * 2 * 16 * 100);
    // What each layer's I kept for its W (the split backward's output gradients): a block's four products and two
    // layer norms, 11 B T C floats; the embedding's output gradient and the head's final layer norm's, B T C each.
    CHECK(profile.layers[1].weight_gradient_bytes == 4.0 * 11 * 2 * 16 * 32);
    CHECK(profile.layers.front().weight_gradient_bytes == 4.0 * 2 * 16 * 32);
    CHECK(profile.layers.back().weight_gradient_bytes == 4.0 * 2 * 16 * 32);
}

TEST_CASE("profile: times are measurements: a block 8x as wide costs more", "[engine][profiler]")
{
    const auto narrow = measureProfile(profilerSmallModel(32));
    const auto wide = measureProfile(profilerSmallModel(256)); // ~64x the block's GEMM work
    CHECK(wide.layers[1].forward_ms > 4 * narrow.layers[1].forward_ms);
    CHECK(wide.layers[1].backward_ms > 4 * narrow.layers[1].backward_ms);
}

TEST_CASE("profile: the split backward's I + W is about the fused backward", "[engine][profiler]")
{
    // The same kernels in two calls instead of one: a block's I + W within a sane margin of B, measured on a block
    // big enough to time. Each compared by its fastest pass: on a machine shared with other work a pass may lose
    // its core for milliseconds, which the fastest of several passes does not see.
    auto o = profilerSmallModel(256);
    o.repeats = 7;
    std::vector<LayerSamples> samples;
    const auto profile = measureProfile(o, &samples);
    const auto fastest = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    for (int l = 1; l < profile.layerCount(); ++l) {
        const auto& s = samples[static_cast<std::size_t>(l)];
        const double fused = fastest(s.backward_s);
        const double input = fastest(s.backward_input_s), weight = fastest(s.backward_weight_s);
        INFO(profile.layers[static_cast<std::size_t>(l)].name << ": B " << fused * 1e3 << " ms, I " << input * 1e3
                                                              << " ms + W " << weight * 1e3 << " ms");
        CHECK(input + weight > 0.5 * fused);
        CHECK(input + weight < 2.0 * fused);
    }
}

TEST_CASE("profile: a plan made from a measured profile can be trained", "[engine][profiler]")
{
    planner::Plan plan;
    plan.model = measureProfile(profilerSmallModel());
    planner::Cluster cluster;
    const auto cpu = *planner::devicePreset("cpu");
    cluster.device_types = {cpu};
    cluster.nodes.push_back({"local", "", 22, "", cpu.name, 2, 1e10, 1e-6});
    plan.cluster = cluster;
    plan.stages = {{0, 2, {0}}, {3, 4, {1}}};
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = 2;
    plan.validate();
    const auto setup = trainingSetup(plan);
    CHECK(setup.model.layers == 3);
    CHECK(setup.model.channels == 32);
    CHECK(setup.shape == BatchShape {2, 16});
}

TEST_CASE("profile: bad options name the option", "[engine][profiler]")
{
    auto o = profilerSmallModel();
    o.shape.heads = 5;
    CHECK_THROWS_WITH(measureProfile(o), Contains("--heads") && Contains("must divide --hidden"));
    o = profilerSmallModel();
    o.repeats = 0;
    CHECK_THROWS_WITH(measureProfile(o), Contains("--repeats: must be positive"));
    o = profilerSmallModel();
    o.warmup = -1;
    CHECK_THROWS_AS(measureProfile(o), planner::InputError);
}

TEST_CASE("profile: a Llama's blocks are measured with the family's layers and sizes", "[engine][profiler]")
{
    auto o = profilerSmallModel();
    o.shape = test::asLlama(o.shape, 2, 40);
    const auto profile = measureProfile(o);
    REQUIRE(profile.layerCount() == 5);
    CHECK(profile.name.rfind("llama (", 0) == 0);
    CHECK(profile.architecture->mlp == planner::MlpKind::SwiGlu);
    // A block's weights are what the planner counts for the family (q 32 x 32, k and v 16 x 32, o 32 x 32, gate and
    // up 40 x 32, down 32 x 40, two norms of 32), the head's its norm and its own output matrix.
    const double C = 32, F = 40;
    CHECK(profile.layers[1].weight_bytes == 4.0 * (2 * C * C + 2 * 16 * C + 3 * F * C + 2 * C));
    CHECK(profile.layers[1].weight_bytes == 4.0 * planner::transformerParameters(o.shape).per_layer);
    CHECK(profile.layers.back().weight_bytes == 4.0 * (C + 128 * C));
    CHECK(
        profile.layers[1].forward_flops == Approx(2.0 * 2 * 16 * (C * 64 + C * C + 3 * C * F) + 4.0 * 2 * 16 * 16 * C));
    for (const auto& layer : profile.layers) {
        CHECK(layer.forward_ms > 0);
        CHECK(layer.backward_ms > 0);
    }
}
