// SPDX-License-Identifier: MIT
// PipeDream's hierarchical DP as its reference optimizer computes it, with the same floating-point formulas.
#include "pipedream_reference_dp.h"

#include <algorithm>
#include <limits>

namespace pw::planner {
namespace {

/// The reference's None: an infeasible or never-filled entry. Infinity keeps every comparison right.
constexpr double kNone = std::numeric_limits<double>::infinity();

/// Rows of a lower level solved together share the last-stage costs; their tables take this many doubles.
constexpr std::size_t kBlockDoubles = std::size_t {1} << 21;

int ceilDiv(int a, int b)
{
    return (a + b - 1) / b;
}

/// min over i < count of max(a[i], b[i]), with independent chains so that it runs at full speed.
double minOfMax(const double* a, const double* b, int count)
{
    double r0 = kNone, r1 = kNone, r2 = kNone, r3 = kNone;
    int i = 0;
    for (; i + 4 <= count; i += 4) {
        r0 = std::min(r0, std::max(a[i], b[i]));
        r1 = std::min(r1, std::max(a[i + 1], b[i + 1]));
        r2 = std::min(r2, std::max(a[i + 2], b[i + 2]));
        r3 = std::min(r3, std::max(a[i + 3], b[i + 3]));
    }
    for (; i < count; ++i)
        r0 = std::min(r0, std::max(a[i], b[i]));
    return std::min(std::min(r0, r1), std::min(r2, r3));
}

} // namespace

ReferenceDp::ReferenceDp(const AntichainDag& dag, ReferenceStateCosts costs, std::vector<ReferenceLevel> levels,
    ReferenceDpSettings settings)
    : m_dag(dag)
    , m_costs(std::move(costs))
    , m_levels(std::move(levels))
    , m_settings(settings)
    , m_states(dag.stateCount())
{
}

double ReferenceDp::estimatedWork(const AntichainDag& dag, const std::vector<ReferenceLevel>& levels, bool straight)
{
    double top = 0;
    double lower = 0;
    for (int j = 0; j < dag.stateCount(); ++j) {
        auto anc = dag.ancestors(j);
        top += static_cast<double>(anc.size());
        for (int k : anc)
            lower += k + 1;
    }
    double work = 0;
    for (std::size_t l = 0; l < levels.size(); ++l) {
        const double m = levels[l].machines;
        const double factor = straight ? m - 1 : m * (m - 1) / 2;
        work += (l + 1 == levels.size() ? top : lower) * factor;
    }
    return work;
}

double ReferenceDp::levelTime(int level, int a, int j) const
{
    if (level == 0)
        return range(m_costs.compute_s, a, j);
    return m_levelTimes[level][static_cast<std::size_t>(a) * m_states + j];
}

bool ReferenceDp::solveRows(int level, int first, int count, std::vector<double>& value, std::vector<Pointer>* pointers,
    std::stop_token stop) const
{
    const int n = m_states;
    const int machines = m_levels[level].machines;
    const double bandwidth = m_levels[level].bandwidth_bytes_per_s;
    const int within = level == 0 ? 1 : m_levels[level - 1].machines; // num_machines_within_machine
    const bool memoryCheck = m_settings.memory_bytes.has_value();
    const double memory = m_settings.memory_bytes.value_or(0);
    const int maxReplicas = m_settings.straight ? 1 : machines;
    const auto& act = m_costs.activation_bytes;
    const auto& par = m_costs.parameter_bytes;
    // Layout [state j][row][m]: for a split k the rows' prefixes lie side by side.
    auto cell = [&](int j, int row) { return &value[(static_cast<std::size_t>(j) * count + row) * machines]; };
    const std::size_t rowSize = static_cast<std::size_t>(n) * machines;

    value.assign(rowSize * count, kNone);
    if (pointers)
        pointers->assign(rowSize, Pointer {});

    // §2.3: one stage a..j replicated m+1 times.
    for (int r = 0; r < count; ++r) {
        const int a = first + r;
        for (int j = a; j < n; ++j) {
            double* entry = cell(j, r);
            const double t = levelTime(level, a, j);
            const double w = range(par, a, j);
            const double stash = range(act, a, j) + w;
            for (int m = 0; m < maxReplicas; ++m) {
                const int replicas = m + 1;
                if (pointers)
                    (*pointers)[static_cast<std::size_t>(j) * machines + m]
                        = {-1, 0, static_cast<std::int16_t>(replicas)};
                if (memoryCheck && ceilDiv(machines - replicas, replicas) * stash > memory)
                    continue;
                if (t == kNone)
                    continue;
                // m = 0 adds nothing (and avoids 0/0 on a level whose bandwidth is unknown).
                const double allreduce = m == 0 ? 0.0 : (4.0 * m * w) / (bandwidth * replicas) / within;
                entry[m] = (t + allreduce) / replicas;
            }
        }
    }
    if (machines < 2)
        return true;

    // §2.4: the last stage k+1..j on m' workers after the best prefix a..k on the other m+1-m'.
    std::vector<double> stashFactor(static_cast<std::size_t>(machines) * machines, 0.0);
    for (int m = 1; m < machines; ++m)
        for (int mp = 1; mp <= m; ++mp)
            stashFactor[static_cast<std::size_t>(m) * machines + mp] = ceilDiv(machines - (m + 1), mp);
    const double ratio = m_settings.activation_compression_ratio.value_or(0);
    const bool comm = m_settings.activation_compression_ratio.has_value();
    const auto& out = m_costs.output_bytes;
    const int maxPrimeAll = m_settings.straight ? 1 : machines - 1;
    std::vector<double> cost(machines, kNone); // last stage's time on m' workers, transfers included
    std::vector<double> costReversed(machines, kNone); // costReversed[x] = cost[machines - 1 - x]
    std::vector<double> minCost(machines, kNone); // min over m' <= m
    std::vector<int> firstFeasible(machines, 1); // smallest m' whose stash fits, per m
    std::vector<double> prefixMin(machines, kNone);
    for (int j = first + 1; j < n; ++j) {
        if ((j & 15) == 0 && stop.stop_requested())
            return false;
        auto anc = m_dag.ancestors(j);
        for (auto it = anc.rbegin(); it != anc.rend() && *it >= first; ++it) {
            const int k = *it;
            const double t = levelTime(level, k + 1, j);
            if (t == kNone)
                continue;
            const double w = range(par, k + 1, j);
            for (int mp = 1; mp <= maxPrimeAll; ++mp) {
                // max(max(max(prev, last), in), out) == max(prev, max(max(last, in), out)): exact.
                double c = (t + (4.0 * (mp - 1) * w) / (bandwidth * mp)) / mp;
                if (comm) {
                    c = std::max(c, ((2.0 * out[k]) / (bandwidth * mp)) / ratio);
                    if (j < n - 1)
                        c = std::max(c, ((2.0 * out[j]) / (bandwidth * mp)) / ratio);
                }
                cost[mp] = c;
                costReversed[machines - 1 - mp] = c;
                minCost[mp] = mp == 1 ? c : std::min(minCost[mp - 1], c);
            }
            if (memoryCheck) {
                // The stash shrinks as m' grows, so the m' that fit are a suffix of 1..m.
                const double stashUnit = range(act, k + 1, j) + w;
                for (int m = 1; m < machines; ++m) {
                    int mp = 1;
                    while (mp <= m && stashUnit * stashFactor[static_cast<std::size_t>(m) * machines + mp] > memory)
                        ++mp;
                    firstFeasible[m] = mp;
                }
            }
            const int lastRow = std::min(k, first + count - 1);
            for (int a = first; a <= lastRow; ++a) {
                double* best = cell(j, a - first);
                const double* prefix = cell(k, a - first);
                // prefixMin[x] = min(prefix[0..x]); with replication the candidates of m are
                // i = m - m' in 0..m - minPrime, so max(prefixMin, minCost) bounds them from below.
                prefixMin[0] = prefix[0];
                for (int x = 1; x < machines; ++x)
                    prefixMin[x] = std::min(prefixMin[x - 1], prefix[x]);
                for (int m = 1; m < machines; ++m) {
                    const int maxPrime = m_settings.straight ? 1 : m;
                    const int minPrime = firstFeasible[m];
                    if (minPrime > maxPrime)
                        continue;
                    const double prefixBound = m_settings.straight ? prefix[m - 1] : prefixMin[m - minPrime];
                    const double bound = std::max(minCost[maxPrime], prefixBound);
                    if (bound >= best[m])
                        continue; // every candidate's time is at least the bound
                    // Candidates m' = maxPrime..minPrime as i = m - m' ascending: prefix[i], cost[m - i].
                    const int i0 = m - maxPrime;
                    const double v
                        = minOfMax(prefix + i0, costReversed.data() + (machines - 1 - m + i0), maxPrime - minPrime + 1);
                    if (!(v < best[m]))
                        continue;
                    best[m] = v;
                    if (pointers) {
                        // The reference keeps the first m' (ascending) that reaches the minimum.
                        int mp = minPrime;
                        while (std::max(prefix[m - mp], cost[mp]) != v)
                            ++mp;
                        (*pointers)[static_cast<std::size_t>(j) * machines + m]
                            = {k, static_cast<std::int16_t>(m - mp), static_cast<std::int16_t>(mp)};
                    }
                }
            }
        }
    }
    return true;
}

bool ReferenceDp::solve(const std::function<void(double)>& progress, std::stop_token stop)
{
    const int n = m_states;
    const int levels = static_cast<int>(m_levels.size());
    m_levelTimes.assign(levels, {});
    m_topValue.clear();
    m_topPointers.clear();
    if (n == 0)
        return true;
    std::vector<double> value;
    int lastPercent = -1;
    for (int l = 0; l + 1 < levels; ++l) {
        const int machines = m_levels[l].machines;
        const std::size_t rowSize = static_cast<std::size_t>(n) * machines;
        const int block = static_cast<int>(std::clamp<std::size_t>(kBlockDoubles / rowSize, 1, 4096));
        std::vector<double> times(static_cast<std::size_t>(n + 1) * n, kNone);
        for (int first = 0; first < n; first += block) {
            const int count = std::min(block, n - first);
            if (!solveRows(l, first, count, value, nullptr, stop))
                return false;
            for (int a = first; a < first + count; ++a)
                for (int j = a; j < n; ++j)
                    times[static_cast<std::size_t>(a) * n + j]
                        = value[(static_cast<std::size_t>(j) * count + (a - first)) * machines + machines - 1];
            // Row a costs about (N - a)^2: report the share of that work done.
            const double left = static_cast<double>(n - first - count) / n;
            int percent = static_cast<int>(100 * (l + 1 - left * left * left) / levels);
            if (progress && percent != lastPercent) {
                lastPercent = percent;
                progress(percent / 100.0);
            }
        }
        m_levelTimes[l + 1] = std::move(times);
    }
    if (!solveRows(levels - 1, 0, 1, m_topValue, &m_topPointers, stop))
        return false;
    if (progress)
        progress(1.0);
    return true;
}

std::optional<double> ReferenceDp::objective() const
{
    if (m_topValue.empty())
        return std::nullopt;
    const int machines = m_levels.back().machines;
    double v = m_topValue[static_cast<std::size_t>(m_states - 1) * machines + machines - 1];
    if (v == kNone)
        return std::nullopt;
    return v;
}

std::vector<std::array<int, 3>> ReferenceDp::split(int level, int start, int end) const
{
    std::vector<double> ownValue;
    std::vector<Pointer> ownPointers;
    const std::vector<Pointer>* pointers = &m_topPointers;
    if (level + 1 != static_cast<int>(m_levels.size()) || start != 0) {
        solveRows(level, start, 1, ownValue, &ownPointers);
        pointers = &ownPointers;
    }
    const int machines = m_levels[level].machines;
    std::vector<std::array<int, 3>> stages;
    int j = end - 1;
    int m = machines - 1;
    for (;;) {
        const Pointer p = (*pointers)[static_cast<std::size_t>(j) * machines + m];
        if (p.split < 0) {
            stages.push_back({start, j, p.machines});
            break;
        }
        stages.push_back({p.split + 1, j, p.machines});
        j = p.split;
        m = p.prefix_index;
    }
    std::reverse(stages.begin(), stages.end());
    return stages;
}

void ReferenceDp::flatten(
    int level, int start, int end, const std::vector<int>& units, std::vector<ReferenceStage>& out) const
{
    int stride = 1; // devices per worker of this level
    for (int l = 0; l < level; ++l)
        stride *= m_levels[l].machines;
    int worker = 0;
    for (const auto& [first, last, replicas] : split(level, start, end)) {
        std::vector<int> sub;
        for (int u : units)
            for (int w = worker; w < worker + replicas; ++w)
                sub.push_back(u + w * stride);
        if (level == 0)
            out.push_back({first, last, std::move(sub)});
        else
            flatten(level - 1, first, last + 1, sub, out);
        worker += replicas;
    }
}

std::vector<ReferenceStage> ReferenceDp::stages() const
{
    std::vector<ReferenceStage> out;
    if (objective())
        flatten(static_cast<int>(m_levels.size()) - 1, 0, m_states, {0}, out);
    return out;
}

} // namespace pw::planner
