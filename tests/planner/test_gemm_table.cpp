// SPDX-License-Identifier: MIT
// GemmTable: its JSON, its checks, and the interpolation of a product's time from the grid's throughputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/gemm_table.h"
#include "planner/io/json_file.h"

using namespace pw::planner;

namespace {

/// A grid of dims^3 shapes whose throughput is `rate(m, n, k)` TFLOP/s.
template <class Rate> GemmTable grid(const std::vector<long long>& dims, Rate rate)
{
    GemmTable t;
    t.device = "test GPU";
    t.library = "cuBLASLt 0.0.0";
    t.layout = "TN";
    for (const long long m : dims)
        for (const long long n : dims)
            for (const long long k : dims) {
                GemmSample s {m, n, k, 0};
                s.seconds = s.flops() / (rate(m, n, k) * 1e12);
                t.samples.push_back(s);
            }
    return t;
}

} // namespace

TEST_CASE("a GEMM table reads back what it wrote and refuses a broken one naming the field", "[gemm]")
{
    const GemmTable t = grid({256, 1024, 4096}, [](long long m, long long, long long) { return m / 10.0; });
    t.validate();
    const auto j = toJson(t);
    CHECK(j.at("format") == "pipewright-gemm-table");
    CHECK(j.at("samples").at(0).at("tflops").get<double>() == Approx(25.6));
    CHECK(gemmTableFromJson(j) == t);

    auto hole = j;
    hole["samples"].erase(3);
    CHECK_THROWS_WITH(gemmTableFromJson(hole), Catch::StartsWith("/samples: the samples are not a full grid: 26"));
    auto twice = j;
    twice["samples"][1] = twice["samples"][0];
    CHECK_THROWS_WITH(gemmTableFromJson(twice), Catch::Contains("is measured twice"));
    auto slow = j;
    slow["samples"][2]["seconds"] = 0;
    CHECK_THROWS_WITH(gemmTableFromJson(slow), Catch::StartsWith("/samples/2/seconds: must be a positive time"));
    auto other = j;
    other["format"] = "plan";
    CHECK_THROWS_WITH(gemmTableFromJson(other), Catch::StartsWith("/format: not a GEMM table"));
    auto dtype = j;
    dtype["dtype"] = "int8";
    CHECK_THROWS_WITH(gemmTableFromJson(dtype), Catch::StartsWith("/dtype: "));
}

TEST_CASE("a GEMM table's time is exact on the grid and interpolates throughput in log2 between", "[gemm]")
{
    // Throughput linear in log2(m) (and flat in n, k): interpolation in log2 reproduces it exactly off the grid.
    const auto rate = [](long long m, long long, long long) { return 100.0 + 50.0 * std::log2(m / 256.0); };
    const GemmTable t = grid({256, 1024, 4096}, rate);
    const auto flops = [](double m, double n, double k) { return 2 * m * n * k; };
    for (const auto& s : t.samples)
        CHECK(t.seconds(s.m, s.n, s.k) == Approx(s.seconds).epsilon(1e-12));
    CHECK(t.seconds(512, 1024, 1024) == Approx(flops(512, 1024, 1024) / (rate(512, 0, 0) * 1e12)).epsilon(1e-12));
    CHECK(t.seconds(2048, 300, 3000) == Approx(flops(2048, 300, 3000) / (rate(2048, 0, 0) * 1e12)).epsilon(1e-12));
    // Beyond the grid the edge's throughput holds: time grows with the FLOPs only.
    CHECK(t.seconds(8192, 1024, 1024) == Approx(2 * t.seconds(4096, 1024, 1024)).epsilon(1e-12));
    CHECK(t.seconds(64, 1024, 1024) == Approx(t.seconds(256, 1024, 1024) / 4).epsilon(1e-12));
    // A constant throughput in all three dimensions: every shape's time is its FLOPs over it.
    const GemmTable flat = grid({128, 512, 2048, 8192}, [](long long, long long, long long) { return 400.0; });
    CHECK(flat.seconds(768, 3072, 50304) == Approx(flops(768, 3072, 50304) / 400e12).epsilon(1e-12));
    CHECK_THROWS_AS(flat.seconds(0, 1, 1), std::invalid_argument);
    CHECK_THROWS_AS(GemmTable().seconds(1, 1, 1), std::invalid_argument);
}

TEST_CASE("the GEMM table measured on an H100 reads back as a full grid with the datasheet's shape", "[gemm]")
{
    // `pipewright-agent --profile-gemm` on the GPU test machine's H100 (2026-11-26, before its matrices were random:
    // constant matrices, which run some 10 % fast). Real data for the reader, not a cost model's input.
    const auto table
        = gemmTableFromJson(readJsonFile(std::string(PW_TEST_DATA_DIR) + "/gemm/h100-constant-fill-bf16.json"));
    CHECK(table.device == "NVIDIA H100 80GB HBM3");
    CHECK(table.samples.size() == 1000);
    CHECK(table.ms() == std::vector<long long> {128, 256, 512, 1024, 2048, 3072, 4096, 8192, 12288, 16384});
    // cuBLAS bf16 8192^3 on the H100 kind measured 806 TFLOP/s through PyTorch (random matrices); the table's own
    // sample is within 10 % of it, and a small product is far from the peak.
    const double at8192 = 2.0 * 8192 * 8192 * 8192 / table.seconds(8192, 8192, 8192) / 1e12;
    CHECK(at8192 == Approx(806).epsilon(0.10));
    CHECK(2.0 * 256 * 256 * 256 / table.seconds(256, 256, 256) / 1e12 < 50);
    // A GPT-2 small layer's product (16 x 1024 tokens, 768 -> 3072) lies between its grid neighbours' throughputs.
    const double fc = 2.0 * 16384 * 3072 * 768 / table.seconds(16384, 3072, 768) / 1e12;
    const double lo = 2.0 * 16384 * 3072 * 512 / table.seconds(16384, 3072, 512) / 1e12;
    const double hi = 2.0 * 16384 * 3072 * 1024 / table.seconds(16384, 3072, 1024) / 1e12;
    CHECK(fc >= std::min(lo, hi));
    CHECK(fc <= std::max(lo, hi));
}
