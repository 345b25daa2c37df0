// SPDX-License-Identifier: MIT
// The CUDA backend against the CPU backend (ops.h, the oracle): every Backend member on random inputs of odd sizes,
// in fp32 (norm-wise relative error <= 1e-5) and bf16 mixed precision (<= 2e-2). Inputs are rounded to the GPU's
// storage type first, so both backends start from the same values; gradient outputs start non-zero, so the
// accumulation (+=) of the parameters' gradients is checked too, and that input gradients are written (=). The error is
// norm-wise: |gpu - cpu|_2 / |cpu|_2 over the whole output, which a single wrong element of a small output still fails
// and which needs no absolute floor for outputs near zero. Every case skips where no CUDA device is visible.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/executor.h"
#include "tests/cuda/twins.h"
#include "tests/skip.h"

using namespace pw::engine;

using namespace pw::test::cuda;

TEST_CASE("the CUDA backend describes itself and refuses a missing device", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes) {
        const auto gpu = makeCudaBackend(0, mode.precision);
        CHECK(gpu->name().rfind("cuda:0 ", 0) == 0);
        CHECK(gpu->name().find(std::string("(") + toString(mode.precision) + ")") != std::string::npos);
        CHECK(gpu->precision() == mode.precision);
        CHECK(gpu->act() == (mode.precision == Precision::Fp32 ? DType::F32 : DType::BF16));
        CHECK_FALSE(gpu->hostAddressable());
        CHECK(gpu->padsLogits());
        CHECK(gpu->attentionStashCount({3, 37, 3, 3, 16}) == 3u * 3 * 37);
    }
    CHECK_THROWS_AS(makeCudaBackend(cudaVisibleDeviceCount(), Precision::Fp32), std::runtime_error);
    CHECK_THROWS_AS(makeCudaBackend(-1, Precision::Fp32), std::runtime_error);
}

TEST_CASE("CUDA upload and download round trips fp32 bf16 and tokens", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    const auto gpu = makeCudaBackend(0, Precision::Bf16Mixed);
    // Larger than one 4 MiB staging chunk of fp32 (and of bf16), and odd.
    const std::size_t n = (3u << 20) + 7;
    const std::vector<float> values = randomValues(n, 1, -1000.0f, 1000.0f);
    std::vector<float> back(n);
    {
        Buffer f(*gpu, n, DType::F32);
        gpu->upload(f.data(), DType::F32, values.data(), n);
        gpu->download(back.data(), f.data(), DType::F32, n);
        CHECK(back == values);
    }
    {
        Buffer h(*gpu, n, DType::BF16);
        std::vector<float> host = values;
        gpu->upload(h.data(), DType::BF16, host.data(), n);
        std::fill(host.begin(), host.end(), 0.0f); // the host memory is the caller's again once upload returns
        gpu->download(back.data(), h.data(), DType::BF16, n);
        std::vector<float> rounded(n);
        std::transform(values.begin(), values.end(), rounded.begin(), roundBf16);
        CHECK(back == rounded);
    }
    {
        const std::vector<std::int32_t> tokens = randomTokens(1001, 50257, 2);
        Buffer t(*gpu, tokens.size(), DType::I32);
        gpu->uploadTokens(t.as<std::int32_t>(), tokens.data(), tokens.size());
        std::vector<float> asFloat(tokens.size());
        gpu->download(asFloat.data(), t.data(), DType::I32, tokens.size());
        for (std::size_t i = 0; i < tokens.size(); ++i)
            REQUIRE(asFloat[i] == static_cast<float>(tokens[i]));
    }
    {
        // zero and copy, at odd byte counts
        Buffer a(*gpu, 1001, DType::F32), b(*gpu, 1001, DType::F32);
        gpu->upload(a.data(), DType::F32, values.data(), 1001);
        gpu->zero(b.data(), b.bytes());
        gpu->copy(b.data(), a.data(), 999 * sizeof(float));
        std::vector<float> got(1001);
        gpu->download(got.data(), b.data(), DType::F32, 1001);
        CHECK(std::equal(got.begin(), got.begin() + 999, values.begin()));
        CHECK(got[999] == 0.0f);
        CHECK(got[1000] == 0.0f);
    }
}

TEST_CASE("CUDA arena counts rounded blocks and reuses freed ones", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    const auto gpu = makeCudaBackend(0, Precision::Fp32);
    gpu->synchronize();
    const MemoryStats start = gpu->memory();
    CHECK(start.allocated > 0); // the cuBLASLt workspace is the backend's own
    CHECK(start.reserved >= start.allocated);
    gpu->resetPeak();
    CHECK(gpu->memory().peak == start.allocated);

    void* a = gpu->allocate(1000); // rounded to 1024
    CHECK(gpu->memory().allocated == start.allocated + 1024);
    void* b = gpu->allocate(5000); // rounded to 5120
    const MemoryStats both = gpu->memory();
    CHECK(both.allocated == start.allocated + 1024 + 5120);
    CHECK(both.peak == both.allocated);
    CHECK(both.reserved >= start.reserved + 1024 + 5120);
    gpu->release(a, 1000);
    gpu->release(b, 5000);
    const MemoryStats freed = gpu->memory();
    CHECK(freed.allocated == start.allocated);
    CHECK(freed.peak == both.allocated);
    CHECK(freed.reserved == both.reserved); // cached, not returned to the device

    // The same sizes again come from the cache: nothing more is reserved.
    void* c = gpu->allocate(900); // 1024 too
    void* d = gpu->allocate(5000);
    CHECK(gpu->memory().reserved == both.reserved);
    CHECK(gpu->memory().allocated == both.allocated);
    gpu->release(c, 900);
    gpu->release(d, 5000);
    CHECK(gpu->memory().allocated == start.allocated);
    gpu->resetPeak();
    CHECK(gpu->memory().peak == start.allocated);

    // Buffers go through the same arena.
    {
        Buffer buffer(*gpu, 333, DType::BF16);
        CHECK(gpu->memory().allocated == start.allocated + 1024);
    }
    CHECK(gpu->memory().allocated == start.allocated);
    CHECK(gpu->allocate(0) == nullptr);
}

TEST_CASE("CUDA action timer reports device spans in order on the monotonic clock", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    const auto gpu = makeCudaBackend(0, Precision::Fp32);
    const auto timer = gpu->makeTimer();
    const std::size_t n = 1 << 22;
    Buffer x(*gpu, n, DType::F32);
    gpu->zero(x.data(), x.bytes());
    const double before = monotonicSeconds();
    std::vector<std::uint64_t> tickets;
    for (int i = 0; i < 6; ++i) {
        const std::uint64_t t = timer->begin();
        for (int k = 0; k < 4; ++k)
            gpu->scale(x.data(), 1.5f, n);
        timer->end(t);
        tickets.push_back(t);
    }
    const std::uint64_t open = timer->begin(); // never ended: resolve stops before it
    struct Span
    {
        std::uint64_t ticket;
        double t0, t1;
    };
    std::vector<Span> spans;
    timer->resolve([&](std::uint64_t ticket, double t0, double t1) { spans.push_back({ticket, t0, t1}); }, true);
    const double after = monotonicSeconds();
    REQUIRE(spans.size() == tickets.size());
    for (std::size_t i = 0; i < spans.size(); ++i) {
        INFO("span " << i << ": " << spans[i].t0 << " .. " << spans[i].t1);
        CHECK(spans[i].ticket == tickets[i]);
        CHECK(spans[i].t0 <= spans[i].t1);
        CHECK(spans[i].t0 >= before - 1e-3); // anchored on the host clock to well under a millisecond
        CHECK(spans[i].t1 <= after + 1e-3);
        if (i > 0)
            CHECK(spans[i - 1].t1 <= spans[i].t0 + 1e-6); // one stream: each action starts after the last ended
    }
    CHECK(spans.back().t1 > spans.front().t0);
    timer->end(open);
    spans.clear();
    timer->resolve([&](std::uint64_t ticket, double t0, double t1) { spans.push_back({ticket, t0, t1}); }, true);
    REQUIRE(spans.size() == 1);
    CHECK(spans[0].ticket == open);
    // Nothing pending: a further resolve reports nothing.
    spans.clear();
    timer->resolve([&](std::uint64_t ticket, double t0, double t1) { spans.push_back({ticket, t0, t1}); }, false);
    CHECK(spans.empty());
}

TEST_CASE("CUDA encoder forward and backward match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const int C : {48, 37}) { // vector and scalar paths
            Backends be(mode);
            const int B = 3, T = 37, V = 23; // few tokens: many positions share a row of dwte
            Tokens tokens(be, randomTokens(static_cast<std::size_t>(B) * T, V, 3));
            Twin wte(be, randomValues(static_cast<std::size_t>(V) * C, 4), be.act());
            Twin wpe(be, randomValues(static_cast<std::size_t>(T) * C, 5), be.act());
            Twin out(be, static_cast<std::size_t>(B) * T * C, be.act());
            be.cpu->encoderForward(out.c(), tokens.cpu.as<std::int32_t>(), wte.c(), wpe.c(), B, T, C);
            be.gpu->encoderForward(out.g(), tokens.gpu.as<std::int32_t>(), wte.g(), wpe.g(), B, T, C);
            expectClose(out, be, "encoder out C " + std::to_string(C));

            Twin dout(be, randomValues(static_cast<std::size_t>(B) * T * C, 6), be.act());
            Twin dwte(be, randomValues(static_cast<std::size_t>(V) * C, 7), be.act());
            Twin dwpe(be, randomValues(static_cast<std::size_t>(T) * C, 8), be.act());
            be.cpu->encoderBackward(dwte.c(), dwpe.c(), dout.c(), tokens.cpu.as<std::int32_t>(), B, T, C);
            be.gpu->encoderBackward(dwte.g(), dwpe.g(), dout.g(), tokens.gpu.as<std::int32_t>(), B, T, C);
            expectClose(dwte, be, "dwte C " + std::to_string(C));
            expectClose(dwpe, be, "dwpe C " + std::to_string(C));
        }
}

TEST_CASE("CUDA layer norm forward and backward match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const int C : {48, 37, 768}) {
            Backends be(mode);
            const int BT = 111;
            const std::size_t n = static_cast<std::size_t>(BT) * C;
            Twin inp(be, randomValues(n, 10, -2.0f, 3.0f), be.act());
            Twin weight(be, randomValues(static_cast<std::size_t>(C), 11, 0.5f, 1.5f), be.act());
            Twin bias(be, randomValues(static_cast<std::size_t>(C), 12), be.act());
            Twin out(be, n, be.act());
            Twin mean(be, static_cast<std::size_t>(BT), DType::F32), rstd(be, static_cast<std::size_t>(BT), DType::F32);
            be.cpu->layernormForward(out.c(), mean.c(), rstd.c(), inp.c(), weight.c(), bias.c(), BT, C);
            be.gpu->layernormForward(out.g(), mean.gf(), rstd.gf(), inp.g(), weight.g(), bias.g(), BT, C);
            const std::string at = " C " + std::to_string(C);
            expectClose(out, be, "layernorm out" + at);
            // The statistics are fp32 on both, of the same (rounded) inputs.
            expectClose(mean, be, "layernorm mean" + at, 1e-5);
            expectClose(rstd, be, "layernorm rstd" + at, 1e-5);

            Twin dout(be, randomValues(n, 13), be.act());
            Twin dinp(be, randomValues(n, 14), be.act());
            Twin dweight(be, randomValues(static_cast<std::size_t>(C), 15), be.act());
            Twin dbias(be, randomValues(static_cast<std::size_t>(C), 16), be.act());
            be.cpu->layernormBackward(
                dinp.c(), dweight.c(), dbias.c(), dout.c(), inp.c(), weight.c(), mean.c(), rstd.c(), BT, C);
            be.gpu->layernormBackward(
                dinp.g(), dweight.g(), dbias.g(), dout.g(), inp.g(), weight.g(), mean.gf(), rstd.gf(), BT, C);
            expectClose(dinp, be, "layernorm dinp" + at);
            expectClose(dweight, be, "layernorm dweight" + at);
            expectClose(dbias, be, "layernorm dbias" + at);
        }
}

TEST_CASE("CUDA matrix products match the CPU with bias and fused GELU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    struct Shape
    {
        int BT, C, OC;
        bool withBias, withGelu;
    };
    for (const Mode& mode : kModes) {
        std::vector<Shape> shapes = {{111, 48, 144, true, false}, {111, 48, 192, true, true},
            {111, 192, 48, false, false}, {111, 48, 192, false, true}};
        if (mode.precision == Precision::Fp32)
            shapes.push_back({37, 37, 53, true, true}); // unaligned leading dimensions
        for (const Shape& s : shapes) {
            Backends be(mode);
            const std::string at = " " + std::to_string(s.BT) + "x" + std::to_string(s.C) + "x" + std::to_string(s.OC)
                + (s.withBias ? " bias" : "") + (s.withGelu ? " gelu" : "");
            const std::size_t in = static_cast<std::size_t>(s.BT) * s.C, on = static_cast<std::size_t>(s.BT) * s.OC;
            Twin inp(be, randomValues(in, 20), be.act());
            Twin weight(be, randomValues(static_cast<std::size_t>(s.OC) * s.C, 21, -0.3f, 0.3f), be.act());
            Twin bias(be, randomValues(static_cast<std::size_t>(s.OC), 22), be.act());
            Twin out(be, on, be.act()), gelu(be, on, be.act());
            be.cpu->matmulForward(out.c(), inp.c(), weight.c(), s.withBias ? bias.c() : nullptr, s.BT, s.C, s.OC,
                s.withGelu ? gelu.c() : nullptr);
            be.gpu->matmulForward(out.g(), inp.g(), weight.g(), s.withBias ? bias.g() : nullptr, s.BT, s.C, s.OC,
                s.withGelu ? gelu.g() : nullptr);
            expectClose(out, be, "matmul out" + at);
            if (s.withGelu)
                expectClose(gelu, be, "matmul gelu_out" + at);

            Twin dout(be, randomValues(on, 23), be.act());
            Twin dinp(be, randomValues(in, 24), be.act());
            Twin dweight(be, randomValues(static_cast<std::size_t>(s.OC) * s.C, 25), be.act());
            Twin dbias(be, randomValues(static_cast<std::size_t>(s.OC), 26), be.act());
            be.cpu->matmulBackward(dinp.c(), dweight.c(), s.withBias ? dbias.c() : nullptr, dout.c(), inp.c(),
                weight.c(), s.BT, s.C, s.OC);
            be.gpu->matmulBackward(dinp.g(), dweight.g(), s.withBias ? dbias.g() : nullptr, dout.g(), inp.g(),
                weight.g(), s.BT, s.C, s.OC);
            expectClose(dinp, be, "matmul dinp" + at);
            expectClose(dweight, be, "matmul dweight" + at);
            expectClose(dbias, be, "matmul dbias" + at); // untouched (still its start) without a bias

            // No input gradient (the first layer's): only dweight and dbias accumulate.
            Twin dweight2(be, randomValues(static_cast<std::size_t>(s.OC) * s.C, 27), be.act());
            be.cpu->matmulBackward(nullptr, dweight2.c(), nullptr, dout.c(), inp.c(), weight.c(), s.BT, s.C, s.OC);
            be.gpu->matmulBackward(nullptr, dweight2.g(), nullptr, dout.g(), inp.g(), weight.g(), s.BT, s.C, s.OC);
            expectClose(dweight2, be, "matmul dweight without dinp" + at);

            // The input gradient through GELU (cuBLASLt's DGELU epilogue, or the product then GELU's backward where
            // it has no algorithm), written over whatever the output held.
            Twin dfused(be, randomValues(in, 28), be.act());
            be.cpu->matmulBackwardGelu(dfused.c(), dout.c(), weight.c(), inp.c(), s.BT, s.C, s.OC);
            be.gpu->matmulBackwardGelu(dfused.g(), dout.g(), weight.g(), inp.g(), s.BT, s.C, s.OC);
            expectClose(dfused, be, "matmul dinp through GELU" + at);
        }
    }
}

TEST_CASE("CUDA fused attention matches the CPU forward and backward", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    // Head sizes 16 (the generic kernel), 64 and 128 (tensor cores in bf16), with T off the 64-row tiles; grouped-query
    // (2 key/value heads for 8 or 4 query heads) and multi-query (1) shapes (the own kernels through the expanded
    // copy). In bf16 both the engine's own kernels and cuDNN's (test_cudnn_attention.cpp) are checked: the own ones
    // stay the fallback and cuDNN's oracle.
    const AttentionShape shapes[] = {{3, 37, 3, 3, 16}, {2, 131, 2, 2, 64}, {1, 70, 2, 2, 128}, {2, 5, 5, 5, 8},
        {2, 70, 8, 2, 16}, {2, 131, 4, 2, 64}, {1, 70, 4, 1, 128}};
    for (const Mode& mode : kModes)
        for (const CudaAttention kernels : {CudaAttention::Own, CudaAttention::Cudnn})
            for (const AttentionShape& s : shapes) {
                if (mode.precision == Precision::Fp32 && kernels == CudaAttention::Cudnn)
                    continue; // fp32 runs the own kernels either way
                Backends be(mode, kernels);
                const std::string at = " B " + std::to_string(s.batch) + " T " + std::to_string(s.seq) + " NH "
                    + std::to_string(s.heads) + " KV " + std::to_string(s.kv_heads) + " hs "
                    + std::to_string(s.head_size) + (kernels == CudaAttention::Own ? " (own kernels)" : " (cuDNN)");
                const std::size_t bt = s.rows();
                const std::size_t W = static_cast<std::size_t>(s.qkvColumns()),
                                  C = static_cast<std::size_t>(s.channels());
                Twin qkv(be, randomValues(bt * W, 30, -1.5f, 1.5f), be.act());
                Twin out(be, bt * C, be.act());
                Twin cpuStash(be, be.cpu->attentionStashCount(s), DType::F32);
                Buffer gpuStash(*be.gpu, be.gpu->attentionStashCount(s), DType::F32);
                be.cpu->attentionForward(out.c(), cpuStash.c(), qkv.c(), s);
                be.gpu->attentionForward(out.g(), gpuStash.as<float>(), qkv.g(), s);
                if (kernels == CudaAttention::Cudnn) // cuDNN ran it, not the fallback
                    CHECK_THAT(cudaAttentionKernels(*be.gpu), Catch::StartsWith("cuDNN"));
                expectClose(out, be, "attention out" + at);

                // The log-sum-exp stash, checked on the host from the same (rounded) q and k in double.
                {
                    const std::vector<float> x = qkv.onGpu();
                    std::vector<float> lse(gpuStash.count());
                    be.gpu->download(lse.data(), gpuStash.data(), DType::F32, lse.size());
                    const std::vector<float> want = attentionLogSumExp(s, x);
                    const double err = relativeError(lse, want);
                    INFO("attention log-sum-exp" << at << ": relative error " << err);
                    CHECK(err <= 1e-5);
                }

                Twin dout(be, randomValues(bt * C, 31), be.act());
                Twin dqkv(be, randomValues(bt * W, 32), be.act());
                be.cpu->attentionBackward(dqkv.c(), dout.c(), qkv.c(), out.c(), cpuStash.c(), s);
                be.gpu->attentionBackward(dqkv.g(), dout.g(), qkv.g(), out.g(), gpuStash.as<float>(), s);
                expectClose(dqkv, be, "attention dqkv" + at);

                // The gradient alone (dqkv started at zero), so that a small error is not hidden by the start values.
                Twin dqkv0(be, bt * W, be.act());
                be.cpu->attentionBackward(dqkv0.c(), dout.c(), qkv.c(), out.c(), cpuStash.c(), s);
                be.gpu->attentionBackward(dqkv0.g(), dout.g(), qkv.g(), out.g(), gpuStash.as<float>(), s);
                expectClose(dqkv0, be, "attention dqkv from zero" + at);
            }
}

TEST_CASE("CUDA GELU and residual match the CPU aligned or not", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const std::size_t offset : {std::size_t {0}, std::size_t {1}}) { // offset 1: the scalar path
            Backends be(mode);
            const std::size_t n = 1001;
            const std::string at = offset ? " misaligned" : " aligned";
            Twin inp(be, randomValues(n + 1, 40, -5.0f, 5.0f), be.act());
            Twin other(be, randomValues(n + 1, 41), be.act());
            Twin out(be, n + 1, be.act());
            const std::size_t e = byteSize(be.act());
            auto at_ = [&](Twin& t, bool gpu) -> void* {
                return gpu ? static_cast<void*>(static_cast<char*>(t.g()) + offset * e) : t.c() + offset;
            };
            be.cpu->geluForward(at_(out, false), at_(inp, false), n);
            be.gpu->geluForward(at_(out, true), at_(inp, true), n);
            expectClose(out, be, "gelu" + at);

            Twin dout(be, randomValues(n + 1, 42), be.act());
            Twin dinp(be, randomValues(n + 1, 43), be.act());
            be.cpu->geluBackward(at_(dinp, false), at_(inp, false), at_(dout, false), n);
            be.gpu->geluBackward(at_(dinp, true), at_(inp, true), at_(dout, true), n);
            expectClose(dinp, be, "gelu backward" + at);

            Twin sum(be, n + 1, be.act());
            be.cpu->residualForward(at_(sum, false), at_(inp, false), at_(other, false), n);
            be.gpu->residualForward(at_(sum, true), at_(inp, true), at_(other, true), n);
            expectClose(sum, be, "residual" + at);
        }
}

TEST_CASE("CUDA classifier matches the CPU and zeroes the padded columns", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const int stride : {128, 103}) { // vector rows and a row length off the 8-element vectors
            Backends be(mode);
            const int BT = 111, V = 101;
            const float dscale = 1.0f / BT;
            const std::size_t n = static_cast<std::size_t>(BT) * stride;
            Tokens targets(be, randomTokens(static_cast<std::size_t>(BT), V, 50));
            std::vector<float> values = randomValues(n, 51, -4.0f, 4.0f);
            for (int i = 0; i < BT; ++i) // garbage in the padding, which the gradient must not keep
                for (int j = V; j < stride; ++j)
                    values[static_cast<std::size_t>(i) * stride + j] = 1e4f;
            Twin logits(be, values, be.act());
            Twin losses(be, static_cast<std::size_t>(BT), DType::F32);
            be.cpu->classifier(losses.c(), logits.c(), targets.cpu.as<std::int32_t>(), BT, V, stride, dscale);
            be.gpu->classifier(losses.gf(), logits.g(), targets.gpu.as<std::int32_t>(), BT, V, stride, dscale);
            const std::string at = " stride " + std::to_string(stride);
            // Losses are fp32 on both, from the same (rounded) logits.
            expectClose(losses, be, "classifier losses" + at, 1e-5);
            expectClose(logits, be, "classifier dlogits" + at);
            const std::vector<float> got = logits.onGpu();
            for (int i = 0; i < BT; ++i)
                for (int j = V; j < stride; ++j)
                    REQUIRE(got[static_cast<std::size_t>(i) * stride + j] == 0.0f);
        }
}

TEST_CASE("CUDA mean scale and sum of squares match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes) {
        Backends be(mode);
        Twin x(be, randomValues(1001, 60, 0.0f, 10.0f), DType::F32);
        Twin m(be, 1, DType::F32);
        be.cpu->mean(m.c(), x.c(), x.n);
        be.gpu->mean(m.gf(), x.gf(), x.n);
        expectClose(m, be, "mean", 1e-5);

        for (const std::size_t n : {std::size_t {1001}, (std::size_t {1} << 21) + 3}) {
            const std::string at = " n " + std::to_string(n);
            Twin v(be, randomValues(n, 61), be.act());
            be.cpu->scale(v.c(), -0.37f, n);
            be.gpu->scale(v.g(), -0.37f, n);
            expectClose(v, be, "scale" + at);

            // Fresh values (not the scaled ones, which each backend rounded its own way): fp32 accumulation on
            // the GPU against the CPU's double sum of the same stored values.
            Twin w(be, randomValues(n, 62), be.act());
            Twin s(be, 1, DType::F32);
            be.cpu->sumSquares(s.c(), w.c(), n);
            be.gpu->sumSquares(s.gf(), w.g(), n);
            expectClose(s, be, "sumSquares" + at, 1e-5);
            // Deterministic: the same bits again, and the output overwritten (not accumulated).
            const float first = s.onGpu()[0];
            be.gpu->sumSquares(s.gf(), w.g(), n);
            CHECK(s.onGpu()[0] == first);
        }
    }
}

TEST_CASE("CUDA wave updates match the CPU", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes) {
        Backends be(mode);
        const std::size_t n = 1001;
        Twin a(be, randomValues(n, 70), be.act()), b(be, randomValues(n, 71), be.act());
        Twin sum(be, randomValues(n, 72), DType::F32);
        be.cpu->addDifference(sum.c(), a.c(), b.c(), n);
        be.gpu->addDifference(sum.gf(), a.g(), b.g(), n);
        expectClose(sum, be, "addDifference", 1e-5); // fp32 sums of the same stored values

        const std::vector<float> start = randomValues(n, 73);
        Twin update(be, randomValues(n, 74, -0.01f, 0.01f), DType::F32);
        Twin params(be, start, be.act());
        if (mode.precision == Precision::Fp32) {
            be.cpu->addUpdate(params.c(), nullptr, update.c(), n);
            be.gpu->addUpdate(params.g(), nullptr, update.gf(), n);
            expectClose(params, be, "addUpdate");
        } else {
            // Mixed: the fp32 master takes the update and the parameters become its rounding.
            Twin master(be, start, DType::F32);
            be.cpu->addUpdate(master.c(), nullptr, update.c(), n);
            be.gpu->addUpdate(params.g(), master.gf(), update.gf(), n);
            expectClose(master, be, "addUpdate master", 1e-6);
            const std::vector<float> p = params.onGpu(), w = master.onGpu();
            for (std::size_t i = 0; i < n; ++i)
                REQUIRE(p[i] == roundBf16(w[i]));
        }
    }
}

TEST_CASE("CUDA AdamW matches the CPU in fp32 and with master weights", "[cuda]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    for (const Mode& mode : kModes)
        for (const float decay : {1.0f, 0.999f}) {
            Backends be(mode);
            const std::size_t n = 1003;
            const std::vector<float> start = randomValues(n, 80);
            Twin grads(be, randomValues(n, 81, -0.1f, 0.1f), be.act());
            Twin m(be, randomValues(n, 82, -0.01f, 0.01f), DType::F32);
            Twin v(be, randomValues(n, 83, 0.0f, 1e-4f), DType::F32);
            const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, c1 = 1.0f - 0.9f * 0.9f * 0.9f,
                        c2 = 1.0f - 0.95f * 0.95f * 0.95f;
            const std::string at = " decay " + std::to_string(decay);
            if (mode.precision == Precision::Fp32) {
                Twin params(be, start, DType::F32);
                for (int step = 0; step < 3; ++step) {
                    be.cpu->adamw(params.c(), nullptr, grads.c(), m.c(), v.c(), n, lr, b1, b2, eps, decay, c1, c2);
                    be.gpu->adamw(params.g(), nullptr, grads.g(), m.gf(), v.gf(), n, lr, b1, b2, eps, decay, c1, c2);
                }
                expectClose(params, be, "adamw params" + at);
            } else {
                // The CPU's fp32 parameters are the GPU's master weights; the GPU's bf16 parameters their rounding.
                Twin master(be, start, DType::F32);
                Twin params(be, start, DType::BF16);
                for (int step = 0; step < 3; ++step) {
                    be.cpu->adamw(master.c(), nullptr, grads.c(), m.c(), v.c(), n, lr, b1, b2, eps, decay, c1, c2);
                    be.gpu->adamw(
                        params.g(), master.gf(), grads.g(), m.gf(), v.gf(), n, lr, b1, b2, eps, decay, c1, c2);
                }
                expectClose(master, be, "adamw master" + at, 1e-5);
                const std::vector<float> p = params.onGpu(), w = master.onGpu();
                for (std::size_t i = 0; i < n; ++i)
                    REQUIRE(p[i] == roundBf16(w[i]));
            }
            expectClose(m, be, "adamw m" + at, 1e-5);
            expectClose(v, be, "adamw v" + at, 1e-5);
        }
}
