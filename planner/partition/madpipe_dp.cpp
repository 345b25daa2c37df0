// SPDX-License-Identifier: MIT
// MadPipe phase 1: the memory-aware DP over allocations with one special GPU, and Algorithm 1 (the outer
// bisection over the target period) with the digest's corrections (§3.3, §3.4; docs/algorithms/madpipe.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "madpipe.h"

namespace pw::planner::madpipe {
namespace {

/// Open-addressing memo: per state either its exact value or a lower bound on it.
class Memo
{
public:
    struct Entry
    {
        std::uint64_t key = 0; ///< state key + 1; 0 = empty
        double value = 0;
        bool exact = false;
    };

    Memo() { m_slots.resize(1 << 16); }

    Entry* find(std::uint64_t key)
    {
        std::size_t i = slot(key);
        while (true) {
            auto& e = m_slots[i];
            if (e.key == 0)
                return nullptr;
            if (e.key == key + 1)
                return &e;
            i = (i + 1) & (m_slots.size() - 1);
        }
    }

    void put(std::uint64_t key, double value, bool exact)
    {
        if (2 * (m_size + 1) > m_slots.size())
            grow();
        std::size_t i = slot(key);
        while (m_slots[i].key != 0 && m_slots[i].key != key + 1)
            i = (i + 1) & (m_slots.size() - 1);
        if (m_slots[i].key == 0)
            ++m_size;
        m_slots[i] = {key + 1, value, exact};
    }

    std::size_t size() const { return m_size; }

private:
    std::size_t slot(std::uint64_t key) const
    {
        std::uint64_t z = key + 0x9e3779b97f4a7c15ull; // splitmix64
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return static_cast<std::size_t>(z ^ (z >> 31)) & (m_slots.size() - 1);
    }

    void grow()
    {
        std::vector<Entry> old(m_slots.size() * 2);
        old.swap(m_slots);
        m_size = 0;
        for (const auto& e : old)
            if (e.key != 0)
                put(e.key - 1, e.value, e.exact);
    }

    std::vector<Entry> m_slots;
    std::size_t m_size = 0;
};

/// T(l, p, t_P, m_P, V) for one target period T^, memoised over the discretised states. solve() returns the
/// exact optimum when it is below `bound` and otherwise some value >= bound: branches whose partial maximum
/// already reaches the best value found are cut, which never changes a value below the bound.
class Phase1
{
public:
    Phase1(const Chain& chain, int gpus, double target, const Phase1Settings& s, std::stop_token stop)
        : m_c(chain)
        , m_gpus(gpus)
        , m_target(target)
        , m_s(s)
        , m_stop(std::move(stop))
    {
        const int L = chain.layers;
        double sumC = 0;
        for (int l = 1; l < L; ++l)
            sumC += chain.comm(l);
        auto step = [](double range, int points) { return range > 0 ? range / (points - 1) : 1.0; };
        m_dt = step(chain.load(0, L), s.t_grid);
        m_dm = step(chain.capacity, s.m_grid);
        m_dv = step(chain.load(0, L) + sumC, s.v_grid);
    }

    double solve(int l, int p, int iT, int iM, int iV, double bound)
    {
        const double tP = iT * m_dt;
        if (l == 0 || tP >= bound)
            return tP;
        const double lower = (m_c.load(0, l) + tP) / (p + 1);
        if (lower >= bound)
            return lower;
        const std::uint64_t key = pack(l, p, iT, iM, iV);
        if (auto* e = m_memo.find(key)) {
            if (e->exact || e->value >= bound)
                return e->value;
        }
        if ((++m_states & 0xfff) == 0 && m_stop.stop_requested())
            throw Cancelled();
        const double V = iV * m_dv, mP = iM * m_dm;
        if (p == 0) {
            // Base case [M:203]: the remaining prefix is one stage on the special GPU.
            const double u = m_c.load(0, l);
            const int g = std::max(1, groupOf(V + u, m_target));
            const double value = fitsIn(mP + m_c.memory(0, l, g - 1), m_c.capacity) ? tP + u : kInf;
            m_memo.put(key, value, true);
            return value;
        }
        double best = bound;
        for (int k = l - 1; k >= 0; --k) {
            const double u = m_c.load(k, l);
            if (u >= best && tP + u >= best)
                break; // both options only get longer as the stage grows
            const double c = m_c.comm(k);
            if (c >= best)
                continue;
            const int g = std::max(1, groupOf(V + u, m_target));
            if (!fitsIn(m_c.memoryFloor(k, l, g), m_c.capacity)
                && !fitsIn(mP + m_c.memoryFloor(k, l, g - 1), m_c.capacity))
                break; // longer stages only need more
            const int iVn = vIndex(k > 0 ? oplus(oplus(V, u, m_target), c, m_target) : oplus(V, u, m_target));
            // Normal GPU: the stage alone, with g activations.
            if (u < best && fitsIn(m_c.memory(k, l, g), m_c.capacity)) {
                const double r = solve(k, p - 1, iT, iM, iVn, best);
                best = std::min(best, std::max({u, c, r}));
            }
            // Special GPU: its load and (under-estimated, g - 1) memory accumulate.
            const double m2 = mP + m_c.memory(k, l, g - 1);
            if (tP + u < best && fitsIn(m2, m_c.capacity)) {
                const int iT2 = tIndex(tP + u);
                const double t2 = iT2 * m_dt;
                if (t2 < best) {
                    const double r = solve(k, p, iT2, mIndex(m2), iVn, best);
                    best = std::min(best, std::max({t2, c, r}));
                }
            }
        }
        if (best < bound) {
            m_memo.put(key, best, true);
            return best;
        }
        m_memo.put(key, bound, false);
        return bound;
    }

    /// Whether any allocation of layers [0, l) fits memory from this state: t_P plays no part, so this is the
    /// DP without its largest dimension; an infeasible target period is rejected without the full search.
    bool feasible(int l, int p, int iM, int iV)
    {
        if (l == 0)
            return true;
        const std::uint64_t key = pack(l, p, 0, iM, iV);
        if (auto* e = m_feasible.find(key))
            return e->value > 0;
        if ((++m_states & 0xfff) == 0 && m_stop.stop_requested())
            throw Cancelled();
        const double V = iV * m_dv, mP = iM * m_dm;
        bool ok = false;
        if (p == 0) {
            const int g = std::max(1, groupOf(V + m_c.load(0, l), m_target));
            ok = fitsIn(mP + m_c.memory(0, l, g - 1), m_c.capacity);
        }
        for (int k = l - 1; k >= 0 && !ok && p > 0; --k) {
            const double u = m_c.load(k, l), c = m_c.comm(k);
            const int g = std::max(1, groupOf(V + u, m_target));
            if (!fitsIn(m_c.memoryFloor(k, l, g), m_c.capacity)
                && !fitsIn(mP + m_c.memoryFloor(k, l, g - 1), m_c.capacity))
                break;
            const int iVn = vIndex(k > 0 ? oplus(oplus(V, u, m_target), c, m_target) : oplus(V, u, m_target));
            if (fitsIn(m_c.memory(k, l, g), m_c.capacity) && feasible(k, p - 1, iM, iVn))
                ok = true;
            const double m2 = mP + m_c.memory(k, l, g - 1);
            if (!ok && fitsIn(m2, m_c.capacity) && feasible(k, p, mIndex(m2), iVn))
                ok = true;
        }
        m_feasible.put(key, ok ? 1.0 : 0.0, true);
        return ok;
    }

    /// Follows the choices that achieve `value` from the root (value must be exact).
    std::vector<Phase1Stage> trace(double value)
    {
        std::vector<Phase1Stage> stages;
        int l = m_c.layers, p = m_gpus - 1, iT = 0, iM = 0, iV = 0;
        const double slack = value * (1 + 1e-12) + 1e-300;
        while (l > 0) {
            if (p == 0) {
                stages.push_back({0, l, true});
                break;
            }
            const double tP = iT * m_dt, V = iV * m_dv, mP = iM * m_dm;
            bool found = false;
            for (int k = l - 1; k >= 0 && !found; --k) {
                const double u = m_c.load(k, l), c = m_c.comm(k);
                const int g = std::max(1, groupOf(V + u, m_target));
                const int iVn = vIndex(k > 0 ? oplus(oplus(V, u, m_target), c, m_target) : oplus(V, u, m_target));
                if (fitsIn(m_c.memory(k, l, g), m_c.capacity)
                    && std::max({u, c, solve(k, p - 1, iT, iM, iVn, slack)}) <= value) {
                    stages.push_back({k, l, false});
                    l = k, p = p - 1, iV = iVn;
                    found = true;
                    break;
                }
                const double m2 = mP + m_c.memory(k, l, g - 1);
                if (fitsIn(m2, m_c.capacity)) {
                    const int iT2 = tIndex(tP + u), iM2 = mIndex(m2);
                    if (std::max({iT2 * m_dt, c, solve(k, p, iT2, iM2, iVn, slack)}) <= value) {
                        stages.push_back({k, l, true});
                        l = k, iT = iT2, iM = iM2, iV = iVn;
                        found = true;
                    }
                }
            }
            if (!found)
                break; // cannot happen for an exact value; leaves an incomplete allocation the caller rejects
        }
        std::reverse(stages.begin(), stages.end());
        return stages;
    }

    long long states() const { return m_states; }

private:
    static std::uint64_t pack(int l, int p, int iT, int iM, int iV)
    {
        return (static_cast<std::uint64_t>(l) << 44) | (static_cast<std::uint64_t>(p) << 36)
            | (static_cast<std::uint64_t>(iT) << 24) | (static_cast<std::uint64_t>(iM) << 12)
            | static_cast<std::uint64_t>(iV);
    }
    int tIndex(double t) const { return std::min(m_s.t_grid - 1, static_cast<int>(std::ceil(t / m_dt - 1e-9))); }
    int mIndex(double m) const { return std::clamp(static_cast<int>(std::ceil(m / m_dm - 1e-9)), 0, m_s.m_grid - 1); }
    int vIndex(double v) const
    {
        // Values beyond U(1,L) + sum C (possible after group jumps) are clamped to the last grid point.
        const double x = v / m_dv;
        const int i = m_s.v_round_up ? static_cast<int>(std::ceil(x - 1e-9)) : static_cast<int>(std::floor(x + 1e-9));
        return std::clamp(i, 0, m_s.v_grid - 1);
    }

    const Chain& m_c;
    int m_gpus;
    double m_target;
    Phase1Settings m_s;
    std::stop_token m_stop;
    double m_dt = 1, m_dm = 1, m_dv = 1;
    Memo m_memo;
    Memo m_feasible;
    long long m_states = 0;
};

} // namespace

double phase1Dp(const Chain& chain, int gpus, double target, const Phase1Settings& settings, double bound,
    Phase1Allocation* allocation, std::stop_token stop, long long* states, double guess)
{
    if (chain.layers < 1 || gpus < 1 || !(target > 0))
        return kInf;
    Phase1 dp(chain, gpus, target, settings, std::move(stop));
    if (!dp.feasible(chain.layers, gpus - 1, 0, 0)) {
        if (states)
            *states += dp.states();
        return kInf;
    }
    // Iterative deepening on the bound: a tight bound prunes most states, and values and lower bounds found
    // under a smaller bound stay valid (the memo is kept), so a retry only expands what the last pass cut.
    double maxLayer = 0;
    for (int l = 0; l < chain.layers; ++l)
        maxLayer = std::max(maxLayer, chain.load(l, l + 1));
    double trial = std::max({guess, chain.load(0, chain.layers) / gpus, maxLayer}) * 1.02;
    double value = kInf;
    for (int pass = 0;; ++pass) {
        const double b = pass < 100 ? std::min(trial, bound) : bound;
        value = dp.solve(chain.layers, gpus - 1, 0, 0, 0, b);
        if (value < b || b >= bound)
            break;
        trial *= 1.5;
    }
    if (allocation && value < bound) {
        allocation->stages = dp.trace(value);
        allocation->period = value;
    }
    if (states)
        *states += dp.states();
    return value;
}

Algorithm1Result algorithm1(const Chain& chain, int gpus, const Phase1Settings& settings, std::stop_token stop,
    const std::function<void(double)>& progress)
{
    Algorithm1Result r;
    const int L = chain.layers;
    double sumC = 0;
    for (int l = 1; l < L; ++l) // sum_{i=1}^{L-1} C(i): the printed sum_{i=2}^{L} is off by one (digest §3.3)
        sumC += chain.comm(l);
    double lb = chain.load(0, L) / gpus;
    double ub = chain.load(0, L) + sumC;
    double target = lb;
    r.best_period = kInf;
    for (int i = 0; i < settings.iterations; ++i) {
        if (!std::isfinite(target) || !(target > 0)) {
            r.diverged = true;
            break;
        }
        // Only a T_i below ub changes ub or the answer, so the DP may stop proving anything above it. The
        // literal update needs T_i itself.
        const double bound = settings.literal_lb_update ? kInf : ub * (1 + 1e-12);
        Phase1Allocation alloc;
        // Start the bound at the best value seen for a larger target (MadPipe-DP is non-increasing in T^ [M:209]).
        double guess = 0;
        for (const auto& s : r.steps)
            if (s.exact && s.target >= target)
                guess = std::max(guess, s.dp);
        const double Ti = phase1Dp(chain, gpus, target, settings, bound, &alloc, stop, &r.states, guess);
        const bool exact = Ti < bound;
        const double Tt = std::max(Ti, target);
        if (settings.literal_lb_update)
            lb = std::max(lb, std::min(Ti, Tt)); // as printed: always T_i, infinite after an infeasible call
        else
            lb = std::max(lb, std::min(Ti, target)); // [M:211]: min(T, T^) is a lower bound on the optimum
        ub = std::min(ub, Tt);
        if (exact && Tt < r.best_period && alloc.stages.size() > 0) {
            r.best = std::move(alloc);
            r.best_period = Tt;
            r.best_target = target;
        }
        r.steps.push_back({target, exact ? Ti : kInf, exact, lb, ub});
        target = 0.5 * (lb + ub);
        if (progress)
            progress(static_cast<double>(i + 1) / settings.iterations);
    }
    return r;
}

} // namespace pw::planner::madpipe
