// SPDX-License-Identifier: MIT
// HetPipe's wave synchronous parallel in the engine: virtual workers (pipelines) train on their own data with
// local updates and exchange per-wave updates through the pulls the schedule places. Checked against a
// sequential reference written here from the digest's rules (§1.2.5), and on the recorded spans: backwards use
// their forward's weights, and no forward runs with weights missing a wave the staleness bound D requires.
#include <catch2/catch.hpp>

#include <map>

#include "engine/local_run.h"
#include "planner/schedule/generator.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/engine/wsp_checks.h"

using namespace pw::engine;
using pw::planner::ActionKind;
using pw::test::checkWaveSemantics;
using pw::test::gpt2Plan;
using pw::test::StageCut;
using pw::test::tinyGpt2;

namespace {

constexpr double kLr = 3e-3;
constexpr double kWeightDecay = 0.1;

pw::planner::Plan wspPlan(const std::vector<StageCut>& cuts, int staleness, int microbatches = 2, int blocks = 2)
{
    auto plan = gpt2Plan(tinyGpt2(blocks), cuts, "wsp", microbatches);
    plan.schedule.staleness = staleness;
    plan.validate();
    return plan;
}

TrainingSetup setupFor(const pw::planner::Plan& plan)
{
    TrainingSetup setup = trainingSetup(plan);
    setup.adam.lr = kLr;
    setup.adam.weight_decay = kWeightDecay;
    return setup;
}

DataOrder dataFor(const TrainingSetup& s)
{
    DataSpec spec;
    spec.synthetic_tokens = 20000;
    return DataOrder(loadTokens(spec, s.model.vocab), s.microbatches, s.shape.batch, s.shape.seq);
}

/// The digest's WSP for N virtual workers that each hold the whole model (one stage, so N_m = 1 and every
/// minibatch is a wave), run one minibatch at a time: before minibatch k a worker adds the other workers'
/// updates of wave k - 1 - D (its pull: waves 0 .. floor((k+1)/N_m) - 2 - D, in order), then trains on its own
/// minibatch and keeps the update u_k = w_after - w_before for its push. Step losses: the mean over workers and
/// microbatches of the step.
std::vector<double> sequentialWsp(int workers, int staleness, int microbatches, int steps)
{
    const auto plan = wspPlan({{0, 3, {0}, 0}}, staleness, microbatches); // for the shape only
    TrainingSetup setup = setupFor(plan);
    setup.microbatches = microbatches * workers;
    const DataOrder data = dataFor(setup);
    const int M = microbatches * steps;
    struct Worker
    {
        std::unique_ptr<StageModel> model;
        std::unique_ptr<AdamW> adam;
        std::vector<std::vector<float>> updates; // per wave
        int steps = 0;
    };
    std::vector<Worker> w(static_cast<std::size_t>(workers));
    for (auto& x : w) {
        x.model = std::make_unique<StageModel>(setup.model, setup.shape, 0, setup.model.layerCount() - 1);
        x.model->initialise(setup.seed);
        x.adam = std::make_unique<AdamW>(*x.model);
    }
    const std::size_t n = static_cast<std::size_t>(setup.shape.batch) * setup.shape.seq;
    std::vector<double> losses(static_cast<std::size_t>(steps), 0.0);
    for (int k = 0; k < M; ++k)
        for (int v = 0; v < workers; ++v) {
            auto& me = w[static_cast<std::size_t>(v)];
            const auto params = me.model->params().host<float>();
            if (const int wave = k - 1 - staleness; wave >= 0)
                for (int o = 0; o < workers; ++o)
                    if (o != v)
                        for (std::size_t i = 0; i < params.size(); ++i)
                            params[i] += w[static_cast<std::size_t>(o)].updates[static_cast<std::size_t>(wave)][i];
            const int global = (k / microbatches) * microbatches * workers + v * microbatches + k % microbatches;
            std::vector<std::int32_t> tokens(n), targets(n);
            data.microbatch(global / setup.microbatches, global % setup.microbatches, tokens, targets);
            StageStash stash;
            float loss = 0;
            me.model->forward(stash, params.data(), tokens, nullptr, targets, 1.0f, &loss);
            losses[static_cast<std::size_t>(k / microbatches)] += loss / (microbatches * workers);
            me.model->backward(stash, params.data(), me.model->grads().data(), nullptr);
            const std::vector<float> before(params.begin(), params.end());
            const double lr = setup.adam.lrAt(me.steps);
            me.adam->step(*me.model, setup.adam, lr, ++me.steps);
            me.model->zeroGrads();
            std::vector<float> update(params.size());
            for (std::size_t i = 0; i < params.size(); ++i)
                update[i] = params[i] - before[i];
            me.updates.push_back(std::move(update));
        }
    return losses;
}

} // namespace

TEST_CASE("WSP with whole-model virtual workers gives the sequential reference's losses", "[engine][wsp]")
{
    const int steps = 5, m = 2;
    for (int workers : {2, 3})
        for (int D : {0, 1}) {
            std::vector<StageCut> cuts;
            for (int v = 0; v < workers; ++v)
                cuts.push_back({0, 3, {v}, v});
            const auto plan = wspPlan(cuts, D, m);
            const auto setup = setupFor(plan);
            CHECK(setup.microbatches == m * workers);
            const auto result = runLocally(plan, setup, dataFor(setup), steps);
            const auto expected = sequentialWsp(workers, D, m, steps);
            REQUIRE(result.losses.size() == expected.size());
            for (std::size_t i = 0; i < expected.size(); ++i) {
                INFO(workers << " workers, D = " << D << ", step " << i);
                CHECK(result.losses[i] == Approx(expected[i]).epsilon(1e-5));
            }
            CHECK(result.losses.back() < result.losses.front());
        }
    // The pulls matter: without the other workers' updates a worker trains alone, on half the data.
    const auto d0 = sequentialWsp(2, 0, m, steps);
    const auto d1 = sequentialWsp(2, 1, m, steps);
    CHECK(d0.back() != Approx(d1.back()).epsilon(1e-6));
}

TEST_CASE(
    "WSP pipelines: backwards use their forward's weights and no forward exceeds the staleness bound", "[engine][wsp]")
{
    // Two virtual workers of two stages, cut alike or differently (the updates then cross stage boundaries).
    const std::vector<StageCut> alike = {{0, 1, {0}, 0}, {2, 3, {1}, 0}, {0, 1, {2}, 1}, {2, 3, {3}, 1}};
    const std::vector<StageCut> unlike = {{0, 1, {0}, 0}, {2, 3, {1}, 0}, {0, 2, {2}, 1}, {3, 3, {3}, 1}};
    for (const auto& cuts : {alike, unlike})
        for (int D : {0, 1}) {
            const auto plan = wspPlan(cuts, D, 4);
            const auto setup = setupFor(plan);
            const auto result = runLocally(plan, setup, dataFor(setup), 6);
            INFO("D = " << D << ", stage 0 of pipeline 1 ends at layer " << cuts[2].last);
            CHECK(result.losses.back() < result.losses.front());
            const auto counts = checkWaveSemantics(plan, result.spans);
            CHECK(counts.forwards == 4 * 6 * 4); // 4 devices x 6 steps x 4 minibatches
            CHECK(counts.pulls > 0);
            CHECK(counts.stale > 0); // in-flight minibatches really ran backward on stashed weights
        }
}
