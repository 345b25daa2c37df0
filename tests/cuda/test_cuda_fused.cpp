// SPDX-License-Identifier: MIT
// Issue 33 item 2's launches saved, each against the unfused path it replaces on the same GPU: AdamW over a stage's
// tensors in a few launches against AdamW a tensor at a time (the same bits), a residual joined with its norm
// (forward and backward) against the two calls, the bias gradient from the weight gradient's product (cuBLASLt's
// BGRADB) against the column sums, and the losses' read-back taken a step later against a download.
// Skipped without a GPU.
#include <catch2/catch.hpp>

#include "tests/cuda/twins.h"
#include "tests/skip.h"

using namespace pw::engine;
using pw::test::cuda::Backends;
using pw::test::cuda::kModes;
using pw::test::cuda::Mode;
using pw::test::cuda::randomValues;
using pw::test::cuda::Twin;

TEST_CASE("CUDA AdamW over a stage's tensors in a few launches gives AdamW a tensor at a time, bit for bit", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    // 150 tensors of odd sizes (more than one launch's 64), decayed and not in turn, and a gap that is no tensor's.
    std::vector<AdamWTensor> tensors;
    std::size_t at = 0;
    for (int j = 0; j < 150; ++j) {
        const std::size_t size = 1 + static_cast<std::size_t>((j * 37) % 101) * ((j % 7) + 1);
        if (j == 90)
            at += 13; // the gap
        tensors.push_back({at, size, j % 3 != 1});
        at += size;
    }
    const std::size_t n = at;
    for (const Mode& mode : kModes) {
        INFO(toString(mode.precision));
        Backends be(mode);
        const bool mixed = mode.precision == Precision::Bf16Mixed;
        const auto start = randomValues(n, 90);
        Twin grads(be, randomValues(n, 91, -0.1f, 0.1f), be.act());
        // Two copies of every state: one stepped per tensor, one in a few launches.
        Twin params1(be, start, be.act()), params2(be, start, be.act());
        Twin master1(be, start, DType::F32), master2(be, start, DType::F32);
        Twin m1(be, n, DType::F32), m2(be, n, DType::F32), v1(be, n, DType::F32), v2(be, n, DType::F32);
        const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, decay = 0.999f;
        for (int t = 1; t <= 3; ++t) {
            const auto c1 = static_cast<float>(1.0 - std::pow(0.9, t)),
                       c2 = static_cast<float>(1.0 - std::pow(0.95, t));
            for (const auto& x : tensors) {
                const std::size_t e = byteSize(be.act()) * x.offset;
                be.gpu->adamw(static_cast<std::byte*>(params1.g()) + e, mixed ? master1.gf() + x.offset : nullptr,
                    static_cast<const std::byte*>(grads.g()) + e, m1.gf() + x.offset, v1.gf() + x.offset, x.size, lr,
                    b1, b2, eps, x.decayed ? decay : 1.0f, c1, c2);
            }
            be.gpu->adamwTensors(params2.g(), mixed ? master2.gf() : nullptr, grads.g(), m2.gf(), v2.gf(), tensors, lr,
                b1, b2, eps, decay, c1, c2);
        }
        CHECK(params2.onGpu() == params1.onGpu());
        CHECK(m2.onGpu() == m1.onGpu());
        CHECK(v2.onGpu() == v1.onGpu());
        if (mixed)
            CHECK(master2.onGpu() == master1.onGpu());
        // The gap's elements are no tensor's: left as they were.
        const auto untouched = params2.onGpu(), before = Twin(be, start, be.act()).onGpu();
        for (std::size_t i = tensors[90].offset - 13; i < tensors[90].offset; ++i)
            CHECK(untouched[i] == before[i]);
    }
}

TEST_CASE("CUDA read-back gives the values a download gives, without waiting for later work", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    Backends be(kModes[0]);
    const auto values = randomValues(1000, 92);
    Twin x(be, values, DType::F32);
    auto copy = be.gpu->readBack(x.gf(), values.size());
    be.gpu->scale(x.g(), 2.0f, values.size()); // after the read-back on the stream: not in what it took
    CHECK(copy->take() == values);
    CHECK_THROWS_AS(be.gpu->readBack(x.gf(), std::size_t {8} << 20), std::invalid_argument);
}

TEST_CASE("CUDA residual joined with its norm gives the unfused calls' values, bit for bit, and the CPU's", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const bool layerNorm : {true, false})
            for (const int C : {64, 100}) { // the vector path, and the scalar one
                INFO(toString(mode.precision) << (layerNorm ? " LayerNorm" : " RMSNorm") << " C " << C);
                Backends be(mode);
                const DType t = be.act();
                const int BT = 37;
                const std::size_t n = static_cast<std::size_t>(BT) * C;
                Twin a(be, randomValues(n, 100), t), b(be, randomValues(n, 101), t);
                Twin w(be, randomValues(C, 102), t), bias(be, randomValues(C, 103), t);
                Twin sum(be, n, t), out(be, n, t), mean(be, BT, DType::F32), rstd(be, BT, DType::F32);
                Twin sum2(be, n, t), out2(be, n, t), mean2(be, BT, DType::F32), rstd2(be, BT, DType::F32);
                float* m = layerNorm ? mean.gf() : nullptr;
                be.gpu->residualNormForward(
                    sum.g(), out.g(), m, rstd.gf(), a.g(), b.g(), w.g(), bias.g(), BT, C, 1e-6f);
                be.gpu->residualForward(sum2.g(), a.g(), b.g(), n);
                if (layerNorm)
                    be.gpu->layernormForward(out2.g(), mean2.gf(), rstd2.gf(), sum2.g(), w.g(), bias.g(), BT, C);
                else
                    be.gpu->rmsnormForward(out2.g(), rstd2.gf(), sum2.g(), w.g(), BT, C, 1e-6f);
                CHECK(sum.onGpu() == sum2.onGpu());
                CHECK(out.onGpu() == out2.onGpu());
                CHECK(rstd.onGpu() == rstd2.onGpu());
                // And the CPU oracle's (fp32: to its tolerance; bf16 rounds the sum before the norm on both).
                be.cpu->residualNormForward(sum.c(), out.c(), layerNorm ? mean.c() : nullptr, rstd.c(), a.c(), b.c(),
                    w.c(), bias.c(), BT, C, 1e-6f);
                CHECK(pw::test::cuda::relativeError(out.onGpu(), out.onCpu()) < mode.tolerance);

                // Backward: dx = dres + the norm's input gradient against a copy then the accumulating backward.
                Twin dout(be, randomValues(n, 104), t), dres(be, randomValues(n, 105), t);
                Twin dx(be, n, t), dx2(be, n, t);
                be.gpu->normBackwardResidual(dx.g(), dres.g(), dout.g(), sum.g(), w.g(), m, rstd.gf(), BT, C);
                be.gpu->copy(dx2.g(), dres.g(), n * byteSize(t));
                if (layerNorm)
                    be.gpu->layernormBackward(
                        dx2.g(), nullptr, nullptr, dout.g(), sum.g(), w.g(), mean.gf(), rstd.gf(), BT, C);
                else
                    be.gpu->rmsnormBackward(dx2.g(), nullptr, dout.g(), sum.g(), w.g(), rstd.gf(), BT, C);
                CHECK(dx.onGpu() == dx2.onGpu());
            }
}

TEST_CASE("CUDA bias gradient from the weight gradient's product accumulates the column sums' values", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes) {
        INFO(toString(mode.precision));
        Backends be(mode);
        const DType t = be.act();
        const int BT = 256, C = 64, OC = 192;
        Twin dout(be, randomValues(static_cast<std::size_t>(BT) * OC, 110), t);
        Twin inp(be, randomValues(static_cast<std::size_t>(BT) * C, 111), t);
        const auto w0 = randomValues(static_cast<std::size_t>(OC) * C, 112), b0 = randomValues(OC, 113);
        Twin dw(be, w0, t), db(be, b0, t), dw2(be, w0, t), db2(be, b0, t);
        be.gpu->matmulBackward(nullptr, dw.g(), db.g(), dout.g(), inp.g(), nullptr, BT, C, OC); // the epilogue's
        be.gpu->matmulBackward(nullptr, dw2.g(), nullptr, dout.g(), inp.g(), nullptr, BT, C, OC);
        be.gpu->matmulBackward(nullptr, nullptr, db2.g(), dout.g(), nullptr, nullptr, BT, C, OC); // column sums
        CHECK(dw.onGpu() == dw2.onGpu());
        CHECK(pw::test::cuda::relativeError(db.onGpu(), db2.onGpu()) < mode.tolerance);
        // And the CPU's, accumulated onto the same starting values.
        be.cpu->matmulBackward(nullptr, dw.c(), db.c(), dout.c(), inp.c(), nullptr, BT, C, OC);
        CHECK(pw::test::cuda::relativeError(db.onGpu(), db.onCpu()) < mode.tolerance);
    }
}
