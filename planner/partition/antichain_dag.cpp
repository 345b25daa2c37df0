// SPDX-License-Identifier: MIT
// The antichain state space of PipeDream's reference optimizer, with bitsets instead of its list scans.
#include "antichain_dag.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace pw::planner {
namespace {

struct VectorHash
{
    std::size_t operator()(const std::vector<int>& v) const
    {
        std::uint64_t h = 1469598103934665603ULL;
        for (int x : v) {
            h ^= static_cast<std::uint64_t>(x) + 0x9e3779b97f4a7c15ULL;
            h *= 1099511628211ULL;
        }
        return static_cast<std::size_t>(h);
    }
};

NodeSet setOf(const std::vector<int>& nodes, int size)
{
    NodeSet s(size);
    for (int v : nodes)
        s.insert(v);
    return s;
}

} // namespace

std::vector<int> NodeSet::members() const
{
    std::vector<int> out;
    for (std::size_t w = 0; w < m_words.size(); ++w) {
        auto bits = m_words[w];
        while (bits) {
            out.push_back(static_cast<int>(w * 64) + std::countr_zero(bits));
            bits &= bits - 1;
        }
    }
    return out;
}

AntichainDag::Status AntichainDag::build(
    const std::vector<std::vector<int>>& inputs, int max_states, std::stop_token stop)
{
    m_inputs = inputs;
    m_augmented.clear();
    m_children.clear();
    m_ancestors.clear();
    m_ancestorStart.clear();
    const int n = nodeCount();
    if (n == 0)
        return Status::Ok;

    std::vector<std::vector<int>> out(n);
    for (int v = 0; v < n; ++v)
        for (int u : inputs[v])
            out[u].push_back(v);
    m_predecessors.assign(n, NodeSet(n));
    for (int v = 0; v < n; ++v)
        for (int u : inputs[v]) {
            m_predecessors[v].unite(m_predecessors[u]);
            m_predecessors[v].insert(u);
        }
    std::vector<NodeSet> successors(n, NodeSet(n));
    for (int v = n - 1; v >= 0; --v)
        for (int w : out[v]) {
            successors[v].unite(successors[w]);
            successors[v].insert(w);
        }
    // live[a]: predecessors of a whose output is also read outside pred(a) ∪ {a}; the augmentation of an
    // antichain is the union of its members' live sets (graph.py's augment_antichain, per member).
    std::vector<NodeSet> live(n, NodeSet(n));
    for (int a = 0; a < n; ++a)
        for (int p : m_predecessors[a].members())
            for (int w : out[p])
                if (w != a && !m_predecessors[a].contains(w)) {
                    live[a].insert(p);
                    break;
                }

    auto augment = [&](const std::vector<int>& antichain) {
        NodeSet extra(n);
        for (int a : antichain)
            extra.unite(live[a]);
        auto result = extra.members();
        result.insert(result.end(), antichain.begin(), antichain.end());
        return result;
    };

    // Breadth-first discovery; ids in discovery order.
    std::unordered_map<std::vector<int>, int, VectorHash> ids;
    std::vector<std::vector<int>> antichains;
    std::vector<std::vector<int>> augmented;
    std::vector<std::vector<int>> children;
    auto discover = [&](std::vector<int> antichain) {
        auto key = antichain;
        std::sort(key.begin(), key.end());
        auto [it, inserted] = ids.emplace(std::move(key), static_cast<int>(antichains.size()));
        if (inserted) {
            augmented.push_back(augment(antichain));
            antichains.push_back(std::move(antichain));
            children.emplace_back();
        }
        return it->second;
    };
    int start = 0;
    while (!inputs[start].empty())
        ++start;
    discover({start});
    for (std::size_t s = 0; s < antichains.size(); ++s) {
        if ((s & 63) == 0 && stop.stop_requested())
            return Status::Cancelled;
        const auto aug = augmented[s];
        const NodeSet antichainSet = setOf(antichains[s], n);
        const NodeSet augSet = setOf(aug, n);
        for (std::size_t idx = 0; idx < aug.size(); ++idx) {
            for (int v : out[aug[idx]]) {
                if (antichainSet.contains(v) || successors[v].intersects(augSet))
                    continue;
                auto next = aug;
                next[idx] = v;
                const NodeSet nextSet = setOf(next, n);
                NodeSet kept(n);
                std::vector<int> deaugmented;
                for (int x : next)
                    if (!successors[x].intersects(nextSet) && !kept.contains(x)) {
                        kept.insert(x);
                        deaugmented.push_back(x);
                    }
                int child = discover(std::move(deaugmented));
                if (std::find(children[s].begin(), children[s].end(), child) == children[s].end())
                    children[s].push_back(child);
                if (static_cast<int>(antichains.size()) > max_states) {
                    m_augmented.resize(antichains.size());
                    return Status::TooLarge;
                }
            }
        }
    }

    // Reverse post-order of a depth-first search from the first state.
    const int count = static_cast<int>(antichains.size());
    std::vector<int> postorder;
    postorder.reserve(count);
    std::vector<char> visited(count, 0);
    std::vector<std::pair<int, std::size_t>> stack {{0, 0}};
    visited[0] = 1;
    while (!stack.empty()) {
        auto& [s, next] = stack.back();
        if (next < children[s].size()) {
            int c = children[s][next++];
            if (!visited[c]) {
                visited[c] = 1;
                stack.push_back({c, 0});
            }
        } else {
            postorder.push_back(s);
            stack.pop_back();
        }
    }
    std::vector<int> number(count);
    for (int i = 0; i < count; ++i)
        number[postorder[count - 1 - i]] = i;
    m_augmented.assign(count, {});
    m_children.assign(count, {});
    for (int s = 0; s < count; ++s) {
        m_augmented[number[s]] = std::move(augmented[s]);
        for (int c : children[s])
            m_children[number[s]].push_back(number[c]);
    }
    return Status::Ok;
}

AntichainDag::Status AntichainDag::computeAncestors(std::int64_t max_entries, std::stop_token stop)
{
    const int count = stateCount();
    std::vector<std::vector<int>> parents(count);
    for (int s = 0; s < count; ++s)
        for (int c : m_children[s])
            parents[c].push_back(s);
    m_ancestors.clear();
    m_ancestorStart.assign(1, 0);
    std::vector<int> stamp(count, -1);
    std::vector<int> stack;
    for (int j = 0; j < count; ++j) {
        if ((j & 63) == 0 && stop.stop_requested())
            return Status::Cancelled;
        const auto begin = m_ancestors.size();
        stack.assign(parents[j].begin(), parents[j].end());
        for (int p : parents[j])
            stamp[p] = j;
        while (!stack.empty()) {
            int s = stack.back();
            stack.pop_back();
            m_ancestors.push_back(s);
            for (int p : parents[s])
                if (stamp[p] != j) {
                    stamp[p] = j;
                    stack.push_back(p);
                }
        }
        std::sort(m_ancestors.begin() + static_cast<std::ptrdiff_t>(begin), m_ancestors.end());
        m_ancestorStart.push_back(static_cast<std::int64_t>(m_ancestors.size()));
        if (static_cast<std::int64_t>(m_ancestors.size()) > max_entries)
            return Status::TooLarge;
    }
    return Status::Ok;
}

NodeSet AntichainDag::closure(int state) const
{
    NodeSet c(nodeCount());
    for (int x : m_augmented[state]) {
        c.unite(m_predecessors[x]);
        c.insert(x);
    }
    return c;
}

} // namespace pw::planner
