// SPDX-License-Identifier: MIT
// Discrete-event execution of a Schedule under a cost model: the predicted Timeline and its metrics.
#pragma once

#include <vector>

#include "../plan.h"
#include "../schedule.h"
#include "../timeline.h"

namespace pw::planner {

/// @brief Costs of one plan on its cluster, in seconds and bytes per microbatch.
struct CostModel
{
    std::vector<double> forward_s; ///< [stage][replica index] flattened by stageReplicaIndex
    std::vector<double> backward_s;
    std::vector<int> stage_offset; ///< first index of each stage in the flattened vectors
    std::vector<double> stage_weight_bytes;
    std::vector<double> stage_activation_bytes; ///< stashed per microbatch (all intermediate outputs)
    std::vector<double> stage_input_bytes; ///< received per microbatch (recomputation keeps only these)
    std::vector<double> stage_optimizer_bytes;
    std::vector<double> boundary_bytes; ///< bytes sent from stage s to s+1 per microbatch
    std::vector<double> device_memory_capacity;
    int samples_per_microbatch = 1;

    static CostModel fromPlan(const Plan& plan);
    double forward(int stage, int replica) const { return forward_s[stage_offset[stage] + replica]; }
    double backward(int stage, int replica) const { return backward_s[stage_offset[stage] + replica]; }
};

struct DeviceMetrics
{
    double busy_s = 0; ///< compute lane busy time
    double bubble_fraction = 0; ///< idle share of the compute lane over the measured window
    double peak_memory_bytes = 0;
    double memory_capacity_bytes = 0;
    int peak_stashed_microbatches = 0;
    int peak_weight_versions = 0;
};

struct StageMetrics
{
    double peak_memory_bytes = 0; ///< the most any of its devices uses
    double memory_capacity_bytes = 0; ///< the least any of its devices has
    int peak_stashed_microbatches = 0;
    int peak_weight_versions = 0;
};

struct SimulationResult
{
    Timeline timeline;
    double makespan_s = 0;
    double iteration_time_s = 0; ///< per batch of microbatches_per_batch (steady state for async schedules)
    double throughput_samples_per_s = 0;
    double bubble_fraction = 0; ///< mean over devices of the idle share of the compute lane
    double bubble_overhead = 0; ///< idle / busy over the same window: the papers' (p-1)/m
    std::vector<DeviceMetrics> devices;
    std::vector<StageMetrics> stages;
    std::size_t simulated_actions = 0;

    bool fitsMemory() const;
};

struct SimulationOptions
{
    bool record_spans = true; ///< false: metrics only (faster; used by planners)
    bool record_memory = true;
};

/// @brief The device closest to (or furthest over) its memory capacity: what "peak memory" means in a summary.
struct MemoryPeak
{
    double peak_bytes = 0;
    double capacity_bytes = 0;
    double ratio = 0; ///< peak / capacity; > 1: does not fit
    bool over() const { return ratio > 1; }
};

/// The first device with the highest peak / capacity ratio; devices without a capacity or without memory in use
/// are passed over (all zero when none is left).
MemoryPeak worstMemory(const SimulationResult& result);

/// The metrics a plan records of its simulation (Plan::predicted).
PredictedMetrics predictedMetrics(const SimulationResult& result);

/// Throws InputError when the schedule deadlocks or does not match the plan.
SimulationResult simulate(const Plan& plan, const Schedule& schedule, const SimulationOptions& options = {});
/// Generates the plan's schedule and simulates it.
SimulationResult simulate(const Plan& plan, const SimulationOptions& options = {});

} // namespace pw::planner
