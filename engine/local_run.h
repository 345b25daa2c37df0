// SPDX-License-Identifier: MIT
// A whole run in one process: every device of the plan on its own thread, linked by a LocalFabric. The engine's
// own reference (tests compare plans against it) and the baseline of the agent benchmark.
#pragma once

#include <vector>

#include "executor.h"

namespace pw::engine {

struct LocalRunResult
{
    std::vector<double> losses; ///< per step: the mean of its microbatches' losses
    std::vector<planner::Span> spans; ///< every action of every device, t0/t1 from the run's start
    double seconds = 0; ///< wall time of the run (after setup)
    /// The whole model after the run in llm.c's order, assembled from the stages (replicas hold equal copies).
    std::vector<float> final_parameters;
};

/// Runs `steps` steps of the plan with `data`; throws the first device's error (and stops the others).
LocalRunResult runLocally(const planner::Plan& plan, const TrainingSetup& setup, const DataOrder& data, int steps);

} // namespace pw::engine
