// SPDX-License-Identifier: MIT
// Model FLOPs, achieved FLOP/s per GPU and MFU (issue 10 item 8), against Megatron's Eq. 4.2 and Table 4.1.
// "digest" = shared/docs/papers/megatron-gavel.md.
#include <catch2/catch.hpp>

#include <limits>

#include "planner/analysis/flops.h"
#include "planner/device_presets.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"

using namespace pw::planner;

namespace {

/// A 24-layer GPT: hidden 1024, 16 heads, sequence 1024, vocabulary 51200, microbatch 4, bf16.
constexpr TransformerConfig kGpt345M {24, 1024, 16, 1024, 51200, 4, 2};

/// The uniform partitioner's plan of `c` on one node of four H100s, 8 microbatches.
PartitionResult uniformOnFourH100(const TransformerConfig& c, bool recompute)
{
    const auto model = transformerProfile(c, *devicePreset("H100"));
    Cluster cluster;
    cluster.device_types = {*devicePreset("H100")};
    cluster.nodes.push_back({"n0", "", 22, "", "H100", 4, 4.5e11, 5e-6});
    PartitionOptions o;
    o.schedule.microbatches = 8;
    o.schedule.recompute = recompute ? Recompute::Full : Recompute::None;
    auto r = findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(r.ok());
    return r;
}

} // namespace

TEST_CASE("Eq. 4.2 reproduces Table 4.1's TFLOP/s per GPU from its iteration times", "[flops]")
{
    // digest §3.1 Eq. 4.2 (recomputation included, as the paper's TFLOP/s are) and §4.2 Table 4.1:
    // 145.6 B: B = 2304, n = 1536, 24.8 s per iteration -> 148 TFLOP/s = 47 % of the A100's 312.
    struct Row
    {
        int heads, hidden, layers, n, batch;
        double seconds, tflops;
    };
    for (const Row& row : {Row {96, 12288, 80, 1536, 2304, 24.8, 148}, Row {64, 8192, 48, 512, 1536, 14.5, 138},
             Row {160, 25600, 128, 3072, 3072, 102.6, 163}}) {
        const TransformerConfig c {row.layers, row.hidden, row.heads, 2048, 51200, 1, 2};
        const double F = transformerFlops(c, row.batch, Recompute::Full);
        const double l = row.layers, h = row.hidden, s = 2048, V = 51200;
        CHECK(F == Approx(96 * row.batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))));
        // Without recomputation one forward fewer per layer; the logit layer is never recomputed.
        CHECK(transformerFlops(c, row.batch, Recompute::None)
            == Approx(F - row.batch * l * (24 * s * h * h + 4 * s * s * h)).epsilon(1e-12));
        INFO(row.hidden);
        CHECK(F / (row.seconds * row.n) / 1e12 == Approx(row.tflops).epsilon(0.01));
    }
    const TransformerConfig big {80, 12288, 96, 2048, 51200, 1, 2};
    CHECK(transformerFlops(big, 2304, Recompute::Full) / (24.8 * 1536) / 312e12 == Approx(0.475).margin(0.001));
}

TEST_CASE("flopsReport of a plan: per sample, per device, MFU against the devices' peak", "[flops]")
{
    const TransformerConfig c = kGpt345M;
    auto r = uniformOnFourH100(c, false);
    const auto sim = simulate(*r.plan);
    const auto report = flopsReport(*r.plan, sim.throughput_samples_per_s);
    REQUIRE(report);
    CHECK(report->model_flops_per_sample == Approx(transformerFlops(c, 1, Recompute::None)));
    CHECK(report->model_flops_per_iteration == Approx(transformerFlops(c, 8 * 4, Recompute::None)));
    CHECK(
        report->model_flops_per_s_per_gpu == Approx(report->model_flops_per_sample * sim.throughput_samples_per_s / 4));
    CHECK(report->peak_flops_per_s_per_gpu == 989e12);
    CHECK(report->mfu == Approx(report->model_flops_per_s_per_gpu / 989e12));
    CHECK(report->hfu == report->mfu); // no recomputation: hardware and model FLOPs agree
    // The generator's GEMMs run at half of peak: bubbles and transfers only lower that.
    CHECK(report->mfu < 0.5);
    CHECK(report->mfu > 0.1);

    // Without an architecture the layers' forward FLOPs count (x 3, x 4 with recomputation) per sample.
    auto plain = *r.plan->model;
    plain.architecture.reset();
    double forward = 0;
    for (const auto& l : plain.layers)
        forward += l.forward_flops.value_or(0);
    CHECK(*modelFlopsPerSample(plain, Recompute::Full) == Approx(4 * forward / 4));
    for (auto& l : plain.layers)
        l.forward_flops.reset();
    CHECK_FALSE(modelFlopsPerSample(plain, Recompute::None));
}

TEST_CASE("MFU counts useful model FLOPs only, HFU the recomputed forward too (closed form)", "[flops]")
{
    // issue 19 item 10. MFU by its usual definition (PaLM, Chowdhery et al. 2022, App. B; Megatron's Eq. 4.2 without
    // recomputation, digest megatron-gavel.md §3.1): per token 6 N plus the attention's 12 l s h, here written out
    // per sample as 72 s l h^2 (1 + s/(6h)) + 6 s h V. The hardware FLOPs add one forward per layer:
    // 96 s l h^2 (1 + s/(6h) + V/(16 l h)).
    const TransformerConfig c = kGpt345M;
    auto r = uniformOnFourH100(c, true);
    REQUIRE(r.plan->schedule.recompute == Recompute::Full);
    const double throughput = 100; // samples/s: any rate, the definitions are linear in it
    const auto report = flopsReport(*r.plan, throughput);
    REQUIRE(report);
    const double s = 1024, l = 24, h = 1024, V = 51200, peak = 989e12, devices = 4;
    const double useful = 72 * s * l * h * h * (1 + s / (6 * h)) + 6 * s * h * V;
    const double executed = 96 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    CHECK(report->model_flops_per_sample == Approx(useful).epsilon(1e-12));
    CHECK(report->hardware_flops_per_sample == Approx(executed).epsilon(1e-12));
    CHECK(report->mfu == Approx(useful * throughput / devices / peak).epsilon(1e-12));
    CHECK(report->hfu == Approx(executed * throughput / devices / peak).epsilon(1e-12));
    // The 6 N rule of thumb (N parameters, tokens = s per sample) is within the attention and logit terms of it.
    const double N = transformerParameterCount(c);
    CHECK(report->model_flops_per_sample == Approx(6 * N * s).epsilon(0.15));
    CHECK(report->hfu > report->mfu);
}

TEST_CASE("counts and FLOP rates are written in units that fit their size", "[flops][units]")
{
    // issue 19 items 10 and 14: never "0.000357792 B parameters" nor "0.0 TFLOP/s".
    CHECK(formatCount(357792) == "357.8 K");
    CHECK(formatCount(124.4e6) == "124.4 M");
    CHECK(formatCount(175.0e9) == "175.0 B");
    CHECK(formatCount(1.2e12) == "1.2 T");
    CHECK(formatCount(512) == "512");
    CHECK(formatCount(999960) == "1.0 M"); // rounded before the unit is chosen
    CHECK(formatFlopRate(12.34e9) == "12.3 GFLOP/s");
    CHECK(formatFlopRate(312.5e12) == "312.5 TFLOP/s");
    CHECK(formatFlopRate(1.25e15) == "1.2 PFLOP/s");
    CHECK(formatFlopRate(850e6) == "850.0 MFLOP/s");
    CHECK(formatFlopRate(0) == "0.0 FLOP/s");
    CHECK(formatFlopRate(std::numeric_limits<double>::infinity()) == "infinite FLOP/s");
}
