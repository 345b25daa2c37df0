// SPDX-License-Identifier: MIT
// Tensor parallelism, sequence parallelism and the distributed optimizer through real agent processes over Gloo
// (issue 34): every rank an agent, the group's collectives inside each layer over TCP, and the run gives the losses
// of one device training the same model in this process.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "app/history/history.h"
#include "app/run/controller.h"
#include "engine/checkpoint.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/local_run_fixtures.h"
#include "tests/run/process_helpers.h"

using namespace pw;
using pw::test::gpt2Plan;
using pw::test::StageCut;
using pw::test::tinyGpt2;

namespace {

constexpr int kSteps = 20;

/// Two stages of d replicas of t ranks each (the blocks halved between them).
planner::Plan tensorPlan(
    const planner::TransformerConfig& shape, int d, int t, bool sequence, bool distributed, const std::string& kind)
{
    const int head = shape.layers + 1;
    return test::tensorPlan(shape, {{0, head / 2}, {head / 2 + 1, head}}, d, t, sequence, kind, distributed);
}

/// One device training `shape` in this process as the agents do at lr 1e-3: the losses and final weights the
/// tensor-parallel runs must give.
engine::LocalRunResult oneDevice(const planner::TransformerConfig& shape)
{
    return test::inProcessRun(gpt2Plan(shape, {{0, shape.layers + 1, {0}}}, "1f1b", 4), kSteps, 1e-3);
}

/// Norm-wise distance of the weights without GPT-2's key biases (their gradient is rounding noise: softmax ignores
/// them; tests/engine/test_tensor_parallel.cpp) and the vocabulary's padding rows (safetensors holds V rows).
double distance(std::vector<float> a, std::vector<float> b, const engine::ModelConfig& model)
{
    const auto C = static_cast<std::size_t>(model.channels);
    const auto blank = [&](std::size_t first, std::size_t count) {
        std::fill_n(a.begin() + static_cast<long>(first), count, 0.0f);
        std::fill_n(b.begin() + static_cast<long>(first), count, 0.0f);
    };
    for (const auto& t : engine::checkpointTensors(model)) {
        if (t.name.ends_with(".qkvb"))
            blank(t.offset + C, C);
        if (t.padded_rows)
            blank(t.offset + static_cast<std::size_t>(model.vocab) * C,
                static_cast<std::size_t>(model.padded_vocab - model.vocab) * C);
    }
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        norm += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
}

} // namespace

TEST_CASE("tensor parallelism through agents over Gloo gives one device's losses and weights",
    "[run][local][tensor-parallel]")
{
    struct Case
    {
        const char* name;
        planner::TransformerConfig shape;
        int d, t;
        bool sequence, distributed;
        const char* kind;
    };
    const auto gpt2 = tinyGpt2(2);
    const auto llama = test::asLlama(gpt2, 2, 32);
    auto fourHeads = gpt2;
    fourHeads.heads = 4;
    for (const Case& c : {Case {"GPT-2, t 2 x p 2 x d 2, sequence parallel, distributed optimizer, 1F1B", gpt2, 2, 2,
                              true, true, "1f1b"},
             Case {"Llama, t 2 x p 2, zb-h1", llama, 1, 2, false, false, "zb-h1"},
             Case {"GPT-2, t 4 x p 2, sequence parallel, zb-h1", fourHeads, 1, 4, true, false, "zb-h1"}})
        SECTION(c.name)
        {
            const auto plan = tensorPlan(c.shape, c.d, c.t, c.sequence, c.distributed, c.kind);
            const auto one = oneDevice(c.shape);
            const auto& want = one.losses;
            test::TempDir dir;
            auto history = app::HistoryStore::open(dir.path / "history.sqlite");
            auto request = test::localRunRequest(plan, kSteps, c.name);
            request.training.lr = 1e-3;
            const bool llamaFamily = c.shape.family == "llama";
            request.training.save_checkpoint = (dir.path / (llamaFamily ? "m.safetensors" : "m.bin")).string();
            app::RunController controller(request, history);
            const auto outcome = controller.run();
            INFO(outcome.message);
            REQUIRE(outcome.status == app::RunStatus::Succeeded);
            REQUIRE(outcome.losses.size() == want.size());
            for (std::size_t i = 0; i < want.size(); ++i) {
                INFO("step " << i);
                CHECK(outcome.losses[i] == Approx(want[i]).epsilon(1e-5));
            }
            // Every action of every rank once.
            const auto measured = history.measuredTimeline(outcome.run_id);
            CHECK(measured.spans.size() == engine::runSchedule(plan, kSteps).actionCount());
            // The weights the ranks wrote together, against one device's.
            const auto model = engine::trainingSetup(plan).model;
            const auto saved
                = engine::readModelCheckpoint(request.training.save_checkpoint, model, c.shape.sequence).params;
            REQUIRE(saved.size() == one.final_parameters.size());
            const double d = distance(saved, one.final_parameters, model);
            WARN(c.name << ": the saved weights' distance to one device's " << d);
            CHECK(d < 1e-5);
        }
}

TEST_CASE("checkpoints are whole tensors: a run at t = 1 continues at t = 2 and back with the losses of t = 1",
    "[run][local][tensor-parallel]")
{
    const auto gpt2 = tinyGpt2(2);
    for (const bool llama : {false, true})
        SECTION(llama ? "Llama, safetensors" : "GPT-2, llm.c's checkpoint")
        {
            const auto shape = llama ? test::asLlama(gpt2, 2, 32) : gpt2;
            const std::string ext = llama ? ".safetensors" : ".bin";
            const auto one = tensorPlan(shape, 1, 1, false, false, "1f1b");
            const auto two = tensorPlan(shape, 1, 2, true, false, "1f1b");
            test::TempDir dir;
            auto history = app::HistoryStore::open(dir.path / "history.sqlite");
            const auto run
                = [&](const planner::Plan& plan, int steps, const std::string& init, const std::string& save) {
                      auto req = test::localRunRequest(plan, steps);
                      if (!init.empty())
                          req.training.init_checkpoint = (dir.path / (init + ext)).string();
                      req.training.save_checkpoint = (dir.path / (save + ext)).string();
                      app::RunController controller(req, history);
                      const auto outcome = controller.run();
                      INFO(outcome.message);
                      REQUIRE(outcome.status == app::RunStatus::Succeeded);
                      return outcome.losses;
                  };
            run(one, 3, "", "a");
            const auto atTwo = run(two, 4, "a", "b"); // t = 1's checkpoint split over two ranks
            const auto atOne = run(one, 4, "a", "c");
            REQUIRE(atTwo.size() == atOne.size());
            for (std::size_t i = 0; i < atOne.size(); ++i)
                CHECK(atTwo[i] == Approx(atOne[i]).epsilon(1e-5));
            // And back: t = 2's checkpoint, gathered by its ranks, continues at t = 1 as t = 1's does.
            const auto fromTwo = run(one, 2, "b", "d");
            const auto fromOne = run(one, 2, "c", "e");
            for (std::size_t i = 0; i < fromOne.size(); ++i)
                CHECK(fromTwo[i] == Approx(fromOne[i]).epsilon(1e-5));
            const auto config = engine::trainingSetup(one).model;
            const auto b = engine::readModelCheckpoint(dir.path / ("b" + ext), config, shape.sequence).params;
            const auto c = engine::readModelCheckpoint(dir.path / ("c" + ext), config, shape.sequence).params;
            REQUIRE(b.size() == c.size());
            double diff = 0, norm = 0;
            for (std::size_t i = 0; i < c.size(); ++i) {
                diff += (static_cast<double>(b[i]) - c[i]) * (static_cast<double>(b[i]) - c[i]);
                norm += static_cast<double>(c[i]) * c[i];
            }
            CHECK(std::sqrt(diff / norm) < 1e-4); // the key biases' noise included (test_tensor_parallel.cpp)
        }
}
