// SPDX-License-Identifier: MIT
// The Llama family's CUDA kernels against their CPU twins (ops.h): RMSNorm, rotary embeddings, SwiGLU and the
// embedding without a position table, fp32 (1e-5) and bf16 mixed (2e-2), on odd sizes and on the vector paths;
// gradient outputs start non-zero, so accumulation (+=) and writing (=) are both checked. Grouped-query attention
// is in test_cuda_kernels.cpp with the multi-head shapes. Every case skips where no CUDA device is visible.
#include <catch2/catch.hpp>

#include "tests/cuda/twins.h"
#include "tests/skip.h"

using namespace pw::engine;
using namespace pw::test::cuda;

TEST_CASE("CUDA RMSNorm forward and backward match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const int C : {48, 37, 4096}) {
            Backends be(mode);
            const int BT = 111;
            const std::size_t n = static_cast<std::size_t>(BT) * C;
            const std::string at = " C " + std::to_string(C);
            Twin inp(be, randomValues(n, 10, -2.0f, 3.0f), be.act());
            Twin weight(be, randomValues(static_cast<std::size_t>(C), 11, 0.5f, 1.5f), be.act());
            Twin out(be, n, be.act());
            Twin rstd(be, static_cast<std::size_t>(BT), DType::F32);
            be.cpu->rmsnormForward(out.c(), rstd.c(), inp.c(), weight.c(), BT, C, 1e-5f);
            be.gpu->rmsnormForward(out.g(), rstd.gf(), inp.g(), weight.g(), BT, C, 1e-5f);
            expectClose(out, be, "rmsnorm out" + at);
            expectClose(rstd, be, "rmsnorm rstd" + at, 1e-5); // fp32 statistics of the same rounded inputs

            Twin dout(be, randomValues(n, 13), be.act());
            Twin dinp(be, randomValues(n, 14), be.act());
            Twin dweight(be, randomValues(static_cast<std::size_t>(C), 15), be.act());
            be.cpu->rmsnormBackward(dinp.c(), dweight.c(), dout.c(), inp.c(), weight.c(), rstd.c(), BT, C);
            be.gpu->rmsnormBackward(dinp.g(), dweight.g(), dout.g(), inp.g(), weight.g(), rstd.gf(), BT, C);
            expectClose(dinp, be, "rmsnorm dinp" + at);
            expectClose(dweight, be, "rmsnorm dweight" + at);
            // The split backward's halves, one call each.
            Twin dinp2(be, randomValues(n, 16), be.act());
            Twin dweight2(be, randomValues(static_cast<std::size_t>(C), 17), be.act());
            be.cpu->rmsnormBackward(dinp2.c(), nullptr, dout.c(), inp.c(), weight.c(), rstd.c(), BT, C);
            be.gpu->rmsnormBackward(dinp2.g(), nullptr, dout.g(), inp.g(), weight.g(), rstd.gf(), BT, C);
            be.cpu->rmsnormBackward(nullptr, dweight2.c(), dout.c(), inp.c(), nullptr, rstd.c(), BT, C);
            be.gpu->rmsnormBackward(nullptr, dweight2.g(), dout.g(), inp.g(), nullptr, rstd.gf(), BT, C);
            expectClose(dinp2, be, "rmsnorm dinp alone" + at);
            expectClose(dweight2, be, "rmsnorm dweight alone" + at);
        }
}

TEST_CASE("CUDA rotary embedding and its inverse match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes) {
        Backends be(mode);
        // 4 query and 2 key heads of 16 rotated in rows that also hold 2 value heads (left alone).
        const int B = 2, T = 37, heads = 6, hs = 16, stride = 8 * hs, half = hs / 2;
        const std::size_t n = static_cast<std::size_t>(B) * T * stride;
        std::vector<float> table(2 * static_cast<std::size_t>(T) * half);
        for (int t = 0; t < T; ++t)
            for (int i = 0; i < half; ++i) {
                const double angle = t * std::pow(10000.0, -2.0 * i / hs);
                table[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
                table[(static_cast<std::size_t>(T) + t) * half + i] = static_cast<float>(std::sin(angle));
            }
        Twin angles(be, table, DType::F32);
        Twin x(be, randomValues(n, 20), be.act());
        for (const bool inverse : {false, true}) {
            be.cpu->rotary(x.c(), angles.c(), B, T, heads, hs, stride, inverse);
            be.gpu->rotary(x.g(), angles.gf(), B, T, heads, hs, stride, inverse);
            expectClose(x, be, inverse ? "rotary, then back" : "rotary");
        }
        // Back where it started (on the CPU, in fp32: a rotation and its transpose).
        const auto start = randomValues(n, 20);
        const auto back = x.onCpu();
        double worst = 0;
        for (std::size_t i = 0; i < n; ++i)
            worst = std::max(worst,
                std::abs(static_cast<double>(back[i])
                    - (mode.precision == Precision::Fp32 ? start[i] : roundBf16(start[i]))));
        CHECK(worst < 1e-5);
    }
}

TEST_CASE("CUDA SwiGLU forward and backward match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const int F : {37, 688}) {
            Backends be(mode);
            const int BT = 53;
            const std::size_t n = static_cast<std::size_t>(BT) * F;
            Twin up(be, randomValues(2 * n, 40, -3.0f, 3.0f), be.act());
            Twin out(be, n, be.act());
            be.cpu->swigluForward(out.c(), up.c(), BT, F);
            be.gpu->swigluForward(out.g(), up.g(), BT, F);
            expectClose(out, be, "swiglu out F " + std::to_string(F));
            Twin dout(be, randomValues(n, 41), be.act());
            Twin dup(be, randomValues(2 * n, 42), be.act()); // written over
            be.cpu->swigluBackward(dup.c(), up.c(), dout.c(), BT, F);
            be.gpu->swigluBackward(dup.g(), up.g(), dout.g(), BT, F);
            expectClose(dup, be, "swiglu dinp F " + std::to_string(F));
        }
}

TEST_CASE("CUDA token embedding without a position table matches the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const int C : {48, 37}) {
            Backends be(mode);
            const int B = 3, T = 37, V = 23;
            Tokens tokens(be, randomTokens(static_cast<std::size_t>(B) * T, V, 3));
            Twin wte(be, randomValues(static_cast<std::size_t>(V) * C, 4), be.act());
            Twin out(be, static_cast<std::size_t>(B) * T * C, be.act());
            be.cpu->encoderForward(out.c(), tokens.cpu.as<std::int32_t>(), wte.c(), nullptr, B, T, C);
            be.gpu->encoderForward(out.g(), tokens.gpu.as<std::int32_t>(), wte.g(), nullptr, B, T, C);
            expectClose(out, be, "embedding out C " + std::to_string(C));
            Twin dout(be, randomValues(static_cast<std::size_t>(B) * T * C, 6), be.act());
            Twin dwte(be, randomValues(static_cast<std::size_t>(V) * C, 7), be.act());
            be.cpu->encoderBackward(dwte.c(), nullptr, dout.c(), tokens.cpu.as<std::int32_t>(), B, T, C);
            be.gpu->encoderBackward(dwte.g(), nullptr, dout.g(), tokens.gpu.as<std::int32_t>(), B, T, C);
            expectClose(dwte, be, "embedding dwte C " + std::to_string(C));
        }
}
