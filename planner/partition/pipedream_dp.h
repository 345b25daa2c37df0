// SPDX-License-Identifier: MIT
// PipeDream's hierarchical dynamic program (SOSP'19 §3.1, paper equations with the digest's errata fixes),
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
// as a pure function on arrays so that tests can compare it with exhaustive search.
#pragma once

#include <functional>
#include <stop_token>
#include <string>
#include <vector>

#include "../cluster.h"
#include "../plan.h"

namespace pw::planner {

/// @brief One DP instance: a chain of layers and a hierarchy of levels.
struct PipeDreamProblem
{
    std::vector<double> compute_s; ///< forward + backward seconds per layer (T_l)
    std::vector<double> weight_bytes; ///< w_l
    std::vector<double> cut_bytes; ///< a_s: bytes crossing a cut after layer s (activations; gradients alike)
    std::vector<HierarchyLevel> levels; ///< innermost first; level 1 components are devices
    bool straight = false; ///< every stage on exactly one worker
    bool per_worker_allreduce = false; ///< 2(m-1)/m |w| / B instead of 2(m-1) |w| / B (errata §2.7 item 3)

    // Optional memory constraint, checked for device-level stages (level 1).
    double memory_capacity_bytes = 0; ///< 0: no constraint
    std::vector<double> activation_bytes; ///< stashed bytes per layer per microbatch
    std::vector<double> optimizer_bytes; ///< optimizer state per layer
    /// Kinds that split the backward: what a microbatch's I keeps for its W per layer (Layer::weight_gradient_bytes,
    /// scaled); empty: none. The check counts it for every stash (stageMemoryBytes' upper bound).
    std::vector<double> weight_gradient_bytes;
    std::string schedule_kind = "pipedream";
    /// > 0: every device-level stage stashes this many microbatches instead of its warm-up count (the zero-bubble
    /// kinds, InFlightLimit::FirstStage: the first stage's count on every stage; the caller bounds it).
    int first_stage_in_flight = 0;
    int microbatches = 1;
    bool recompute = false;
};

struct PipeDreamSolution
{
    bool feasible = false;
    double objective_s = 0; ///< A^L(0 -> N-1, m_L): the slowest stage's time per input
    std::vector<PlanStage> stages; ///< device-level stages, devices numbered level by level from 0
};

struct PipeDreamSolveOptions
{
    bool prune = true; ///< false: the textbook recurrence over every row and every split (for tests, baselines)
    /// How the top level is solved when pruning: Automatic takes the threshold search from
    /// kThresholdSearchWorkers workers on. The threshold search does not model the position-dependent memory
    /// rule, so a one-level problem with a memory capacity always uses the table.
    enum class TopLevel { Automatic, Table, Threshold };
    TopLevel top_level = TopLevel::Automatic;
    std::function<void(double)> progress;
    std::stop_token stop;
};

/// Top levels with at least this many workers are solved by the threshold search (Automatic).
constexpr int kThresholdSearchWorkers = 64;

/// Exact optimum of the recurrence. With pruning only the top level's first row is solved and every split
/// search is confined by monotone lower bounds (compute / workers on each side), so the result is the
/// same value the textbook recurrence gives. A large top level is instead solved over worker counts by
/// bisection on the bottleneck (see pipedream_dp.cpp), with the same optimum. Sets `cancelled` when the stop
/// token fires.
PipeDreamSolution solvePipeDream(
    const PipeDreamProblem& problem, const PipeDreamSolveOptions& options, bool* cancelled = nullptr);

} // namespace pw::planner
