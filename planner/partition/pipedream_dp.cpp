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
#include "pipedream_dp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>

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
        in.in_flight = inFlight * m_traits.in_flight_factor; // 1F1B-SO keeps twice the warm-up in flight
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

    Row solveRow(int k, int i)
    {
        const int M = levelSize(k);
        Row row;
        row.i = i;
        row.M = M;
        row.value.assign(static_cast<std::size_t>(m_n - i) * M, kInf);
        row.arg.assign(row.value.size(), {});
        const double capk = static_cast<double>(m_cap[k]);
        for (int j = i; j < m_n; ++j) {
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

    /// Device-level stages of A^k(first..last, m), workers numbered from `base` in level-k units.
    std::vector<PlanStage> expand(int k, int first, int last, int m, int base, const Row* solved)
    {
        if (k == 0)
            return {PlanStage {first, last, {base}}};
        Row local;
        if (!solved || solved->i != first) {
            local = solveRow(k, first);
            solved = &local;
        }
        // Unroll into this level's stages (first to last), each with its worker count.
        struct LevelStage
        {
            int a, b, workers;
        };
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
    std::vector<double> m_cpre, m_wpre, m_apre, m_opre;
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
