// SPDX-License-Identifier: MIT
// Partitioner time against layers x devices. The baseline, measured in the same run, is the textbook
// recurrence (every row at every level, every split), which gives the same optimum.
#include <cstdio>
#include <random>
#include <string>

#include "bench_common.h"
#include "planner/device_presets.h"
#include "planner/io/graph_txt.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "planner/partition/pipedream_dp.h"
#include "planner/partition/pipedream_reference.h"

using namespace pw::planner;

namespace {

PipeDreamProblem randomChain(int layers, std::vector<HierarchyLevel> levels, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    PipeDreamProblem p;
    for (int l = 0; l < layers; ++l) {
        p.compute_s.push_back(1e-3 * (0.2 + u(rng)));
        p.weight_bytes.push_back(u(rng) < 0.3 ? 0.0 : 4e6 * u(rng));
        p.cut_bytes.push_back(1e6 * (0.1 + u(rng)));
        p.activation_bytes.push_back(0);
        p.optimizer_bytes.push_back(0);
    }
    p.levels = std::move(levels);
    return p;
}

PipeDreamProblem fromModel(const ModelProfile& m, std::vector<HierarchyLevel> levels)
{
    PipeDreamProblem p;
    p.cut_bytes = m.cutBytes();
    for (const auto& l : m.layers) {
        p.compute_s.push_back((l.forward_ms + l.backward_ms) * 1e-3);
        p.weight_bytes.push_back(l.weight_bytes);
        p.activation_bytes.push_back(l.activation_bytes);
        p.optimizer_bytes.push_back(2 * l.weight_bytes);
    }
    p.levels = std::move(levels);
    return p;
}

double solveTime(const PipeDreamProblem& p, bool prune, double* objective, int repeats = 3,
    PipeDreamSolveOptions::TopLevel top = PipeDreamSolveOptions::TopLevel::Automatic)
{
    PipeDreamSolveOptions o;
    o.prune = prune;
    o.top_level = top;
    return pw::bench::bestOf(repeats, [&] { *objective = solvePipeDream(p, o).objective_s; });
}

std::string levelsText(const std::vector<HierarchyLevel>& levels)
{
    std::string s;
    for (const auto& l : levels)
        s += (s.empty() ? "" : "x") + std::to_string(l.count);
    return s;
}

void row(const char* what, const PipeDreamProblem& p, bool withBaseline)
{
    double fast = 0, slow = 0;
    double tFast = solveTime(p, true, &fast);
    if (withBaseline) {
        double tSlow = solveTime(p, false, &slow, 1);
        std::printf("%-28s %6zu %10s %12.4f %12.4f %9.1fx  %s\n", what, p.compute_s.size(),
            levelsText(p.levels).c_str(), tFast, tSlow, tSlow / tFast,
            fast == slow ? "same optimum" : "DIFFERENT OPTIMUM");
    } else {
        std::printf("%-28s %6zu %10s %12.4f %12s %10s  objective %.6g s\n", what, p.compute_s.size(),
            levelsText(p.levels).c_str(), tFast, "-", "-", fast);
    }
}

/// `nodes` nodes of `perNode` H100s: NVLink inside a node, InfiniBand between (the levels {perNode, 4.5e11},
/// {nodes, 5e10} of the DP rows above).
Shared<Cluster> h100Cluster(int nodes, int perNode)
{
    Cluster c;
    c.device_types = {*devicePreset("H100")};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", "H100", perNode, 4.5e11, 0});
    c.inter_node_bandwidth_bytes_per_s = 5e10;
    return std::make_shared<const Cluster>(std::move(c));
}

/// One partitioner run through its registry entry, as `pipewright-cli plan` makes it: seconds and objective.
double planTime(const Shared<ModelProfile>& model, const Shared<Cluster>& cluster, const std::string& algorithm,
    const PartitionOptions& options, double* objective)
{
    PartitionRequest req {model, cluster, options};
    return pw::bench::bestOf(1, [&] {
        auto r = findPartitioner(algorithm)->partition(req, {}, {});
        *objective = r.plan ? r.plan->objective_s : -1;
        if (!r.plan)
            for (const auto& d : r.diagnostics)
                std::printf("    %s: %s\n", d.code.c_str(), d.message.c_str());
    });
}

/// The 1,002-layer GPT on 16,384 GPUs (and smaller clusters), through the partitioners themselves. Megatron's
/// leaders are simulated on a few of their identical data-parallel pipelines (simulateDataParallel), which keeps
/// its search at 16,384 GPUs under 10 s (docs/algorithms/megatron.md).
void clusterScale(const ModelProfile& gpt, const std::string& only)
{
    auto model = std::make_shared<const ModelProfile>(gpt);
    std::printf("\nPlanning the 1,002-layer GPT through the partitioners (H100 nodes of 8, NVLink + IB)\n");
    std::printf("%-34s %8s %10s %14s\n", "partitioner", "GPUs", "seconds", "objective s");
    auto print = [](const char* what, int gpus, double t, const double& objective) {
        std::printf("%-34s %8d %10.3f %14.9g\n", what, gpus, t, objective);
    };
    for (int nodes : {128, 2048}) {
        auto cluster = h100Cluster(nodes, 8);
        double objective = 0;
        if (only.empty() || only == "pipedream") {
            PartitionOptions o;
            print("pipedream (hierarchical, <10s)", nodes * 8, planTime(model, cluster, "pipedream", o, &objective),
                objective);
            o.flat = true;
            print(
                "pipedream --flat (<10s)", nodes * 8, planTime(model, cluster, "pipedream", o, &objective), objective);
        }
        if (only.empty() || only == "megatron") {
            PartitionOptions o;
            o.params["global-batch"] = 2 * nodes * 8;
            print("megatron (<10s)", nodes * 8, planTime(model, cluster, "megatron", o, &objective), objective);
            // The new dimensions (issue 31): context-parallel sizes beside t, p, d, b, v and recomputation.
            o.params["context-sizes"] = {1, 2, 4, 8};
            print(
                "megatron, c in 1-8 (<10s)", nodes * 8, planTime(model, cluster, "megatron", o, &objective), objective);
        }
    }
}

/// The threshold search of the top level against the pruned table (the exact search it replaces there).
void thresholdRow(const char* what, const PipeDreamProblem& p)
{
    double fast = 0, table = 0;
    const double tFast = solveTime(p, true, &fast, 1, PipeDreamSolveOptions::TopLevel::Threshold);
    const double tTable = solveTime(p, true, &table, 1, PipeDreamSolveOptions::TopLevel::Table);
    std::printf("%-28s %6zu %10s %12.4f %12.4f %9.1fx  %s\n", what, p.compute_s.size(), levelsText(p.levels).c_str(),
        tFast, tTable, tTable / tFast, fast == table ? "same optimum" : "DIFFERENT OPTIMUM");
}

} // namespace

int main(int argc, char** argv)
{
    TransformerConfig gptConfig {1000, 8192, 64, 2048, 51200, 1, 2};
    if (argc > 1 && std::string(argv[1]) == "--cluster-scale") { // these rows alone [pipedream | megatron]
        clusterScale(transformerProfile(gptConfig, *devicePreset("H100")), argc > 2 ? argv[2] : "");
        return 0;
    }
    std::printf("PipeDream DP (paper variant), best of 3; baseline = textbook recurrence in the same run\n");
    std::printf(
        "%-28s %6s %10s %12s %12s %10s\n", "instance", "layers", "devices", "pruned s", "textbook s", "speed-up");
    row("random chain", randomChain(100, {{8, 1e10}}, 1), true);
    row("random chain", randomChain(200, {{16, 1e10}}, 2), true);
    row("random chain (target <1s)", randomChain(400, {{16, 1e10}}, 3), true);
    row("random chain", randomChain(100, {{8, 3e11}, {8, 2.5e10}}, 4), true);
    row("random chain", randomChain(400, {{64, 1e10}}, 5), false);

    const TransformerConfig& cfg = gptConfig;
    auto h100 = *devicePreset("H100");
    auto model = transformerProfile(cfg, h100);
    row("GPT 1000 layers (<10s)", fromModel(model, {{8, 4.5e11}, {128, 5e10}}), false);
    std::printf("\nTop level by threshold search (counts, bisection on the bottleneck) against the pruned table\n");
    std::printf(
        "%-28s %6s %10s %12s %12s %10s\n", "instance", "layers", "devices", "threshold s", "table s", "speed-up");
    thresholdRow("random chain", randomChain(400, {{64, 1e10}}, 5));
    thresholdRow("random chain flat", randomChain(200, {{256, 1e10}}, 6));
    thresholdRow("GPT 1000 layers", fromModel(model, {{8, 4.5e11}, {128, 5e10}}));
    thresholdRow("GPT 1000 layers flat", fromModel(model, {{256, 5e10}}));
    thresholdRow("GPT 1000 layers flat", fromModel(model, {{1024, 5e10}}));
    row("GPT 1000 layers 16,384 (<10s)", fromModel(model, {{8, 4.5e11}, {2048, 5e10}}), false);
    row("GPT 1000 layers flat 16,384", fromModel(model, {{16384, 5e10}}), false);
    std::printf("\n");

    TransformerConfig small = cfg;
    small.layers = 100;
    auto smallModel = transformerProfile(small, h100);
    row("GPT 100 layers", fromModel(smallModel, {{8, 4.5e11}, {8, 5e10}}), true);

    std::printf("\nReference variant (antichain states), best of 3\n");
    for (auto [name, levels] : std::vector<std::pair<std::string, std::vector<HierarchyLevel>>> {
             {"densenet121", {{16, 1e10}}}, {"densenet121", {{8, 1e10}, {2, 1e9}}}, {"gnmt_large", {{16, 1e10}}}}) {
        ModelProfile m;
        try {
            m = loadGraphTxt(std::string(PW_PROFILES_DIR) + "/pipedream/" + name + "/graph.txt");
        } catch (const std::exception& e) {
            std::printf("%-28s skipped: %s\n", name.c_str(), e.what());
            continue;
        }
        Cluster c;
        c.device_types = {h100};
        for (int n = 0; n < (levels.size() > 1 ? levels[1].count : 1); ++n)
            c.nodes.push_back(
                {"n" + std::to_string(n), "", 22, "", "H100", levels[0].count, levels[0].bandwidth_bytes_per_s, 0});
        c.inter_node_bandwidth_bytes_per_s = levels.size() > 1 ? levels[1].bandwidth_bytes_per_s : 0;
        PartitionOptions o;
        o.pipedream_variant = "reference";
        PartitionRequest req {m, c, o};
        double objective = 0;
        double t = pw::bench::bestOf(3, [&] {
            auto r = partitionPipeDreamReference(req, {}, {});
            objective = r.plan ? r.plan->objective_s : -1;
        });
        std::printf("%-28s %6d %10s %12.4f   objective %.9g s (Python reference: ~11 s flat 16, >60 s 8x2)\n",
            name.c_str(), m.layerCount(), levelsText(levels).c_str(), t, objective);
    }
    clusterScale(model, {});
    return 0;
}
