// SPDX-License-Identifier: MIT
// Stages sharing one GPU over the device fabric (issue 33 item 1): the sum kernel against its CPU twin, events that
// order one stream after another, and runs whose stages exchange in device memory giving the losses of the same
// runs staged through host memory (and of one stage). Skipped without a GPU.
#include <catch2/catch.hpp>

#include <thread>

#include "engine/device_fabric.h"
#include "engine/local_run.h"
#include "engine/ops.h"
#include "tests/cuda/comparison.h"
#include "tests/cuda/twins.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/skip.h"

using namespace pw::engine;
using pw::test::comparison;
using pw::test::gpt2Plan;
using pw::test::setupOf;
using pw::test::StageCut;
using pw::test::cuda::Backends;
using pw::test::cuda::kModes;
using pw::test::cuda::randomValues;
using pw::test::cuda::Twin;

TEST_CASE("CUDA sum adds its parts in order like the CPU's", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    for (const auto& mode : kModes) {
        Backends be(mode);
        const DType t = be.act();
        for (const std::size_t n : {std::size_t {1}, std::size_t {1003}, std::size_t {1} << 20}) {
            for (const int count : {1, 2, 3, 16}) {
                INFO(toString(mode.precision) << ", " << count << " parts of " << n);
                std::vector<Twin> parts;
                for (int p = 0; p < count; ++p)
                    parts.emplace_back(be, randomValues(n, static_cast<unsigned>(100 + p)), t);
                Twin out(be, n, t);
                std::vector<const float*> cpu;
                std::vector<const void*> gpu;
                for (auto& p : parts) {
                    cpu.push_back(p.c());
                    gpu.push_back(p.g());
                }
                ops::sumParts(out.c(), cpu, n);
                be.gpu->sum(out.g(), gpu, n);
                auto want = out.onCpu();
                if (t == DType::BF16) // one rounding of the fp32 sum
                    std::transform(want.begin(), want.end(), want.begin(), pw::test::cuda::roundBf16);
                CHECK(out.onGpu() == want);
                be.gpu->sum(parts[0].g(), gpu, n); // in place: out is the first part
                CHECK(parts[0].onGpu() == want);
            }
        }
    }
}

TEST_CASE("CUDA events order one stream after another on the same GPU", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const auto a = makeCudaBackend(0, Precision::Fp32);
    const auto b = makeCudaBackend(0, Precision::Fp32);
    CHECK(a->sharesMemoryWith(*b));
    CHECK_FALSE(a->sharesMemoryWith(cpuBackend()));
    const std::size_t n = std::size_t {64} << 20; // long enough that an unordered copy would read too early
    Buffer x(*a, n, DType::F32), y(*b, n, DType::F32);
    const std::vector<float> ones(n, 1.0f);
    a->upload(x.data(), DType::F32, ones.data(), n);
    for (int k = 0; k < 8; ++k)
        a->scale(x.data(), 2.0f, n); // 256 once done
    b->waitFor(*a->record());
    b->copy(y.data(), x.data(), n * sizeof(float));
    std::vector<float> got(n);
    b->download(got.data(), y.data(), DType::F32, n);
    CHECK(std::all_of(got.begin(), got.end(), [](float v) { return v == 256.0f; }));
}

TEST_CASE("CUDA stages sharing one GPU over the device fabric give the host-staged losses", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const auto r = comparison();
    const std::vector<std::pair<const char*, std::vector<StageCut>>> plans {
        {"1f1b", {{0, 1, {0}}, {2, 3, {1}}}}, {"zb-h1", {{0, 0, {0}}, {1, 1, {1}}, {2, 2, {2}}, {3, 3, {3}}}},
        {"1f1b", {{0, 1, {0, 1}}, {2, 3, {2}}}}, // a replicated stage: the fabric's all-reduce
    };
    for (const auto& mode : kModes)
        for (const auto& [kind, stages] : plans) {
            INFO(toString(mode.precision) << " " << kind << ", " << stages.size() << " stages");
            const auto plan = gpt2Plan(r.shape, stages, kind, r.microbatches);
            const TrainingSetup setup = [&] {
                TrainingSetup s = setupOf(r, plan);
                s.precision = mode.precision;
                return s;
            }();
            const DataOrder data(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq);
            // The engine's own attention kernels: cuDNN's backward accumulates dQ with atomics (not bit-reproducible
            // run to run), and this test checks that the fabric changes no bit.
            const BackendFactory gpu
                = [&](int) { return std::shared_ptr<Backend>(makeCudaBackend(0, mode.precision, CudaAttention::Own)); };
            const auto host = runLocally(plan, setup, data, r.steps, gpu, LocalLinks::Host);
            const auto device = runLocally(plan, setup, data, r.steps, gpu, LocalLinks::Auto);
            REQUIRE(device.losses.size() == host.losses.size());
            // The same kernels in the same order; the all-reduce sums two members in fp32 and rounds once either way.
            for (std::size_t k = 0; k < host.losses.size(); ++k)
                CHECK(device.losses[k] == Approx(host.losses[k]).epsilon(1e-6));
            CHECK(device.final_parameters == host.final_parameters);
        }
}
