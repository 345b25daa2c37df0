// SPDX-License-Identifier: MIT
// Internal to tests/run/: the run request of a local agents run of a tiny GPT-2 plan and the same training in this
// process (engine::runLocally), whose losses the agents must reproduce. Shared by the local-run tests.
#pragma once

#include <string>
#include <vector>

#include "app/run/controller.h"
#include "engine/local_run.h"

namespace pw::test {

/// Synthetic data, seed 1234, AdamW at lr 1e-2 and weight decay 0.1, one thread per agent.
inline app::RunRequest localRunRequest(const planner::Plan& plan, int steps, std::string label = "test plan")
{
    app::RunRequest r;
    r.plan = plan;
    r.plan_label = std::move(label);
    r.training.steps = steps;
    r.training.data = {agents::DataKind::Synthetic, "", 1234};
    r.training.lr = 1e-2;
    r.training.weight_decay = 0.1;
    r.training.seed = 1234;
    r.threads = 1;
    r.force = true; // plans of up to 4 devices (tiny ones) on test machines of fewer cores
    r.agent_executable = PW_AGENT_EXE;
    return r;
}

/// The same training in this process (engine::runLocally): what the agents must reproduce (at lr `lr`: give the
/// request the same).
inline engine::LocalRunResult inProcessRun(const planner::Plan& plan, int steps, double lr = 1e-2)
{
    engine::TrainingSetup setup = engine::trainingSetup(plan);
    setup.adam.lr = lr;
    setup.adam.weight_decay = 0.1;
    setup.adam.total_steps = steps;
    setup.seed = 1234;
    engine::DataSpec data;
    data.seed = 1234;
    const engine::DataOrder order(
        engine::loadTokens(data, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq);
    return engine::runLocally(plan, setup, order, steps);
}

inline std::vector<double> inProcessLosses(const planner::Plan& plan, int steps)
{
    return inProcessRun(plan, steps).losses;
}

} // namespace pw::test
