// SPDX-License-Identifier: MIT
// PipeDream's antichain DAG of a layer graph: the cut states its reference optimizer partitions between.
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
#pragma once

#include <cstdint>
#include <span>
#include <stop_token>
#include <vector>

namespace pw::planner {

/// @brief A set of graph nodes as a bitset.
class NodeSet
{
public:
    NodeSet() = default;
    explicit NodeSet(int size)
        : m_words((size + 63) / 64, 0)
    {
    }

    void insert(int v) { m_words[v >> 6] |= std::uint64_t {1} << (v & 63); }
    bool contains(int v) const { return (m_words[v >> 6] >> (v & 63)) & 1; }
    void unite(const NodeSet& other)
    {
        for (std::size_t w = 0; w < m_words.size(); ++w)
            m_words[w] |= other.m_words[w];
    }
    bool intersects(const NodeSet& other) const
    {
        for (std::size_t w = 0; w < m_words.size(); ++w)
            if (m_words[w] & other.m_words[w])
                return true;
        return false;
    }
    /// Members in ascending order.
    std::vector<int> members() const;

private:
    std::vector<std::uint64_t> m_words;
};

/// @brief The antichain DAG of PipeDream's graph.Graph.antichain_dag(), states in topological order.
///
/// Built by breadth-first search from the antichain {first source}. A state's augmented antichain is the
/// antichain plus every predecessor p of a member a with an out-edge leaving pred(a) ∪ {a}; its
/// successors replace one augmented member u by an out-neighbour v (not in the antichain, with no
/// successor in the augmented antichain) and drop members that precede other members. States are then
/// numbered in the reverse post-order of a depth-first search from the first state (children in the
/// order found), as the reference's topological sort numbers them; for a chain, state i is "the first
/// i+1 nodes". Augmented members are kept as extra nodes (ascending) followed by the antichain.
class AntichainDag
{
public:
    enum class Status { Ok, TooLarge, Cancelled };

    /// `inputs[v]` lists the producers of node v, all of them < v (nodes in topological order). At most
    /// `max_states` states are explored; beyond that the build stops with TooLarge.
    Status build(const std::vector<std::vector<int>>& inputs, int max_states, std::stop_token stop = {});

    /// All ancestors of every state (transitive), as sorted lists; TooLarge when their total would
    /// exceed `max_entries`.
    Status computeAncestors(std::int64_t max_entries, std::stop_token stop = {});

    int nodeCount() const { return static_cast<int>(m_inputs.size()); }
    /// States found (also when the build stopped with TooLarge: then the count reached).
    int stateCount() const { return static_cast<int>(m_augmented.size()); }
    const std::vector<int>& augmented(int state) const { return m_augmented[state]; }
    /// Every node at or before the cut of `state`: the augmented antichain and all its predecessors.
    NodeSet closure(int state) const;
    std::span<const int> ancestors(int state) const
    {
        return {m_ancestors.data() + m_ancestorStart[state],
            static_cast<std::size_t>(m_ancestorStart[state + 1] - m_ancestorStart[state])};
    }
    std::int64_t ancestorEntries() const { return m_ancestorStart.empty() ? 0 : m_ancestorStart.back(); }

private:
    std::vector<std::vector<int>> m_inputs;
    std::vector<NodeSet> m_predecessors; ///< transitive, exclusive
    std::vector<std::vector<int>> m_augmented; ///< per state (topological numbering)
    std::vector<std::vector<int>> m_children; ///< per state
    std::vector<int> m_ancestors;
    std::vector<std::int64_t> m_ancestorStart;
};

} // namespace pw::planner
