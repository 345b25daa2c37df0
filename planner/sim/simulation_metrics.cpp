// SPDX-License-Identifier: MIT
// A simulation's whole-run metrics (simulation_metrics.h, and simulator.h's worstMemory, fitsMemory and
// predictedMetrics), apart from the discrete-event run that produces the per-device numbers they summarise.
#include "simulation_metrics.h"

#include <algorithm>
#include <map>

namespace pw::planner {

void bubbleMetrics(SimulationResult& r, const std::vector<bool>& used, const std::vector<int>& sharedGpu)
{
    const double makespan = r.makespan_s;
    const auto gpuOf = [&](std::size_t d) { return d < sharedGpu.size() ? sharedGpu[d] : -1; };
    std::map<int, double> gpuBusy; // a shared GPU's busy time: its devices' computations, one after another
    for (std::size_t d = 0; d < r.devices.size(); ++d)
        if (used[d] && gpuOf(d) >= 0)
            gpuBusy[gpuOf(d)] += r.devices[d].busy_s;
    double bubbleSum = 0, overheadSum = 0, waitSum = 0;
    int count = 0;
    for (std::size_t d = 0; d < r.devices.size(); ++d) {
        auto& m = r.devices[d];
        if (!used[d] || makespan <= 0)
            continue;
        const double busy = gpuOf(d) >= 0 ? std::min(makespan, gpuBusy[gpuOf(d)]) : m.busy_s;
        // Idle time is the pipeline's bubble, except the wait for all-reduces (data parallelism), counted apart.
        const double wait = std::min(m.collective_wait_s, std::max(0.0, makespan - busy));
        m.data_parallel_wait_fraction = wait / makespan;
        m.bubble_fraction = std::max(0.0, 1.0 - (busy + wait) / makespan);
        bubbleSum += m.bubble_fraction;
        waitSum += m.data_parallel_wait_fraction;
        overheadSum += busy > 0 ? std::max(0.0, makespan - busy - wait) / busy : 0;
        ++count;
    }
    if (count) {
        r.bubble_fraction = bubbleSum / count;
        r.bubble_overhead = overheadSum / count;
        r.data_parallel_wait_fraction = waitSum / count;
    }
}

double throughput(const Plan& plan, int perBatch, double iteration_time_s)
{
    const int mbSize
        = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : std::max(1, plan.model->microbatch_size);
    // Independent pipelines (wsp) each run a batch of perBatch microbatches per iteration.
    const double samples = static_cast<double>(perBatch) * mbSize * plan.pipelineCount();
    return iteration_time_s > 0 ? samples / iteration_time_s : 0;
}

MemoryPeak worstMemory(const SimulationResult& result)
{
    MemoryPeak worst;
    for (const auto& d : result.devices) {
        if (d.memory_capacity_bytes <= 0 || d.peak_memory_bytes <= 0)
            continue;
        const double ratio = d.peak_memory_bytes / d.memory_capacity_bytes;
        if (ratio > worst.ratio)
            worst = {d.peak_memory_bytes, d.memory_capacity_bytes, ratio};
    }
    return worst;
}

bool SimulationResult::fitsMemory() const
{
    for (const auto& d : devices)
        if (d.peak_memory_bytes > d.memory_capacity_bytes)
            return false;
    return true;
}

PredictedMetrics predictedMetrics(const SimulationResult& result)
{
    PredictedMetrics p;
    p.iteration_time_s = result.iteration_time_s;
    p.throughput_samples_per_s = result.throughput_samples_per_s;
    p.bubble_fraction = result.bubble_fraction;
    for (const auto& s : result.stages)
        p.stage_peak_memory_bytes.push_back(s.peak_memory_bytes);
    return p;
}

} // namespace pw::planner
