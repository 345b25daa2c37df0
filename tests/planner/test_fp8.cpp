// SPDX-License-Identifier: MIT
// FP8 products (issue 31 item 3): a block's QKV, projection and MLP products in FP8 as Transformer Engine runs them,
// at the device's FP8 peak; their inputs kept as 1-byte copies; the weights' FP8 copies and scaling state in memory;
// plans, the Megatron search and the exports.
#include <catch2/catch.hpp>

#include <string>

#include "fixtures.h"
#include "planner/costs.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/gemm_table.h"
#include "planner/gpu_cost_model.h"
#include "planner/io/hf_config.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "planner/transformer_shape.h"

using namespace pw::planner;

namespace {

TransformerConfig llama8bConfig(bool fp8)
{
    auto c = loadHfConfig(std::string(PW_TEST_DATA_DIR) + "/hf/llama-3-8b.config.json", RunShape {8192, 1, 2});
    c.fp8 = fp8;
    return c;
}

ModelProfile fp8Llama8b(bool fp8)
{
    return transformerProfile(llama8bConfig(fp8), *devicePreset("H100"));
}

Cluster h100Node()
{
    Cluster cluster = pw::test::uniformCluster(1, 8, {80e9, 100, 4.5e11, 5e-6, 5e10, 1e-5});
    cluster.device_types[0] = *devicePreset("H100");
    cluster.device_types[0].name = "gpu";
    return cluster;
}

Plan fp8Plan(const ModelProfile& model, int p, int t, int d)
{
    PartitionOptions o;
    o.schedule.microbatches = 8;
    o.schedule.distributed_optimizer = true;
    megatron::Config k {p, t, d, 1, 1, Recompute::None, 8};
    k.sequence_parallel = t > 1;
    k.distributed_optimizer = true;
    return megatron::configPlan(PartitionRequest {model, h100Node(), o}, k);
}

std::string exported(const char* format, const Plan& fp8Plan)
{
    std::string text;
    for (const auto& f : findPlanExporter(format)->write(fp8Plan).files)
        text += f.text;
    return text;
}

} // namespace

TEST_CASE("fp8: the presets carry the datasheets' dense FP8 peaks and cluster files keep them", "[fp8][presets]")
{
    CHECK(devicePreset("H100")->peak_fp8_tflops == 1978.9);
    CHECK(devicePreset("H100 PCIe")->peak_fp8_tflops == 1513);
    CHECK(devicePreset("H200")->peak_fp8_tflops == 1978.9);
    CHECK(devicePreset("B200")->peak_fp8_tflops == 4500);
    CHECK(devicePreset("MI300X")->peak_fp8_tflops == 2614.9);
    CHECK(devicePreset("A100")->peak_fp8_tflops == 0); // Ampere has no FP8 tensor cores
    Cluster cluster = h100Node();
    const auto j = toJson(cluster);
    CHECK(j.at("device_types").at(0).at("peak_fp8_tflops") == 1978.9);
    CHECK(clusterFromJson(j) == cluster);
    cluster.device_types[0] = *devicePreset("A100");
    CHECK_FALSE(toJson(cluster).at("device_types").at(0).contains("peak_fp8_tflops"));
}

TEST_CASE("fp8: a product is never timed faster than cuBLASLt's FP8 rate, and thin ones by their bytes",
    "[fp8][gpu-cost-model]")
{
    const DeviceType h100 = *devicePreset("H100");
    const GpuCurve curve = *defaultGpuCurve(h100);
    const GpuCostModel model(h100, nullptr, curve);
    CHECK(curve.fp8_eff_max == Approx(0.898).margin(0.001));
    CHECK(curve.eff_max == Approx(0.855).margin(0.001));
    // 8192^3: the measured 1,611 TFLOP/s the ceiling is taken from.
    CHECK(2.0 * 8192 * 8192 * 8192 / model.fp8GemmSeconds(8192, 8192, 8192) / 1e12 == Approx(1611).epsilon(1e-9));
    for (double m : {512.0, 4096.0, 16384.0})
        for (double n : {1024.0, 8192.0, 28672.0})
            for (double k : {128.0, 4096.0, 65536.0}) {
                const double seconds = model.fp8GemmSeconds(m, n, k);
                CHECK(2 * m * n * k / seconds / 1e12 <= 1611 * (1 + 1e-9));
                // Never faster than reading its 1-byte operands and writing its 16-bit output at 0.9 x 3.35 TB/s.
                CHECK(seconds >= (m * k + k * n + 2 * m * n) / (0.9 * 3350e9) * (1 - 1e-12));
                // Faster than the same product in bf16, by at most the peaks' ratio times the curves' (the FP8
                // curve's larger k0 leaves it a higher eff_max: 0.898 against 0.855).
                const double ratio = model.gemmSeconds(m, n, k) / seconds;
                CHECK(ratio > 1.0);
                CHECK(ratio <= 1978.9 / 989 * curve.fp8_eff_max / curve.eff_max * (1 + 1e-9));
            }
    // An A100 has none.
    const DeviceType a100 = *devicePreset("A100");
    CHECK_THROWS_AS(
        GpuCostModel(a100, nullptr, defaultGpuCurve(a100)).fp8GemmSeconds(8192, 8192, 8192), std::logic_error);
}

TEST_CASE("fp8: Llama 3 8B's blocks run faster, keep 1-byte product inputs and FP8 copies of their weights",
    "[fp8][transformer]")
{
    const auto bf16 = fp8Llama8b(false), fp8 = fp8Llama8b(true);
    REQUIRE(fp8.architecture->fp8);
    CHECK(fp8.name == bf16.name.substr(0, bf16.name.size() - 1) + ", fp8)");
    const Layer &a = bf16.layers[1], &b = fp8.layers[1];
    // The same model: parameters, weights, FLOPs.
    CHECK(b.weight_bytes == a.weight_bytes);
    CHECK(b.forward_flops == a.forward_flops);
    CHECK(fp8.totalWeightBytes() == bf16.totalWeightBytes());
    // The products at up to twice the rate, the attention core (a third of the forward at 8,192 tokens) and the
    // casts not: the block's forward between 0.6 and 0.85 of bf16's, its backward likewise.
    CHECK(b.forward_ms / a.forward_ms > 0.6);
    CHECK(b.forward_ms / a.forward_ms < 0.85);
    CHECK(b.backward_ms / a.backward_ms > 0.6);
    CHECK(b.backward_ms / a.backward_ms < 0.85);
    // The head and the attention core stay 16-bit.
    CHECK(fp8.layers.back().forward_ms == Approx(bf16.layers.back().forward_ms));
    CHECK(b.selective_recompute_ms == Approx(a.selective_recompute_ms));
    // A tensor-parallel rank's products get thinner and the FP8 gain smaller while the casts stay: its backward
    // stays faster, its forward up to t = 16; at t = 32 (4,096-wide products cut 32 ways) the casts cost what the
    // products save (forward 0.30 ms either way).
    REQUIRE(b.tensor_parallel_times.size() == a.tensor_parallel_times.size());
    double previous = 0;
    for (std::size_t i = 0; i < a.tensor_parallel_times.size(); ++i) {
        const auto &x = a.tensor_parallel_times[i], &y = b.tensor_parallel_times[i];
        CHECK(y.backward_ms < x.backward_ms);
        if (x.size <= 16)
            CHECK(y.forward_ms < x.forward_ms);
        CHECK(y.forward_ms / x.forward_ms > previous); // the gain shrinks as t grows
        previous = y.forward_ms / x.forward_ms;
    }
    CHECK(b.tensor_parallel_times.back().forward_ms / a.tensor_parallel_times.back().forward_ms < 1.02);

    // Stash: QKV's and the MLP up product's inputs (2 h of the replicated part) and the projection's and the down
    // product's (h + f of the sharded part) drop from 2 bytes to 1. h = 4,096, f = 14,336, 8,192 tokens.
    const double tokens = 8192, h = 4096, f = 14336;
    REQUIRE(a.activation_parts);
    CHECK(a.activation_parts->replicated - b.activation_parts->replicated == Approx(tokens * 2 * h));
    CHECK(a.activation_parts->sharded - b.activation_parts->sharded == Approx(tokens * (h + f)));
    CHECK(*a.stashed_bytes - *b.stashed_bytes == Approx(tokens * (3 * h + f)));
    CHECK(b.activation_parts->attention_core == a.activation_parts->attention_core);

    // FP8 copies: weight and transpose, 1 byte each, of the products' 218,103,808 weights (QKV 4096 x 6144, projection
    // 4096^2, gate and up 4096 x 28672, down 14336 x 4096), and 4 x 5 x 1,026 fp32 scaling values.
    CHECK(a.fp8_weight_bytes == 0);
    CHECK(b.fp8_weight_bytes == 2.0 * 218103808 + 4 * 5 * 1026 * 4);
    CHECK(fp8.layers.front().fp8_weight_bytes == 0);
    CHECK(fp8.layers.back().fp8_weight_bytes == 0);
    CHECK(modelFromJson(toJson(fp8)) == fp8);
    CHECK(toJson(fp8).at("architecture").at("fp8") == true);
    CHECK_FALSE(toJson(bf16).at("architecture").contains("fp8"));

    // GPT's stash with materialized scores: s b h (34 + 5 a s / h) in bf16, (27 + 5 a s / h) with FP8 products.
    TransformerConfig gpt {24, 2048, 16, 2048, 51200, 1, 2};
    gpt.flash_attention = false;
    const double s = 2048, a16 = 16, h2 = 2048;
    CHECK(blockActivations(gpt).total() == Approx(s * h2 * (34 + 5 * a16 * s / h2)));
    gpt.fp8 = true;
    CHECK(blockActivations(gpt).total() == Approx(s * h2 * (27 + 5 * a16 * s / h2)));
}

TEST_CASE("fp8: the flat model puts the products at the FP8 peak and the attention core at the 16-bit one",
    "[fp8][transformer]")
{
    // B200 has no curve: --efficiency times it flat.
    auto c = llama8bConfig(true);
    TransformerProfileOptions o;
    o.efficiency = 0.5;
    const auto model = transformerProfile(c, *devicePreset("B200"), o);
    const double core = attentionCoreFlops(c, 1), all = blockForwardFlops(c, 1);
    CHECK(model.layers[1].forward_ms == Approx(((all - core) / 4500e12 + core / 2250e12) / 0.5 * 1e3));
    CHECK(model.layers[1].backward_ms == Approx(2 * model.layers[1].forward_ms));
}

TEST_CASE("fp8: a device, table or plan that cannot have FP8 products is refused naming the field", "[fp8][errors]")
{
    const auto c = llama8bConfig(true);
    CHECK_THROWS_WITH(transformerProfile(c, *devicePreset("A100")),
        Catch::StartsWith("precision: fp8: 'A100' has no FP8 tensor cores"));
    TransformerProfileOptions table;
    table.gemm_table = std::make_shared<GemmTable>(
        gemmTableFromJson(readJsonFile(std::string(PW_TEST_DATA_DIR) + "/gemm/h100-constant-fill-bf16.json")));
    CHECK_THROWS_WITH(transformerProfile(c, *devicePreset("H100"), table), Catch::StartsWith("gemm_table: fp8:"));
    // An fp8 table (`--profile-gemm --precision fp8`) checks the FP8 curve; a profile's table times 16-bit products.
    auto fp8Table = std::make_shared<GemmTable>(*table.gemm_table);
    fp8Table->dtype = "fp8";
    CHECK(gemmTableFromJson(toJson(*fp8Table)).dtype == "fp8");
    TransformerProfileOptions withFp8Table;
    withFp8Table.gemm_table = fp8Table;
    CHECK_THROWS_WITH(transformerProfile(llama8bConfig(false), *devicePreset("H100"), withFp8Table),
        Catch::StartsWith("gemm_table: the table's products are fp8"));
    TransformerConfig fp32 = c;
    fp32.bytes_per_element = 4;
    CHECK_THROWS_WITH(fp32.validate(), Catch::StartsWith("fp8: FP8 products keep 16-bit weights"));

    // Plans: fp8 is the profile's, and a 16-bit precision on an FP8 profile (or fp8 on a 16-bit one) is refused.
    const auto fp8 = fp8Llama8b(true), bf16 = fp8Llama8b(false);
    Plan p = fp8Plan(fp8, 1, 8, 1);
    CHECK(weightPrecision(p.schedule, *p.model) == "fp8");
    CHECK(precisionBytes("fp8") == 2);
    CHECK_THROWS_WITH(precisionBytes("fp8", "/schedule/gradient_precision"),
        Catch::Contains("unknown precision 'fp8' (fp32, bf16 or fp16)"));
    p.schedule.precision = "fp8";
    CHECK_NOTHROW(p.validate());
    p.schedule.precision = "bf16";
    CHECK_THROWS_WITH(
        p.validate(), Catch::StartsWith("/schedule/precision: bf16: the profile's block products are FP8"));
    Plan q = fp8Plan(bf16, 1, 8, 1);
    q.schedule.precision = "fp8";
    CHECK_THROWS_WITH(q.validate(), Catch::StartsWith("/schedule/precision: fp8: the profile's products are timed"));
}

TEST_CASE("fp8: a rank's memory counts its share of the FP8 weight copies with its weights", "[fp8][memory]")
{
    const auto bf16 = fp8Llama8b(false), fp8 = fp8Llama8b(true);
    const Plan a = fp8Plan(bf16, 2, 4, 1), b = fp8Plan(fp8, 2, 4, 1);
    const auto& type = a.cluster->typeOf(0);
    const auto ta = stageTotals(a, 0, type), tb = stageTotals(b, 0, type);
    double copies = 0;
    for (int pos = b.stages[0].first_layer; pos <= b.stages[0].last_layer; ++pos)
        copies += fp8.layers[static_cast<std::size_t>(b.layerAt(pos))].fp8_weight_bytes;
    CHECK(tb.fp8_weight_bytes == Approx(copies / 4));
    CHECK(tb.resident_weight_bytes == Approx(ta.resident_weight_bytes + copies / 4));
    CHECK(tb.weight_bytes == Approx(ta.weight_bytes));
    CHECK(tb.optimizer_bytes == Approx(ta.optimizer_bytes));
    CHECK(tb.kept_bytes < ta.kept_bytes);
    CHECK(tb.forward_s < ta.forward_s);
    // The simulator's peak holds them: weights and copies at rest plus the smaller stash.
    const auto simA = simulate(a), simB = simulate(b);
    CHECK(simB.throughput_samples_per_s > simA.throughput_samples_per_s);
}

TEST_CASE("fp8: the Megatron search plans FP8 profiles, and the exports carry FP8 where the runtime has it",
    "[fp8][megatron][exports]")
{
    const auto model = fp8Llama8b(true);
    PartitionOptions o;
    o.schedule.microbatches = 8;
    o.schedule.precision = "fp8";
    using nlohmann::json;
    o.params = {{"tensor-sizes", json::array({1, 2, 4})}, {"pipeline-sizes", json::array({1, 2})}};
    const auto r = findPartitioner("megatron")->partition(PartitionRequest {model, h100Node(), o}, {}, {});
    REQUIRE(r.ok());
    CHECK(r.plan->schedule.precision == "fp8");
    CHECK(simulate(*r.plan).fitsMemory());

    const Plan p = fp8Plan(model, 2, 2, 2);
    CHECK_THAT(exported("megatron", p),
        Catch::Contains("--bf16") && Catch::Contains("--fp8-format hybrid")
            && Catch::Contains("--fp8-amax-history-len 1024"));
    CHECK_THAT(exported("torchtitan", p), Catch::Contains("converters = [\"float8\"]"));
    Plan fsdp = p;
    setZeroStage(fsdp.schedule, 3);
    CHECK_THAT(exported("torchtitan", fsdp), Catch::Contains("enable_fsdp_float8_all_gather = true"));
    Plan one = fp8Plan(model, 2, 1, 4);
    one.schedule.sequence_parallel = false;
    CHECK_THROWS_WITH(findPlanExporter("deepspeed")->write(one), Catch::StartsWith("/schedule/precision:"));
}
