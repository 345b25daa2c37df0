// SPDX-License-Identifier: MIT
// The backend's gradient contract (engine/backend.h) on the CPU, the oracle of every other backend: the input
// gradients of the products, GELU and attention are written, not accumulated (issue 33 item 2: nothing is zeroed to
// be overwritten), so an output that starts as NaN ends as one that starts as zero; the product's input gradient
// through GELU is the product's followed by GELU's backward, bit for bit; a residual joined with its norm, forward and
// backward, is the two calls it replaces, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/backend.h"

using namespace pw::engine;

namespace {

std::vector<float> random(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::vector<float> v(n);
    for (float& x : v)
        x = normal(rng);
    return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

} // namespace

TEST_CASE("backend: input gradients are written, whatever the output held", "[kernels]")
{
    auto be = makeCpuBackend();
    const int B = 2, T = 8, C = 16, NH = 4, OC = 24, BT = B * T;
    const auto dout = random(static_cast<std::size_t>(BT) * OC, 1);
    const auto weight = random(static_cast<std::size_t>(OC) * C, 2);
    const auto inp = random(static_cast<std::size_t>(BT) * C, 3);
    for (const float start : {0.0f, kNaN, 7.0f}) {
        INFO("the output starts at " << start);
        std::vector<float> dinp(static_cast<std::size_t>(BT) * C, start), zeroed(dinp.size(), 0.0f);
        be->matmulBackward(dinp.data(), nullptr, nullptr, dout.data(), nullptr, weight.data(), BT, C, OC);
        be->matmulBackward(zeroed.data(), nullptr, nullptr, dout.data(), nullptr, weight.data(), BT, C, OC);
        CHECK(sameBits(dinp, zeroed));

        std::vector<float> g(inp.size(), start), g0(inp.size(), 0.0f);
        be->geluBackward(g.data(), inp.data(), zeroed.data(), inp.size());
        be->geluBackward(g0.data(), inp.data(), zeroed.data(), inp.size());
        CHECK(sameBits(g, g0));

        for (const int KV : {NH, 2}) { // multi-head, and grouped-query (a key head's gradient summed over its group)
            const AttentionShape a {B, T, NH, KV, C / NH};
            const auto qkv = random(a.rows() * static_cast<std::size_t>(a.qkvColumns()), 4);
            const auto dy = random(static_cast<std::size_t>(BT) * C, 5);
            std::vector<float> out(static_cast<std::size_t>(BT) * C), stash(be->attentionStashCount(a));
            be->attentionForward(out.data(), stash.data(), qkv.data(), a);
            std::vector<float> dqkv(qkv.size(), start), dqkv0(qkv.size(), 0.0f);
            be->attentionBackward(dqkv.data(), dy.data(), qkv.data(), out.data(), stash.data(), a);
            be->attentionBackward(dqkv0.data(), dy.data(), qkv.data(), out.data(), stash.data(), a);
            CHECK(sameBits(dqkv, dqkv0));
        }

        const auto up = random(static_cast<std::size_t>(BT) * 2 * C, 6);
        std::vector<float> dup(up.size(), start), dup0(up.size(), 0.0f);
        const auto dact = random(static_cast<std::size_t>(BT) * C, 7);
        be->swigluBackward(dup.data(), up.data(), dact.data(), BT, C);
        be->swigluBackward(dup0.data(), up.data(), dact.data(), BT, C);
        CHECK(sameBits(dup, dup0));
    }
}

TEST_CASE("backend: the input gradient through GELU is the product's then GELU's backward", "[kernels]")
{
    auto be = makeCpuBackend();
    const int BT = 12, C = 32, OC = 8; // the MLP's down projection: 4C in, C out
    const auto dout = random(static_cast<std::size_t>(BT) * OC, 11);
    const auto weight = random(static_cast<std::size_t>(OC) * C, 12);
    const auto pre = random(static_cast<std::size_t>(BT) * C, 13);
    std::vector<float> fused(static_cast<std::size_t>(BT) * C, kNaN), product(fused.size()), expected(fused.size());
    be->matmulBackwardGelu(fused.data(), dout.data(), weight.data(), pre.data(), BT, C, OC);
    be->matmulBackward(product.data(), nullptr, nullptr, dout.data(), nullptr, weight.data(), BT, C, OC);
    be->geluBackward(expected.data(), pre.data(), product.data(), product.size());
    CHECK(sameBits(fused, expected));
    // GELU's slope is not 1: the GELU did something.
    CHECK_FALSE(sameBits(fused, product));
}

TEST_CASE("backend: a residual joined with its norm gives the sum and the norm of the sum, bit for bit", "[kernels]")
{
    auto be = makeCpuBackend();
    const int BT = 12, C = 32;
    const std::size_t n = static_cast<std::size_t>(BT) * C;
    const auto a = random(n, 21), b = random(n, 22), weight = random(C, 23), bias = random(C, 24);
    for (const bool layerNorm : {true, false}) {
        INFO((layerNorm ? "LayerNorm" : "RMSNorm"));
        std::vector<float> sum(n, kNaN), out(n, kNaN), mean(BT, kNaN), rstd(BT, kNaN);
        be->residualNormForward(sum.data(), out.data(), layerNorm ? mean.data() : nullptr, rstd.data(), a.data(),
            b.data(), weight.data(), bias.data(), BT, C, 1e-6f);
        std::vector<float> sum2(n), out2(n), mean2(BT, kNaN), rstd2(BT);
        be->residualForward(sum2.data(), a.data(), b.data(), n);
        if (layerNorm)
            be->layernormForward(
                out2.data(), mean2.data(), rstd2.data(), sum2.data(), weight.data(), bias.data(), BT, C);
        else
            be->rmsnormForward(out2.data(), rstd2.data(), sum2.data(), weight.data(), BT, C, 1e-6f);
        CHECK(sameBits(sum, sum2));
        CHECK(sameBits(out, out2));
        CHECK(sameBits(rstd, rstd2));
        if (layerNorm)
            CHECK(sameBits(mean, mean2));

        // The backward: dx = dresidual + the norm's input gradient, written over whatever dx held, and in place.
        const auto dout = random(n, 25), dres = random(n, 26);
        std::vector<float> dx(n, kNaN);
        be->normBackwardResidual(dx.data(), dres.data(), dout.data(), sum.data(), weight.data(),
            layerNorm ? mean.data() : nullptr, rstd.data(), BT, C);
        std::vector<float> expected = dres;
        if (layerNorm)
            be->layernormBackward(expected.data(), nullptr, nullptr, dout.data(), sum.data(), weight.data(),
                mean.data(), rstd.data(), BT, C);
        else
            be->rmsnormBackward(expected.data(), nullptr, dout.data(), sum.data(), weight.data(), rstd.data(), BT, C);
        CHECK(sameBits(dx, expected));
        std::vector<float> inPlace = dres;
        be->normBackwardResidual(inPlace.data(), inPlace.data(), dout.data(), sum.data(), weight.data(),
            layerNorm ? mean.data() : nullptr, rstd.data(), BT, C);
        CHECK(sameBits(inPlace, expected));
        CHECK_FALSE(sameBits(dx, dres)); // the norm's gradient did something
    }
}
