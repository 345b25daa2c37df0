// SPDX-License-Identifier: MIT
// The built-in partitioners (one file each) and helpers shared by the simple ones.
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
#pragma once

#include <vector>

#include "partitioner.h"

namespace pw::planner {

const Partitioner& pipeDreamPartitioner();
const Partitioner& pipeDream2BwPartitioner();
const Partitioner& uniformPartitioner();
const Partitioner& parametersPartitioner();
const Partitioner& manualPartitioner();
const Partitioner& baPipePartitioner();
const Partitioner& megatronPartitioner();
const Partitioner& madPipePartitioner();
const Partitioner& hetPipePartitioner();

namespace detail {
/// Turns stage boundaries (last layer of each stage but the final one, increasing) into a validated plan
/// whose stages get the first `devices` devices: with chunks v the boundaries describe p*v virtual
/// stages and virtual stage s runs on physical stage s mod p; physical stages get devices/p replicas each.
/// Returns a failure result when the boundaries or the device count do not work.
PartitionResult planFromBoundaries(
    const PartitionRequest& request, std::string_view algorithm, const std::vector<int>& boundaries, int devices);
/// Number of stages the simple partitioners cut into (options.stages, else one per device; times chunks).
int requestedStages(const PartitionRequest& request, int devices);
/// Boundaries of the contiguous partition into `parts` non-empty ranges minimising the largest sum of
/// `weights` (exact: binary search over the bottleneck with a greedy check).
std::vector<int> balancedBoundaries(const std::vector<double>& weights, int parts);
/// PipeDream levels (innermost first) for the first `devices` devices: the cluster's hierarchy when they
/// form whole nodes of equal size, one level inside a node, else one flat level at the slowest link (also
/// when options.flat is set). Falling back to flat adds a warning.
std::vector<HierarchyLevel> pipeDreamLevels(
    const PartitionRequest& request, int devices, std::vector<Diagnostic>& diagnostics);
/// "4 x 4".
std::string levelsText(const std::vector<HierarchyLevel>& levels);
} // namespace detail

} // namespace pw::planner
