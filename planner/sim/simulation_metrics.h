// SPDX-License-Identifier: MIT
// The simulator's whole-run metrics that a reduced simulation (data_parallel.cpp) recomputes for the full plan.
// Internal to planner/sim/: the simulator and simulateDataParallel share them so both compute them alike.
#pragma once

#include <vector>

#include "simulator.h"

namespace pw::planner {

/// Every used device's bubble and data-parallel wait fractions from its busy and all-reduce wait times and
/// r.makespan_s, and their means (bubble_fraction, bubble_overhead, data_parallel_wait_fraction) over the used
/// devices (those with actions), in device order. A device on a GPU that others share (sharedGpu[d] >= 0,
/// planner::sharedGpus) counts its GPU's busy time, its devices' together: waiting while the GPU runs another
/// device's work is no bubble.
void bubbleMetrics(SimulationResult& r, const std::vector<bool>& used, const std::vector<int>& sharedGpu = {});

/// Samples per second of `plan` at perBatch microbatches per iteration of iteration_time_s (0 without a time).
double throughput(const Plan& plan, int perBatch, double iteration_time_s);

} // namespace pw::planner
