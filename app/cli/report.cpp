// SPDX-License-Identifier: MIT
#include "report.h"

#include <algorithm>
#include <cstdio>

namespace pw::cli {

using nlohmann::json;
using namespace pw::planner;

std::string formatBytes(double bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

std::string formatSeconds(double s)
{
    char buf[32];
    if (s >= 1)
        std::snprintf(buf, sizeof buf, "%.3f s", s);
    else if (s >= 1e-3)
        std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
    return buf;
}

std::string memoryProblem(const Plan& plan, const SimulationResult& r)
{
    int worst = -1;
    double ratio = 1.0;
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
        const auto& st = r.stages[s];
        double q = st.peak_memory_bytes / st.memory_capacity_bytes;
        if (q > ratio) {
            ratio = q;
            worst = static_cast<int>(s);
        }
    }
    if (worst < 0)
        return {};
    const auto& st = r.stages[worst];
    return "the plan does not fit device memory: stage " + std::to_string(worst) + " needs "
        + formatBytes(st.peak_memory_bytes) + " per device but "
        + plan.cluster.typeOf(plan.stages[worst].devices[0]).name + " has " + formatBytes(st.memory_capacity_bytes);
}

json metricsJson(const Plan& plan, const SimulationResult& r)
{
    json stages = json::array();
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& st = plan.stages[s];
        const auto& m = r.stages[s];
        stages.push_back(
            {{"stage", s}, {"first_layer", st.first_layer}, {"last_layer", st.last_layer}, {"devices", st.devices},
                {"peak_memory_bytes", m.peak_memory_bytes}, {"memory_capacity_bytes", m.memory_capacity_bytes},
                {"fits_memory", m.peak_memory_bytes <= m.memory_capacity_bytes},
                {"peak_stashed_microbatches", m.peak_stashed_microbatches},
                {"peak_weight_versions", m.peak_weight_versions}});
    }
    json devices = json::array();
    for (std::size_t d = 0; d < r.devices.size(); ++d) {
        const auto& m = r.devices[d];
        devices.push_back({{"device", d}, {"name", r.timeline.device_names[d]}, {"busy_s", m.busy_s},
            {"bubble_fraction", m.bubble_fraction}, {"peak_memory_bytes", m.peak_memory_bytes}});
    }
    return {{"algorithm", plan.algorithm}, {"config", plan.configString()}, {"schedule", plan.schedule.kind},
        {"microbatches", plan.schedule.microbatches}, {"objective_s", plan.objective_s},
        {"iteration_time_s", r.iteration_time_s}, {"makespan_s", r.makespan_s},
        {"throughput_samples_per_s", r.throughput_samples_per_s}, {"bubble_fraction", r.bubble_fraction},
        {"bubble_overhead", r.bubble_overhead}, {"fits_memory", r.fitsMemory()},
        {"simulated_actions", r.simulated_actions}, {"stages", std::move(stages)}, {"devices", std::move(devices)}};
}

void printDiagnostics(std::ostream& out, const std::vector<Diagnostic>& diagnostics)
{
    for (const auto& d : diagnostics) {
        const char* tag = d.severity == Diagnostic::Severity::Error ? "error"
            : d.severity == Diagnostic::Severity::Warning           ? "warning"
                                                                    : "note";
        out << tag << ": " << d.message << "\n";
    }
}

void printPlanSummary(std::ostream& out, const Plan& plan, const SimulationResult& r)
{
    char line[1024];
    std::snprintf(line, sizeof line, "plan     %s on %s / %s (%d devices), config %s\n", plan.algorithm.c_str(),
        plan.model.name.c_str(), plan.cluster.name.c_str(), plan.cluster.deviceCount(), plan.configString().c_str());
    out << line;
    std::snprintf(line, sizeof line, "schedule %s, %d microbatches x %d iteration(s)%s%s\n", plan.schedule.kind.c_str(),
        plan.schedule.microbatches, plan.schedule.iterations,
        plan.schedule.chunks > 1 ? (", " + std::to_string(plan.schedule.chunks) + " chunks").c_str() : "",
        plan.schedule.recompute ? ", recompute" : "");
    out << line;
    if (plan.objective_s > 0)
        out << "objective " << formatSeconds(plan.objective_s) << " (the partitioner's slowest stage per microbatch)\n";
    const auto cost = CostModel::fromPlan(plan);
    out << "  stage  layers       replicas  devices                 fwd+bwd      peak memory / capacity\n";
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& st = plan.stages[s];
        std::string devs = r.timeline.device_names.empty() ? "" : r.timeline.device_names[st.devices[0]];
        if (st.replicas() > 1)
            devs += " +" + std::to_string(st.replicas() - 1);
        const auto& m = r.stages[s];
        std::snprintf(line, sizeof line, "  %-5d  %-11s  %-8d  %-22s  %-11s  %s / %s%s\n", s,
            (std::to_string(st.first_layer) + "-" + std::to_string(st.last_layer)).c_str(), st.replicas(), devs.c_str(),
            formatSeconds(cost.forward(s, 0) + cost.backward(s, 0)).c_str(), formatBytes(m.peak_memory_bytes).c_str(),
            formatBytes(m.memory_capacity_bytes).c_str(),
            m.peak_memory_bytes > m.memory_capacity_bytes ? "  OVER" : "");
        out << line;
    }
    std::snprintf(line, sizeof line, "iteration %s   throughput %.1f samples/s   bubble %.1f %%   %zu actions\n",
        formatSeconds(r.iteration_time_s).c_str(), r.throughput_samples_per_s, 100 * r.bubble_fraction,
        r.simulated_actions);
    out << line;
}

} // namespace pw::cli
