// SPDX-License-Identifier: MIT
// `pipewright-cli demo`: plans and simulates the bundled demo and prints a readable summary.
#include <cstdio>
#include <filesystem>

#include "app/project/demo_project.h"
#include "cli.h"
#include "commands.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "report.h"

namespace pw::cli {

using nlohmann::json;
using namespace pw::planner;

namespace {

struct DemoRun
{
    std::string title;
    std::string algorithm;
    ScheduleOptions schedule;
    bool flat = false;
    bool memory_limit = false;
};

struct DemoOutcome
{
    Plan plan;
    SimulationResult result;
    std::vector<Diagnostic> diagnostics;
};

DemoOutcome runOne(const ModelProfile& model, const Cluster& cluster, const DemoRun& run)
{
    PartitionOptions options;
    options.schedule = run.schedule;
    options.flat = run.flat;
    options.memory_limit = run.memory_limit;
    PartitionRequest request {model, cluster, options};
    auto partitioned = findPartitioner(run.algorithm)->partition(request, {}, {});
    if (!partitioned.ok())
        throw InputError("demo '" + run.title + "': " + partitioned.errorText());
    DemoOutcome o {std::move(*partitioned.plan), {}, partitioned.diagnostics};
    Schedule schedule = generateSchedule(o.plan);
    auto report = validate(schedule, o.plan);
    if (!report.ok)
        throw InputError("demo '" + run.title + "': invalid schedule: " + report.errors.front());
    SimulationOptions so;
    so.record_spans = false;
    so.record_memory = false;
    o.result = simulate(o.plan, schedule, so);
    return o;
}

double peakShare(const SimulationResult& r)
{
    double worst = 0;
    for (const auto& s : r.stages)
        worst = std::max(worst, s.peak_memory_bytes / s.memory_capacity_bytes);
    return worst;
}

} // namespace

void demo(bool asJson, std::ostream& out)
{
    namespace fs = std::filesystem;
    const fs::path dir = app::demoDirectory();
    auto model = loadModel((dir / "gpt-demo.json").string());
    auto dgx = loadCluster((dir / "dgx-h100.json").string());
    auto het = loadCluster((dir / "hetpipe-cluster.json").string());

    auto sched = [](std::string kind, int microbatches, int chunks = 1, int iterations = 1, bool recompute = false) {
        ScheduleOptions s;
        s.recompute = recompute ? Recompute::Full : Recompute::None;
        s.kind = std::move(kind);
        s.microbatches = microbatches;
        s.chunks = chunks;
        s.iterations = iterations;
        return s;
    };
    const std::vector<std::pair<const Cluster*, DemoRun>> runs = {
        {&dgx, {"PipeDream DP, 1F1B", "pipedream", sched("1f1b", 16)}},
        {&dgx, {"8 straight stages, GPipe", "uniform", sched("gpipe", 16)}},
        {&dgx, {"8 straight stages, 1F1B", "uniform", sched("1f1b", 16)}},
        {&dgx, {"8 stages x 2 chunks, interleaved", "uniform", sched("interleaved", 16, 2)}},
        {&dgx, {"8 straight stages, PipeDream-2BW", "uniform", sched("2bw", 16, 1, 4)}},
        {&dgx, {"8 straight stages, PipeDream async", "uniform", sched("pipedream", 16, 1, 4)}},
        // The 6-24 GB GPUs of HetPipe's cluster hold this model's activations only with recomputation.
        {&het, {"HetPipe cluster: uniform, 1F1B+recompute", "uniform", sched("1f1b", 32, 1, 1, true)}},
        {&het, {"HetPipe cluster: parameters, 1F1B+recompute", "parameters", sched("1f1b", 32, 1, 1, true)}},
        {&het,
            {"HetPipe cluster: PipeDream (flat, mem limit)", "pipedream", sched("1f1b", 32, 1, 1, true), true, true}},
        // HetPipe itself: four ED virtual workers under WSP, N_m chosen within memory (no recomputation).
        {&het, {"HetPipe cluster: HetPipe ED, WSP", "hetpipe", sched("wsp", 32)}},
    };

    json results = json::array();
    if (!asJson) {
        out << "Pipewright demo: " << model.name << " (" << model.layerCount() << " layers, "
            << formatBytes(model.totalWeightBytes()) << " of weights)\n\n";
    }
    std::vector<DemoOutcome> outcomes;
    for (const auto& [cluster, run] : runs)
        outcomes.push_back(runOne(model, *cluster, run));

    if (asJson) {
        for (std::size_t i = 0; i < runs.size(); ++i) {
            auto j = metricsJson(outcomes[i].plan, outcomes[i].result);
            j["title"] = runs[i].second.title;
            j["cluster"] = runs[i].first->name;
            results.push_back(std::move(j));
        }
        out << json {{"model", model.name}, {"runs", results}}.dump(2) << "\n";
        return;
    }
    printPlanSummary(out, outcomes[0].plan, outcomes[0].result);
    out << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "%-44s %-16s %12s %12s %8s %9s\n", "run", "config", "iteration", "samples/s",
        "bubble", "peak mem");
    out << line;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const auto& o = outcomes[i];
        std::string config = o.plan.configString();
        if (config.size() > 16)
            config = config.substr(0, 13) + "...";
        std::snprintf(line, sizeof line, "%-44s %-16s %12s %12.1f %7.1f%% %8.0f%%\n", runs[i].second.title.c_str(),
            config.c_str(), formatSeconds(o.result.iteration_time_s).c_str(), o.result.throughput_samples_per_s,
            100 * o.result.bubble_fraction, 100 * peakShare(o.result));
        out << line;
    }
    out << "\npeak mem is the fullest device's share of its memory. Plan your own with `pipewright-cli plan --help`.\n";
}

} // namespace pw::cli
