// SPDX-License-Identifier: MIT
// Tests of the analytic transformer profile against Megatron's formulas and model table (digest §3, §4.2).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/transformer.h"
#include "planner/transformer_shape.h"

using namespace pw::planner;

namespace {

struct MegatronRow
{
    double billions; ///< as printed in Table 4.1, rounded to 0.1B
    int heads;
    int hidden;
    int layers;
    int gpus;
    int batch;
    double tflops_per_gpu;
    double iteration_s; ///< the digest's F / (n X) column
};

// megatron-gavel.md §4.2 (Table 4.1). V = 51,200 and s = 2048 for every row.
const MegatronRow kTable41[] = {
    {1.7, 24, 2304, 24, 32, 512, 137, 3.5},
    {3.6, 32, 3072, 30, 64, 512, 138, 3.7},
    {7.5, 32, 4096, 36, 128, 512, 142, 3.7},
    {18.4, 48, 6144, 40, 256, 1024, 135, 9.4},
    {39.1, 64, 8192, 48, 512, 1536, 138, 14.5},
    {76.1, 80, 10240, 60, 1024, 1792, 140, 16.1},
    {145.6, 96, 12288, 80, 1536, 2304, 148, 24.8},
    {310.1, 128, 16384, 96, 1920, 2160, 155, 37.6},
    {529.6, 128, 20480, 105, 2520, 2520, 163, 54.1},
    {1008.0, 160, 25600, 128, 3072, 3072, 163, 102.6},
};

TransformerConfig configOf(const MegatronRow& row, int microbatch = 1)
{
    TransformerConfig c;
    c.layers = row.layers;
    c.hidden = row.hidden;
    c.heads = row.heads;
    c.sequence = 2048;
    c.vocab = 51200;
    c.microbatch = microbatch;
    c.bytes_per_element = 2;
    return c;
}

DeviceType a100()
{
    return *devicePreset("A100");
}

double sumForwardFlops(const ModelProfile& m, const char* kind)
{
    double sum = 0;
    for (const auto& l : m.layers)
        if (l.kind == kind)
            sum += l.forward_flops.value_or(0);
    return sum;
}

} // namespace

TEST_CASE("Eq. 4.3 reproduces every parameter count of Megatron's Table 4.1", "[transformer]")
{
    for (const auto& row : kTable41) {
        INFO("model " << row.billions << "B");
        double p = megatronParameterCount(configOf(row)) / 1e9;
        CHECK(std::abs(p - row.billions) <= 0.05); // the table prints one decimal
    }
}

TEST_CASE("Eq. 4.3 equals 12lh^2 + 13lh + (V + s)h and the profile's weights", "[transformer]")
{
    const auto c = configOf(kTable41[0]);
    const double l = c.layers, h = c.hidden, V = c.vocab, s = c.sequence;
    CHECK(megatronParameterCount(c) == Approx(12 * l * h * h + 13 * l * h + (V + s) * h).epsilon(1e-12));
    // The exact count adds what Eq. 4.3 leaves out: the final layer norm's 2h.
    CHECK(transformerParameterCount(c) == megatronParameterCount(c) + 2 * h);

    auto m = transformerProfile(c, a100());
    REQUIRE(m.layerCount() == c.layers + 2);
    CHECK(m.layers.front().kind == "embedding");
    CHECK(m.layers.back().kind == "head");
    CHECK(m.layers.front().weight_bytes == Approx((V + s) * h * 2));
    CHECK(m.layers[1].weight_bytes == Approx((12 * h * h + 13 * h) * 2));
    // Tied weights: Eq. 4.3 counts the word embedding once; the head keeps the last stage's copy (V h) and
    // the final layer norm (2h).
    CHECK(m.totalWeightBytes() == Approx((megatronParameterCount(c) + V * h + 2 * h) * 2).epsilon(1e-12));
}

TEST_CASE("Per-layer FLOPs add up to Eq. 4.2", "[transformer]")
{
    for (const auto& row : {kTable41[0], kTable41[6], kTable41[9]}) {
        for (int b : {1, 4}) {
            INFO("model " << row.billions << "B, microbatch " << b);
            const auto c = configOf(row, b);
            const double B = b, l = c.layers, h = c.hidden, V = c.vocab, s = c.sequence;
            auto m = transformerProfile(c, a100());
            double layers = sumForwardFlops(m, "transformer_layer");
            double head = sumForwardFlops(m, "head");
            CHECK(sumForwardFlops(m, "embedding") == 0);
            CHECK(layers == Approx(l * (24 * B * s * h * h + 4 * B * s * s * h)).epsilon(1e-12));
            CHECK(head == Approx(2 * B * s * h * V).epsilon(1e-12));

            // Without recomputation: forward + backward (2x) = 3x every layer.
            double noRecompute = 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V;
            CHECK(3 * (layers + head) == Approx(noRecompute).epsilon(1e-12));
            // Eq. 4.2 as printed: recomputation adds one forward to the transformer layers, not to the logits.
            double eq42 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
            CHECK(4 * layers + 3 * head == Approx(eq42).epsilon(1e-12));
        }
    }
}

TEST_CASE("Eq. 4.2 over the profile reproduces Table 4.1's iteration times", "[transformer]")
{
    // iteration time = F / (n X), F summed from the per-layer FLOPs of one sample times the batch.
    for (const auto& row : kTable41) {
        INFO("model " << row.billions << "B");
        auto m = transformerProfile(configOf(row), a100());
        double perSample = 4 * sumForwardFlops(m, "transformer_layer") + 3 * sumForwardFlops(m, "head");
        double seconds = perSample * row.batch / (row.gpus * row.tflops_per_gpu * 1e12);
        CHECK(std::abs(seconds - row.iteration_s) <= 0.05 + 1e-9);
    }
}

TEST_CASE("Times are FLOPs over sustained peak and scale with the device", "[transformer]")
{
    const auto c = configOf(kTable41[0], 2);
    const double B = 2, h = c.hidden, s = c.sequence;
    TransformerProfileOptions options;
    options.efficiency = 0.5;
    auto onA100 = transformerProfile(c, a100(), options);
    auto onH100 = transformerProfile(c, *devicePreset("h100"), options);

    const auto& layer = onA100.layers[1];
    double flops = 24 * B * s * h * h + 4 * B * s * s * h;
    CHECK(layer.forward_ms == Approx(flops / (312e12 * 0.5) * 1e3));
    CHECK(layer.backward_ms == Approx(2 * layer.forward_ms));
    CHECK(layer.forward_ms == Approx(3.8407).epsilon(1e-4)); // 1.7B model, b = 2: 5.99e11 FLOPs at 156 TFLOPS
    for (int i = 1; i < onA100.layerCount(); ++i)
        CHECK(onA100.layers[i].forward_ms / onH100.layers[i].forward_ms == Approx(989.0 / 312.0));

    options.efficiency = 0.25; // half the efficiency, twice the time
    auto slow = transformerProfile(c, a100(), options);
    CHECK(slow.layers[1].forward_ms == Approx(2 * layer.forward_ms));
    options.backward_factor = 3;
    CHECK(transformerProfile(c, a100(), options).layers[1].backward_ms == Approx(3 * slow.layers[1].forward_ms));

    // The embedding is a memory-bound lookup: bytes over bandwidth, not FLOPs.
    CHECK(onA100.layers[0].forward_ms == Approx(3 * B * s * h * 2 / 2.039e12 * 1e3)); // the datasheet 2,039 GB/s
    CHECK(onA100.layers[0].forward_ms < 0.01 * layer.forward_ms);
}

TEST_CASE("Profile records the shape, the device and the activation sizes", "[transformer]")
{
    const auto c = configOf(kTable41[2], 4);
    auto m = transformerProfile(c, a100());
    CHECK(m.profiled_device == "A100");
    CHECK(m.microbatch_size == 4);
    REQUIRE(m.architecture.has_value());
    CHECK(m.architecture->hidden == c.hidden);
    CHECK(m.architecture->heads == c.heads);
    CHECK(m.name.find("7.5B") != std::string::npos);
    CHECK_FALSE(m.is_graph);
    const double out = 4.0 * 2048 * 4096 * 2;
    CHECK(m.layers[0].activation_bytes == out);
    CHECK(m.layers[5].activation_bytes == out);
    CHECK(m.layers.back().activation_bytes == 4.0 * 2048 * 51200 * 2);
    CHECK_NOTHROW(m.validate());
}

TEST_CASE("Bad transformer configurations name the field", "[transformer]")
{
    auto fieldOf = [](TransformerConfig c, DeviceType d = a100(), TransformerProfileOptions o = {}) -> std::string {
        try {
            transformerProfile(c, d, o);
        } catch (const InputError& e) {
            return e.field();
        }
        return "(no error)";
    };
    const auto good = configOf(kTable41[0]);
    auto c = good;
    c.heads = 25; // 2304 is not a multiple of 25
    CHECK(fieldOf(c) == "heads");
    c = good;
    c.hidden = 0;
    CHECK(fieldOf(c) == "hidden");
    c = good;
    c.layers = -1;
    CHECK(fieldOf(c) == "layers");
    c = good;
    c.microbatch = 0;
    CHECK(fieldOf(c) == "microbatch");
    c = good;
    c.vocab = 0;
    CHECK(fieldOf(c) == "vocab");
    c = good;
    c.sequence = 0;
    CHECK(fieldOf(c) == "sequence");
    c = good;
    c.bytes_per_element = 0;
    CHECK(fieldOf(c) == "bytes_per_element");
    DeviceType slowDevice = a100();
    slowDevice.peak_tflops = 0;
    CHECK(fieldOf(good, slowDevice) == "peak_tflops");
    TransformerProfileOptions o;
    o.efficiency = 1.5;
    CHECK(fieldOf(good, a100(), o) == "efficiency");
    CHECK_THROWS_AS(transformerParameterCount(c), InputError);
}
