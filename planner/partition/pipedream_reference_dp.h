// SPDX-License-Identifier: MIT
// The dynamic program of PipeDream's optimizer_graph_hierarchical.py over antichain states, level by level.
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <vector>

#include "antichain_dag.h"

namespace pw::planner {

/// @brief One level of the reference optimizer's hierarchy (innermost first): workers and their link.
struct ReferenceLevel
{
    int machines = 1;
    double bandwidth_bytes_per_s = 0;
};

struct ReferenceDpSettings
{
    bool straight = false; ///< --straight_pipeline
    std::optional<double> memory_bytes; ///< --use_memory_constraint with -s memory_bytes
    std::optional<double> activation_compression_ratio; ///< absent: stage-to-stage traffic is ignored
};

/// @brief Per-state sums over P(i), the nodes at or before the cut of state i (§1.2 item 3).
struct ReferenceStateCosts
{
    std::vector<double> compute_s; ///< C[i] = Σ (fwd + bwd) / 1000
    std::vector<double> activation_bytes; ///< Act[i]
    std::vector<double> parameter_bytes; ///< W[i]
    std::vector<double> output_bytes; ///< out[i]: activations of the augmented antichain
};

/// @brief A stage at the innermost level: states first..last (inclusive) on device offsets
/// (level-major: offset = Σ worker index × devices per worker of that level).
struct ReferenceStage
{
    int first_state = 0;
    int last_state = 0;
    std::vector<int> devices;
};

/// @brief §2.3/§2.4 of docs/papers/pipedream-reference-optimizer.md: A(a, j, r) per level, every row a
/// at lower levels and a = 0 at the top, with the reference's cost terms and quirks kept as written.
///
/// Rows of a level are independent, so lower levels are solved in blocks of rows keeping only A(a, j, M),
/// and a row's split pointers are recomputed when the plan is reconstructed. The last stage's cost for a
/// split (k, j) does not depend on the row, so it is computed once per block. Ancestors k < a cannot
/// contribute to row a (A(a, k, ·) is None there), which also makes the reference's `k ∈ anc(a−1)` test
/// redundant. Candidates whose last stage alone is no better than the best found are skipped (exactly:
/// their time could only tie or lose, and the reference keeps the first of equal times).
class ReferenceDp
{
public:
    ReferenceDp(const AntichainDag& dag, ReferenceStateCosts costs, std::vector<ReferenceLevel> levels,
        ReferenceDpSettings settings);

    /// Number of innermost candidate evaluations before pruning: the size of the problem.
    static double estimatedWork(const AntichainDag& dag, const std::vector<ReferenceLevel>& levels, bool straight);

    /// Returns false when stopped. Progress in [0, 1].
    bool solve(const std::function<void(double)>& progress, std::stop_token stop);
    /// "Time per stage in pipeline": seconds per minibatch of the bottleneck; nullopt when infeasible.
    std::optional<double> objective() const;
    /// The innermost stages in pipeline order (after a feasible solve).
    std::vector<ReferenceStage> stages() const;

private:
    struct Pointer
    {
        std::int32_t split = -1; ///< last state of the prefix, -1 for a single (replicated) stage
        std::int16_t prefix_index = 0; ///< m of the prefix (workers - 1)
        std::int16_t machines = 1; ///< workers of the last stage
    };

    double range(const std::vector<double>& prefix, int a, int j) const
    {
        return a == 0 ? prefix[j] : prefix[j] - prefix[a - 1];
    }
    double levelTime(int level, int a, int j) const;
    /// Rows first..first+count-1 of a level into `value` (row-major: row, state j, m). Pointers only for
    /// a single row. Returns false when stopped.
    bool solveRows(int level, int first, int count, std::vector<double>& value, std::vector<Pointer>* pointers,
        std::stop_token stop = {}) const;
    /// (first state, last state, workers) of the stages of row `start` ending at state end-1.
    std::vector<std::array<int, 3>> split(int level, int start, int end) const;
    void flatten(int level, int start, int end, const std::vector<int>& units, std::vector<ReferenceStage>& out) const;

    const AntichainDag& m_dag;
    ReferenceStateCosts m_costs;
    std::vector<ReferenceLevel> m_levels;
    ReferenceDpSettings m_settings;
    int m_states = 0;
    std::vector<std::vector<double>> m_levelTimes; ///< [level] (N+1) x N: A of the level below, for level >= 1
    std::vector<double> m_topValue;
    std::vector<Pointer> m_topPointers;
};

} // namespace pw::planner
