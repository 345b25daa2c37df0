// SPDX-License-Identifier: MIT
// V-Half and V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): two chunks per device in a V,
// the backward split into I and W, each microbatch's passes laid out by a building block whose lifespan sets the
// peak activations: about half (V-Half) or a third (V-Min) of 1F1B's. The construction is the authors'
// (zbv_greedy.py in sail-sg/zero-bubble-pipeline-parallelism): the block repeated every 6 slots, W filling the free
// slots, then the warm-up and cool-down squeezed greedily under the stable phase's memory, slot by slot.
#include <algorithm>
#include <array>
#include <cassert>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "builder.h"

namespace pw::planner {
namespace {

/// The building block: V-Half's or V-Min's offsets.
enum class Block { Half, Min };

// Pass types in the authors' notation: F and f the forwards of chunk 0 (down the V) and chunk 1 (back up), B and b
// the input gradients of chunk 1 (the loss is at the V's bottom, so they flow down) and chunk 0, W and w their
// weight gradients. Before the W are split (the last step) type W stands for both.
constexpr int kF = 0, kFUp = 1, kB = 2, kBUp = 3, kW = 4, kWUp = 5;

using Slots = std::vector<std::vector<int>>; ///< per pass type, per microbatch: its slot
using Pipeline = std::vector<Slots>; ///< per rank

/// Slot offsets of a microbatch's F, f, B and b on `rank` of p: the building block (the period is 6 slots).
std::array<int, 4> blockOffsets(Block block, int p, int rank)
{
    if (block == Block::Half) {
        const int gap = p % 2 == 0 ? 3 : 0;
        return {2 * rank, 3 * p - rank - 2, 3 * p + gap + 2 * rank - 1, 6 * p + gap - rank - 2};
    }
    const int gap = p % 3 == 0 ? 2 : 0;
    return {rank, 2 * p - rank - 1, 2 * p + gap + rank, 4 * p + gap - rank - 1};
}

int lastSlot(const Slots& s)
{
    int last = -1;
    for (const auto& type : s)
        if (!type.empty())
            last = std::max(last, type.back());
    return last;
}

/// The pass type in each slot of a rank (-1: free), sized to hold `size` slots.
std::vector<int> occupancy(const Slots& s, int size)
{
    std::vector<int> at(static_cast<std::size_t>(size), -1);
    for (std::size_t t = 0; t < s.size(); ++t)
        for (int slot : s[t])
            at[slot] = static_cast<int>(t);
    return at;
}

/// Adds the weight gradients (one type, or W and w when `split`): each into the first free slot once an input
/// gradient (any, or of its chunk) is waiting for one, the rest after the last pass.
Slots putWeights(Slots s, bool split)
{
    s.resize(4);
    const int bound = lastSlot(s);
    const auto at = occupancy(s, bound + 1);
    const int kinds = split ? 2 : 1;
    s.resize(4 + kinds);
    int pending[2] = {0, 0};
    for (int t = 0; t <= bound; ++t) {
        if (at[t] == kB || at[t] == kBUp)
            ++pending[split ? at[t] - kB : 0];
        else if (at[t] < 0)
            for (int w = 0; w < kinds; ++w)
                if (pending[w] > 0) {
                    s[4 + w].push_back(t);
                    --pending[w];
                    break;
                }
    }
    int t = bound;
    for (int w = 0; w < kinds; ++w)
        for (; pending[w] > 0; --pending[w])
            s[4 + w].push_back(++t);
    return s;
}

/// A rank's chunk activations in the authors' count, slot by slot: +1 at a forward, -1 at a weight gradient; without
/// the weight gradients placed (`weights` false) every free slot runs one that is waiting.
struct Activations
{
    int current = 0;
    int waiting = 0; ///< input gradients whose W has not run

    bool operator==(const Activations&) const = default;

    void step(int type, bool weights)
    {
        if (type == kF || type == kFUp)
            ++current;
        else if (type == kB || type == kBUp)
            ++waiting;
        else if (type >= kW)
            --current;
        else if (!weights && waiting > 0) {
            --current;
            --waiting;
        }
    }
};

/// The activations after each slot of a rank.
std::vector<Activations> activationsBySlot(const std::vector<int>& at, bool weights)
{
    std::vector<Activations> out(at.size());
    Activations a;
    for (std::size_t t = 0; t < at.size(); ++t) {
        a.step(at[t], weights);
        out[t] = a;
    }
    return out;
}

/// Whether a rank whose slots `at` changed at `from` and `to` only (from < to) stays within `bound` activations, given
/// `before`, its activations by slot before the change (all within `bound`): replayed from `from` until they meet the
/// old ones again past `to` (the same state and slots from there on). On true, `before` becomes the new ones.
bool staysWithin(
    const std::vector<int>& at, bool weights, int from, int to, int bound, std::vector<Activations>& before)
{
    Activations a = from > 0 ? before[static_cast<std::size_t>(from - 1)] : Activations {};
    std::vector<Activations> changed;
    for (auto t = static_cast<std::size_t>(from); t < at.size(); ++t) {
        a.step(at[t], weights);
        if (a.current > bound)
            return false;
        if (static_cast<int>(t) >= to && a == before[t])
            break;
        changed.push_back(a);
    }
    std::copy(changed.begin(), changed.end(), before.begin() + from);
    return true;
}

/// One pass of the pipeline: (slot, rank, type, microbatch).
using Item = std::tuple<int, int, int, int>;

/// Every pass in slot order (ties by rank, type, microbatch, as the authors' scan): a counting sort by slot of the
/// passes listed in (rank, type, microbatch) order, which keeps that order within a slot.
std::vector<Item> slotOrder(const Pipeline& pipe)
{
    int last = -1;
    std::size_t n = 0;
    for (const auto& s : pipe) {
        last = std::max(last, lastSlot(s));
        for (const auto& type : s)
            n += type.size();
    }
    std::vector<std::size_t> first(static_cast<std::size_t>(last) + 2, 0);
    for (const auto& s : pipe)
        for (const auto& type : s)
            for (int slot : type)
                ++first[static_cast<std::size_t>(slot) + 1];
    for (std::size_t i = 1; i < first.size(); ++i)
        first[i] += first[i - 1];
    std::vector<Item> items(n);
    for (int r = 0; r < static_cast<int>(pipe.size()); ++r)
        for (int t = 0; t < static_cast<int>(pipe[r].size()); ++t)
            for (int k = 0; k < static_cast<int>(pipe[r][t].size()); ++k) {
                const int slot = pipe[r][t][k];
                items[first[static_cast<std::size_t>(slot)]++] = {slot, r, t, k};
            }
    return items;
}

/// The slot each pass starts in when every pass takes one slot and runs as early as its inputs, its rank's previous
/// pass and its type's previous microbatch allow (the authors' eager execution with unit costs).
Pipeline eagerSlots(const Pipeline& pipe)
{
    const int p = static_cast<int>(pipe.size());
    Pipeline end = pipe, start = pipe;
    std::vector<int> rankEnd(p, 0);
    for (const auto& [slot, r, t, k] : slotOrder(pipe)) {
        int ready = rankEnd[r];
        if ((t == kF || t == kB) && r > 0)
            ready = std::max(ready, end[r - 1][t][k]);
        if ((t == kFUp || t == kBUp) && r + 1 < p)
            ready = std::max(ready, end[r + 1][t][k]);
        if (t > 0 && t < kW)
            ready = std::max(ready, end[r][t - 1][k]);
        if (k > 0)
            ready = std::max(ready, end[r][t][k - 1]);
        start[r][t][k] = ready;
        end[r][t][k] = rankEnd[r] = ready + 1;
    }
    return start;
}

/// The authors' greedy squeeze: every pass of the warm-up (only when `weights`: with the W placed first) and of
/// the cool-down (after the last forward) moves to the earliest free slot after its inputs where the rank's
/// activations stay within the pipeline's peak; the stable phase (from rank 0's first b) stays. Returns the
/// eager slots of the result, W placed.
Pipeline squeeze(Pipeline pipe, bool weights)
{
    const int p = static_cast<int>(pipe.size());
    const int m = static_cast<int>(pipe[0][kF].size());
    if (weights)
        for (auto& s : pipe)
            s = putWeights(std::move(s), false);
    std::vector<std::vector<int>> at(p), taken(p);
    std::vector<std::vector<Activations>> held(p);
    int bound = 0;
    for (int r = 0; r < p; ++r) {
        at[r] = occupancy(pipe[r], lastSlot(pipe[r]) + 1);
        taken[r].assign(at[r].size(), 0);
        held[r] = activationsBySlot(at[r], weights);
        for (const auto& a : held[r])
            bound = std::max(bound, a.current);
    }
    int phase = 0;
    for (const auto& [next, r, t, k] : slotOrder(pipe)) {
        if (t == kBUp && r == 0 && phase == 0)
            phase = 1;
        if (phase == 1 || (phase == 0 && !weights)) {
            if (phase == 1 && t == kF && k == m - 1)
                phase = 2;
            taken[r][next] = 1;
            continue;
        }
        const auto& s = pipe[r];
        int ready = -1;
        if ((t == kF || t == kB) && r > 0)
            ready = std::max(ready, pipe[r - 1][t][k]);
        if ((t == kFUp || t == kBUp) && r + 1 < p)
            ready = std::max(ready, pipe[r + 1][t][k]);
        if (t > 0 && t < kW)
            ready = std::max(ready, s[t - 1][k]);
        if (t == kW) { // the k-th input gradient of either chunk
            std::vector<int> inputs(s[kB]);
            inputs.insert(inputs.end(), s[kBUp].begin(), s[kBUp].end());
            std::nth_element(inputs.begin(), inputs.begin() + k, inputs.end());
            ready = std::max(ready, inputs[k]);
        }
        if (k > 0)
            ready = std::max(ready, s[t][k - 1]);
        assert(ready < next);
        int chosen = next;
        for (int slot = ready + 1; slot < next; ++slot) {
            if (taken[r][slot])
                continue;
            at[r][next] = -1;
            at[r][slot] = t;
            if (staysWithin(at[r], weights, slot, next, bound, held[r])) {
                chosen = slot;
                break;
            }
            at[r][slot] = -1;
            at[r][next] = t;
        }
        pipe[r][t][k] = chosen;
        taken[r][chosen] = 1;
    }
    if (!weights)
        for (auto& s : pipe)
            s = putWeights(std::move(s), false);
    return eagerSlots(pipe);
}

/// Every rank's program over m microbatches: the block repeated, squeezed with the W placed, squeezed again
/// without them, the W split by chunk into the free slots; each rank's passes in slot order.
VPrograms controllableMemoryPrograms(Block block, int p, int m)
{
    Pipeline pipe(p, Slots(4));
    for (int r = 0; r < p; ++r) {
        const auto offsets = blockOffsets(block, p, r);
        for (int t = 0; t < 4; ++t)
            for (int k = 0; k < m; ++k)
                pipe[r][t].push_back(offsets[t] + 6 * k);
    }
    for (const bool weights : {true, false}) {
        pipe = squeeze(std::move(pipe), weights);
        for (auto& s : pipe)
            s.resize(4);
    }
    // Type -> (chunk, kind): F and f forwards of chunks 0 and 1, B and b input gradients of chunks 1 and 0, W and
    // w the weight gradients of chunks 1 and 0.
    constexpr std::array<std::pair<int, ActionKind>, 6> kAction {
        {{0, ActionKind::Forward}, {1, ActionKind::Forward}, {1, ActionKind::BackwardInput},
            {0, ActionKind::BackwardInput}, {1, ActionKind::BackwardWeight}, {0, ActionKind::BackwardWeight}}};
    VPrograms ranks(p);
    for (int r = 0; r < p; ++r) {
        Pipeline one {putWeights(std::move(pipe[r]), true)};
        for (const auto& [slot, unused, t, k] : slotOrder(one))
            ranks[r].push_back({kAction[t].first, kAction[t].second, k});
    }
    return ranks;
}

/// The programs of (block, p, m), computed once per process (the searches ask for the same shapes many times).
std::shared_ptr<const VPrograms> cachedPrograms(Block block, int p, int m)
{
    static std::mutex mutex;
    static std::map<std::tuple<Block, int, int>, std::shared_ptr<const VPrograms>> cache;
    const auto key = std::make_tuple(block, p, m);
    {
        const std::lock_guard lock(mutex);
        if (const auto it = cache.find(key); it != cache.end())
            return it->second;
    }
    auto programs = std::make_shared<const VPrograms>(controllableMemoryPrograms(block, p, m));
    const std::lock_guard lock(mutex);
    if (cache.size() > 256)
        cache.clear();
    return cache.emplace(key, std::move(programs)).first->second;
}

class ControllableMemoryGenerator final : public ScheduleGenerator
{
public:
    explicit ControllableMemoryGenerator(Block block)
        : m_block(block)
    {
    }

    std::string_view name() const override { return m_block == Block::Half ? "v-half" : "v-min"; }
    std::string_view description() const override
    {
        return m_block == Block::Half
            ? "V-Half (Qi et al. 2024, controllable memory): two chunks per device in a V, the backward split; "
              "about half of 1F1B's activations at about half its bubble"
            : "V-Min (Qi et al. 2024, controllable memory): two chunks per device in a V, the backward split; "
              "about a third of 1F1B's activations at about two thirds of its bubble (more when F, B and W "
              "differ)";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.steady_state = SteadyState::BatchToBatch,
            .min_iterations = 3,
            .chunks = ChunkRule::V,
            .splits_backward = true,
            .replicas_alike = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        return buildV(plan, name(), [this](int p, int count) { return *cachedPrograms(m_block, p, count); });
    }

    std::optional<double> uniformBubble(int p, int m, const UniformStageTimes& t) const override
    {
        return vProgramBubble(*cachedPrograms(m_block, p, m), t);
    }
    std::optional<double> uniformPeakActivationBytes(int p, int m, int rank, double stash, double kept) const override
    {
        return vProgramPeakActivationBytes((*cachedPrograms(m_block, p, m))[rank], stash, kept);
    }

private:
    Block m_block;
};

} // namespace

const ScheduleGenerator& vHalfGenerator()
{
    static const ControllableMemoryGenerator generator(Block::Half);
    return generator;
}

const ScheduleGenerator& vMinGenerator()
{
    static const ControllableMemoryGenerator generator(Block::Min);
    return generator;
}

} // namespace pw::planner
