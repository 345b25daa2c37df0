// SPDX-License-Identifier: MIT
// MadPipe (Beaumont, Eyraud-Dubois, Shilova): the 1F1B* periodic schedule, the memory-aware phase-1 DP and its
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
// outer bisection (Algorithm 1), on a chain of layers over identical GPUs (docs/algorithms/madpipe.md).
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <vector>

#include "partitioner.h"

namespace pw::planner::madpipe {

/// A time or a size no plan reaches.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

/// Whether `need` bytes fit in `capacity`: with a relative slack of 1e-12 and 1e-9 bytes, since sizes are sums of
/// prefix differences that round.
inline bool fitsIn(double need, double capacity)
{
    return need <= capacity * (1 + 1e-12) + 1e-9;
}

/// @brief The chain MadPipe plans: per-layer costs as prefix sums, so that any range [first, end) costs O(1).
/// Times in seconds, sizes in bytes, all per microbatch. Layers are 0-based; the paper's layer l is index l-1.
struct Chain
{
    int layers = 0;
    std::vector<double> forward_prefix; ///< [l]: forward time of layers < l
    std::vector<double> backward_prefix; ///< [l]: backward time of layers < l (+ forward again with recompute)
    std::vector<double> weight_prefix; ///< [l]: W of layers < l
    std::vector<double> optimizer_prefix; ///< [l]: optimizer state of layers < l (the paper has none: SGD)
    std::vector<double> stash_prefix; ///< [l]: activation bytes a batch keeps for its backward, layers < l
    std::vector<double> cut_bytes; ///< [l]: bytes crossing a cut after layer l (a_l of the paper)
    double capacity = 0; ///< M: memory of one GPU
    double bandwidth = 0; ///< beta, bytes per second (0 or less: transfers take forever)
    double latency = 0; ///< per transfer
    bool recompute = false; ///< stash only the stage input, keep one full working set during a backward
    bool comm_buffers = true; ///< count the paper's 2 a buffers on both sides of every cut

    /// U(first..end-1) = sum of u_F + u_B.
    double load(int first, int end) const
    {
        return forward_prefix[end] - forward_prefix[first] + backward_prefix[end] - backward_prefix[first];
    }
    double forward(int first, int end) const { return forward_prefix[end] - forward_prefix[first]; }
    double backward(int first, int end) const { return backward_prefix[end] - backward_prefix[first]; }
    /// One-way transfer time of the activation crossing the cut before layer `first` (first >= 1).
    double transfer(int first) const;
    /// C of the cut before layer `first`: forward and backward transfer, 0 for first = 0 (no cut).
    double comm(int first) const { return first <= 0 ? 0.0 : 2 * transfer(first); }
    /// The paper's M(k, l, g): 3W (two versions + accumulated gradient) + optimizer state + g stashed
    /// activations (+ one working set with recomputation) + 2a buffers at each cut. `g` may be 0 (phase 1's
    /// special-GPU under-estimate for a lone stage).
    double memory(int first, int end, int g) const;
    /// memory() without the buffers: never decreases when the range grows or g grows (searches stop on it).
    double memoryFloor(int first, int end, int g) const;
};

/// The group-aware delay operator: x + y when it stays inside x's group of length T, else T ceil(x/T) + y.
double oplus(double x, double y, double period);
/// ceil(x / T), robust to rounding (x a hair above a multiple of T counts as that multiple).
int groupOf(double x, double period);

/// @brief 1F1B* for a contiguous allocation: the transformed chain (stage, cut, stage, ..., stage: each cut a
/// pseudo-stage with U_F = U_B = transfer time) and its grouping at a period.
struct StarChain
{
    std::vector<double> forward; ///< per element of the transformed chain
    std::vector<double> backward;
    std::vector<int> stage_of; ///< element -> stage index, -1 for a communication pseudo-stage
};

/// Stage s holds layers [cuts[s], cuts[s+1]); cuts[0] = 0, cuts.back() = layers.
using Cuts = std::vector<int>;

StarChain starChain(const Chain& chain, const Cuts& cuts);
/// Group index of every element (1 = the group holding the last element), walking from the end and adding
/// elements while the group's total U stays <= T [M:117].
std::vector<int> starGroups(const std::vector<double>& loads, double period);

/// @brief The periodic pattern of 1F1B* [M:117-127]: per element, start time in [0, T) and index shift
/// of its F and B (in period k the op starts at kT + t and processes batch k - h).
struct StarPattern
{
    double period = 0;
    std::vector<int> group;
    std::vector<double> forward_start, backward_start;
    std::vector<int> forward_shift, backward_shift;
};

/// Builds the pattern; requires T >= max element load. All forwards form one chain from t = 0 (shift 0);
/// group g's backwards follow its last forward with shift g - 1; then times are wrapped into [0, T).
StarPattern starPattern(const std::vector<double>& forward, const std::vector<double>& backward, double period);

/// @brief The smallest valid 1F1B* period of a contiguous allocation and the stored activations per stage.
struct StarPeriod
{
    double period = 0;
    std::vector<int> in_flight; ///< per stage: its group index = activations it stores
};

/// Scans the breakpoints (contiguous sums of the transformed chain) for the least T >= max load at which every
/// stage fits memory with its group index [M:127]; nullopt when none does (even one group overflows).
std::optional<StarPeriod> minimalStarPeriod(const Chain& chain, const Cuts& cuts);

/// Thrown inside the searches when the stop token fires.
using Cancelled = PartitionCancelled;

/// Exact search over contiguous allocations of at most `gpus` stages for the least valid 1F1B* period:
/// bisection on T with an O(gpus L^2) feasibility DP keeping, per (layers placed from the end, stages used),
/// the least delay V (smaller V never needs more memory). nullopt when nothing fits.
std::optional<Cuts> bestContiguous(const Chain& chain, int gpus, std::stop_token stop);

/// @brief Phase 1's discretisation and Algorithm 1's settings [M:207-233, M:260].
struct Phase1Settings
{
    int t_grid = 101; ///< values of t_P in [0, U(1,L)]
    int m_grid = 11; ///< values of m_P in [0, M]
    int v_grid = 51; ///< values of V in [0, U(1,L) + sum C]
    bool v_round_up = true; ///< V rounded up (over-estimates g: safe for memory) or down
    int iterations = 10; ///< K
    bool literal_lb_update = false; ///< the printed lb <- max(lb, min(T_i, T~_i)) (digest §3.4 ERR)
};

/// @brief One stage of a phase-1 allocation: on its own ("normal") GPU or on the shared special GPU.
struct Phase1Stage
{
    int first = 0;
    int end = 0;
    bool special = false;
};

struct Phase1Allocation
{
    std::vector<Phase1Stage> stages; ///< in chain order
    double period = 0; ///< MadPipe-DP's value for it
};

/// MadPipe-DP(T^): T(L, P-1, 0, 0, 0) [M:181-203] with the corrected C(k-1). Returns the optimum when it is
/// below `bound`, else a value >= bound (infinity when infeasible); `allocation` is filled when below bound.
/// `guess` (optional) is where the internal bound starts; it changes the work done, never the result.
double phase1Dp(const Chain& chain, int gpus, double target_period, const Phase1Settings& settings, double bound,
    Phase1Allocation* allocation, std::stop_token stop, long long* states = nullptr, double guess = 0);

/// @brief One step of Algorithm 1.
struct Algorithm1Step
{
    double target = 0; ///< T^_i
    double dp = 0; ///< T_i (infinity: infeasible, or not below ub when `exact` is false)
    bool exact = true; ///< dp is MadPipe-DP's value (false: only known to be >= the ub of that step)
    double lb = 0, ub = 0; ///< after the update
};

struct Algorithm1Result
{
    std::vector<Algorithm1Step> steps;
    std::optional<Phase1Allocation> best; ///< the allocation of min_i T~_i
    double best_period = 0; ///< min_i max(T_i, T^_i)
    double best_target = 0; ///< its T^
    bool diverged = false; ///< the literal update made lb infinite
    long long states = 0; ///< DP states evaluated, all iterations
};

/// Algorithm 1: lb = U(1,L)/P, ub = U(1,L) + sum_{i=1}^{L-1} C(i), T^_1 = lb, K bisection steps.
Algorithm1Result algorithm1(const Chain& chain, int gpus, const Phase1Settings& settings, std::stop_token stop,
    const std::function<void(double)>& progress = {});

} // namespace pw::planner::madpipe
