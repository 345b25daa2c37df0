// SPDX-License-Identifier: MIT
// PipeDream's hierarchical DP, exact, with bounded split searches.
//
// Recurrence per level k (digest §2.3/§2.6, fix #2 included):
//   T(i,j,m) = max(Aprev(i,j), sync(i,j,m)) / m
//   A(i,j,1) = Aprev(i,j);  A(i,j,m) = min(T(i,j,m), min_{s,m'} max(A(i,s,m-m'), 2 a_s / B_k, T(s+1,j,m')))
// Structure used for speed, without changing the optimum:
//  * A(i,.,.) only refers to the same row i, so the top level needs row 0 alone; lower levels need
//    A(i,j,m_k) for all i <= j (kept as an N x N matrix).
//  * For fixed (i,j,m,m'), A(i,s,m-m') >= C(i..s) / (cap (m-m')) grows with s and T(s+1,j,m') >=
//    max(C(s+1..j) / (cap m'), sync(s+1..j,m') / m') shrinks with s (cap = devices per worker). The split
//    search starts where the two bounds cross and walks outwards in order of increasing bound, stopping
//    when the bound reaches the best value found: every skipped split is provably no better.
//  * A top level of thousands of workers (2,048 nodes, or 16,384 devices planned flat) makes even the pruned
//    row cost O(N M^2) split searches. There the optimum is found by bisection on the bottleneck tau instead:
//    a stage i..j on r workers costs max(A_prev(i,j), sync(i,j,r)) / r, whose compute part falls and whose
//    sync part rises with r, so the counts within tau form at most two intervals (one, except with the
//    per-worker all-reduce). Workers are interchangeable, so a feasibility check needs only the set of worker
//    totals that can cover each prefix (a union of intervals), and "is M in the set for the whole chain?".
//    Both the bound and the costs are evaluated with the same floating-point expressions as the table, so
//    the smallest feasible double is exactly the table's optimum.
#include "pipedream_dp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "../costs.h"

namespace pw::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Lower bounds are shrunk by this factor so that rounding can never prune a split that ties the optimum.
constexpr double kBoundSlack = 1.0 - 1e-12;

struct Arg
{
    std::int32_t split = -1; ///< -1: no split (m == 1, or the whole range replicated)
    std::int32_t last_workers = 0;
};

/// Worker counts lo..hi (inclusive).
struct Span
{
    int lo = 0, hi = 0;
};

/// A(i, j, m) for one row i at one level: j in [i, N), m in [1, M].
struct Row
{
    int i = 0;
    int M = 0;
    std::vector<double> value;
    std::vector<Arg> arg;
    double& at(int j, int m) { return value[static_cast<std::size_t>(j - i) * M + (m - 1)]; }
    double at(int j, int m) const { return value[static_cast<std::size_t>(j - i) * M + (m - 1)]; }
    Arg& argAt(int j, int m) { return arg[static_cast<std::size_t>(j - i) * M + (m - 1)]; }
    Arg argAt(int j, int m) const { return arg[static_cast<std::size_t>(j - i) * M + (m - 1)]; }
};

class Solver
{
public:
    Solver(const PipeDreamProblem& p, const PipeDreamSolveOptions& o)
        : m_p(p)
        , m_o(o)
        , m_n(static_cast<int>(p.compute_s.size()))
        , m_levels(static_cast<int>(p.levels.size()))
    {
        auto prefix = [&](const std::vector<double>& v) {
            std::vector<double> out(m_n + 1, 0.0);
            for (int l = 0; l < m_n; ++l)
                out[l + 1] = out[l] + (l < static_cast<int>(v.size()) ? v[l] : 0.0);
            return out;
        };
        if (p.memory_capacity_bytes > 0) // the memory rules of the schedule's kind (throws for an unknown one)
            m_traits = scheduleTraits(p.schedule_kind);
        m_cpre = prefix(p.compute_s);
        m_wpre = prefix(p.weight_bytes);
        m_apre = prefix(p.activation_bytes);
        m_gpre = prefix(p.weight_gradient_bytes);
        m_opre = prefix(p.optimizer_bytes);
        m_cap.assign(m_levels + 1, 1);
        for (int k = 1; k <= m_levels; ++k)
            m_cap[k] = m_cap[k - 1] * (k == 1 ? 1 : p.levels[k - 2].count);
        m_full.resize(m_levels + 1);
    }

    bool cancelled() const { return m_cancelled; }

    PipeDreamSolution solve()
    {
        PipeDreamSolution sol;
        if (m_n == 0 || m_levels == 0)
            return sol;
        double total = 0, done = 0;
        for (int k = 1; k <= m_levels; ++k)
            total += k < m_levels || !m_o.prune ? m_n : 1;
        for (int k = 1; k < m_levels; ++k) {
            // Lower levels: every row, keeping A(i, j, m_k) for the level above. Rows are independent, so
            // they are shared out among threads; the calling thread reports progress.
            m_full[k].assign(static_cast<std::size_t>(m_n) * m_n, kInf);
            std::atomic<int> next {0}, finished {0};
            auto work = [&](bool reporter) {
                for (int i = next++; i < m_n && !m_cancelled; i = next++) {
                    Row row = solveRow(k, i);
                    for (int j = i; j < m_n && !m_cancelled; ++j)
                        m_full[k][static_cast<std::size_t>(i) * m_n + j] = row.at(j, levelSize(k));
                    ++finished;
                    if (reporter)
                        report((done + finished) / total);
                }
            };
            const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
            std::vector<std::thread> pool;
            for (int t = 1; t < std::min(threads, m_n); ++t)
                pool.emplace_back(work, false);
            work(true);
            for (auto& t : pool)
                t.join();
            if (m_cancelled)
                return sol;
            done += m_n;
        }
        const int top = m_levels;
        if (useThreshold(top)) {
            solveByThreshold(top, done, total, sol);
            return sol;
        }
        if (!m_o.prune) {
            // Textbook: the top level solves every row as the paper's pseudocode does.
            for (int i = m_n - 1; i > 0; --i) {
                solveRow(top, i);
                if (m_cancelled)
                    return sol;
                report(++done / total);
            }
        }
        Row row = solveRow(top, 0);
        if (m_cancelled)
            return sol;
        report(1.0);
        sol.objective_s = row.at(m_n - 1, levelSize(top));
        sol.feasible = std::isfinite(sol.objective_s);
        if (sol.feasible)
            sol.stages = expand(top, 0, m_n - 1, levelSize(top), 0, &row);
        return sol;
    }

private:
    int levelSize(int k) const { return m_p.levels[k - 1].count; }
    double bandwidth(int k) const { return m_p.levels[k - 1].bandwidth_bytes_per_s; }

    void report(double fraction)
    {
        if (m_o.progress)
            m_o.progress(std::min(1.0, fraction));
    }

    double compute(int i, int j) const { return m_cpre[j + 1] - m_cpre[i]; }
    double weights(int i, int j) const { return m_wpre[j + 1] - m_wpre[i]; }

    /// A^{k-1}(i, j, m_{k-1}): level 0 is one device running the range.
    double below(int k, int i, int j) const
    {
        if (k == 1)
            return compute(i, j);
        return m_full[k - 1][static_cast<std::size_t>(i) * m_n + j];
    }

    double sync(int k, int i, int j, int m) const
    {
        if (m <= 1)
            return 0;
        double bw = bandwidth(k);
        double w = weights(i, j);
        if (w == 0)
            return 0;
        if (!(bw > 0))
            return kInf;
        double bytes = 2.0 * (m - 1) * w;
        if (m_p.per_worker_allreduce)
            bytes /= m;
        return bytes / bw;
    }

    double comm(int k, int s) const
    {
        double a = s < static_cast<int>(m_p.cut_bytes.size()) ? m_p.cut_bytes[s] : 0.0;
        if (a == 0)
            return 0;
        double bw = bandwidth(k);
        return bw > 0 ? 2.0 * a / bw : kInf;
    }

    /// Device-level stage i..j on `replicas` devices with `inFlight` microbatches stashed: fits memory?
    bool fits(int k, int i, int j, int replicas, int inFlight) const
    {
        if (k != 1 || !(m_p.memory_capacity_bytes > 0))
            return true;
        StageMemoryInput in;
        in.weight_bytes = weights(i, j);
        in.activation_bytes = m_apre[j + 1] - m_apre[i];
        in.input_bytes = i > 0 && i - 1 < static_cast<int>(m_p.cut_bytes.size()) ? m_p.cut_bytes[i - 1] : 0;
        in.optimizer_bytes = m_opre[j + 1] - m_opre[i];
        if (!m_gpre.empty() && j + 1 < static_cast<int>(m_gpre.size()))
            in.weight_gradient_bytes = m_gpre[j + 1] - m_gpre[i];
        in.in_flight = m_p.first_stage_in_flight > 0
            ? m_p.first_stage_in_flight
            : inFlight * m_traits.in_flight_factor; // 1F1B-SO keeps twice the warm-up in flight
        in.microbatches = (m_p.microbatches + replicas - 1) / replicas;
        in.recompute = m_p.recompute;
        return stageMemoryBytes(m_traits, in) <= m_p.memory_capacity_bytes;
    }

    /// T^k(i, j, m) for a last stage of a sub-pipeline using `used` workers of the level's M.
    double stage(int k, int i, int j, int m, int used) const
    {
        const int M = levelSize(k);
        int inFlight = (M - used + m + m - 1) / m; // ceil(workers from this stage on / replicas)
        if (!fits(k, i, j, m, inFlight))
            return kInf;
        return std::max(below(k, i, j), sync(k, i, j, m)) / m;
    }

    /// A(i, j, m) for j in [i, upTo] (upTo < 0: to the last layer).
    Row solveRow(int k, int i, int upTo = -1)
    {
        const int M = levelSize(k);
        Row row;
        row.i = i;
        row.M = M;
        row.value.assign(static_cast<std::size_t>(m_n - i) * M, kInf);
        row.arg.assign(row.value.size(), {});
        const double capk = static_cast<double>(m_cap[k]);
        const int end = upTo < 0 ? m_n : upTo + 1;
        for (int j = i; j < end; ++j) {
            if (m_o.stop.stop_requested()) {
                m_cancelled = true;
                return row;
            }
            for (int m = 1; m <= M; ++m) {
                double best;
                Arg arg;
                if (m == 1) {
                    best = fits(k, i, j, 1, M) ? below(k, i, j) : kInf;
                } else {
                    best = m_p.straight ? kInf : stage(k, i, j, m, m);
                    const int maxLast = m_p.straight ? 1 : m - 1;
                    for (int last = 1; last <= maxLast; ++last) {
                        const int q = m - last;
                        if (m_o.prune)
                            searchPruned(k, row, i, j, m, last, q, capk, best, arg);
                        else
                            searchAll(k, row, i, j, m, last, q, best, arg);
                    }
                }
                row.at(j, m) = best;
                row.argAt(j, m) = arg;
            }
        }
        return row;
    }

    double candidate(int k, const Row& row, int s, int j, int m, int last, int q) const
    {
        return std::max({row.at(s, q), comm(k, s), stage(k, s + 1, j, last, m)});
    }

    void searchAll(int k, const Row& row, int i, int j, int m, int last, int q, double& best, Arg& arg) const
    {
        for (int s = i; s < j; ++s) {
            double v = candidate(k, row, s, j, m, last, q);
            if (v < best) {
                best = v;
                arg = {s, last};
            }
        }
    }

    void searchPruned(
        int k, const Row& row, int i, int j, int m, int last, int q, double capk, double& best, Arg& arg) const
    {
        if (j <= i)
            return;
        auto lbLeft = [&](int s) { return compute(i, s) / (capk * q) * kBoundSlack; };
        auto lbRight = [&](int s) {
            return std::max(compute(s + 1, j) / (capk * last), sync(k, s + 1, j, last) / last) * kBoundSlack;
        };
        // First split where the left bound reaches the right one (left grows, right shrinks with s).
        int lo = i, hi = j;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (lbLeft(mid) >= lbRight(mid))
                hi = mid;
            else
                lo = mid + 1;
        }
        int left = lo - 1, right = lo;
        while (left >= i || right < j) {
            double boundLeft = left >= i ? lbRight(left) : kInf;
            double boundRight = right < j ? lbLeft(right) : kInf;
            int s;
            double bound;
            if (boundLeft <= boundRight) {
                s = left--;
                bound = boundLeft;
            } else {
                s = right++;
                bound = boundRight;
            }
            if (bound >= best)
                break;
            if (comm(k, s) >= best || row.at(s, q) >= best)
                continue;
            double v = candidate(k, row, s, j, m, last, q);
            if (v < best) {
                best = v;
                arg = {s, last};
            }
        }
    }

    bool useThreshold(int top) const
    {
        using TopLevel = PipeDreamSolveOptions::TopLevel;
        if (!m_o.prune || m_o.top_level == TopLevel::Table)
            return false;
        if (top == 1 && m_p.memory_capacity_bytes > 0) // in-flight counts depend on the workers after a stage
            return false;
        return m_o.top_level == TopLevel::Threshold || levelSize(top) >= kThresholdSearchWorkers;
    }

    /// Sync part of a stage's cost, sync(r) / r, as stage() computes it.
    double syncShare(int k, int i, int j, int r) const { return sync(k, i, j, r) / r; }

    /// Smallest r in [1, M] with value / r <= tau (value / M <= tau holds).
    static int fewestWithin(double value, double tau, int M)
    {
        if (value / 1 <= tau)
            return 1;
        const double guess = std::ceil(value / tau);
        int r = guess >= M ? M : std::max(1, static_cast<int>(guess));
        while (r < M && value / r > tau)
            ++r;
        while (r > 1 && value / (r - 1) <= tau)
            --r;
        return r;
    }

    /// Worker counts r of [1, M] whose stage i..j costs at most tau at level k: up to two spans, ascending.
    /// The compute part max(...)/r falls with r (r >= lo); the sync part rises with r (r <= hi), or with the
    /// per-worker all-reduce falls from r = 2 on (r == 1 or r >= r*).
    int countsWithin(int k, int i, int j, double tau, int M, Span out[2]) const
    {
        const double b = below(k, i, j);
        if (!(b / M <= tau))
            return 0;
        int lo = fewestWithin(b, tau, M);
        if (m_p.straight) {
            if (lo > 1)
                return 0;
            out[0] = {1, 1};
            return 1;
        }
        if (!m_p.per_worker_allreduce) {
            int hi = M;
            if (syncShare(k, i, j, M) > tau) {
                // 2 (r-1) w / (B r) <= tau  <=>  r <= 1 / (1 - tau B / 2w): a guess, corrected by the true costs.
                const double w = weights(i, j), bw = bandwidth(k);
                const double x = w > 0 && bw > 0 ? tau * bw / (2.0 * w) : 0.0;
                const double guess = x < 1 ? std::floor(1.0 / (1.0 - x)) : M;
                hi = guess >= M ? M - 1 : std::max(1, static_cast<int>(guess));
                while (hi > 1 && syncShare(k, i, j, hi) > tau)
                    --hi;
                while (hi + 1 < M && syncShare(k, i, j, hi + 1) <= tau)
                    ++hi;
            }
            if (lo > hi)
                return 0;
            out[0] = {lo, hi};
            return 1;
        }
        // Per-worker: sync(r) / r = 2 (r-1) w / (B r^2) is 0 at r = 1 and falls from r = 2 on.
        int n = 0;
        if (lo == 1)
            out[n++] = {1, 1};
        if (M >= 2 && syncShare(k, i, j, M) <= tau) {
            int a = 2, z = M; // smallest r >= 2 within tau
            while (a < z) {
                const int mid = a + (z - a) / 2;
                if (syncShare(k, i, j, mid) <= tau)
                    z = mid;
                else
                    a = mid + 1;
            }
            const int from = std::max(a, std::max(lo, 2));
            if (from <= M) {
                if (n > 0 && from == 2)
                    out[0].hi = M;
                else
                    out[n++] = {from, M};
            }
        }
        return n;
    }

    /// True when no stage that starts at i or earlier and ends at j can cost tau or less: the compute lower
    /// bound (exact at level 1) and the weights only grow as the stage grows, so the search stops there.
    bool hopeless(int k, int i, int j, double tau, int M) const
    {
        const double lb = k == 1 ? compute(i, j) : compute(i, j) / static_cast<double>(m_cap[k]) * kBoundSlack;
        if (!(lb / M <= tau))
            return true;
        const int lo = fewestWithin(lb, tau, M);
        if (lo == 1 || m_p.per_worker_allreduce)
            return m_p.per_worker_allreduce && lo > 1 && syncShare(k, i, j, M) > tau;
        return m_p.straight || syncShare(k, i, j, lo) > tau;
    }

    /// Worker totals that can run layers 0..j at level k with every stage and cut within tau, for every j:
    /// sets[j + 1] (sets[0] = {0}). False when cancelled.
    bool coverable(int k, double tau, std::vector<std::vector<Span>>& sets)
    {
        const int M = levelSize(k);
        sets.assign(m_n + 1, {});
        sets[0] = {{0, 0}};
        std::vector<Span> acc;
        Span spans[2];
        for (int j = 0; j < m_n; ++j) {
            if (m_o.stop.stop_requested()) {
                m_cancelled = true;
                return false;
            }
            acc.clear();
            for (int s = j - 1; s >= -1; --s) { // last stage s+1..j after the prefix 0..s
                if (hopeless(k, s + 1, j, tau, M))
                    break;
                const auto& prefix = sets[s + 1];
                if (prefix.empty() || (s >= 0 && comm(k, s) > tau))
                    continue;
                const int n = countsWithin(k, s + 1, j, tau, M, spans);
                for (int q = 0; q < n; ++q)
                    for (const Span& f : prefix)
                        if (f.lo + spans[q].lo <= M)
                            acc.push_back({f.lo + spans[q].lo, std::min(M, f.hi + spans[q].hi)});
            }
            std::sort(acc.begin(), acc.end(), [](Span a, Span b) { return a.lo < b.lo; });
            auto& out = sets[j + 1];
            for (const Span& sp : acc)
                if (!out.empty() && sp.lo <= out.back().hi + 1)
                    out.back().hi = std::max(out.back().hi, sp.hi);
                else
                    out.push_back(sp);
        }
        return true;
    }

    static bool contains(const std::vector<Span>& set, int w)
    {
        for (const Span& sp : set)
            if (sp.lo <= w && w <= sp.hi)
                return true;
        return false;
    }

    /// The top level by bisection on the bottleneck over the doubles' ordering: the smallest tau for which
    /// every worker is placed with every stage and cut within tau is the recurrence's optimum, because the
    /// optimum is the cost of one such placement and no placement has all costs below it.
    void solveByThreshold(int k, double done, double total, PipeDreamSolution& sol)
    {
        const int M = levelSize(k);
        std::vector<std::vector<Span>> sets;
        auto feasible = [&](double tau) { return coverable(k, tau, sets) && contains(sets[m_n], M); };
        auto bits = [](double v) {
            std::uint64_t u;
            std::memcpy(&u, &v, sizeof u);
            return u;
        };
        auto value = [](std::uint64_t u) {
            double v;
            std::memcpy(&v, &u, sizeof v);
            return v;
        };
        // Positive doubles order as their bit patterns; search (lo, hi] with hi feasible.
        std::uint64_t lo = bits(0.0), hi = bits(std::numeric_limits<double>::max());
        if (!feasible(0.0)) {
            if (m_cancelled || !feasible(value(hi)))
                return; // infeasible (or cancelled): no finite-cost placement
            int steps = 0;
            while (hi - lo > 1) {
                const std::uint64_t mid = lo + (hi - lo) / 2;
                if (feasible(value(mid)))
                    hi = mid;
                else if (m_cancelled)
                    return;
                else
                    lo = mid;
                report((done + std::min(1.0, ++steps / 64.0)) / total);
            }
        } else {
            hi = lo;
        }
        const double tau = value(hi);
        if (!feasible(tau))
            return;
        report(1.0);
        // Walk back from the last layer: the longest last stage whose worker count leaves a coverable rest.
        std::vector<LevelStage> stages;
        int j = m_n - 1, W = M;
        Span spans[2];
        while (j >= 0) {
            bool placed = false;
            for (int s = -1; s < j && !placed; ++s) {
                if (s >= 0 && comm(k, s) > tau)
                    continue;
                const int n = countsWithin(k, s + 1, j, tau, M, spans);
                for (int q = 0; q < n && !placed; ++q)
                    for (const Span& f : sets[s + 1]) {
                        const int r = std::max(spans[q].lo, W - f.hi);
                        if (r <= std::min(spans[q].hi, W - f.lo)) {
                            stages.push_back({s + 1, j, r});
                            j = s;
                            W -= r;
                            placed = true;
                            break;
                        }
                    }
            }
            if (!placed)
                return; // cannot happen: sets[j + 1] contains W
        }
        std::reverse(stages.begin(), stages.end());
        double objective = 0;
        int used = 0;
        for (std::size_t q = 0; q < stages.size(); ++q) {
            used += stages[q].workers;
            objective = std::max(objective, stage(k, stages[q].a, stages[q].b, stages[q].workers, used));
            if (q + 1 < stages.size())
                objective = std::max(objective, comm(k, stages[q].b));
        }
        sol.objective_s = objective;
        sol.feasible = std::isfinite(objective);
        if (sol.feasible)
            sol.stages = expandStages(k, stages, 0);
    }

    /// One stage of level k: layers a..b on `workers` level-k workers.
    struct LevelStage
    {
        int a, b, workers;
    };

    /// Device-level stages of A^k(first..last, m), workers numbered from `base` in level-k units.
    std::vector<PlanStage> expand(int k, int first, int last, int m, int base, const Row* solved)
    {
        if (k == 0)
            return {PlanStage {first, last, {base}}};
        Row local;
        if (!solved || solved->i != first) {
            local = solveRow(k, first, last); // later columns are not needed for this stage
            solved = &local;
        }
        // Unroll into this level's stages (first to last), each with its worker count.
        std::vector<LevelStage> levelStages;
        int j = last, mm = m;
        while (mm > 0) {
            Arg a = solved->argAt(j, mm);
            if (a.split < 0) {
                levelStages.push_back({first, j, mm});
                break;
            }
            levelStages.push_back({a.split + 1, j, a.last_workers});
            j = a.split;
            mm -= a.last_workers;
        }
        std::reverse(levelStages.begin(), levelStages.end());
        return expandStages(k, levelStages, base);
    }

    /// Device-level stages of level-k stages, workers numbered from `base` in level-k units.
    std::vector<PlanStage> expandStages(int k, const std::vector<LevelStage>& levelStages, int base)
    {
        std::vector<PlanStage> out;
        int offset = 0;
        const int inner = k == 1 ? 1 : levelSize(k - 1);
        for (const auto& ls : levelStages) {
            // Every worker of a level stage runs the same inner pipeline: solve it once, then shift its devices.
            const int first = base + offset;
            std::vector<PlanStage> merged = expand(k - 1, ls.a, ls.b, inner, first * inner, nullptr);
            const auto once = merged;
            for (int w = 1; w < ls.workers; ++w) {
                const int shift = static_cast<int>(w * m_cap[k]);
                for (std::size_t p = 0; p < merged.size(); ++p)
                    for (int d : once[p].devices)
                        merged[p].devices.push_back(d + shift);
            }
            offset += ls.workers;
            out.insert(out.end(), merged.begin(), merged.end());
        }
        return out;
    }

    const PipeDreamProblem& m_p;
    ScheduleTraits m_traits;
    const PipeDreamSolveOptions& m_o;
    int m_n;
    int m_levels;
    std::vector<double> m_cpre, m_wpre, m_apre, m_opre, m_gpre;
    std::vector<long long> m_cap;
    std::vector<std::vector<double>> m_full;
    std::atomic<bool> m_cancelled {false};
};

} // namespace

PipeDreamSolution solvePipeDream(const PipeDreamProblem& problem, const PipeDreamSolveOptions& options, bool* cancelled)
{
    Solver solver(problem, options);
    auto sol = solver.solve();
    if (cancelled)
        *cancelled = solver.cancelled();
    return sol;
}

} // namespace pw::planner
