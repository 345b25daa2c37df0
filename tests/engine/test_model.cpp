// SPDX-License-Identifier: MIT
// The model seam: every family's model (GPT-2; Llama with grouped-query attention, untied or tied, with Qwen2's
// biases) against finite differences, a stage split against the whole model, the split backward against the fused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/model.h"
#include "planner/errors.h"

using namespace pw::engine;
namespace planner = pw::planner;

namespace {

ModelConfig gpt2Tiny()
{
    return {8, 11, 16, 2, 2, 8}; // maxT, V, Vp, L, NH, C
}

/// A small Llama: 4 query heads of 4 dimensions sharing 2 key/value heads, SwiGLU of 12, untied head.
ModelConfig llamaTiny(bool tied = false, planner::BiasKind bias = planner::BiasKind::None)
{
    ModelConfig c = {8, 11, 16, 2, 4, 16};
    c.kv_heads = 2;
    c.ffn_hidden = 12;
    c.mlp = planner::MlpKind::SwiGlu;
    c.norm = planner::NormKind::RmsNorm;
    c.positions = planner::PositionKind::Rotary;
    c.bias = bias;
    c.tied_embeddings = tied;
    c.rotary.theta = 500.0; // angles that turn visibly within 8 positions
    c.norm_eps = 1e-5;
    return c;
}

/// Every model the seam builds, by name.
std::pair<std::string, ModelConfig> anyTiny()
{
    return GENERATE(std::pair {std::string("gpt2"), gpt2Tiny()}, std::pair {std::string("llama"), llamaTiny()},
        std::pair {std::string("llama tied"), llamaTiny(true)},
        std::pair {std::string("qwen2 (q, k, v biases)"), llamaTiny(false, planner::BiasKind::Qkv)});
}

std::size_t offsetOf(const ModelConfig& c, const std::string& name)
{
    for (const auto& t : checkpointTensors(c))
        if (t.name == name)
            return t.offset;
    FAIL("no tensor " << name);
    return 0;
}

struct Batch
{
    std::vector<std::int32_t> tokens, targets;
};

Batch batch(const ModelConfig& c, BatchShape shape, unsigned seed)
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
    const ModelConfig c = {1024, 50257, 50304, 12, 12, 768}; // GPT-2 124M
    CHECK(parameterCount(c) == 124475904); // llm.c's train_gpt2.c prints "num_parameters: 124475904"
    CHECK(offsetOf(c, "wpe") == 50304u * 768);
    CHECK(offsetOf(c, "h.0.ln1b") == offsetOf(c, "h.0.ln1w") + 12u * 768);
    CHECK(offsetOf(c, "h.3.qkvw") == offsetOf(c, "h.0.qkvw") + 3u * 3 * 768 * 768);
    CHECK(offsetOf(c, "lnfb") + 768 == parameterCount(c));
}

TEST_CASE("a Llama's tensors carry Hugging Face's names, shapes and optimizer traits", "[engine][model]")
{
    ModelConfig c = llamaTiny();
    c.vocab = 4096;
    c.padded_vocab = 4096;
    c.layers = 4;
    c.heads = 8;
    c.kv_heads = 2;
    c.channels = 256;
    c.ffn_hidden = 688;
    // transformers' LlamaForCausalLM of this config: embed 4096 x 256, per layer q 256 x 256, k and v 64 x 256 each,
    // o 256 x 256, gate and up 688 x 256, down 256 x 688, two norms of 256; final norm 256; lm_head 4096 x 256.
    const std::size_t layer = 256 * 256 * 2 + 2 * 64 * 256 + 3 * 688 * 256 + 2 * 256;
    CHECK(parameterCount(c) == 4096u * 256 * 2 + 4 * layer + 256);
    const auto all = checkpointTensors(c);
    const auto named = [&](const std::string& name) -> const TensorSlot& {
        for (const auto& t : all)
            if (t.name == name)
                return t;
        FAIL("no tensor " << name);
        return all.front();
    };
    CHECK(named("model.layers.3.self_attn.k_proj.weight").shape == std::vector<std::size_t> {64, 256});
    CHECK(named("model.layers.0.mlp.down_proj.weight").shape == std::vector<std::size_t> {256, 688});
    CHECK(named("model.layers.0.mlp.down_proj.weight").decayed);
    CHECK_FALSE(named("model.layers.2.post_attention_layernorm.weight").decayed);
    CHECK(named("model.norm.weight").shape == std::vector<std::size_t> {256});
    CHECK_FALSE(named("lm_head.weight").tied);
    // q, k and v are one product: adjacent in the buffer, in that order.
    CHECK(named("model.layers.1.self_attn.k_proj.weight").offset
        == named("model.layers.1.self_attn.q_proj.weight").offset + 256u * 256);
    CHECK(named("model.layers.1.self_attn.v_proj.weight").offset
        == named("model.layers.1.self_attn.k_proj.weight").offset + 64u * 256);
    c.tied_embeddings = true;
    CHECK(parameterCount(c) == 4096u * 256 + 4 * layer + 256);
}

TEST_CASE("every gradient matches a central finite difference", "[engine][model]")
{
    const auto [family, c] = anyTiny();
    INFO(family);
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
            if (slot.shape.front() == static_cast<std::size_t>(c.padded_vocab)
                && (i - slot.offset) / c.channels >= static_cast<std::size_t>(c.vocab))
                continue; // padded rows: no gradient by design
            const float saved = params[i];
            const float h = 1e-2f;
            params[i] = saved + h;
            const double up = lossOf(model, b);
            params[i] = saved - h;
            const double down = lossOf(model, b);
            params[i] = saved;
            const double numeric = (up - down) / (2.0 * h);
            INFO(slot.name << " index " << i - slot.offset);
            CHECK(analytic[i] == Approx(numeric).margin(2e-3).epsilon(3e-2));
            ++checked;
        }
    }
    CHECK(checked > 60);
}

TEST_CASE("two stages compute what the whole model computes", "[engine][model]")
{
    const auto [family, c] = anyTiny();
    INFO(family);
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
    // Every tensor's gradient is the whole model's; a tied embedding's is the sum of the two stages' copies.
    const auto gw = whole.hostGrads(), g1 = first.hostGrads(), g2 = second.hostGrads();
    for (const auto* stage : {&first, &second})
        for (const auto& s : stage->slots()) {
            if (s.tied)
                continue;
            const auto& mine = stage == &first ? g1 : g2;
            for (const auto& w : whole.slots())
                if (w.name == s.name)
                    for (std::size_t i = 0; i < s.size; i += 5) {
                        INFO(s.name << " " << i);
                        CHECK(mine[s.offset + i] == Approx(gw[w.offset + i]).margin(1e-6));
                    }
        }
    if (!c.tied_embeddings) {
        CHECK_FALSE(first.tiedSlot());
        CHECK_FALSE(second.tiedSlot());
        return;
    }
    const auto* w1 = first.tiedSlot();
    const auto* w2 = second.tiedSlot();
    REQUIRE(w1);
    REQUIRE(w2);
    const auto* ww = whole.tiedSlot();
    for (std::size_t i = 0; i < w1->size; i += 7)
        CHECK(gw[ww->offset + i] == Approx(g1[w1->offset + i] + g2[w2->offset + i]).margin(1e-6));
}

TEST_CASE("the same seed gives the same tensor on every stage", "[engine][model]")
{
    const ModelConfig c = gpt2Tiny();
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

TEST_CASE("bad shapes are refused with the field", "[engine][model]")
{
    ModelConfig c = gpt2Tiny();
    c.channels = 9;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("channels: 9 is not a multiple of heads (2)"));
    CHECK_THROWS_WITH(StageModel(gpt2Tiny(), {1, 9}, 0, 1), Catch::Contains("8 positions"));
    CHECK_THROWS_WITH(StageModel(gpt2Tiny(), {1, 4}, 0, 9), Catch::Contains("outside the model's 4 layers"));
    ModelConfig g = llamaTiny();
    g.kv_heads = 3;
    CHECK_THROWS_WITH(g.validate(), Catch::Contains("kv_heads: 3 does not divide heads (4)"));
    ModelConfig mixed = gpt2Tiny();
    mixed.norm = planner::NormKind::RmsNorm; // RMSNorm with GELU and learned positions: no family builds it
    try {
        mixed.validate();
        FAIL("a block of no family was accepted");
    } catch (const pw::planner::InputError& e) {
        CHECK(e.field() == "norm"); // GPT-2's first difference: it has learned positions
        CHECK_THAT(e.message(), Catch::Contains("from Llama's in mlp"));
    }
}

TEST_CASE("the split backward (I then W) gives the fused backward's gradients and input gradient", "[engine][model]")
{
    // Every cut of the model: the whole model (embedding and head on one stage), the embedding with a block, a
    // block alone (input and output gradients both cross), the head alone, and a last block with the head.
    const auto [family, c] = anyTiny();
    INFO(family);
    const BatchShape shape {2, 6};
    const Batch b = batch(c, shape, 9);
    const int last = c.layerCount() - 1;
    for (const auto& [first, end] :
        std::vector<std::pair<int, int>> {{0, last}, {0, 1}, {1, 1}, {2, last}, {last, last}}) {
        INFO("layers " << first << ".." << end);
        StageModel fused(c, shape, first, end), split(c, shape, first, end);
        fused.initialise(3);
        split.initialise(3);
        // The stage's input (a previous stage's output) and output gradient, the same for both.
        const std::size_t n = fused.activationCount();
        std::mt19937 rng(11);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> input(n), dout(n);
        for (auto& v : input)
            v = normal(rng);
        for (auto& v : dout)
            v = 0.01f * normal(rng);
        Buffer g(cpuBackend(), n, DType::F32);
        cpuBackend().upload(g.data(), DType::F32, dout.data(), n);
        const bool head = end == last;
        // Two microbatches through each, the second's I before the first's W (as a zero-bubble schedule orders them).
        StageStash f1, f2, s1, s2;
        float loss = 0;
        const auto fwd = [&](StageModel& m, StageStash& st) {
            Buffer in(cpuBackend(), n, DType::F32); // the forward takes it into the stash
            cpuBackend().upload(in.data(), DType::F32, input.data(), n);
            m.forward(
                st, m.params().data(), b.tokens, first == 0 ? nullptr : &in, b.targets, 0.5f, head ? &loss : nullptr);
        };
        fwd(fused, f1);
        fwd(split, s1);
        fwd(fused, f2);
        fwd(split, s2);
        std::vector<std::vector<float>> fusedInputs, splitInputs;
        const auto host = [&](const Buffer* d) {
            std::vector<float> v;
            if (d)
                v.assign(d->as<float>(), d->as<float>() + d->count());
            return v;
        };
        for (StageStash* st : {&f1, &f2})
            fusedInputs.push_back(
                host(fused.backward(*st, fused.params().data(), fused.grads().data(), head ? nullptr : &g)));
        splitInputs.push_back(host(split.backwardInput(s1, split.params().data(), head ? nullptr : &g)));
        splitInputs.push_back(host(split.backwardInput(s2, split.params().data(), head ? nullptr : &g)));
        std::vector<std::pair<int, std::size_t>> heard;
        const auto done = [&](int layer, std::size_t, std::size_t count) { heard.emplace_back(layer, count); };
        split.backwardWeight(s1, split.grads().data(), done);
        split.backwardWeight(s2, split.grads().data());
        // The embedding's stage returns no input gradient on either path.
        CHECK(fusedInputs[0].empty() == (first == 0));
        for (std::size_t k = 0; k < 2; ++k) {
            REQUIRE(splitInputs[k].size() == fusedInputs[k].size());
            for (std::size_t i = 0; i < fusedInputs[k].size(); ++i)
                REQUIRE(splitInputs[k][i] == Approx(fusedInputs[k][i]).epsilon(1e-6).margin(1e-9));
        }
        const auto gf = fused.hostGrads(), gs = split.hostGrads();
        REQUIRE(gf.size() == gs.size());
        double largest = 0;
        for (float v : gf)
            largest = std::max(largest, std::abs(static_cast<double>(v)));
        CHECK(largest > 0);
        for (std::size_t i = 0; i < gf.size(); ++i) {
            INFO("gradient " << i);
            REQUIRE(gs[i] == Approx(gf[i]).epsilon(1e-6).margin(1e-9));
        }
        // W reports every layer once, last to first, with the layer's range (the executor's all-reduce buckets).
        REQUIRE(heard.size() == static_cast<std::size_t>(end - first + 1));
        for (std::size_t k = 0; k < heard.size(); ++k) {
            CHECK(heard[k].first == end - static_cast<int>(k));
            CHECK(heard[k].second == split.layerRange(heard[k].first).second);
        }
        // W releases the gradients its I kept.
        for (const auto& layer : s1.layers)
            CHECK((layer.g_out.empty()
                && std::all_of(layer.grads.begin(), layer.grads.end(), [](const Buffer& g) { return g.empty(); })));
    }
}

TEST_CASE("a weight gradient without its input gradient is refused", "[engine][model]")
{
    const ModelConfig c = gpt2Tiny();
    const BatchShape shape {2, 6};
    const Batch b = batch(c, shape, 4);
    StageModel m(c, shape, 0, 1);
    m.initialise(1);
    StageStash st;
    m.forward(st, m.params().data(), b.tokens, nullptr, {}, 1.0f, nullptr);
    CHECK_THROWS_WITH(m.backwardWeight(st, m.grads().data()), Catch::Contains("before its input gradient"));
}
