// SPDX-License-Identifier: MIT
// HetPipe (Park et al., ATC'20; digest §1): allocation policies NP / ED / HD / custom, the per-VW min-max DP
// over distinct GPU orders with the N_m memory limit, and the choice of N_m by simulated throughput.
#include "hetpipe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>

#include "../costs.h"
#include "../errors.h"
#include "../sim/simulator.h"
#include "builtin.h"

namespace pw::planner {
namespace hetpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string& message)
{
    throw InputError(message);
}

/// Devices of the first `devices`, per node (nodes without any left out).
std::vector<std::vector<int>> nodeGroups(const Cluster& cluster, int devices)
{
    std::vector<std::vector<int>> groups(cluster.nodes.size());
    for (int d = 0; d < devices; ++d)
        groups[cluster.device(d).node].push_back(d);
    groups.erase(std::remove_if(groups.begin(), groups.end(), [](const auto& g) { return g.empty(); }), groups.end());
    return groups;
}

/// Seconds of one forward and backward of the whole model on a device's type: HD's speed ranking.
double modelSeconds(const ModelProfile& model, const Cluster& cluster, const DeviceType& type)
{
    const double speed = deviceSpeed(type, model, cluster.device_types).factor;
    double t = 0;
    for (const auto& layer : model.layers) {
        auto lt = layerTimesOn(layer, type, speed);
        t += lt.forward_ms + lt.backward_ms;
    }
    return t;
}

} // namespace

std::vector<std::vector<int>> allocateVirtualWorkers(const ModelProfile& model, const Cluster& cluster, int devices,
    const std::string& policy, int vws, const std::vector<int>& custom)
{
    if (devices < 1)
        fail("HetPipe needs at least one GPU, got " + std::to_string(devices));
    if (vws < 0)
        fail("the number of virtual workers must be >= 1 (0 = automatic), got " + std::to_string(vws));
    if (vws > devices)
        fail(std::to_string(vws) + " virtual workers need at least " + std::to_string(vws) + " GPUs, there are "
            + std::to_string(devices));
    const auto nodes = nodeGroups(cluster, devices);
    const int H = static_cast<int>(nodes.size());
    std::vector<std::vector<int>> out;
    if (policy == "np") {
        // Node Partition: one whole node per VW (digest §1.2.1, Table 3: VVVV, RRRR, GGGG, QQQQ).
        if (vws != 0 && vws != H)
            fail("policy np makes one virtual worker per node: the " + std::to_string(devices) + " GPUs span "
                + std::to_string(H) + " node(s), got virtual-workers = " + std::to_string(vws));
        out = nodes;
    } else if (policy == "ed") {
        // Equal Distribution: VW v takes the v-th equal share of every node (Table 3: VRGQ x 4).
        int g = 0;
        for (const auto& n : nodes)
            g = std::gcd(g, static_cast<int>(n.size()));
        int N = vws;
        if (N == 0) {
            N = 1;
            for (int c = std::min(H, g); c >= 1; --c)
                if (g % c == 0) {
                    N = c;
                    break;
                }
        }
        for (std::size_t i = 0; i < nodes.size(); ++i)
            if (static_cast<int>(nodes[i].size()) % N != 0)
                fail("policy ed gives every virtual worker an equal share of every node, so virtual-workers = "
                    + std::to_string(N) + " must divide every node's GPU count; node '"
                    + cluster.nodes[cluster.device(nodes[i][0]).node].name + "' has "
                    + std::to_string(nodes[i].size()));
        out.resize(N);
        for (const auto& n : nodes) {
            const int share = static_cast<int>(n.size()) / N;
            for (int v = 0; v < N; ++v)
                out[v].insert(out[v].end(), n.begin() + v * share, n.begin() + (v + 1) * share);
        }
    } else if (policy == "hd") {
        // Hybrid Distribution (INF generalisation of Table 3's VVQQ, VVQQ, RRGG, RRGG): devices sorted fastest
        // first; each VW takes ceil(k/2) from the fast end and floor(k/2) from the slow end, so every VW pairs
        // fast with slow GPUs and the VWs' compute evens out.
        const int N = vws != 0 ? vws : H;
        if (devices % N != 0)
            fail("virtual-workers = " + std::to_string(N) + " does not divide the " + std::to_string(devices)
                + " GPUs into equal virtual workers");
        const int k = devices / N;
        std::vector<std::pair<double, int>> ranked;
        for (int d = 0; d < devices; ++d)
            ranked.push_back({modelSeconds(model, cluster, cluster.typeOf(d)), d});
        std::stable_sort(ranked.begin(), ranked.end());
        std::size_t front = 0, back = ranked.size();
        out.resize(N);
        for (int v = 0; v < N; ++v) {
            for (int i = 0; i < (k + 1) / 2; ++i)
                out[v].push_back(ranked[front++].second);
            for (int i = 0; i < k / 2; ++i)
                out[v].push_back(ranked[--back].second);
        }
    } else if (policy == "custom") {
        if (custom.empty())
            fail("policy custom needs the option vw-devices: the device indices of the virtual workers, one block "
                 "of equal size per virtual worker");
        const int N = vws != 0 ? vws : 1;
        const int total = static_cast<int>(custom.size());
        if (total % N != 0)
            fail("virtual-workers = " + std::to_string(N) + " does not divide the " + std::to_string(total)
                + " devices of vw-devices into equal virtual workers");
        std::vector<bool> seen(devices, false);
        for (int d : custom) {
            if (d < 0 || d >= devices)
                fail("vw-devices names device " + std::to_string(d) + ", but " + std::to_string(devices)
                    + " GPUs are in use");
            if (seen[d])
                fail("vw-devices lists device " + std::to_string(d) + " twice");
            seen[d] = true;
        }
        const int k = total / N;
        for (int v = 0; v < N; ++v)
            out.emplace_back(custom.begin() + v * k, custom.begin() + (v + 1) * k);
    } else {
        fail("unknown allocation policy '" + policy + "' (np, ed, hd or custom)");
    }
    for (auto& g : out)
        std::sort(g.begin(), g.end());
    return out;
}

StageCosts::StageCosts(const Plan& base, const std::vector<int>& devices)
    : m_plan(base)
    , m_layers(base.model->layerCount())
    , m_devices(devices)
{
    const double scale = microbatchScale(base);
    const double optFactor = optimizerStateFactor(base.schedule, base.model); // one replica per stage
    const int L = m_layers;
    m_weight.assign(L + 1, 0);
    m_act.assign(L + 1, 0);
    m_opt.assign(L + 1, 0);
    for (int pos = 0; pos < L; ++pos) {
        const auto& layer = base.model->layers[base.layerAt(pos)];
        m_weight[pos + 1] = m_weight[pos] + layer.weight_bytes;
        m_act[pos + 1] = m_act[pos] + layer.stashed_bytes.value_or(layer.activation_bytes) * scale;
        m_opt[pos + 1] = m_opt[pos] + layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes);
    }
    for (int d : devices) {
        const auto& type = base.cluster->typeOf(d);
        const double speed = deviceSpeed(type, base.model, base.cluster->device_types).factor;
        std::vector<double> t(L + 1, 0);
        for (int pos = 0; pos < L; ++pos) {
            auto lt = layerTimesOn(base.model->layers[base.layerAt(pos)], type, speed);
            t[pos + 1] = t[pos] + (lt.forward_ms + lt.backward_ms) * 1e-3 * scale;
        }
        m_time.push_back(std::move(t));
        m_step.push_back(type.memory_bandwidth_bytes_per_s > 0 ? 1.0 / type.memory_bandwidth_bytes_per_s : 0.0);
    }
    const int k = static_cast<int>(devices.size());
    m_latency.assign(k, std::vector<double>(k, 0.0));
    m_bandwidth.assign(k, std::vector<double>(k, 0.0));
    for (int a = 0; a < k; ++a) {
        m_capacity.push_back(capacity(devices[a]));
        for (int b = 0; b < k; ++b)
            if (a != b) {
                m_latency[a][b] = base.cluster->latency(devices[a], devices[b]);
                m_bandwidth[a][b] = base.cluster->bandwidth(devices[a], devices[b]);
            }
    }
    auto cut = base.model->cutBytes(base.layer_order);
    m_cut.resize(L);
    for (int pos = 0; pos < L; ++pos)
        m_cut[pos] = cut[pos] * scale;
}

int StageCosts::slot(int device) const
{
    for (std::size_t i = 0; i < m_devices.size(); ++i)
        if (m_devices[i] == device)
            return static_cast<int>(i);
    throw std::logic_error("hetpipe: device " + std::to_string(device) + " is not in the virtual worker");
}

double StageCosts::capacity(int device) const
{
    const double m = m_plan.cluster->typeOf(device).memory_bytes;
    return m > 0 ? m : kInf;
}

double StageCosts::stageSeconds(const std::vector<int>& order, int q, int first, int last) const
{
    const int k = static_cast<int>(order.size());
    return stageSecondsAt(
        slot(order[q]), q > 0 ? slot(order[q - 1]) : -1, q + 1 < k ? slot(order[q + 1]) : -1, first, last);
}

double StageCosts::stageSecondsAt(int me, int from, int to, int first, int last) const
{
    const double weight = m_weight[last + 1] - m_weight[first];
    const double opt = m_opt[last + 1] - m_opt[first];
    double e = m_time[me][last + 1] - m_time[me][first] + (3 * weight + 2 * opt) * m_step[me];
    const auto receive = [&](int peer, double bytes) {
        const double lat = m_latency[peer][me], bw = m_bandwidth[peer][me];
        return bytes <= 0 ? lat : lat + (bw > 0 ? bytes / bw : kInf);
    };
    if (from >= 0)
        e += receive(from, m_cut[first - 1]);
    if (to >= 0)
        e += receive(to, m_cut[last]);
    return e;
}

double StageCosts::stageMemoryBytes(int k, int q, int first, int last, int nm) const
{
    const double n = q + 1 < k ? nm : 1;
    const double weight = m_weight[last + 1] - m_weight[first];
    return weight * (n + 2) + (m_opt[last + 1] - m_opt[first]) + n * (m_act[last + 1] - m_act[first]);
}

VwPartition partitionVirtualWorker(const Plan& base, const std::vector<int>& devices, int nm, long long maxOrders)
{
    VwPartition best;
    const int k = static_cast<int>(devices.size());
    const int L = base.model->layerCount();
    if (k < 1 || k > L)
        return best;
    StageCosts costs(base, devices);
    // Devices of one type on one node are interchangeable: permute classes, not devices.
    std::map<std::pair<int, int>, std::vector<int>> byClass;
    for (int d : devices) {
        auto ref = base.cluster->device(d);
        byClass[{ref.type, ref.node}].push_back(d);
    }
    std::vector<std::vector<int>> members;
    for (auto& [key, list] : byClass)
        members.push_back(list);
    const int classes = static_cast<int>(members.size());
    std::vector<int> left(classes), order(k), slots(k);
    for (int c = 0; c < classes; ++c)
        left[c] = static_cast<int>(members[c].size());

    // Depth-first over the distinct orders, sharing the DP rows of a common prefix. D[q][j]: the best bottleneck of
    // stages 0..q covering positions 0..j (stage q ends at j). Stage q's cost needs its successor (the gradient
    // comes from it), so row q is computed once position q + 1 is placed; the last row at the leaf. A prefix whose
    // row minimum is no better than the best complete order cannot lead to a better one (the bottleneck only
    // grows), so its subtree is skipped: the result is the same optimum as trying every order.
    std::vector<std::vector<double>> D(k, std::vector<double>(L, kInf));
    std::vector<std::vector<int>> arg(k, std::vector<int>(L, -1));
    best.objective_s = kInf;
    const auto computeRow = [&](int q, bool leaf) {
        auto& cur = D[q];
        std::fill(cur.begin(), cur.end(), kInf);
        const double cap = costs.capacityAt(slots[q]);
        const int from = q > 0 ? slots[q - 1] : -1, to = q + 1 < k ? slots[q + 1] : -1;
        const int jMin = leaf ? L - 1 : q, jMax = L - k + q;
        double rowMin = kInf;
        const double bound = best.objective_s * (1 - 1e-12); // values at or above it cannot win
        for (int j = jMin; j <= jMax; ++j) {
            // Stage q holds positions i..j; its memory grows as i moves down, so the first i that does not fit
            // ends the scan.
            for (int i = j; i >= q; --i) {
                if (costs.stageMemoryBytes(k, q, i, j, nm) > cap)
                    break;
                const double before = q == 0 ? (i == 0 ? 0.0 : kInf) : D[q - 1][i - 1];
                if (before >= cur[j] || before >= bound)
                    continue;
                const double v = std::max(before, costs.stageSecondsAt(slots[q], from, to, i, j));
                if (v < cur[j]) {
                    cur[j] = v;
                    arg[q][j] = i;
                }
            }
            rowMin = std::min(rowMin, cur[j]);
        }
        return rowMin;
    };
    const auto place = [&](auto&& self, int q) -> void {
        if (best.truncated)
            return;
        if (q == k) {
            if (best.orders_checked >= maxOrders) {
                best.truncated = true;
                return;
            }
            ++best.orders_checked;
            const double value = computeRow(k - 1, true);
            if (value < best.objective_s * (1 - 1e-12)) {
                best.feasible = true;
                best.objective_s = value;
                best.order = order;
                best.boundaries.assign(k - 1, 0);
                int j = L - 1;
                for (int r = k - 1; r > 0; --r) {
                    const int i = arg[r][j];
                    best.boundaries[r - 1] = i - 1;
                    j = i - 1;
                }
            }
            return;
        }
        for (int c = 0; c < classes; ++c) {
            if (left[c] == 0)
                continue;
            order[q] = members[c][members[c].size() - left[c]];
            slots[q] = costs.slot(order[q]);
            --left[c];
            // Row q - 1 is now complete; prune when it cannot beat the best order found.
            if (q == 0 || computeRow(q - 1, false) < best.objective_s * (1 - 1e-12))
                self(self, q + 1);
            ++left[c];
        }
    };
    place(place, 0);
    if (!best.feasible)
        best.objective_s = 0;
    return best;
}

} // namespace hetpipe

namespace {

std::string groupText(const Cluster& cluster, const std::vector<int>& group)
{
    std::string s;
    for (int d : group)
        s += (s.empty() ? "" : " ") + cluster.deviceName(d);
    return s;
}

class HetPipePartitioner final : public OptionedPartitioner
{
public:
    std::string_view name() const override { return "hetpipe"; }
    std::string_view description() const override
    {
        return "HetPipe: virtual workers of (possibly different) GPUs by policy NP/ED/HD, each partitioned by an "
               "exact min-max DP over its GPU orders under the N_m memory limit; wave synchronous parallel across "
               "them (schedule wsp)";
    }

    std::vector<OptionSpec> options() const override
    {
        using T = OptionSpec::Type;
        using nlohmann::json;
        return {
            {"policy", T::Choice, "ed",
                "which GPUs form each virtual worker: np (one node each), ed (equal share of every node), hd "
                "(fastest with slowest), custom (vw-devices)",
                std::nullopt, std::nullopt, {"np", "ed", "hd", "custom"}},
            {"virtual-workers", T::Integer, json(),
                "number of virtual workers; auto: np one per node, ed the most (up to one per node) that divide "
                "every node, hd one per node, custom 1",
                1, 1'000'000, {}},
            {"vw-devices", T::IntegerList, json(),
                "policy custom: device indices, virtual worker after virtual worker (equal blocks)", 0, kMaxDevices,
                {}},
            {"staleness", T::Integer, 0, "D: waves a virtual worker may run ahead of the slowest one (WSP)", 0,
                1'000'000, {}},
            {"in-flight", T::Integer, json(),
                "N_m: minibatches in flight per virtual worker (the wave size); auto: every feasible value up to "
                "max-in-flight, the best by simulated throughput",
                1, 1'000'000, {}},
            {"max-in-flight", T::Integer, json(),
                "largest N_m tried by auto in-flight; auto: twice the largest virtual worker (and at most the "
                "minibatches simulated)",
                1, 1'000'000, {}},
            {"max-orders", T::Integer, 40320, "at most this many distinct GPU orders per virtual worker in the DP", 1,
                1e9, {}},
            {"parameter-servers", T::Choice, "auto",
                "where the parameters live: local (ED-local: stage q's on the node of stage q of every virtual "
                "worker, pushes and pulls stay inside nodes), round-robin over all nodes, or auto (local when the "
                "virtual workers allow it)",
                std::nullopt, std::nullopt, {"auto", "local", "round-robin"}},
        };
    }

private:
    PartitionResult search(const PartitionRequest& request, const detail::OptionValues& values, int devices,
        const ProgressFn& progress, std::stop_token stop, std::vector<Diagnostic> diag) const override
    {
        const auto& opt = request.options;
        const auto& model = request.model;
        if (opt.schedule.chunks > 1)
            return detail::failure("bad-option",
                "hetpipe plans one stage per GPU (chunks = 1), got chunks = " + std::to_string(opt.schedule.chunks));
        if (opt.schedule.recompute != Recompute::None)
            return detail::failure("bad-option", "hetpipe keeps activations (HetPipe does not recompute)");
        if (opt.schedule.microbatches < 1 || opt.schedule.microbatches > kMaxMicrobatches)
            return detail::failure("bad-option",
                "minibatches per virtual worker (microbatches) must be in [1, " + std::to_string(kMaxMicrobatches)
                    + "], got " + std::to_string(opt.schedule.microbatches));
        if (opt.schedule.microbatch_size < 0)
            return detail::failure("bad-option",
                "the minibatch size must be >= 0 (0 = the profile's), got "
                    + std::to_string(opt.schedule.microbatch_size));

        std::vector<std::vector<int>> groups;
        try {
            groups = hetpipe::allocateVirtualWorkers(model, request.cluster, devices, values.choice("policy"),
                values.has("virtual-workers") ? values.integer("virtual-workers") : 0,
                values.has("vw-devices") ? values.integers("vw-devices") : std::vector<int> {});
        } catch (const InputError& e) {
            return detail::failure("bad-option", e.message());
        }
        int kMax = 0;
        for (std::size_t v = 0; v < groups.size(); ++v) {
            const int k = static_cast<int>(groups[v].size());
            kMax = std::max(kMax, k);
            if (k > model->layerCount())
                return detail::failure("too-many-stages",
                    "virtual worker " + std::to_string(v) + " has " + std::to_string(k) + " GPUs but the model only "
                        + std::to_string(model->layerCount()) + " layers (every GPU needs a non-empty partition)");
        }

        Plan base = detail::basePlan(request, name());
        base.schedule.kind = "wsp";
        base.schedule.chunks = 1;
        base.schedule.in_flight.clear();
        base.schedule.staleness = values.integer("staleness");
        const long long maxOrders = values.integer("max-orders");
        const int minibatches = opt.schedule.microbatches * std::max(1, opt.schedule.iterations);

        std::vector<int> candidatesNm;
        if (values.has("in-flight")) {
            candidatesNm.push_back(values.integer("in-flight"));
        } else {
            int cap = values.has("max-in-flight") ? values.integer("max-in-flight") : 2 * kMax;
            cap = std::max(1, std::min(cap, minibatches));
            for (int n = 1; n <= cap; ++n)
                candidatesNm.push_back(n);
        }

        struct Choice
        {
            Plan plan;
            double throughput = 0;
            Candidate candidate;
        };
        std::optional<Choice> best;
        std::vector<Candidate> rejected;
        std::vector<Candidate> evaluated;
        bool truncated = false;
        const int total = static_cast<int>(candidatesNm.size() * groups.size());
        int done = 0;
        // Larger N_m only tightens the memory limit (the feasible partitions are nested), so a VW's optimum for
        // a smaller N_m that still fits is optimal for the larger one too: the DP reruns only when memory binds.
        std::vector<std::optional<hetpipe::VwPartition>> previous(groups.size());
        std::vector<std::optional<hetpipe::StageCosts>> vwCosts(groups.size());
        int previousNm = 0;
        // VWs whose devices have the same types on the same pattern of nodes cost the same in every order.
        std::vector<std::vector<std::pair<int, int>>> signatures;
        for (const auto& g : groups) {
            signatures.emplace_back();
            for (int d : g) {
                const auto ref = base.cluster->device(d);
                signatures.back().push_back({ref.type, ref.node});
            }
        }
        std::vector<int> solvedAt(groups.size(), 0);
        const auto stillFits = [&](std::size_t v, const hetpipe::VwPartition& part, int nm) {
            if (!vwCosts[v])
                vwCosts[v].emplace(base, groups[v]);
            const auto& costs = *vwCosts[v];
            const int k = static_cast<int>(part.order.size());
            int first = 0;
            for (int q = 0; q < k; ++q) {
                const int last = q + 1 < k ? part.boundaries[q] : model->layerCount() - 1;
                if (costs.stageMemoryBytes(k, q, first, last, nm) > costs.capacity(part.order[q]))
                    return false;
                first = last + 1;
            }
            return true;
        };
        for (int nm : candidatesNm) {
            Plan plan = base;
            plan.schedule.concurrent_minibatches = nm;
            double objective = 0;
            int infeasible = -1;
            for (std::size_t v = 0; v < groups.size(); ++v) {
                if (stop.stop_requested())
                    return detail::failure("cancelled", "partitioning was cancelled");
                const bool reuse = nm > previousNm && previous[v] && previous[v]->feasible && !previous[v]->truncated
                    && stillFits(v, *previous[v], nm);
                std::optional<hetpipe::VwPartition> same; // an identical VW's partition for this N_m (ED's are)
                for (std::size_t u = 0; u < v && !reuse && !same; ++u)
                    if (signatures[u] == signatures[v] && solvedAt[u] == nm && previous[u]) {
                        same = *previous[u];
                        for (int& d : same->order) // same position in the other VW's device list
                            d = groups[v][std::find(groups[u].begin(), groups[u].end(), d) - groups[u].begin()];
                    }
                auto part = reuse ? *previous[v]
                    : same        ? *same
                                  : hetpipe::partitionVirtualWorker(base, groups[v], nm, maxOrders);
                previous[v] = part;
                solvedAt[v] = nm;
                if (progress)
                    progress(static_cast<double>(++done) / total);
                truncated = truncated || part.truncated;
                if (!part.feasible) {
                    infeasible = static_cast<int>(v);
                    break;
                }
                objective = std::max(objective, part.objective_s);
                int first = 0;
                for (int q = 0; q < static_cast<int>(part.order.size()); ++q) {
                    const int last
                        = q + 1 < static_cast<int>(part.order.size()) ? part.boundaries[q] : model->layerCount() - 1;
                    PlanStage st;
                    st.first_layer = first;
                    st.last_layer = last;
                    st.devices = {part.order[q]};
                    st.pipeline = static_cast<int>(v);
                    plan.stages.push_back(std::move(st));
                    first = last + 1;
                }
            }
            previousNm = nm;
            Candidate c;
            c.description = "N_m=" + std::to_string(nm);
            c.config = {{"concurrent_minibatches", nm}};
            if (infeasible >= 0) {
                c.feasible = false;
                c.reason = "virtual worker " + std::to_string(infeasible) + " ("
                    + groupText(request.cluster, groups[infeasible]) + ") does not fit memory with "
                    + std::to_string(nm) + " minibatches in flight";
                rejected.push_back(std::move(c));
                // Memory grows with N_m: Max_m of that VW is nm - 1 (digest §1.2.3), so stop here.
                if (!values.has("in-flight"))
                    break;
                continue;
            }
            const auto servers = values.choice("parameter-servers");
            if (servers != "round-robin") {
                plan.schedule.local_parameter_servers = true;
                try {
                    plan.validate(); // ED-local needs stage q of every VW on one node with the same layers
                } catch (const InputError& e) {
                    plan.schedule.local_parameter_servers = false;
                    if (servers == "local") {
                        c.feasible = false;
                        c.reason = e.message();
                        rejected.push_back(std::move(c));
                        continue;
                    }
                }
            }
            c.config["parameter_servers"] = plan.schedule.local_parameter_servers ? "local" : "round-robin";
            plan.objective_s = objective;
            plan.algorithm_options = values.effective();
            nlohmann::json vws = nlohmann::json::array();
            for (int s = 0; s < plan.stageCount(); s = plan.pipelineEnd(s)) {
                nlohmann::json list = nlohmann::json::array();
                for (int t = s; t < plan.pipelineEnd(s); ++t)
                    list.push_back(plan.stages[t].devices[0]);
                vws.push_back(std::move(list));
            }
            plan.algorithm_options["virtual_worker_devices"] = std::move(vws);
            plan.algorithm_options["concurrent_minibatches"] = nm;
            SimulationResult sim;
            try {
                sim = simulate(plan, SimulationOptions {.record_spans = false, .record_memory = false});
            } catch (const InputError& e) { // this N_m cannot run (e.g. its wave gates); others may
                c.feasible = false;
                c.reason = e.what();
                rejected.push_back(std::move(c));
                continue;
            }
            c.throughput_samples_per_s = sim.throughput_samples_per_s;
            for (const auto& d : sim.devices)
                if (d.memory_capacity_bytes > 0
                    && d.peak_memory_bytes / d.memory_capacity_bytes
                        > c.peak_memory_bytes / std::max(1.0, c.memory_capacity_bytes)) {
                    c.peak_memory_bytes = d.peak_memory_bytes;
                    c.memory_capacity_bytes = d.memory_capacity_bytes;
                }
            plan.predicted = predictedMetrics(sim);
            if (!sim.fitsMemory()) { // the DP's memory bound did not hold in the simulation
                c.feasible = false;
                c.reason = "the simulator finds it over device memory";
                rejected.push_back(std::move(c));
                continue;
            }
            // Ties go to the smaller N_m: less memory and less local staleness.
            if (!best || sim.throughput_samples_per_s > best->throughput * (1 + 1e-9)) {
                if (best) {
                    best->candidate.reason = "lower simulated throughput";
                    evaluated.push_back(best->candidate);
                }
                best = Choice {std::move(plan), sim.throughput_samples_per_s, c};
            } else {
                c.reason = "lower simulated throughput";
                evaluated.push_back(std::move(c));
            }
        }
        if (truncated)
            diag.push_back({Diagnostic::Severity::Warning, "truncated",
                "a virtual worker has more distinct GPU orders than max-orders = " + std::to_string(maxOrders)
                    + "; only the first were searched"});
        if (!best) {
            std::string why = rejected.empty() ? "no N_m to try" : rejected.front().reason;
            diag.push_back({Diagnostic::Severity::Error, "infeasible", "no HetPipe plan can run: " + why});
            PartitionResult failed {std::nullopt, std::move(diag)};
            failed.candidates = std::move(rejected); // each N_m tried, with the reason it was rejected
            return failed;
        }
        PartitionResult result = detail::validated(std::move(best->plan), std::move(diag));
        result.candidates.push_back(best->candidate);
        for (auto& c : evaluated)
            result.candidates.push_back(std::move(c));
        for (auto& c : rejected)
            result.candidates.push_back(std::move(c));
        if (progress)
            progress(1.0);
        return result;
    }
};

} // namespace

const Partitioner& hetPipePartitioner()
{
    static const HetPipePartitioner instance;
    return instance;
}

} // namespace pw::planner
