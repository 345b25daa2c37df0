// SPDX-License-Identifier: MIT
// Tensor and sequence parallelism in the engine (issue 34): a plan whose stages split every block over t ranks trains
// to the losses and weights of one device, for GPT-2 and Llama, with pipelines and data-parallel replicas around it.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/adamw.h"
#include "engine/local_run.h"
#include "engine/profiler.h"
#include "planner/errors.h"
#include "planner/sim/simulator.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/engine/profile_fixtures.h"

using namespace pw::engine;
using pw::test::asLlama;
using pw::test::gpt2Plan;
using pw::test::tensorPlan;

namespace {

/// 2 blocks of 4 heads over 32 channels, 8 positions, a vocabulary of 50 (padded to 128: with t = 4 two ranks hold
/// padding rows only).
pw::planner::TransformerConfig smallGpt2()
{
    pw::planner::TransformerConfig c;
    c.layers = 2;
    c.hidden = 32;
    c.heads = 4;
    c.sequence = 8;
    c.vocab = 50;
    c.microbatch = 2;
    c.bytes_per_element = 4;
    return c;
}

/// The same with Llama's block: 8 query heads over 4 key/value heads of 8 dimensions (64 channels), MLP 96.
pw::planner::TransformerConfig tensorParallelSmallLlama()
{
    auto c = smallGpt2();
    c.hidden = 64;
    c.heads = 8;
    return asLlama(c, 4, 96);
}

struct Trained
{
    std::vector<double> losses;
    std::vector<float> weights;
};

Trained tensorParallelTrain(const pw::planner::Plan& plan, int steps, LocalLinks links = LocalLinks::Host)
{
    TrainingSetup setup = trainingSetup(plan);
    // At lr 1e-2 AdamW's normalised steps amplify the rounding of sums split otherwise (over ranks, over OpenMP's
    // threads) to 2e-6 - 1.8e-5 of the weights after 20 steps, the bound itself; at 1e-3, below 5e-7.
    setup.adam.lr = 1e-3;
    setup.adam.weight_decay = 0.1;
    setup.bucket_bytes = 4096;
    DataSpec spec;
    spec.synthetic_tokens = 20000;
    const DataOrder data(loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq);
    auto run = runLocally(plan, setup, data, steps, {}, links);
    return {run.losses, run.final_parameters};
}

double relativeDistance(const std::vector<float>& a, const std::vector<float>& b)
{
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        diff += d * d;
        norm += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
}

/// The weights without the key biases: softmax is invariant to adding one number to every score of a row, so a key
/// bias's gradient is zero in exact arithmetic, and AdamW's normalised steps follow its rounding noise, which any other
/// order of summation changes (two runs differing only in how a sum is split differ in it by 100 %, and by 1e-6 in the
/// query and value biases beside it).
std::vector<float> withoutKeyBiases(std::vector<float> weights, const ModelConfig& model)
{
    for (const auto& t : checkpointTensors(model)) {
        const bool gpt2 = t.name.ends_with(".qkvb");
        if (!gpt2 && !t.name.ends_with("k_proj.bias"))
            continue;
        const std::size_t first = t.offset + (gpt2 ? static_cast<std::size_t>(model.channels) : 0);
        std::fill_n(weights.begin() + static_cast<long>(first), gpt2 ? model.channels : t.size, 0.0f);
    }
    return weights;
}

void checkSame(const Trained& got, const Trained& want, const ModelConfig& model)
{
    REQUIRE(got.losses.size() == want.losses.size());
    for (std::size_t i = 0; i < want.losses.size(); ++i)
        CHECK(got.losses[i] == Approx(want.losses[i]).epsilon(1e-5));
    REQUIRE(got.weights.size() == want.weights.size());
    CHECK(relativeDistance(withoutKeyBiases(got.weights, model), withoutKeyBiases(want.weights, model)) < 1e-5);
    CHECK(want.losses.back() < want.losses.front());
}

} // namespace

TEST_CASE("tensor parallelism trains to one device's losses and weights", "[engine][tensor-parallel]")
{
    constexpr int kSteps = 20;
    for (const bool llama : {false, true}) {
        const auto shape = llama ? tensorParallelSmallLlama() : smallGpt2();
        const int head = shape.layers + 1;
        const Trained one = tensorParallelTrain(gpt2Plan(shape, {{0, head, {0}}}, "1f1b", 4), kSteps);
        struct Case
        {
            std::string name;
            std::vector<std::pair<int, int>> cuts;
            int d, t;
            bool sequence;
            std::string kind;
            bool distributed = false; ///< Megatron's distributed optimizer over the d replicas
        };
        const std::vector<Case> cases {
            {"t 2", {{0, head}}, 1, 2, false, "1f1b"},
            {"t 4", {{0, head}}, 1, 4, false, "1f1b"},
            {"t 2, sequence parallel", {{0, head}}, 1, 2, true, "1f1b"},
            {"t 4, sequence parallel", {{0, head}}, 1, 4, true, "1f1b"},
            {"t 2 x p 2 x d 2, 1F1B", {{0, 1}, {2, head}}, 2, 2, false, "1f1b"},
            {"t 2 x p 2 x d 2, zb-h1, sequence parallel", {{0, 1}, {2, head}}, 2, 2, true, "zb-h1"},
            {"t 4 x p 2, zb-h1", {{0, 1}, {2, head}}, 1, 4, false, "zb-h1"},
            {"t 4 x p 2 x d 2, 1F1B, sequence parallel", {{0, 1}, {2, head}}, 2, 4, true, "1f1b"},
            {"t 2 x p 2 x d 2, 1F1B, distributed optimizer", {{0, 1}, {2, head}}, 2, 2, false, "1f1b", true},
            {"t 2 x p 2 x d 2, zb-h1, sequence parallel, distributed optimizer", {{0, 1}, {2, head}}, 2, 2, true,
                "zb-h1", true},
            {"p 2 x d 3, 1F1B, distributed optimizer", {{0, 1}, {2, head}}, 3, 1, false, "1f1b", true},
        };
        for (const auto& c : cases)
            SECTION(std::string(llama ? "Llama, " : "GPT-2, ") + c.name)
            {
                checkSame(
                    tensorParallelTrain(tensorPlan(shape, c.cuts, c.d, c.t, c.sequence, c.kind, c.distributed), kSteps),
                    one, ModelConfig::fromTransformer(shape));
            }
    }
}

TEST_CASE("fewer key/value heads than ranks: each is shared by its query heads' ranks, and training is one device's",
    "[engine][tensor-parallel]")
{
    constexpr int kSteps = 20;
    auto shape = asLlama(smallGpt2(), 2, 96); // 4 query heads over 2 key/value heads
    shape.bias = pw::planner::BiasKind::Qkv; // Qwen2's biases: the shared k and v biases too
    const int head = shape.layers + 1;
    const Trained one = tensorParallelTrain(gpt2Plan(shape, {{0, head, {0}}}, "1f1b", 4), kSteps);
    const auto model = ModelConfig::fromTransformer(shape);
    SECTION("t 4: ranks 0, 1 hold key/value head 0, ranks 2, 3 head 1")
    {
        checkSame(tensorParallelTrain(tensorPlan(shape, {{0, head}}, 1, 4, false, "1f1b"), kSteps), one, model);
    }
    SECTION("t 4 x p 2 x d 2, zb-h1, sequence parallel, distributed optimizer")
    {
        checkSame(
            tensorParallelTrain(tensorPlan(shape, {{0, 1}, {2, head}}, 2, 4, true, "zb-h1", true), kSteps), one, model);
    }
    SECTION("what each rank holds")
    {
        const TensorShare heads {TensorSplit::Rows, 1, 2};
        const std::vector<std::size_t> shape2 {16, 3}; // 2 heads of 8 rows
        CHECK(heads.holders(4) == 2);
        CHECK(heads.holders(2) == 1);
        using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;
        CHECK(shardRanges(shape2, heads, {1, 4}) == Ranges {{0, 24}});
        CHECK(shardRanges(shape2, heads, {2, 4}) == Ranges {{24, 48}});
        CHECK(shardRanges(shape2, heads, {1, 2}) == Ranges {{24, 48}});
        CHECK_THROWS_AS(shardRanges(shape2, heads, {0, 3}), std::invalid_argument);
    }
}

TEST_CASE("the distributed optimizer keeps each replica's shard of the moments, covering the parameters once",
    "[engine][tensor-parallel]")
{
    const auto shape = smallGpt2();
    const ModelConfig config = ModelConfig::fromTransformer(shape);
    StageModel model(config, {2, 8}, 0, config.layerCount() - 1);
    const std::size_t n = model.parameterCount();
    std::size_t covered = 0, previous = 0;
    for (int i = 0; i < 3; ++i) {
        const AdamW adam(model, {i, 3});
        const auto [first, end] = adam.range();
        CHECK(first == previous);
        CHECK(first % 64 == 0);
        CHECK(end - first <= n / 3 + 64);
        covered += end - first;
        previous = end;
    }
    CHECK(covered == n);
    CHECK(previous == n);
    // A whole-model step and three shards' steps from the same gradients give the same parameters.
    model.initialise(7);
    std::vector<float> grads(n);
    for (std::size_t i = 0; i < n; ++i)
        grads[i] = std::sin(0.37 * static_cast<double>(i));
    const auto start = model.hostParams();
    const auto stepWith = [&](std::vector<AdamW>& optimizers) {
        model.setHostParams(start);
        std::copy(grads.begin(), grads.end(), model.grads().host<float>().begin());
        AdamWOptions o;
        o.weight_decay = 0.1;
        for (auto& adam : optimizers)
            adam.step(model, o, 1e-2, 1);
        return model.hostParams();
    };
    std::vector<AdamW> whole;
    whole.emplace_back(model);
    std::vector<AdamW> shards;
    for (int i = 0; i < 3; ++i)
        shards.emplace_back(model, OptimizerShard {i, 3});
    CHECK(stepWith(whole) == stepWith(shards));
}

TEST_CASE("tensor parallelism and the distributed optimizer: each rank's measured peak memory is the planner's, within "
          "10 %",
    "[engine][tensor-parallel]")
{
    // A profile the engine measured (its stashes in the planner's parts), plans of two stages over it: GPT-2's, and
    // Llama's of the same size (8 query heads over 4 key/value heads, SwiGLU of 172).
    ProfileOptions o = pw::test::smallProfileOptions();
    struct Case
    {
        const char* name;
        int d, t;
        bool sequence, distributed;
    };
    for (const bool llama : {false, true})
        for (const Case c : {Case {"one device per stage", 1, 1, false, false}, Case {"t 2", 1, 2, false, false},
                 Case {"t 2, sequence parallel", 1, 2, true, false}, Case {"t 4, sequence parallel", 1, 4, true, false},
                 Case {"d 2, distributed optimizer", 2, 1, false, true},
                 Case {"t 2 x d 2, sequence parallel, distributed optimizer", 2, 2, true, true}})
            SECTION(std::string(llama ? "Llama, " : "GPT-2, ") + c.name)
            {
                if (llama) { // GQA 8/4: at least t key/value heads (fewer are shared, the planner divides them by t)
                    o.shape.heads = 8;
                    o.shape = asLlama(o.shape, 4, 172);
                }
                const auto profile = measureProfile(o);
                auto plan = tensorPlan(o.shape, {{0, 3}, {4, 7}}, c.d, c.t, c.sequence, "1f1b", c.distributed);
                plan.model = profile;
                plan.validate();
                const TrainingSetup setup = trainingSetup(plan);
                DataSpec spec;
                spec.synthetic_tokens = 5000;
                const auto result = runLocally(plan, setup,
                    DataOrder(
                        loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq),
                    2);
                const auto sim = pw::planner::simulate(plan);
                std::string table;
                for (std::size_t d = 0; d < result.memory.size(); ++d)
                    table += " " + std::to_string(result.memory[d].peak / 1000) + "/"
                        + std::to_string(static_cast<long>(sim.devices.at(d).peak_memory_bytes / 1000));
                WARN((llama ? "Llama, " : "GPT-2, ") << c.name << ": peak kB per device, measured/predicted:" << table);
                for (std::size_t d = 0; d < result.memory.size(); ++d) {
                    const double measured = static_cast<double>(result.memory[d].peak);
                    const double predicted = sim.devices.at(d).peak_memory_bytes;
                    INFO(c.name << ", device " << d << ": measured " << measured << " B, predicted " << predicted
                                << " B");
                    CHECK(measured == Approx(predicted).epsilon(0.10));
                }
            }
}
