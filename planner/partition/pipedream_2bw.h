// SPDX-License-Identifier: MIT
// PipeDream-2BW's planner (Narayanan's dissertation Ch. 3, D:1144-1239): the closed-form throughput and memory
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
// cost functions it searches with, exposed for tests and for the design notes (docs/algorithms/pipedream-2bw.md).
#pragma once

#include <vector>

namespace pw::planner::twobw {

/// @brief One stage of a candidate configuration as the closed-form model sees it (seconds per microbatch).
struct StageCost
{
    double compute_s = 0; ///< T_i^comp(b): forward + backward (+ the recomputed forward) of the stage
    double comm_s = 0; ///< sum_j T^comm_{j->i}(b): 2 |A^{inp.+out.}(b)| / in-pipeline bandwidth
    double allreduce_s = 0; ///< T_i^comm(b): ring all-reduce of the stage's weights over its d replicas
};

/// D:1197-1205, cases 2 and 3: time per microbatch of a pipelined execution,
/// max_i max(T_i^comp + sum_j T^comm_{j->i}, T_i^comm / m). Throughput = d b / t.
double pipelinedTime(const std::vector<StageCost>& stages, int microbatches_per_sync);

/// D:1191-1195, case 1: time per microbatch without pipelining, sum_i max(T_i^comp + sum_j T^comm_{j->i},
/// T_i^comm / m).
double unpipelinedTime(const std::vector<StageCost>& stages, int microbatches_per_sync);

/// Bubble overhead of a flushed pipeline (PipeDream-Flush, GPipe): (p - 1) / m (digest §3.7, §4.2 note).
double flushBubble(int depth, int microbatches);

/// D:1235 (2BW without recomputation): 2|W|/p + p |A^total(b)|/p + p |A^input(b)|, and D:1239 (with
/// recomputation): 2|W|/p + |A^total(b)|/p + p |A^input(b)|. `input_term` false drops the p |A^input| of the
/// first formula, which the digest (§4.3) reads as double counting.
double paperMemoryBytes(double weight_bytes, double activation_total_bytes, double activation_input_bytes, int depth,
    bool recompute, bool input_term = true);

/// Ring all-reduce volume per worker: 2 (d - 1) / d x bytes (digest §4.2 [derived]).
double ringAllReduceBytes(double bytes, int workers);

} // namespace pw::planner::twobw
