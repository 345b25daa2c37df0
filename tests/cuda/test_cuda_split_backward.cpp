// SPDX-License-Identifier: MIT
// The backward split in two on a GPU (zero-bubble schedules' I and W): StageModel::backwardInput then
// backwardWeight on the CUDA backend give its fused backward's input gradient and parameter gradients, in fp32 and
// in bf16 mixed precision, on every cut of the model; zero-bubble plans (zb-h1, and zbv's V with two chunks per
// device) trained on the GPU give the CPU engine's 1F1B losses. Every case is skipped where no CUDA device is
// visible.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/local_run.h"
#include "engine/model.h"
#include "tests/cuda/comparison.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/skip.h"

using namespace pw::engine;
using pw::test::Comparison;
using pw::test::comparison;
using pw::test::gpt2Plan;
using pw::test::setupOf;
using pw::test::StageCut;

namespace {

std::unique_ptr<Backend> gpu(Precision precision)
{
    DeviceChoice choice;
    choice.cuda = 0;
    choice.precision = precision;
    return makeBackend(choice);
}

std::vector<float> download(Backend& be, const Buffer* b)
{
    std::vector<float> host;
    if (!b)
        return host;
    host.resize(b->count());
    be.download(host.data(), b->data(), b->dtype(), host.size());
    return host;
}

/// got against want, relative to want's largest magnitude (bf16's rounding is relative to the values' scale).
void requireClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance, const char* what)
{
    REQUIRE(got.size() == want.size());
    double scale = 0;
    for (float v : want)
        scale = std::max(scale, std::abs(static_cast<double>(v)));
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        REQUIRE(std::isfinite(got[i]));
        worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    INFO(what << ": largest difference " << worst << " against values up to " << scale);
    CHECK(scale > 0);
    CHECK(worst <= tolerance * scale);
}

/// Fused and split backward of two microbatches through layers first..last on one backend: the split's second I
/// runs before the first's W, as a zero-bubble schedule orders them.
void splitMatchesFused(Precision precision, double tolerance)
{
    const Comparison r = comparison();
    const ModelConfig c = ModelConfig::fromTransformer(r.shape);
    const BatchShape shape {r.shape.microbatch, r.shape.sequence};
    const int last = c.layerCount() - 1;
    auto be = gpu(precision);
    std::mt19937 rng(5);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(shape.batch) * shape.seq), targets(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(c.vocab));
        targets[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(c.vocab));
    }
    for (const auto& [first, end] : std::vector<std::pair<int, int>> {{0, last}, {0, 1}, {1, 2}, {2, last}}) {
        INFO("layers " << first << ".." << end);
        StageModel fused(c, shape, first, end, *be), split(c, shape, first, end, *be);
        fused.loadFrom(*r.checkpoint);
        split.loadFrom(*r.checkpoint);
        const std::size_t n = fused.activationCount();
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> input(n), dout(n);
        for (auto& v : input)
            v = normal(rng);
        for (auto& v : dout)
            v = 0.01f * normal(rng);
        Buffer g(*be, n, be->act());
        be->upload(g.data(), be->act(), dout.data(), n);
        const bool head = end == last;
        Buffer loss(*be, 1, DType::F32);
        const auto forward = [&](StageModel& m, StageStash& st) {
            Buffer in(*be, n, be->act());
            be->upload(in.data(), be->act(), input.data(), n);
            m.forward(st, m.params().data(), tokens, first == 0 ? nullptr : &in, targets, 0.5f,
                head ? loss.as<float>() : nullptr);
        };
        StageStash f1, f2, s1, s2;
        forward(fused, f1);
        forward(split, s1);
        forward(fused, f2);
        forward(split, s2);
        std::vector<std::vector<float>> fusedInputs, splitInputs;
        for (StageStash* st : {&f1, &f2})
            fusedInputs.push_back(
                download(*be, fused.backward(*st, fused.params().data(), fused.grads().data(), head ? nullptr : &g)));
        for (StageStash* st : {&s1, &s2})
            splitInputs.push_back(download(*be, split.backwardInput(*st, split.params().data(), head ? nullptr : &g)));
        split.backwardWeight(s1, split.grads().data());
        split.backwardWeight(s2, split.grads().data());
        CHECK(fusedInputs[0].empty() == (first == 0));
        for (std::size_t k = 0; k < 2 && first != 0; ++k)
            requireClose(splitInputs[k], fusedInputs[k], tolerance, "input gradient");
        requireClose(split.hostGrads(), fused.hostGrads(), tolerance, "parameter gradients");
    }
}

} // namespace

TEST_CASE("CUDA fp32: the split backward (I then W) gives the fused backward's gradients", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    splitMatchesFused(Precision::Fp32, 1e-5);
}

TEST_CASE("CUDA bf16 mixed: the split backward (I then W) gives the fused backward's gradients", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    splitMatchesFused(Precision::Bf16Mixed, 2e-2);
}

TEST_CASE("CUDA fp32 zero-bubble plans on one GPU give the CPU engine's 1F1B losses", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const Comparison r = comparison(); // 4 layers: embedding, 2 blocks, head
    const auto train = [&](const std::vector<StageCut>& stages, const std::string& kind, int chunks, bool onGpu) {
        const auto plan = gpt2Plan(r.shape, stages, kind, r.microbatches, chunks);
        TrainingSetup setup = setupOf(r, plan);
        BackendFactory backends;
        if (onGpu)
            backends = [](int) { return std::shared_ptr<Backend>(gpu(Precision::Fp32)); };
        return runLocally(
            plan, setup, DataOrder(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), r.steps, backends)
            .losses;
    };
    const std::vector<StageCut> straight = {{0, 0, {0}}, {1, 1, {1}}, {2, 2, {2}}, {3, 3, {3}}};
    const auto cpu = train(straight, "1f1b", 1, false);
    REQUIRE(cpu.size() == static_cast<std::size_t>(r.steps));
    CHECK(cpu.back() < cpu.front());
    const auto compare = [&](const std::vector<double>& got) {
        REQUIRE(got.size() == cpu.size());
        for (std::size_t k = 0; k < cpu.size(); ++k) {
            INFO("step " << k);
            CHECK(got[k] == Approx(cpu[k]).epsilon(1e-4));
        }
    };
    SECTION("zb-h1, 4 stages")
    {
        compare(train(straight, "zb-h1", 1, true));
    }
    SECTION("zbv, 2 devices in a V")
    {
        compare(train({{0, 0, {0}}, {1, 1, {1}}, {2, 2, {1}}, {3, 3, {0}}}, "zbv", 2, true));
    }
}
