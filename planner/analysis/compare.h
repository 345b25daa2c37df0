// SPDX-License-Identifier: MIT
// Runs every applicable partitioner on one model and cluster and tabulates what each predicts.
#pragma once

#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "../partition/partitioner.h"

namespace pw::planner {

/// @brief One algorithm's result on the shared input: its plan's shape and the simulator's prediction.
struct ComparisonRow
{
    std::string algorithm;
    bool ok = false;
    std::string error; ///< why there is no plan (infeasible, not applicable, ...)
    std::string config; ///< replicas per stage, "2-2-1-1"
    int stages = 0; ///< virtual stages
    int pipelines = 1;
    int devices_used = 0;
    std::string schedule; ///< schedule kind of the plan
    int microbatches = 0;
    int microbatch_size = 0;
    int tensor_parallel = 1;
    int context_parallel = 1;
    int chunks = 1; ///< virtual stages per device (interleaving)
    Recompute recompute = Recompute::None;
    double throughput_samples_per_s = 0;
    /// Achieved model FLOP/s per device and its share of the devices' peak (MFU), and the hardware FLOPs' share
    /// (HFU: with the recomputed forward; flops.h); absent when the profile gives no FLOPs (or, for the
    /// utilisations, the devices no peak).
    std::optional<double> model_flops_per_s_per_gpu;
    std::optional<double> mfu;
    std::optional<double> hfu;
    double iteration_time_s = 0;
    double bubble_fraction = 0;
    double peak_memory_bytes = 0; ///< the device with the highest peak/capacity ratio
    double memory_capacity_bytes = 0; ///< that device's capacity
    double memory_ratio = 0; ///< its peak / capacity (> 1: does not fit)
    double planning_time_s = 0; ///< wall time of the partitioner alone
    std::vector<Diagnostic> diagnostics;
    std::optional<Plan> plan;
};

struct ComparisonOptions
{
    /// Options every partitioner gets (devices, memory limit, schedule defaults); algorithm params are not
    /// shared. Algorithms that choose their own schedule override its kind.
    PartitionOptions base;
    std::vector<std::string> algorithms; ///< empty = every registered one except "manual"
    bool keep_plans = false;
    /// Called from the comparing thread as each algorithm starts, with its name and place (0-based) in the run.
    std::function<void(const std::string& algorithm, std::size_t index, std::size_t count)> on_start = {};
};

/// Runs the algorithms one after another (planning times stay comparable) and simulates each plan.
/// `progress` gets the share of algorithms done. Never throws for bad input: failures become rows.
std::vector<ComparisonRow> compareAlgorithms(const ModelProfile& model, const Cluster& cluster,
    const ComparisonOptions& options, const ProgressFn& progress = {}, std::stop_token stop = {});

} // namespace pw::planner
