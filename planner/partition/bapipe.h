// SPDX-License-Identifier: MIT
// BaPipe's balanced-partition steps on a chain of layers over a fixed order of (possibly different) devices.
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
#pragma once

#include <string>
#include <vector>

namespace pw::planner::bapipe {

/// @brief The costs BaPipe balances: stage s runs on the s-th device of the chain (the cluster's order).
/// Prefix sums over layers, so that any contiguous range costs O(1).
struct Chain
{
    int layers = 0;
    int stages = 0;
    std::vector<std::vector<double>> time_prefix; ///< [stage][l]: F+B (+F again with recompute) of layers < l
    std::vector<std::vector<double>> forward_prefix; ///< [stage][l]: F of layers < l
    std::vector<double> weight_prefix; ///< [l]: weight bytes of layers < l
    std::vector<double> stash_prefix; ///< [l]: activation bytes stashed per microbatch
    std::vector<double> optimizer_prefix; ///< [l]: optimizer state bytes
    std::vector<double> cut_bytes; ///< [l]: bytes crossing a cut after layer l, per microbatch
    std::vector<double> capacity; ///< [stage]: memory of its device
    std::vector<int> in_flight; ///< [stage]: microbatches whose activations are stashed at the peak
    std::string kind = "1f1b"; ///< schedule kind for the memory formula (costs.h stageMemoryBytes)
    int microbatches = 1;
    bool recompute = false;

    /// Compute time of layers [first, end) on the device of `stage`.
    double stageTime(int stage, int first, int end) const
    {
        return time_prefix[stage][end] - time_prefix[stage][first];
    }
    double stageForward(int stage, int first, int end) const
    {
        return forward_prefix[stage][end] - forward_prefix[stage][first];
    }
    /// Peak memory of layers [first, end) on the device of `stage` under the schedule's formula.
    double stageMemory(int stage, int first, int end) const;
};

/// Stage s holds layers [cuts[s], cuts[s+1]); cuts[0] = 0, cuts[stages] = layers.
using Cuts = std::vector<int>;

/// Eq. 1: T = 1 / sum_n (1 / T_n), T_n the time of the whole chain on device n.
double idealStageTime(const Chain& chain);

/// Cut positions p in 1..layers-1 (a cut before layer p) that may be used: all of them, or, for the
/// coarse-grained partition, those whose crossing bytes are at most `max_cut_bytes`.
std::vector<char> allowedCuts(const Chain& chain, double max_cut_bytes);

/// Step 1: the speed-proportional greedy cut. Stage n takes layers while its real time approaches T (Eq. 1),
/// ending at the allowed cut whose time is closest to T; the last stage takes the rest. Empty when fewer
/// than stages - 1 cuts are allowed.
Cuts speedProportionalCuts(const Chain& chain, const std::vector<char>& allowed);

/// Memory over capacity, summed over stages (0 when the partition fits).
double memoryExcess(const Chain& chain, const Cuts& cuts);

/// Local search: moves one layer from a stage to another (every boundary in between shifts by one allowed
/// cut; neighbours are the simple boundary move) while that lowers (memory excess when `memory_aware`, then)
/// the stage times sorted from the largest down. Returns the moves made.
int localSearch(const Chain& chain, Cuts& cuts, const std::vector<char>& allowed, bool memory_aware);

/// Exact fallback: the allowed partition minimising the slowest stage with every stage in memory (DP over
/// stages and cut positions, O(stages x cuts^2)). Empty when none fits.
Cuts exactMemoryFit(const Chain& chain, const std::vector<char>& allowed);

/// The slowest stage's compute time.
double maxStageTime(const Chain& chain, const Cuts& cuts);

} // namespace pw::planner::bapipe
