// SPDX-License-Identifier: MIT
// HetPipe (Park et al., ATC'20): virtual workers of possibly different GPUs, each partitioned by an exact
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
// min-max DP over its GPU orders, run as independent pipelines under wave synchronous parallel.
// The pieces are public for the tests; the partitioner ("hetpipe") is in the registry.
#pragma once

#include <string>
#include <vector>

#include "../plan.h"

namespace pw::planner::hetpipe {

/// Groups of device indices, one per virtual worker (VW), under an allocation policy (digest §1.2.1):
/// "np" one node per VW; "ed" an equal share of every node's devices per VW; "hd" fastest with slowest (devices
/// sorted by the model's time on their type, each VW takes ceil(k/2) from the fast end and floor(k/2) from the
/// slow end); "custom" consecutive blocks of `custom_order`. Only the first `devices` devices are used.
/// `vws` is the VW count, 0 = automatic. Each group is sorted by device index. Throws InputError with a
/// message for the user when the policy cannot form the groups.
std::vector<std::vector<int>> allocateVirtualWorkers(const ModelProfile& model, const Cluster& cluster, int devices,
    const std::string& policy, int vws, const std::vector<int>& custom_order);

/// @brief Per-layer sums of one VW's problem (times per device, memory terms) for O(1) stage costs.
class StageCosts
{
public:
    /// `base` gives the model, cluster, microbatch size and optimizer (its stages are ignored).
    StageCosts(const Plan& base, const std::vector<int>& devices);

    int layers() const { return m_layers; }
    /// E_q of digest §1.2.2: F+B of positions [first, last] on `order[q]` plus its local update, plus the
    /// time to receive the activation from order[q-1] (q > 0) and the gradient from order[q+1] (q < k-1).
    double stageSeconds(const std::vector<int>& order, int q, int first, int last) const;
    /// The same by slots (indices into the VW's devices): `from` / `to` are the neighbours' slots, -1 for none.
    double stageSecondsAt(int me, int from, int to, int first, int last) const;
    /// Mem_q(N_m) of digest §1.2.2 with the conservative n_q (N_m before the last stage, 1 on it):
    /// weights x (n_q + 2) + optimizer state + n_q x stashed activations.
    double stageMemoryBytes(int k, int q, int first, int last, int nm) const;
    double capacity(int device) const; ///< memory of a device (infinite when the type gives none)
    int slot(int device) const; ///< index of a device among the VW's devices
    double capacityAt(int slot) const { return m_capacity[slot]; }

private:
    const Plan& m_plan;
    int m_layers = 0;
    std::vector<int> m_devices;
    std::vector<std::vector<double>> m_time; ///< per VW device: prefix sums of F+B seconds
    std::vector<double> m_step; ///< per VW device: local-update seconds per weight byte
    std::vector<double> m_weight, m_act, m_opt; ///< prefix sums
    std::vector<double> m_cut; ///< bytes crossing the cut after each position
    std::vector<double> m_capacity; ///< per VW device
    std::vector<std::vector<double>> m_latency, m_bandwidth; ///< [from slot][to slot]
};

/// @brief The best partition of one VW for N_m minibatches in flight.
struct VwPartition
{
    bool feasible = false;
    std::vector<int> order; ///< devices in stage order
    std::vector<int> boundaries; ///< last position of every stage but the final one
    double objective_s = 0; ///< max_q E_q
    long long orders_checked = 0;
    bool truncated = false; ///< more distinct orders existed than max_orders
};

/// Exact min-max partition of the layers into k = devices.size() non-empty contiguous stages over every
/// distinct device order (devices of the same type on the same node are interchangeable), with the memory
/// limit for `nm` minibatches in flight: D[q][j] = min_i max(D[q-1][i-1], E_q(i..j)) (digest §1.2.2).
VwPartition partitionVirtualWorker(const Plan& base, const std::vector<int>& devices, int nm, long long max_orders);

} // namespace pw::planner::hetpipe
