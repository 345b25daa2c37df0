// SPDX-License-Identifier: MIT
// The "reference" variant of the pipedream partitioner: PipeDream's optimizer_graph_hierarchical.py as implemented.
#include "pipedream_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "../costs.h"
#include "../errors.h"
#include "antichain_dag.h"
#include "builtin.h"
#include "pipedream_reference_dp.h"

namespace pw::planner {
namespace {

using Severity = Diagnostic::Severity;

/// Beyond these the antichain DAG or the DP would take minutes and gigabytes (raw inception_v3 has more
/// than 200,000 states; the published profiles other than it and the NASNets stay under 2,000).
constexpr int kMaxStates = 50'000;
constexpr std::int64_t kMaxAncestorEntries = 25'000'000;
constexpr double kMaxWork = 2e10;

std::string withCommas(double v)
{
    auto s = std::to_string(static_cast<long long>(v));
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
        s.insert(static_cast<std::size_t>(i), ",");
    return s;
}

std::vector<ReferenceLevel> levelsFor(const PartitionRequest& request, int devices, std::vector<Diagnostic>& diag)
{
    std::vector<ReferenceLevel> levels;
    for (const auto& l : detail::pipeDreamLevels(request, devices, diag))
        levels.push_back({l.count, l.bandwidth_bytes_per_s});
    return levels;
}

std::string levelsText(const std::vector<ReferenceLevel>& levels)
{
    std::vector<HierarchyLevel> h;
    for (const auto& l : levels)
        h.push_back({l.machines, l.bandwidth_bytes_per_s});
    return detail::levelsText(h);
}

/// The graph the optimizer sees: Input* sources and then __getitem__ sinks removed (§1.2 item 1).
struct ReducedGraph
{
    std::vector<int> kept; ///< layer index of every remaining node, ascending
    std::vector<std::vector<int>> inputs; ///< producers, as indices into `kept`
    std::vector<int> removed_sources;
    std::vector<int> removed_sinks;
    std::vector<std::vector<int>> layer_inputs; ///< all layers' producers (a chain when not a graph)
};

ReducedGraph reduceGraph(const ModelProfile& model)
{
    const int n = model.layerCount();
    ReducedGraph g;
    g.layer_inputs.resize(n);
    for (int v = 0; v < n; ++v) {
        if (!model.is_graph) {
            if (v > 0)
                g.layer_inputs[v].push_back(v - 1);
            continue;
        }
        for (int u : model.layers[v].inputs)
            if (std::find(g.layer_inputs[v].begin(), g.layer_inputs[v].end(), u) == g.layer_inputs[v].end())
                g.layer_inputs[v].push_back(u);
    }
    std::vector<char> removed(n, 0);
    for (int v = 0; v < n; ++v)
        if (g.layer_inputs[v].empty() && model.layers[v].kind.rfind("Input", 0) == 0) {
            removed[v] = 1;
            g.removed_sources.push_back(v);
        }
    std::vector<int> consumers(n, 0);
    for (int v = 0; v < n; ++v)
        if (!removed[v])
            for (int u : g.layer_inputs[v])
                ++consumers[u];
    for (int v = 0; v < n; ++v)
        if (!removed[v] && consumers[v] == 0 && model.layers[v].kind.rfind("__getitem__", 0) == 0) {
            removed[v] = 1;
            g.removed_sinks.push_back(v);
        }
    std::vector<int> index(n, -1);
    for (int v = 0; v < n; ++v)
        if (!removed[v]) {
            index[v] = static_cast<int>(g.kept.size());
            g.kept.push_back(v);
        }
    for (int v : g.kept) {
        std::vector<int> in;
        for (int u : g.layer_inputs[v])
            if (index[u] >= 0)
                in.push_back(index[u]);
        g.inputs.push_back(std::move(in));
    }
    return g;
}

ReferenceStateCosts stateCosts(const AntichainDag& dag, const ReducedGraph& g, const Plan& plan, const DeviceType& type)
{
    const double scale = microbatchScale(plan);
    const int nodes = static_cast<int>(g.kept.size());
    std::vector<double> compute(nodes), activation(nodes), parameters(nodes);
    const double speed = deviceSpeed(type, plan.model, plan.cluster->device_types).factor;
    for (int x = 0; x < nodes; ++x) {
        const auto& layer = plan.model->layers[g.kept[x]];
        auto t = layerTimesOn(layer, type, speed);
        compute[x] = (t.forward_ms * scale + t.backward_ms * scale) / 1000.0;
        activation[x] = layer.activation_bytes * scale;
        parameters[x] = layer.weight_bytes;
    }
    ReferenceStateCosts c;
    for (int s = 0; s < dag.stateCount(); ++s) {
        double sc = 0, sa = 0, sp = 0, so = 0;
        for (int x : dag.closure(s).members()) {
            sc += compute[x];
            sa += activation[x];
            sp += parameters[x];
        }
        for (int x : dag.augmented(s))
            so += activation[x];
        c.compute_s.push_back(sc);
        c.activation_bytes.push_back(sa);
        c.parameter_bytes.push_back(sp);
        c.output_bytes.push_back(so);
    }
    return c;
}

/// Stage of every layer: each stage takes the nodes up to its last state's cut not taken before (as the
/// reference assigns them); removed sources go to the first stage, removed sinks and nodes no state
/// reaches (counted in `unreached`) to the last. Returns false when a consumer had to be moved into a
/// later stage to keep the order topological.
bool assignLayers(const AntichainDag& dag, const ReducedGraph& g, const std::vector<ReferenceStage>& stages, int layers,
    std::vector<int>& stageOf, int& unreached)
{
    const int last = static_cast<int>(stages.size()) - 1;
    stageOf.assign(layers, -1);
    for (int s = 0; s <= last; ++s)
        for (int x : dag.closure(stages[s].last_state).members())
            if (stageOf[g.kept[x]] < 0)
                stageOf[g.kept[x]] = s;
    for (int v : g.removed_sources)
        stageOf[v] = 0;
    for (int v : g.removed_sinks)
        stageOf[v] = last;
    unreached = 0;
    for (auto& s : stageOf)
        if (s < 0) {
            s = last;
            ++unreached;
        }
    bool consistent = true;
    for (int v = 0; v < layers; ++v)
        for (int u : g.layer_inputs[v])
            if (stageOf[u] > stageOf[v]) {
                stageOf[v] = stageOf[u];
                consistent = false;
            }
    return consistent;
}

/// Seconds with nine significant digits and no unit, as the reference prints them.
std::string referenceSeconds(double s)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", s);
    return buf;
}

} // namespace

PartitionResult partitionPipeDreamReference(
    const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop)
{
    const auto& opt = request.options;
    std::vector<Diagnostic> diag;
    auto fail = [&diag](std::string code, std::string message) {
        diag.push_back({Severity::Error, std::move(code), std::move(message)});
        return PartitionResult {std::nullopt, diag};
    };
    auto devices = detail::usableDevices(request, diag);
    if (!devices)
        return {std::nullopt, diag};
    if (opt.activation_compression_ratio && !(*opt.activation_compression_ratio > 0))
        return fail("bad-option", "--activation-compression-ratio must be > 0");
    const auto& cluster = request.cluster;
    const auto& type = cluster->typeOf(0);
    double memory = type.memory_bytes;
    bool mixed = false;
    for (int d = 1; d < *devices; ++d) {
        memory = std::min(memory, cluster->typeOf(d).memory_bytes);
        mixed = mixed || cluster->typeOf(d).name != type.name;
    }
    if (mixed)
        diag.push_back({Severity::Warning, "heterogeneous",
            "PipeDream's optimizer assumes one device type; costs use " + type.name});
    auto levels = levelsFor(request, *devices, diag);
    for (const auto& l : levels)
        if (l.machines > 1 && !(l.bandwidth_bytes_per_s > 0))
            return fail("bad-cluster",
                "PipeDream needs a bandwidth > 0 between the " + std::to_string(l.machines) + " workers of a level");
    if (opt.memory_limit && !(memory > 0))
        return fail("bad-cluster", "the memory constraint needs the device type's memory_bytes");

    Plan plan = detail::basePlan(request, "pipedream");
    if (plan.schedule.chunks > 1) {
        plan.schedule.chunks = 1;
        diag.push_back({Severity::Warning, "chunks", "the reference variant plans without interleaving"});
    }
    const auto graph = reduceGraph(request.model);
    if (graph.kept.empty())
        return fail("empty-model", "the model has no layers besides its inputs");

    AntichainDag dag;
    auto status = dag.build(graph.inputs, kMaxStates, stop);
    if (status == AntichainDag::Status::Ok)
        status = dag.computeAncestors(kMaxAncestorEntries, stop);
    if (status == AntichainDag::Status::Cancelled)
        return fail("cancelled", "partitioning was cancelled");
    const std::string modelName = request.model->name.empty() ? "the model" : "'" + request.model->name + "'";
    const std::string hint = "; compress its branches first (e.g. inception_v3_compressed for inception_v3) or use "
                             "--pipedream-variant paper";
    if (status == AntichainDag::Status::TooLarge) {
        std::string count = dag.ancestorEntries() > kMaxAncestorEntries
            ? withCommas(dag.stateCount()) + " states whose ancestor lists exceed "
                + withCommas(static_cast<double>(kMaxAncestorEntries)) + " entries"
            : "more than " + withCommas(kMaxStates) + " states";
        return fail("too-many-states", "the antichain DAG of " + modelName + " has " + count + hint);
    }
    const double work = ReferenceDp::estimatedWork(dag, levels, opt.straight);
    if (work > kMaxWork)
        return fail("too-many-states",
            "the antichain DAG of " + modelName + " has " + withCommas(dag.stateCount()) + " states; the "
                + levelsText(levels) + " DP would need about " + withCommas(work) + " steps" + hint
                + ", or plan with --flat");

    ReferenceDpSettings settings;
    settings.straight = opt.straight;
    if (opt.memory_limit)
        settings.memory_bytes = memory;
    settings.activation_compression_ratio = opt.activation_compression_ratio;
    ReferenceDp dp(dag, stateCosts(dag, graph, plan, type), levels, settings);
    if (!dp.solve(progress, stop))
        return fail("cancelled", "partitioning was cancelled");
    auto objective = dp.objective();
    if (!objective) {
        std::string why = opt.memory_limit ? "no partition fits " + withCommas(memory) + " bytes per device"
                                           : "no partition exists";
        if (opt.straight && dag.stateCount() < *devices)
            why += " (a straight pipeline needs at least one antichain state per device; there are "
                + std::to_string(dag.stateCount()) + " states for " + std::to_string(*devices) + " devices)";
        diag.push_back({Severity::Error, "infeasible", why});
        return {std::nullopt, diag};
    }

    const auto stages = dp.stages();
    const int layers = request.model->layerCount();
    std::vector<int> stageOf;
    int unreached = 0;
    const bool consistent = assignLayers(dag, graph, stages, layers, stageOf, unreached);
    if (unreached > 0)
        diag.push_back({Severity::Warning, "unreached-layers",
            std::to_string(unreached)
                + " layer(s) lie outside every antichain state (the graph is "
                  "not connected from its first source); the reference ignores their cost, they run "
                  "in the last stage"});
    if (!consistent)
        diag.push_back({Severity::Warning, "stage-order",
            "some layers were moved to a later stage to keep the layer order topological; the "
            "plan's stages differ from the reference's node assignment"});
    std::vector<std::vector<int>> members(stages.size());
    for (int v : graph.removed_sources)
        members[0].push_back(v);
    for (int v = 0; v < layers; ++v)
        if (!(stageOf[v] == 0
                && std::find(graph.removed_sources.begin(), graph.removed_sources.end(), v)
                    != graph.removed_sources.end()))
            members[stageOf[v]].push_back(v);
    int position = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        if (members[s].empty()) {
            diag.push_back({Severity::Error, "empty-stage",
                "the reference's stage " + std::to_string(s) + " (states " + std::to_string(stages[s].first_state)
                    + ".." + std::to_string(stages[s].last_state) + ") holds no layer"});
            return {std::nullopt, diag};
        }
        plan.stages.push_back({position, position + static_cast<int>(members[s].size()) - 1, stages[s].devices});
        for (int v : members[s])
            plan.layer_order.push_back(v);
        position += static_cast<int>(members[s].size());
    }
    bool identity = true;
    for (int i = 0; i < layers && identity; ++i)
        identity = plan.layer_order[i] == i;
    if (identity)
        plan.layer_order.clear();

    plan.objective_s = *objective;
    nlohmann::json bandwidths = nlohmann::json::array();
    for (const auto& l : levels)
        bandwidths.push_back(l.bandwidth_bytes_per_s);
    plan.algorithm_options
        = {{"variant", "reference"}, {"levels", levelsText(levels)}, {"bandwidths_bytes_per_s", bandwidths},
            {"straight", opt.straight}, {"memory_limit", opt.memory_limit}, {"states", dag.stateCount()}};
    if (opt.memory_limit)
        plan.algorithm_options["memory_bytes"] = memory;
    plan.algorithm_options["activation_compression_ratio"]
        = opt.activation_compression_ratio ? nlohmann::json(*opt.activation_compression_ratio) : nlohmann::json();
    if (!opt.activation_compression_ratio)
        diag.push_back({Severity::Info, "no-communication",
            "as in the reference's default, stage-to-stage transfers are ignored (set an activation "
            "compression ratio, e.g. 1, to count them)"});
    diag.push_back({Severity::Info, "objective",
        "time per stage in pipeline (reference objective): " + referenceSeconds(*objective) + " s over "
            + std::to_string(dag.stateCount()) + " antichain states"});
    return detail::validated(std::move(plan), std::move(diag));
}

} // namespace pw::planner
