// SPDX-License-Identifier: MIT
// PipeDream's reference optimizer (optimizer_graph_hierarchical.py) as implemented, antichain states included.
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
#pragma once

#include <stop_token>

#include "partitioner.h"

namespace pw::planner {

/// @brief Plans with the DP of msr-fiddle/pipedream's optimizer_graph_hierarchical.py exactly as implemented
/// (docs/papers/pipedream-reference-optimizer.md §1.2, §2): Input* sources and __getitem__ sinks removed,
/// antichain states, levels from the cluster's hierarchy (or one flat level), options straight,
/// memory_limit (the device type's memory_bytes) and activation_compression_ratio (absent: no
/// stage-to-stage traffic, the reference's default). plan.objective_s is the reference's "Time per stage
/// in pipeline"; stages are flattened to GPU level over global device indices, and plan.layer_order is a
/// topological order in which every stage is a range (removed sources first, removed sinks last).
/// Errors: "too-many-states" (e.g. raw inception_v3), "infeasible", "cancelled", "bad-cluster", "bad-option".
PartitionResult partitionPipeDreamReference(
    const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop);

} // namespace pw::planner
