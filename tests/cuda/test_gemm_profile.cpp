// SPDX-License-Identifier: MIT
// The GEMM table measured on the GPU (engine/gemm_profile.h, `pipewright-agent --profile-gemm`): a full grid,
// throughputs below the device's peak, large products faster per FLOP than small ones, and the agent's file read
// back by the planner.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/backend.h"
#include "engine/gemm_profile.h"
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

TEST_CASE("GEMM profiling refuses a device that is not there", "[cuda][gemm]")
{
    engine::GemmProfileOptions o;
    o.gpu = 64;
    o.dims = {128};
    CHECK_THROWS_WITH(engine::measureGemmTable(o), Catch::Contains("cuda:64") || Catch::Contains("no CUDA"));
}
