// SPDX-License-Identifier: MIT
// The model against finite differences, and a stage split against the whole model.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "engine/gpt2.h"
#include "planner/errors.h"

using namespace pw::engine;

namespace {

Gpt2Config tiny()
{
    return {8, 11, 16, 2, 2, 8}; // maxT, V, Vp, L, NH, C
}

struct Batch
{
    std::vector<std::int32_t> tokens, targets;
};

Batch batch(const Gpt2Config& c, BatchShape shape, unsigned seed)
{
    std::mt19937 rng(seed);
    Batch b;
    for (int i = 0; i < shape.batch * shape.seq; ++i) {
        b.tokens.push_back(static_cast<std::int32_t>(rng() % c.vocab));
        b.targets.push_back(static_cast<std::int32_t>(rng() % c.vocab));
    }
    return b;
}

double lossOf(StageModel& m, const Batch& b)
{
    StageStash stash;
    float loss = 0;
    m.forward(stash, m.params().data(), b.tokens, nullptr, b.targets, 1.0f, &loss);
    return loss;
}

} // namespace

TEST_CASE("llm.c's parameter layout: sizes and offsets", "[engine][gpt2]")
{
    const Gpt2Config c = {1024, 50257, 50304, 12, 12, 768}; // GPT-2 124M
    CHECK(parameterCount(c) == 124475904); // llm.c's train_gpt2.c prints "num_parameters: 124475904"
    CHECK(checkpointOffset(c, Tensor::Wpe) == 50304u * 768);
    CHECK(checkpointOffset(c, Tensor::Ln1b) == checkpointOffset(c, Tensor::Ln1w) + 12u * 768);
    CHECK(checkpointOffset(c, Tensor::Qkvw, 3) == checkpointOffset(c, Tensor::Qkvw) + 3u * 3 * 768 * 768);
}

TEST_CASE("every gradient matches a central finite difference", "[engine][gpt2]")
{
    const Gpt2Config c = tiny();
    const BatchShape shape {2, 5};
    StageModel model(c, shape, 0, c.layerCount() - 1);
    model.initialise(7);
    // Larger weights than GPT-2's init make every path's gradient visible above float noise.
    std::mt19937 rng(3);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (float& p : model.params().host<float>())
        p += noise(rng);
    const Batch b = batch(c, shape, 11);
    StageStash stash;
    model.zeroGrads();
    float loss = 0;
    model.forward(stash, model.params().data(), b.tokens, nullptr, b.targets, 1.0f, &loss);
    model.backward(stash, model.params().data(), model.grads().data(), nullptr);
    const std::vector<float> analytic = model.hostGrads();
    const auto params = model.params().host<float>();

    int checked = 0;
    for (const auto& slot : model.slots()) {
        for (int probe = 0; probe < 6; ++probe) {
            std::size_t i = slot.offset + rng() % slot.size;
            if (slot.tensor == Tensor::Wte && (i - slot.offset) / c.channels >= static_cast<std::size_t>(c.vocab))
                continue; // padded rows: no gradient by design
            const float saved = params[i];
            const float h = 1e-2f;
            params[i] = saved + h;
            const double up = lossOf(model, b);
            params[i] = saved - h;
            const double down = lossOf(model, b);
            params[i] = saved;
            const double numeric = (up - down) / (2.0 * h);
            INFO(tensorName(slot.tensor) << " block " << slot.block << " index " << i - slot.offset);
            CHECK(analytic[i] == Approx(numeric).margin(2e-3).epsilon(3e-2));
            ++checked;
        }
    }
    CHECK(checked > 60);
}

TEST_CASE("two stages compute what the whole model computes", "[engine][gpt2]")
{
    const Gpt2Config c = tiny();
    const BatchShape shape {2, 6};
    const Batch b = batch(c, shape, 5);
    StageModel whole(c, shape, 0, c.layerCount() - 1);
    whole.initialise(1);
    StageModel first(c, shape, 0, 1), second(c, shape, 2, c.layerCount() - 1);
    first.initialise(1);
    second.initialise(1);
    StageStash ws, s1, s2;
    float wholeLoss = 0, secondLoss = 0;
    whole.forward(ws, whole.params().data(), b.tokens, nullptr, b.targets, 1.0f, &wholeLoss);
    const Buffer* out = first.forward(s1, first.params().data(), b.tokens, nullptr, {}, 1.0f, nullptr);
    REQUIRE(out);
    Buffer act(cpuBackend(), out->count(), out->dtype());
    cpuBackend().copy(act.data(), out->data(), out->bytes());
    second.forward(s2, second.params().data(), {}, &act, b.targets, 1.0f, &secondLoss);
    CHECK(secondLoss == Approx(wholeLoss).epsilon(1e-6));

    whole.zeroGrads();
    first.zeroGrads();
    second.zeroGrads();
    whole.backward(ws, whole.params().data(), whole.grads().data(), nullptr);
    const Buffer* dact = second.backward(s2, second.params().data(), second.grads().data(), nullptr);
    REQUIRE(dact);
    first.backward(s1, first.params().data(), first.grads().data(), dact);
    // The tied embedding: the whole model's wte gradient is the sum of the two stages' copies.
    const auto* w1 = first.tiedSlot();
    const auto* w2 = second.tiedSlot();
    REQUIRE(w1);
    REQUIRE(w2);
    const auto* ww = whole.tiedSlot();
    const auto gw = whole.hostGrads(), g1 = first.hostGrads(), g2 = second.hostGrads();
    for (std::size_t i = 0; i < w1->size; i += 7)
        CHECK(gw[ww->offset + i] == Approx(g1[w1->offset + i] + g2[w2->offset + i]).margin(1e-6));
}

TEST_CASE("the same seed gives the same tensor on every stage", "[engine][gpt2]")
{
    const Gpt2Config c = tiny();
    StageModel a(c, {1, 4}, 0, 0), b(c, {1, 4}, c.layerCount() - 1, c.layerCount() - 1);
    a.initialise(42);
    b.initialise(42);
    const auto* wa = a.tiedSlot();
    const auto* wb = b.tiedSlot();
    REQUIRE(wa);
    REQUIRE(wb);
    const auto pa = a.hostParams(), pb = b.hostParams();
    CHECK(std::equal(pa.begin() + static_cast<long>(wa->offset), pa.begin() + static_cast<long>(wa->offset + wa->size),
        pb.begin() + static_cast<long>(wb->offset)));
}

TEST_CASE("bad shapes are refused with the field", "[engine][gpt2]")
{
    Gpt2Config c = tiny();
    c.channels = 9;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("channels: 9 is not a multiple of heads (2)"));
    CHECK_THROWS_WITH(StageModel(tiny(), {1, 9}, 0, 1), Catch::Contains("8 positions"));
    CHECK_THROWS_WITH(StageModel(tiny(), {1, 4}, 0, 9), Catch::Contains("outside the model's 4 layers"));
}
