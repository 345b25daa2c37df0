// SPDX-License-Identifier: MIT
// Runs every applicable partitioner on one model and cluster and tabulates what each predicts.
#include "compare.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "../errors.h"
#include "../sim/simulator.h"
#include "flops.h"

namespace pw::planner {

namespace {

void fillPrediction(ComparisonRow& row, const Plan& plan)
{
    row.config = plan.configString();
    row.stages = plan.stageCount();
    row.pipelines = plan.pipelineCount(); // HetPipe: one per virtual worker
    std::set<int> used;
    for (const auto& s : plan.stages)
        for (int d : s.devices)
            used.insert(d);
    row.devices_used = static_cast<int>(used.size());
    row.schedule = plan.schedule.kind;
    row.microbatches = plan.schedule.microbatches;
    row.microbatch_size
        = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size;
    const auto sim = simulate(plan, SimulationOptions {.record_spans = false, .record_memory = false});
    row.tensor_parallel = std::max(1, plan.tensor_parallel);
    row.context_parallel = std::max(1, plan.context_parallel);
    row.chunks = plan.schedule.chunks;
    row.recompute = plan.schedule.recompute;
    row.throughput_samples_per_s = sim.throughput_samples_per_s;
    if (auto flops = flopsReport(plan, sim.throughput_samples_per_s)) {
        row.model_flops_per_s_per_gpu = flops->model_flops_per_s_per_gpu;
        if (flops->peak_flops_per_s_per_gpu > 0) {
            row.mfu = flops->mfu;
            row.hfu = flops->hfu;
        }
    }
    row.iteration_time_s = sim.iteration_time_s;
    row.bubble_fraction = sim.bubble_fraction;
    const MemoryPeak worst = worstMemory(sim);
    row.memory_ratio = worst.ratio;
    row.peak_memory_bytes = worst.peak_bytes;
    row.memory_capacity_bytes = worst.capacity_bytes;
}

} // namespace

std::vector<ComparisonRow> compareAlgorithms(const ModelProfile& model, const Cluster& cluster,
    const ComparisonOptions& options, const ProgressFn& progress, std::stop_token stop)
{
    std::vector<const Partitioner*> chosen;
    if (options.algorithms.empty()) {
        for (const auto* p : partitioners())
            if (p->name() != "manual")
                chosen.push_back(p);
    } else {
        for (const auto& name : options.algorithms)
            chosen.push_back(findPartitioner(name));
    }
    std::vector<ComparisonRow> rows;
    for (std::size_t i = 0; i < chosen.size(); ++i) {
        if (stop.stop_requested())
            break;
        ComparisonRow row;
        if (!chosen[i]) {
            row.algorithm = options.algorithms[i];
            row.error = "unknown algorithm";
            rows.push_back(std::move(row));
            continue;
        }
        row.algorithm = std::string(chosen[i]->name());
        if (options.on_start)
            options.on_start(row.algorithm, i, chosen.size());
        PartitionRequest request {model, cluster, options.base};
        request.options.params = nlohmann::json::object();
        const auto t0 = std::chrono::steady_clock::now();
        auto result = chosen[i]->partition(
            request,
            [&](double f) {
                if (progress)
                    progress((static_cast<double>(i) + std::clamp(f, 0.0, 1.0)) / static_cast<double>(chosen.size()));
            },
            stop);
        row.planning_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        row.diagnostics = result.diagnostics;
        if (!result.ok()) {
            row.error = result.errorText();
        } else {
            try {
                fillPrediction(row, *result.plan);
                row.ok = true;
                if (options.keep_plans)
                    row.plan = std::move(result.plan);
            } catch (const std::exception& e) { // InputError from the generator or simulator
                row.error = std::string("plan does not simulate: ") + e.what();
            }
        }
        rows.push_back(std::move(row));
        if (progress)
            progress(static_cast<double>(i + 1) / static_cast<double>(chosen.size()));
    }
    return rows;
}

} // namespace pw::planner
