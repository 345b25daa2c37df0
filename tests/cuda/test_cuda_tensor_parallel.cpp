// SPDX-License-Identifier: MIT
// Tensor parallelism on one GPU (issue 34): the ranks of a group are stages sharing the GPU, their collectives over
// the device fabric, and they train to the CPU engine's one-device losses (fp32) and, in bf16, to the one-GPU run's
// within bf16's band.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/cuda/cuda_backend.h"
#include "engine/local_run.h"
#include "tests/cuda/comparison.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/skip.h"

using namespace pw::engine;
using pw::test::Comparison;
using pw::test::gpt2Plan;
using pw::test::setupOf;

namespace {

std::vector<double> train(const Comparison& r, const pw::planner::Plan& plan, Precision precision, bool gpu)
{
    TrainingSetup setup = setupOf(r, plan);
    setup.precision = precision;
    const DataOrder data(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq);
    BackendFactory factory;
    if (gpu)
        factory = [&](int) { return std::shared_ptr<Backend>(makeCudaBackend(0, precision)); };
    return runLocally(plan, setup, data, r.steps, factory, LocalLinks::Auto).losses;
}

} // namespace

TEST_CASE("tensor-parallel ranks sharing one GPU over the device fabric give the CPU engine's losses", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    for (const bool llama : {false, true}) {
        const Comparison r = llama ? pw::test::llamaComparison() : pw::test::comparison();
        const auto one = train(r, gpt2Plan(r.shape, {{0, 3, {0}}}, "1f1b", r.microbatches), Precision::Fp32, false);
        const auto oneGpu
            = train(r, gpt2Plan(r.shape, {{0, 3, {0}}}, "1f1b", r.microbatches), Precision::Bf16Mixed, true);
        struct Case
        {
            const char* name;
            std::vector<std::pair<int, int>> cuts;
            int t;
            bool sequence;
        };
        for (const Case& c : {Case {"t 2", {{0, 3}}, 2, false}, Case {"t 2, sequence parallel", {{0, 3}}, 2, true},
                 Case {"t 2 x p 2, sequence parallel", {{0, 1}, {2, 3}}, 2, true}}) {
            INFO((llama ? "Llama, " : "GPT-2, ") << c.name);
            const auto plan = pw::test::tensorPlan(r.shape, c.cuts, 1, c.t, c.sequence, "1f1b", false, r.microbatches);
            const auto fp32 = train(r, plan, Precision::Fp32, true);
            REQUIRE(fp32.size() == one.size());
            for (std::size_t k = 0; k < one.size(); ++k)
                CHECK(fp32[k] == Approx(one[k]).epsilon(1e-4));
            const auto bf16 = train(r, plan, Precision::Bf16Mixed, true);
            REQUIRE(bf16.size() == oneGpu.size());
            for (std::size_t k = 0; k < oneGpu.size(); ++k) {
                CHECK(std::isfinite(bf16[k]));
                CHECK(bf16[k] == Approx(oneGpu[k]).epsilon(2e-2)); // bf16's band: sums split and rounded otherwise
            }
        }
    }
}
