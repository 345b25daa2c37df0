// SPDX-License-Identifier: MIT
// The GEMM table measured on the GPU (engine/gemm_profile.h, `pipewright-agent --profile-gemm`): a full grid,
// throughputs below the device's peak, large products faster per FLOP than small ones, and the agent's file read
// back by the planner.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/backend.h"
#include "engine/gemm_profile.h"
#include "planner/gemm_table.h"
#include "planner/io/json_file.h"
#include "tests/skip.h"

using namespace pw;

TEST_CASE("GEMM throughput over a grid of shapes on the GPU", "[cuda][gemm]")
{
    if (engine::cudaDeviceCount() < 1)
        PW_SKIP("no CUDA device visible");
    engine::GemmProfileOptions o;
    o.dims = {256, 1024, 4096};
    o.repeats = 3;
    std::size_t heard = 0;
    const auto table = engine::measureGemmTable(o, [&](std::size_t done, std::size_t all) {
        CHECK(done == ++heard);
        CHECK(all == 27);
    });
    REQUIRE(table.samples.size() == 27);
    table.validate();
    CHECK(table.dtype == "bf16");
    CHECK_THAT(table.library, Catch::StartsWith("cuBLASLt "));
    for (const auto& s : table.samples) {
        INFO(s.m << " x " << s.n << " x " << s.k << ": " << s.tflops() << " TFLOP/s");
        CHECK(s.tflops() > 0.01);
        CHECK(s.tflops() < 2500); // above any GPU's dense bf16 peak: a timing error
    }
    // A 4096^3 product keeps the tensor cores busier than a 256^3 one.
    CHECK(table.seconds(4096, 4096, 4096) / table.seconds(256, 256, 256) < 4096.0 * 4096 * 4096 / (256.0 * 256 * 256));
    std::printf("GEMM bf16 on %s: 256^3 %.1f, 1024^3 %.1f, 4096^3 %.1f TFLOP/s\n", table.device.c_str(),
        2.0 * 256 * 256 * 256 / table.seconds(256, 256, 256) / 1e12,
        2.0 * 1024 * 1024 * 1024 / table.seconds(1024, 1024, 1024) / 1e12,
        2.0 * 4096 * 4096 * 4096 / table.seconds(4096, 4096, 4096) / 1e12);
}

TEST_CASE("FP8 GEMM throughput on Hopper runs E4M3 products faster than bf16 ones", "[cuda][gemm][fp8]")
{
    if (engine::cudaDeviceCount() < 1)
        PW_SKIP("no CUDA device visible");
    engine::GemmProfileOptions bf16;
    bf16.dims = {1024, 8192};
    bf16.repeats = 3;
    engine::GemmProfileOptions fp8 = bf16;
    fp8.dtype = engine::GemmDtype::Fp8;
    planner::GemmTable eight;
    try {
        eight = engine::measureGemmTable(fp8);
    } catch (const std::runtime_error& e) {
        // cuBLASLt has FP8 kernels from compute capability 8.9 (Ada, Hopper) on: an older GPU says so.
        if (std::string(e.what()).find("no algorithm") != std::string::npos)
            PW_SKIP("this GPU has no FP8 products: " << e.what());
        throw;
    }
    const auto sixteen = engine::measureGemmTable(bf16);
    REQUIRE(eight.samples.size() == 8);
    eight.validate();
    CHECK(eight.dtype == "fp8");
    // Planner-readable, and twice the bf16 tensor-core rate at most (the datasheets' FP8 peak is 2x bf16's).
    CHECK(planner::gemmTableFromJson(planner::toJson(eight)) == eight);
    const double big = sixteen.seconds(8192, 8192, 8192) / eight.seconds(8192, 8192, 8192);
    std::printf("GEMM fp8 on %s: 8192^3 %.1f TFLOP/s, %.2fx bf16\n", eight.device.c_str(),
        2.0 * 8192 * 8192 * 8192 / eight.seconds(8192, 8192, 8192) / 1e12, big);
    CHECK(big > 1.2);
    CHECK(big < 2.2);
}

TEST_CASE("GEMM profiling refuses a device that is not there", "[cuda][gemm]")
{
    engine::GemmProfileOptions o;
    o.gpu = 64;
    o.dims = {128};
    CHECK_THROWS_WITH(engine::measureGemmTable(o), Catch::Contains("cuda:64") || Catch::Contains("no CUDA"));
}
