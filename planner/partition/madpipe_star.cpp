// SPDX-License-Identifier: MIT
// MadPipe's 1F1B* for contiguous allocations: grouping, periodic pattern, least valid period, and the exact
// search over contiguous allocations (digest §3.2; docs/algorithms/madpipe.md).
#include <algorithm>
#include <cmath>
#include <limits>

#include "madpipe.h"

namespace pw::planner::madpipe {
double Chain::transfer(int first) const
{
    const double bytes = cut_bytes[first - 1];
    if (bytes <= 0)
        return latency;
    return latency + (bandwidth > 0 ? bytes / bandwidth : kInf);
}

double Chain::memoryFloor(int first, int end, int g) const
{
    const double weights = weight_prefix[end] - weight_prefix[first];
    const double state = optimizer_prefix[end] - optimizer_prefix[first];
    const double stash = stash_prefix[end] - stash_prefix[first];
    return 3 * weights + state + (recompute ? stash : g * stash);
}

double Chain::memory(int first, int end, int g) const
{
    const double weights = weight_prefix[end] - weight_prefix[first];
    const double state = optimizer_prefix[end] - optimizer_prefix[first];
    const double stash = stash_prefix[end] - stash_prefix[first];
    double perBatch = stash, working = 0;
    if (recompute) {
        perBatch = first > 0 ? cut_bytes[first - 1] : 0.0;
        working = stash;
    }
    double buffers = 0;
    if (comm_buffers) {
        if (first > 0)
            buffers += 2 * cut_bytes[first - 1];
        if (end < layers)
            buffers += 2 * cut_bytes[end - 1];
    }
    return 3 * weights + state + g * perBatch + working + buffers;
}

int groupOf(double x, double period)
{
    if (period <= 0)
        return x > 0 ? (1 << 29) : 0;
    return std::max(0, static_cast<int>(std::ceil(x / period - 1e-9)));
}

double oplus(double x, double y, double period)
{
    const int gx = groupOf(x, period);
    if (groupOf(x + y, period) == gx)
        return x + y;
    return period * gx + y;
}

StarChain starChain(const Chain& chain, const Cuts& cuts)
{
    StarChain s;
    const int n = static_cast<int>(cuts.size()) - 1;
    for (int st = 0; st < n; ++st) {
        if (st > 0) {
            const double t = chain.transfer(cuts[st]);
            s.forward.push_back(t);
            s.backward.push_back(t);
            s.stage_of.push_back(-1);
        }
        s.forward.push_back(chain.forward(cuts[st], cuts[st + 1]));
        s.backward.push_back(chain.backward(cuts[st], cuts[st + 1]));
        s.stage_of.push_back(st);
    }
    return s;
}

std::vector<int> starGroups(const std::vector<double>& loads, double period)
{
    std::vector<int> group(loads.size(), 1);
    double x = 0;
    for (int e = static_cast<int>(loads.size()) - 1; e >= 0; --e) {
        group[e] = std::max(1, groupOf(x + loads[e], period));
        x = oplus(x, loads[e], period);
    }
    return group;
}

StarPattern starPattern(const std::vector<double>& forward, const std::vector<double>& backward, double period)
{
    const int n = static_cast<int>(forward.size());
    std::vector<double> loads(n);
    for (int e = 0; e < n; ++e)
        loads[e] = forward[e] + backward[e];
    StarPattern p;
    p.period = period;
    p.group = starGroups(loads, period);
    p.forward_start.assign(n, 0.0);
    p.backward_start.assign(n, 0.0);
    p.forward_shift.assign(n, 0);
    p.backward_shift.assign(n, 0);
    // All forwards back to back from t = 0 with shift 0 (groups connected F to F).
    for (int e = 1; e < n; ++e)
        p.forward_start[e] = p.forward_start[e - 1] + forward[e - 1];
    // Group g = elements [a, b]: its backwards run b, b-1, ..., a right after F_b ends, with shift g - 1.
    for (int b = n - 1; b >= 0;) {
        int a = b;
        while (a > 0 && p.group[a - 1] == p.group[b])
            --a;
        double t = p.forward_start[b] + forward[b];
        for (int e = b; e >= a; --e) {
            p.backward_start[e] = t;
            p.backward_shift[e] = p.group[b] - 1;
            t += backward[e];
        }
        b = a - 1;
    }
    auto wrap = [&](double& t, int& h) {
        if (period <= 0)
            return;
        const double k = std::floor(t / period + 1e-12);
        h += static_cast<int>(k);
        t = std::max(0.0, t - k * period);
    };
    for (int e = 0; e < n; ++e) {
        wrap(p.forward_start[e], p.forward_shift[e]);
        wrap(p.backward_start[e], p.backward_shift[e]);
    }
    return p;
}

std::optional<StarPeriod> minimalStarPeriod(const Chain& chain, const Cuts& cuts)
{
    const StarChain s = starChain(chain, cuts);
    const int n = static_cast<int>(s.forward.size());
    std::vector<double> loads(n);
    double least = 0;
    for (int e = 0; e < n; ++e) {
        loads[e] = s.forward[e] + s.backward[e];
        least = std::max(least, loads[e]);
    }
    if (!std::isfinite(least))
        return std::nullopt;
    // Groups change only where T crosses a contiguous sum of the transformed chain.
    std::vector<double> candidates {least};
    for (int a = 0; a < n; ++a) {
        double sum = 0;
        for (int b = a; b < n; ++b) {
            sum += loads[b];
            if (sum > least)
                candidates.push_back(sum);
        }
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    auto fits = [&](double T, std::vector<int>* inFlight) {
        const auto group = starGroups(loads, T);
        if (inFlight)
            inFlight->clear();
        for (int e = 0; e < n; ++e) {
            if (s.stage_of[e] < 0)
                continue;
            const int st = s.stage_of[e];
            if (!fitsIn(chain.memory(cuts[st], cuts[st + 1], group[e]), chain.capacity))
                return false;
            if (inFlight)
                inFlight->push_back(group[e]);
        }
        return true;
    };
    if (!fits(candidates.back(), nullptr))
        return std::nullopt;
    // Fitting is monotone in T (group indices never grow with T).
    std::size_t lo = 0, hi = candidates.size() - 1;
    while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if (fits(candidates[mid], nullptr))
            hi = mid;
        else
            lo = mid + 1;
    }
    StarPeriod r;
    r.period = candidates[lo];
    fits(r.period, &r.in_flight);
    return r;
}

namespace {

/// Is there a contiguous allocation into at most `gpus` stages whose 1F1B* pattern of period T is valid?
/// best[j][l] = least delay V after placing layers [l, L) as j stages (every element <= T, memory with the
/// group index); a smaller V never gives a larger group index upstream, so it dominates.
std::optional<Cuts> feasibleAt(const Chain& chain, int gpus, double T)
{
    const int L = chain.layers;
    std::vector<std::vector<double>> best(gpus + 1, std::vector<double>(L + 1, kInf));
    std::vector<std::vector<int>> next(gpus + 1, std::vector<int>(L + 1, -1));
    best[0][L] = 0;
    for (int j = 0; j < gpus; ++j)
        for (int l = L; l > 0; --l) {
            const double V = best[j][l];
            if (!std::isfinite(V))
                continue;
            for (int k = l - 1; k >= 0; --k) {
                const double u = chain.load(k, l);
                if (!fitsIn(u, T))
                    break;
                const double c = chain.comm(k);
                if (!fitsIn(c, T))
                    continue;
                const int g = std::max(1, groupOf(V + u, T));
                if (!fitsIn(chain.memory(k, l, g), chain.capacity))
                    continue;
                const double v = k > 0 ? oplus(oplus(V, u, T), c, T) : oplus(V, u, T);
                if (v < best[j + 1][k]) {
                    best[j + 1][k] = v;
                    next[j + 1][k] = l;
                }
            }
        }
    for (int j = 1; j <= gpus; ++j)
        if (std::isfinite(best[j][0])) {
            Cuts cuts {0};
            int l = 0;
            for (int jj = j; jj > 0; --jj) {
                l = next[jj][l];
                cuts.push_back(l);
            }
            return cuts;
        }
    return std::nullopt;
}

} // namespace

std::optional<Cuts> bestContiguous(const Chain& chain, int gpus, std::stop_token stop)
{
    const int L = chain.layers;
    gpus = std::min(gpus, L);
    if (gpus < 1 || L < 1)
        return std::nullopt;
    double total = chain.load(0, L), maxLayer = 0;
    for (int l = 0; l < L; ++l) {
        maxLayer = std::max(maxLayer, chain.load(l, l + 1));
        if (l > 0)
            total += chain.comm(l);
    }
    double hi = total * (1 + 1e-9) + 1e-12;
    auto best = feasibleAt(chain, gpus, hi);
    if (!best)
        return std::nullopt;
    double lo = std::max(chain.load(0, L) / gpus, maxLayer);
    if (auto at = feasibleAt(chain, gpus, lo))
        return at;
    for (int it = 0; it < 100 && hi - lo > 1e-10 * hi; ++it) {
        if (stop.stop_requested())
            throw Cancelled();
        const double mid = 0.5 * (lo + hi);
        if (auto at = feasibleAt(chain, gpus, mid)) {
            hi = mid;
            best = std::move(at);
        } else {
            lo = mid;
        }
    }
    return best;
}

} // namespace pw::planner::madpipe
