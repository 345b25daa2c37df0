// SPDX-License-Identifier: MIT
// Tensor and sequence parallelism in the engine (issue 34): a plan whose stages split every block over t ranks trains
// to the losses and weights of one device, for GPT-2 and Llama, with pipelines and data-parallel replicas around it.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/local_run.h"
#include "planner/errors.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw::engine;
using pw::test::asLlama;
using pw::test::gpt2Plan;

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
pw::planner::TransformerConfig smallLlama()
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

Trained train(const pw::planner::Plan& plan, int steps, LocalLinks links = LocalLinks::Host)
{
    TrainingSetup setup = trainingSetup(plan);
    setup.adam.lr = 1e-2;
    setup.adam.weight_decay = 0.1;
    setup.bucket_bytes = 4096;
    DataSpec spec;
    spec.synthetic_tokens = 20000;
    const DataOrder data(loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq);
    auto run = runLocally(plan, setup, data, steps, {}, links);
    return {run.losses, run.final_parameters};
}

/// `stages` devices of d replicas of t ranks each, in the plan's order (replica, then tensor rank).
pw::planner::Plan tensorPlan(const pw::planner::TransformerConfig& shape, const std::vector<std::pair<int, int>>& cuts,
    int d, int t, bool sequence, const std::string& kind)
{
    std::vector<pw::test::StageCut> stages;
    int next = 0;
    for (const auto& [first, last] : cuts) {
        pw::test::StageCut cut {first, last, {}};
        for (int i = 0; i < d * t; ++i)
            cut.devices.push_back(next++);
        stages.push_back(cut);
    }
    auto plan = gpt2Plan(shape, stages, kind, 4);
    plan.tensor_parallel = t;
    plan.schedule.sequence_parallel = sequence;
    plan.validate();
    return plan;
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
        const auto shape = llama ? smallLlama() : smallGpt2();
        const int head = shape.layers + 1;
        const Trained one = train(gpt2Plan(shape, {{0, head, {0}}}, "1f1b", 4), kSteps);
        struct Case
        {
            std::string name;
            std::vector<std::pair<int, int>> cuts;
            int d, t;
            bool sequence;
            std::string kind;
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
        };
        for (const auto& c : cases)
            SECTION(std::string(llama ? "Llama, " : "GPT-2, ") + c.name)
            {
                checkSame(train(tensorPlan(shape, c.cuts, c.d, c.t, c.sequence, c.kind), kSteps), one,
                    ModelConfig::fromTransformer(shape));
            }
    }
}
