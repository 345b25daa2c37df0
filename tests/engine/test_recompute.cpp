// SPDX-License-Identifier: MIT
// Recomputation as the plan says (schedule.recompute): selective rebuilds each block's attention core before its
// backward, full each block's whole forward from its input. The losses are the run's without recomputation (the
// same operations on the same values), and the peak memory each device measures drops as the planner predicts from
// a profile the engine measured (its stashes in the planner's parts).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/local_run.h"
#include "engine/profiler.h"
#include "planner/sim/simulator.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/engine/profile_fixtures.h"

using namespace pw::engine;
namespace planner = pw::planner;
using pw::test::gpt2Plan;
using pw::test::StageCut;

namespace {

planner::TransformerConfig llama(int blocks)
{
    planner::TransformerConfig c = pw::test::tinyGpt2(blocks);
    c.heads = 4;
    return pw::test::asLlama(c, 2, 24);
}

std::vector<double> losses(planner::Plan plan, planner::Recompute recompute, int steps = 6)
{
    plan.schedule.recompute = recompute;
    const TrainingSetup setup = trainingSetup(plan);
    REQUIRE(setup.recompute == recompute);
    DataSpec spec;
    spec.synthetic_tokens = 5000;
    return runLocally(plan, setup,
        DataOrder(loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq), steps)
        .losses;
}

} // namespace

TEST_CASE("recomputation: selective and full train to the losses of a run that keeps everything", "[engine][recompute]")
{
    const std::vector<StageCut> two = {{0, 2, {0}}, {3, 5, {1}}};
    for (const auto& [name, shape] :
        {std::pair {std::string("gpt2"), pw::test::tinyGpt2(4)}, std::pair {std::string("llama"), llama(4)}})
        for (const char* kind : {"1f1b", "zb-h1"}) {
            INFO(name << ", " << kind);
            const auto plan = gpt2Plan(shape, two, kind, 4);
            const auto kept = losses(plan, planner::Recompute::None);
            for (const auto recompute : {planner::Recompute::Selective, planner::Recompute::Full}) {
                const auto again = losses(plan, recompute);
                REQUIRE(again.size() == kept.size());
                for (std::size_t k = 0; k < kept.size(); ++k) {
                    INFO("step " << k << ", " << planner::name(recompute));
                    CHECK(again[k] == Approx(kept[k]).epsilon(1e-6));
                }
            }
        }
}

TEST_CASE("recomputation: each device's measured peak memory drops as the planner predicts, within 10 %",
    "[engine][recompute]")
{
    // A profile the engine measured (its stashes in the planner's parts), a plan of two stages over it.
    const ProfileOptions o = pw::test::smallProfileOptions();
    const auto profile = measureProfile(o);
    auto plan = gpt2Plan(o.shape, {{0, 3, {0}}, {4, 7, {1}}}, "1f1b", 4);
    plan.model = profile;
    plan.validate();
    std::vector<std::vector<double>> measured, predicted;
    for (const auto recompute : {planner::Recompute::None, planner::Recompute::Selective, planner::Recompute::Full}) {
        plan.schedule.recompute = recompute;
        const TrainingSetup setup = trainingSetup(plan);
        DataSpec spec;
        spec.synthetic_tokens = 5000;
        const auto result = runLocally(plan, setup,
            DataOrder(loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq), 2);
        const auto sim = planner::simulate(plan);
        std::vector<double> m, p;
        for (std::size_t d = 0; d < result.memory.size(); ++d) {
            m.push_back(static_cast<double>(result.memory[d].peak));
            p.push_back(sim.devices.at(d).peak_memory_bytes);
            INFO(planner::name(recompute)
                << ", device " << d << ": measured " << m.back() << " B, predicted " << p.back() << " B");
            CHECK(m.back() == Approx(p.back()).epsilon(0.10));
        }
        measured.push_back(m);
        predicted.push_back(p);
    }
    for (std::size_t d = 0; d < measured.front().size(); ++d) {
        INFO("device " << d);
        CHECK(measured[1][d] < measured[0][d]); // selective keeps less than none
        CHECK(measured[2][d] < measured[1][d]); // full less than selective
        CHECK(predicted[2][d] < predicted[0][d]);
    }
    WARN("peak bytes per device, measured / predicted: none "
        << measured[0][0] << " / " << predicted[0][0] << ", " << measured[0][1] << " / " << predicted[0][1]
        << "; selective " << measured[1][0] << " / " << predicted[1][0] << ", " << measured[1][1] << " / "
        << predicted[1][1] << "; full " << measured[2][0] << " / " << predicted[2][0] << ", " << measured[2][1] << " / "
        << predicted[2][1]);
}
