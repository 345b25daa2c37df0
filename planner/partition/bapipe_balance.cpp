// SPDX-License-Identifier: MIT
// BaPipe's partition steps: Eq. 1 split, greedy cumulative cut, boundary local search, memory fitting.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "../costs.h"
#include "bapipe.h"

namespace pw::planner::bapipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// a < b by more than rounding.
bool less(double a, double b)
{
    return a < b - 1e-12 * std::max({1.0, std::abs(a), std::abs(b)});
}

/// What the local search minimises: memory excess first (when asked), then stage times largest first.
struct Score
{
    double excess = 0;
    std::vector<double> times; ///< sorted descending

    bool better(const Score& o) const
    {
        if (less(excess, o.excess))
            return true;
        if (less(o.excess, excess))
            return false;
        for (std::size_t i = 0; i < times.size(); ++i) {
            if (less(times[i], o.times[i]))
                return true;
            if (less(o.times[i], times[i]))
                return false;
        }
        return false;
    }
};

Score score(const Chain& chain, const Cuts& cuts, bool memoryAware)
{
    Score s;
    s.times.resize(chain.stages);
    for (int i = 0; i < chain.stages; ++i)
        s.times[i] = chain.stageTime(i, cuts[i], cuts[i + 1]);
    std::sort(s.times.begin(), s.times.end(), std::greater<>());
    if (memoryAware)
        s.excess = memoryExcess(chain, cuts);
    return s;
}

} // namespace

double Chain::stageMemory(int stage, int first, int end) const
{
    StageMemoryInput in;
    in.weight_bytes = weight_prefix[end] - weight_prefix[first];
    in.activation_bytes = stash_prefix[end] - stash_prefix[first];
    in.input_bytes = first > 0 ? cut_bytes[first - 1] : 0.0;
    in.optimizer_bytes = optimizer_prefix[end] - optimizer_prefix[first];
    in.in_flight = in_flight[stage];
    in.microbatches = microbatches;
    in.recompute = recompute;
    return stageMemoryBytes(kind, in);
}

double idealStageTime(const Chain& chain)
{
    double inverse = 0;
    for (int n = 0; n < chain.stages; ++n) {
        const double t = chain.stageTime(n, 0, chain.layers);
        if (!(t > 0))
            return 0; // a device that computes for free takes everything: no finite balance point
        inverse += 1.0 / t;
    }
    return inverse > 0 ? 1.0 / inverse : 0;
}

std::vector<char> allowedCuts(const Chain& chain, double maxCutBytes)
{
    std::vector<char> allowed(chain.layers + 1, 1);
    for (int p = 1; p < chain.layers; ++p)
        allowed[p] = chain.cut_bytes[p - 1] <= maxCutBytes;
    return allowed;
}

Cuts speedProportionalCuts(const Chain& chain, const std::vector<char>& allowed)
{
    const int L = chain.layers, N = chain.stages;
    // after[p]: allowed cuts strictly after position p (interior positions only).
    std::vector<int> after(L + 1, 0);
    for (int p = L - 1; p >= 1; --p)
        after[p - 1] = after[p] + (allowed[p] ? 1 : 0);
    if (N < 1 || after[0] < N - 1)
        return {};
    const double T = idealStageTime(chain);
    Cuts cuts(N + 1, 0);
    cuts[N] = L;
    for (int i = 0; i + 1 < N; ++i) {
        const int first = cuts[i];
        int prev = -1, chosen = -1;
        for (int e = first + 1; e < L; ++e) {
            if (!allowed[e])
                continue;
            if (after[e] < N - 2 - i)
                break; // later stages need the remaining cuts
            const double t = chain.stageTime(i, first, e);
            if (t >= T) {
                chosen = e;
                if (prev > 0 && T - chain.stageTime(i, first, prev) < t - T)
                    chosen = prev;
                break;
            }
            prev = e;
        }
        if (chosen < 0)
            chosen = prev;
        if (chosen < 0)
            return {};
        cuts[i + 1] = chosen;
    }
    return cuts;
}

double memoryExcess(const Chain& chain, const Cuts& cuts)
{
    double excess = 0;
    for (int i = 0; i < chain.stages; ++i)
        excess += std::max(0.0, chain.stageMemory(i, cuts[i], cuts[i + 1]) - chain.capacity[i]);
    return excess;
}

double maxStageTime(const Chain& chain, const Cuts& cuts)
{
    double worst = 0;
    for (int i = 0; i < chain.stages; ++i)
        worst = std::max(worst, chain.stageTime(i, cuts[i], cuts[i + 1]));
    return worst;
}

int localSearch(const Chain& chain, Cuts& cuts, const std::vector<char>& allowed, bool memoryAware)
{
    const int N = chain.stages;
    Score current = score(chain, cuts, memoryAware);
    int moves = 0;
    // Every accepted move lowers the score strictly, so the search ends; the cap only bounds the work.
    const long long cap = 8LL * chain.layers * std::max(1, N) + 64;
    while (moves < cap) {
        Cuts best;
        Score bestScore = current;
        // One layer from stage `from` to stage `to`: every boundary in between moves one allowed cut towards
        // `from` (the neighbour moves are the cases |from - to| = 1).
        for (int from = 0; from < N; ++from) {
            for (int to = 0; to < N; ++to) {
                if (to == from)
                    continue;
                Cuts trial = cuts;
                bool ok = true;
                const int dir = to > from ? -1 : +1;
                const int lo = std::min(from, to) + 1, hi = std::max(from, to);
                for (int k = lo; k <= hi && ok; ++k) {
                    int p = trial[k] + dir;
                    while (p > 0 && p < chain.layers && !allowed[p])
                        p += dir;
                    trial[k] = p;
                    ok = p > 0 && p < chain.layers;
                }
                for (int k = 1; k <= N && ok; ++k)
                    ok = trial[k] > trial[k - 1];
                if (!ok)
                    continue;
                Score s = score(chain, trial, memoryAware);
                if (s.better(bestScore)) {
                    bestScore = std::move(s);
                    best = std::move(trial);
                }
            }
        }
        if (best.empty())
            break;
        cuts = std::move(best);
        current = std::move(bestScore);
        ++moves;
    }
    return moves;
}

Cuts exactMemoryFit(const Chain& chain, const std::vector<char>& allowed)
{
    const int L = chain.layers, N = chain.stages;
    std::vector<int> pos {0};
    for (int p = 1; p < L; ++p)
        if (allowed[p])
            pos.push_back(p);
    pos.push_back(L);
    const int P = static_cast<int>(pos.size());
    // best[i][j]: slowest stage when stages 0..i-1 cover layers [0, pos[j]); from[i][j]: previous position.
    std::vector<std::vector<double>> best(N + 1, std::vector<double>(P, kInf));
    std::vector<std::vector<int>> from(N + 1, std::vector<int>(P, -1));
    best[0][0] = 0;
    for (int i = 0; i < N; ++i)
        for (int a = 0; a < P; ++a) {
            if (best[i][a] == kInf)
                continue;
            for (int b = a + 1; b < P; ++b) {
                if (chain.stageMemory(i, pos[a], pos[b]) > chain.capacity[i])
                    continue;
                const double t = std::max(best[i][a], chain.stageTime(i, pos[a], pos[b]));
                if (t < best[i + 1][b]) {
                    best[i + 1][b] = t;
                    from[i + 1][b] = a;
                }
            }
        }
    if (best[N][P - 1] == kInf)
        return {};
    Cuts cuts(N + 1, 0);
    for (int i = N, j = P - 1; i > 0; --i) {
        cuts[i] = pos[j];
        j = from[i][j];
    }
    return cuts;
}

} // namespace pw::planner::bapipe
