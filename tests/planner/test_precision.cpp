// SPDX-License-Identifier: MIT
// Training memory per parameter (issue 10 item 2): precision, gradient precision, optimizer and Megatron's
// distributed optimizer; the memory models use it; Table 4.1's published configurations fit under it.
// "digest" = shared/docs/papers/megatron-gavel.md.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "planner/costs.h"
#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelProfile bf16Model()
{
    return transformerProfile({4, 1024, 16, 512, 51200, 1, 2}, *devicePreset("H100"));
}

ScheduleOptions options(const std::string& optimizer, const std::string& precision = "",
    const std::string& gradients = "", bool distributed = false)
{
    ScheduleOptions o;
    o.optimizer = optimizer;
    o.precision = precision;
    o.gradient_precision = gradients;
    o.distributed_optimizer = distributed;
    return o;
}

/// Selene: `nodes` DGX A100 (8 x A100 80 GB, NVLink), HDR InfiniBand between nodes (digest §4.1).
Cluster selene(int nodes)
{
    Cluster c;
    c.name = "selene";
    auto a100 = *devicePreset("A100");
    c.device_types = {a100};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", a100.name, 8, 3e11, 5e-6});
    c.inter_node_bandwidth_bytes_per_s = 2e11;
    c.inter_node_latency_s = 1e-5;
    return c;
}

} // namespace

TEST_CASE(
    "bytes per parameter: fp32 and mixed-precision Adam, fp32 gradients, the distributed optimizer", "[precision]")
{
    const auto fp32 = transformerProfile({2, 256, 4, 128, 1000, 1, 4}, *devicePreset("H100"));
    const auto bf16 = bf16Model();
    CHECK(weightPrecision(ScheduleOptions {}, fp32) == "fp32");
    CHECK(weightPrecision(ScheduleOptions {}, bf16) == "bf16"); // architecture.bytes_per_element 2
    ModelProfile pipedream;
    CHECK(weightPrecision(ScheduleOptions {}, pipedream) == "fp32");

    // ZeRO's 2 + 2 + 12 and Megatron-LM's docs/distrib_optimizer.md table.
    CHECK(trainingBytesPerParameter(options("adam"), fp32) == 16);
    CHECK(trainingBytesPerParameter(options("adam"), bf16) == 16);
    CHECK(trainingBytesPerParameter(options("adam", "bf16", "fp32"), bf16) == 18);
    CHECK(trainingBytesPerParameter(options("adam", "bf16", "fp32", true), bf16, 8) == Approx(6 + 12.0 / 8));
    CHECK(trainingBytesPerParameter(options("adam", "", "", true), fp32, 4) == Approx(8 + 8.0 / 4));
    CHECK(trainingBytesPerParameter(options("sgd"), fp32) == 8);
    CHECK(trainingBytesPerParameter(options("sgd"), bf16) == 8); // fp32 master weights
    CHECK(trainingBytesPerParameter(options("momentum"), bf16) == 12);

    // Per weight byte beyond weights and a weight-sized gradient: fp32 Adam keeps its old 2.
    CHECK(optimizerStateFactor(options("adam"), fp32) == 2);
    CHECK(optimizerStateFactor(options("adam"), bf16) == 6); // was 2: half the real memory
    CHECK(optimizerStateFactor(options("adam", "", "fp32"), bf16) == 7);

    // FP8 products keep 16-bit weights (issue 31): Adam costs what it costs in bf16.
    CHECK(trainingBytesPerParameter(options("adam", "fp8"), bf16) == 16);
    CHECK_THROWS_WITH(trainingBytesPerParameter(options("adam", "int8"), bf16),
        Catch::Contains("/schedule/precision") && Catch::Contains("int8") && Catch::Contains("fp16 or fp8"));
    CHECK_THROWS_WITH(trainingBytesPerParameter(options("adam", "", "fp8"), bf16),
        Catch::Contains("/schedule/gradient_precision") && Catch::Contains("(fp32, bf16 or fp16)"));
    CHECK_THROWS_WITH(
        trainingBytesPerParameter(options("adam", "", "int4"), bf16), Catch::Contains("/schedule/gradient_precision"));
    CHECK_THROWS_WITH(trainingBytesPerParameter(options("lion"), bf16), Catch::Contains("/schedule/optimizer"));
}

TEST_CASE("a bf16 model's weight state is 16 bytes per parameter in the simulator, options round-trip", "[precision]")
{
    const auto model = bf16Model();
    Cluster c;
    c.device_types = {*devicePreset("H100")};
    c.nodes.push_back({"n0", "", 22, "", "H100", 2, 4.5e11, 5e-6});
    PartitionOptions o;
    o.schedule.microbatches = 2;
    o.stages = 1;
    auto r = findPartitioner("uniform")->partition({model, c, o}, {}, {});
    REQUIRE(r.ok());
    Plan plan = *r.plan;
    plan.stages[0].devices = {0};
    const double params = model.totalWeightBytes() / 2;
    auto totals = stageTotals(plan, 0, c.device_types[0]);
    CHECK(totals.weight_bytes + totals.weight_bytes + totals.optimizer_bytes == Approx(16 * params));
    const auto base = simulate(plan).devices[0].peak_memory_bytes;

    plan.schedule.gradient_precision = "fp32";
    CHECK(simulate(plan).devices[0].peak_memory_bytes == Approx(base + 2 * params));
    // Distributed over two replicas: the 12 bytes of master weights and moments are halved (fp32 gradients).
    plan.schedule.distributed_optimizer = true;
    plan.stages[0].devices = {0, 1};
    totals = stageTotals(plan, 0, c.device_types[0]);
    CHECK(totals.weight_bytes + totals.weight_bytes + totals.optimizer_bytes == Approx((2 + 4 + 12 / 2) * params));

    auto back = planFromJson(toJson(plan));
    CHECK(back.schedule.precision.empty());
    CHECK(back.schedule.gradient_precision == "fp32");
    CHECK(back.schedule.distributed_optimizer);
    CHECK_FALSE(toJson(ScheduleOptions {}).contains("precision")); // old files and golden outputs unchanged

    // A precision the profile was not made in is refused, naming the field.
    plan.schedule.precision = "fp32";
    CHECK_THROWS_WITH(plan.validate(), Catch::Contains("/schedule/precision") && Catch::Contains("bytes_per_element"));
    plan.schedule.precision = "fp16";
    CHECK_NOTHROW(plan.validate());
}

TEST_CASE("Table 4.1: Megatron's published t and p fit 80 GB under the corrected memory model", "[precision]")
{
    // digest §4.2 Table 4.1 (s = 2048, V = 51,200, A100 80 GB, mixed precision with Megatron's fp32 gradients,
    // activation recomputation, b = 1 as the digest derives m). Before the fix the weight state was 8 bytes per
    // parameter, which let configurations with twice the parameters per GPU look feasible.
    struct Row
    {
        double billions;
        int heads, hidden, layers, t, p, n, batch;
    };
    const std::vector<Row> rows {{39.1, 64, 8192, 48, 8, 2, 512, 1536}, {76.1, 80, 10240, 60, 8, 4, 1024, 1792},
        {145.6, 96, 12288, 80, 8, 8, 1536, 2304}};
    for (const auto& row : rows) {
        INFO(row.billions << "B on " << row.n << " GPUs");
        const auto model
            = transformerProfile({row.layers, row.hidden, row.heads, 2048, 51200, 1, 2}, *devicePreset("A100"));
        const auto cluster = selene(row.n / 8);
        PartitionOptions o;
        o.schedule.gradient_precision = "fp32";
        const int d = row.n / (row.t * row.p);
        const megatron::Config published {row.p, row.t, d, 1, 1, Recompute::Full, row.batch / d};
        const PartitionRequest request {model, cluster, o};
        const auto estimate = megatron::estimate(megatron::configPlan(request, published), published);
        WARN(row.billions << "B published p=" << row.p << " t=" << row.t << ": " << estimate.peak_memory_bytes / kGiB
                          << " GiB of " << estimate.memory_capacity_bytes / kGiB << " GiB");
        CHECK(estimate.fits);
        // The weight state alone: 18 bytes per parameter over t p GPUs.
        const double params = model.totalWeightBytes() / 2;
        CHECK(estimate.peak_memory_bytes > 18 * params / (row.t * row.p));

        // The search's own choice on the same machine and batch.
        o.params = {{"global-batch", row.batch}, {"simulate-top", 1}};
        auto r = findPartitioner("megatron")->partition({model, cluster, o}, {}, {});
        INFO(r.errorText());
        REQUIRE(r.ok());
        const auto& chosen = r.plan->algorithm_options.at("chosen");
        WARN(row.billions << "B search: " << chosen.dump() << ", " << r.candidates.front().peak_memory_bytes / kGiB
                          << " GiB");
        CHECK(r.candidates.front().feasible);
        CHECK(r.candidates.front().peak_memory_bytes <= cluster.device_types[0].memory_bytes);
    }
}

TEST_CASE("the data-parallel all-reduce moves gradients: twice the weight bytes with fp32 gradients", "[precision]")
{
    Plan plan;
    plan.model = bf16Model();
    plan.cluster = selene(1);
    const int L = plan.model->layerCount();
    plan.stages = {{0, L / 2 - 1, {0, 1}}, {L / 2, L - 1, {2, 3}}};
    plan.schedule.microbatches = 4;
    auto allReduceBytes = [&](const std::string& gradients) {
        plan.schedule.gradient_precision = gradients;
        double bytes = 0;
        for (const auto& actions : generateSchedule(plan).devices)
            for (const auto& a : actions)
                if (a.kind == ActionKind::AllReduce)
                    bytes += a.bytes;
        return bytes;
    };
    const double same = allReduceBytes("");
    REQUIRE(same > 0);
    CHECK(allReduceBytes("bf16") == Approx(same));
    CHECK(allReduceBytes("fp32") == Approx(2 * same));
    CHECK(gradientBytesPerWeightByte(plan.schedule, *plan.model) == 2);
}
