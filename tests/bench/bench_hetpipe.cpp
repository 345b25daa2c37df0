// SPDX-License-Identifier: MIT
// HetPipe's per-virtual-worker partition (exact min-max DP over every distinct GPU order) against its baseline,
// measured in the same run: every distinct order enumerated with a full O(k L^2) DP each, which is what the
// depth-first search with shared prefix rows and branch and bound replaced. Both must give the same optimum.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <vector>

#include "bench_common.h"
#include "planner/device_presets.h"
#include "planner/io/transformer.h"
#include "planner/partition/hetpipe.h"

using namespace pw::planner;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The baseline: for each distinct order (devices of one type on one node interchangeable), the plain DP.
double everyOrder(const Plan& base, const std::vector<int>& devices, int nm, long long& orders)
{
    const hetpipe::StageCosts costs(base, devices);
    const int k = static_cast<int>(devices.size());
    const int L = base.model->layerCount();
    std::map<std::pair<int, int>, std::vector<int>> byClass;
    for (int d : devices) {
        auto ref = base.cluster->device(d);
        byClass[{ref.type, ref.node}].push_back(d);
    }
    std::vector<int> keys;
    std::vector<std::vector<int>> members;
    for (auto& [key, list] : byClass) {
        for (std::size_t i = 0; i < list.size(); ++i)
            keys.push_back(static_cast<int>(members.size()));
        members.push_back(list);
    }
    double best = kInf;
    std::vector<int> order(k);
    std::vector<double> prev(L), cur(L);
    orders = 0;
    do {
        ++orders;
        std::vector<std::size_t> used(members.size(), 0);
        for (int q = 0; q < k; ++q)
            order[q] = members[keys[q]][used[keys[q]]++];
        std::fill(prev.begin(), prev.end(), kInf);
        for (int q = 0; q < k; ++q) {
            std::fill(cur.begin(), cur.end(), kInf);
            for (int j = q; j <= L - k + q; ++j)
                for (int i = q; i <= j; ++i) {
                    const double before = q == 0 ? (i == 0 ? 0.0 : kInf) : prev[i - 1];
                    if (before >= cur[j] || costs.stageMemoryBytes(k, q, i, j, nm) > costs.capacity(order[q]))
                        continue;
                    cur[j] = std::min(cur[j], std::max(before, costs.stageSeconds(order, q, i, j)));
                }
            std::swap(prev, cur);
        }
        best = std::min(best, prev[L - 1]);
    } while (std::next_permutation(keys.begin(), keys.end()));
    return best;
}

/// `nodes` nodes of `perNode` GPUs, the types of HetPipe's Table 1 in turn; the VW takes one GPU of each node.
Plan setting(int layers, int nodes, int perNode)
{
    Plan base;
    TransformerConfig gpt {layers, 1024, 16, 1024, 51200, 4, 2};
    base.model = transformerProfile(gpt, *devicePreset("TITAN V"));
    const char* types[] = {"TITAN V", "TITAN RTX", "RTX 2060", "Quadro P4000"};
    for (int t = 0; t < 4; ++t) {
        auto type = *devicePreset(types[t]);
        type.relative_speed = type.peak_tflops / devicePreset("TITAN V")->peak_tflops; // the profile's device
        base.cluster.edit().device_types.push_back(type);
    }
    for (int n = 0; n < nodes; ++n)
        base.cluster.edit().nodes.push_back(
            {"n" + std::to_string(n), "", 22, "", types[n % 4], perNode, 15.75e9, 1e-5});
    base.cluster.edit().inter_node_bandwidth_bytes_per_s = 7e9;
    base.cluster.edit().inter_node_latency_s = 5e-6;
    return base;
}

} // namespace

int main()
{
    std::printf("HetPipe per-VW DP: depth-first over GPU orders with shared prefixes and branch and bound\n");
    std::printf("%-34s %9s %12s %12s %9s %s\n", "virtual worker", "orders", "dfs", "every order", "ratio", "optimum");
    struct Case
    {
        int layers, nodes, nm;
    };
    for (auto c : std::vector<Case> {{24, 4, 4}, {24, 6, 6}, {24, 8, 8}, {48, 8, 8}}) {
        Plan base = setting(c.layers, c.nodes, 1);
        std::vector<int> vw;
        for (int d = 0; d < c.nodes; ++d)
            vw.push_back(d);
        hetpipe::VwPartition fast;
        const double tFast
            = pw::bench::bestOf(3, [&] { fast = hetpipe::partitionVirtualWorker(base, vw, c.nm, 1LL << 40); });
        long long orders = 0;
        double slow = 0;
        const double tSlow = pw::bench::bestOf(1, [&] { slow = everyOrder(base, vw, c.nm, orders); });
        const bool same = fast.feasible ? std::abs(fast.objective_s - slow) <= 1e-12 * slow : slow == kInf;
        char label[64];
        std::snprintf(label, sizeof label, "%d layers, %d GPUs, N_m = %d", c.layers + 2, c.nodes, c.nm);
        std::printf("%-34s %9lld %10.4f s %10.4f s %8.1fx %s\n", label, orders, tFast, tSlow, tSlow / tFast,
            same ? "same" : "DIFFERENT");
        if (!same)
            return 1;
    }
    return 0;
}
