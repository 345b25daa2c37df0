// SPDX-License-Identifier: MIT
#include "report.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "planner/analysis/flops.h"

namespace pw::cli {

using nlohmann::json;
using namespace pw::planner;

std::string fixedText(double v, int digits)
{
    std::ostringstream s;
    s << std::fixed << std::setprecision(digits) << v;
    return s.str();
}

std::string signedPercent(double relative)
{
    return (relative >= 0 ? "+" : "") + fixedText(relative * 100, 1) + " %";
}

namespace {

std::string padded(std::string text, std::size_t width)
{
    if (text.size() < width)
        text.append(width - text.size(), ' ');
    return text;
}

} // namespace

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
        + plan.cluster->typeOf(plan.stages[worst].devices[0]).name + " has " + formatBytes(st.memory_capacity_bytes);
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
                {"peak_weight_versions", m.peak_weight_versions}, {"microbatch_time_s", m.charge.total_s()},
                {"forward_s", m.charge.forward_s}, {"backward_s", m.charge.backward_s},
                {"recompute_s", m.charge.recompute_s}, {"tensor_parallel_allreduce_s", m.charge.tensor_parallel_s}});
        if (plan.schedule.shard_weights)
            stages.back()["weight_gather_s"] = m.charge.weight_gather_s;
        if (plan.context_parallel > 1)
            stages.back()["context_parallel_exchange_s"] = m.charge.context_parallel_s;
        if (plan.pipelineCount() > 1)
            stages.back()["pipeline"] = st.pipeline;
    }
    json devices = json::array();
    for (std::size_t d = 0; d < r.devices.size(); ++d) {
        const auto& m = r.devices[d];
        devices.push_back({{"device", d}, {"name", r.timeline.device_names[d]}, {"busy_s", m.busy_s},
            {"bubble_fraction", m.bubble_fraction}, {"peak_memory_bytes", m.peak_memory_bytes}});
    }
    json j = {{"algorithm", plan.algorithm}, {"config", plan.configString()}, {"schedule", plan.schedule.kind},
        {"microbatches", plan.schedule.microbatches}, {"objective_s", plan.objective_s},
        {"iteration_time_s", r.iteration_time_s}, {"makespan_s", r.makespan_s},
        {"throughput_samples_per_s", r.throughput_samples_per_s}, {"bubble_fraction", r.bubble_fraction},
        {"bubble_overhead", r.bubble_overhead}, {"data_parallel_wait_fraction", r.data_parallel_wait_fraction},
        {"fits_memory", r.fitsMemory()}, {"simulated_actions", r.simulated_actions}, {"stages", std::move(stages)},
        {"devices", std::move(devices)}};
    const int size = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size;
    j.update({{"tensor_parallel", std::max(1, plan.tensor_parallel)},
        {"context_parallel", std::max(1, plan.context_parallel)}, {"chunks", plan.schedule.chunks},
        {"microbatch_size", size}, {"recompute", name(plan.schedule.recompute)}});
    if (auto flops = flopsReport(plan, r.throughput_samples_per_s)) {
        j["model_flops_per_s_per_gpu"] = flops->model_flops_per_s_per_gpu;
        j["hardware_flops_per_s_per_gpu"] = flops->hardware_flops_per_s_per_gpu;
        if (flops->peak_flops_per_s_per_gpu > 0) {
            j["mfu"] = flops->mfu;
            j["hfu"] = flops->hfu;
        }
    }
    return j;
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
    std::snprintf(line, sizeof line, "plan     %s on %s / %s (%d devices), config %s\n",
        plan.algorithm.empty() ? "(no algorithm)" : plan.algorithm.c_str(), plan.model->name.c_str(),
        plan.cluster->name.c_str(), plan.cluster->deviceCount(), plan.configString().c_str());
    out << line;
    std::snprintf(line, sizeof line, "schedule %s, %d microbatches x %d iteration(s)%s%s\n", plan.schedule.kind.c_str(),
        plan.schedule.microbatches, plan.schedule.iterations,
        plan.schedule.chunks > 1 ? (", " + std::to_string(plan.schedule.chunks) + " chunks").c_str() : "",
        plan.schedule.recompute != Recompute::None
            ? (std::string(", ") + name(plan.schedule.recompute) + " recomputation").c_str()
            : "");
    out << line;
    if (plan.pipelineCount() > 1) {
        // HetPipe: independent pipelines (virtual workers); stage numbers below are global, "v/q" per pipeline.
        std::snprintf(line, sizeof line,
            "pipelines %d (virtual workers), %d minibatches in flight each, staleness %d\n", plan.pipelineCount(),
            plan.effectiveConcurrentMinibatches(), plan.schedule.staleness);
        out << line;
    }
    if (plan.tensor_parallel > 1)
        out << "tensor   " << plan.tensor_parallel
            << "-way tensor parallelism: each replica below is a group of that many devices\n";
    if (plan.context_parallel > 1)
        out << "context  " << plan.context_parallel << "-way context parallelism: each replica below is "
            << plan.context_parallel << " groups of " << std::max(1, plan.tensor_parallel) << " device(s), each on 1/"
            << plan.context_parallel << " of every sequence\n";
    if (plan.objective_s > 0)
        out << "objective " << formatSeconds(plan.objective_s) << " (the partitioner's slowest stage per microbatch)\n";
    // Per microbatch, what the simulation charged each stage's compute lane (under the costs it ran with: the
    // profile's or calibrated ones), and its parts.
    const bool recompute = plan.schedule.recompute != Recompute::None, tp = plan.tensor_parallel > 1;
    const bool fsdp = plan.schedule.shard_weights, cp = plan.context_parallel > 1;
    std::string parts = "forward + backward";
    if (recompute)
        parts += plan.schedule.recompute == Recompute::Full ? " + recomputed forward" : " + recomputed attention core";
    if (tp)
        parts += " + tensor-parallel all-reduces";
    if (fsdp)
        parts += " + ZeRO-3 gathers the compute does not cover";
    if (cp)
        parts += " + ring-attention exchanges the attention does not cover";
    out << "per microbatch on each stage's first device, as simulated: " << parts << "\n";
    std::snprintf(line, sizeof line, "  %-5s  %-11s  %-8s  %-22s  %-11s  %-11s  %-11s%s%s%s%s  %s\n", "stage", "layers",
        "replicas", "devices", "time", "forward", "backward", recompute ? "  recompute  " : "",
        tp ? "  TP all-red." : "", fsdp ? "  ZeRO-3     " : "", cp ? "  CP ring    " : "", "peak memory / capacity");
    out << line;
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& st = plan.stages[s];
        std::string devs = r.timeline.device_names.empty() ? "" : r.timeline.device_names[st.devices[0]];
        if (st.replicas() > 1)
            devs += " +" + std::to_string(st.replicas() - 1);
        const auto& m = r.stages[s];
        const std::string label = plan.pipelineCount() > 1
            ? std::to_string(st.pipeline) + "/" + std::to_string(s - plan.pipelineBegin(s))
            : std::to_string(s);
        char extra[128] = "";
        if (recompute || tp || fsdp || cp)
            std::snprintf(extra, sizeof extra, "%s%s%s%s",
                recompute ? ("  " + padded(formatSeconds(m.charge.recompute_s), 11)).c_str() : "",
                tp ? ("  " + padded(formatSeconds(m.charge.tensor_parallel_s), 11)).c_str() : "",
                fsdp ? ("  " + padded(formatSeconds(m.charge.weight_gather_s), 11)).c_str() : "",
                cp ? ("  " + padded(formatSeconds(m.charge.context_parallel_s), 11)).c_str() : "");
        std::snprintf(line, sizeof line, "  %-5s  %-11s  %-8d  %-22s  %-11s  %-11s  %-11s%s  %s / %s%s\n",
            label.c_str(), (std::to_string(st.first_layer) + "-" + std::to_string(st.last_layer)).c_str(),
            plan.dataReplicas(s), devs.c_str(), formatSeconds(m.charge.total_s()).c_str(),
            formatSeconds(m.charge.forward_s).c_str(), formatSeconds(m.charge.backward_s).c_str(), extra,
            formatBytes(m.peak_memory_bytes).c_str(), formatBytes(m.memory_capacity_bytes).c_str(),
            m.peak_memory_bytes > m.memory_capacity_bytes ? "  OVER" : "");
        out << line;
    }
    std::snprintf(line, sizeof line,
        "iteration %s   throughput %.1f samples/s   bubble %.1f %%   all-reduce wait %.1f %%   %zu actions simulated\n",
        formatSeconds(r.iteration_time_s).c_str(), r.throughput_samples_per_s, 100 * r.bubble_fraction,
        100 * r.data_parallel_wait_fraction, r.simulated_actions);
    out << line;
    if (auto flops = flopsReport(plan, r.throughput_samples_per_s)) {
        // Devices that share GPUs: the rate and the MFU are each card's.
        std::string per = " per device";
        if (flops->gpus < flops->devices)
            per = " per GPU (" + std::to_string(flops->devices) + " devices on " + std::to_string(flops->gpus)
                + (flops->gpus == 1 ? " GPU)" : " GPUs)");
        out << "flops    " << formatFlopRate(flops->model_flops_per_s_per_gpu) << per << " of model FLOPs";
        if (recompute)
            out << ", " << formatFlopRate(flops->hardware_flops_per_s_per_gpu)
                << " of hardware FLOPs (with the recomputed "
                << (plan.schedule.recompute == Recompute::Full ? "forward)" : "attention core)");
        if (flops->peak_flops_per_s_per_gpu > 0) {
            std::snprintf(line, sizeof line, "   MFU %.1f %%", 100 * flops->mfu);
            out << line;
            if (recompute) {
                std::snprintf(line, sizeof line, "   HFU %.1f %%", 100 * flops->hfu);
                out << line;
            }
            out << " of " << formatFlopRate(flops->peak_flops_per_s_per_gpu) << " peak";
        }
        out << "\n";
    }
}

void printComparison(std::ostream& out, const std::vector<ComparisonRow>& rows)
{
    char line[1024];
    std::snprintf(line, sizeof line, "%-14s %-16s %6s %-11s %9s %12s %7s %21s %9s\n", "algorithm", "config", "stages",
        "schedule", "m x b", "samples/s", "bubble", "peak mem / capacity", "planning");
    out << line;
    for (const auto& r : rows) {
        if (!r.ok) {
            std::snprintf(line, sizeof line, "%-14s -- %s\n", r.algorithm.c_str(), r.error.c_str());
            out << line;
            continue;
        }
        std::string config = r.config.size() > 16 ? r.config.substr(0, 13) + "..." : r.config;
        const std::string mb = std::to_string(r.microbatches) + " x " + std::to_string(r.microbatch_size);
        const std::string mem = formatBytes(r.peak_memory_bytes) + " / " + formatBytes(r.memory_capacity_bytes);
        std::snprintf(line, sizeof line, "%-14s %-16s %6d %-11s %9s %12.1f %6.1f%% %21s %9s%s\n", r.algorithm.c_str(),
            config.c_str(), r.stages, r.schedule.c_str(), mb.c_str(), r.throughput_samples_per_s,
            100 * r.bubble_fraction, mem.c_str(), formatSeconds(r.planning_time_s).c_str(),
            r.memory_ratio > 1 ? "  OVER" : "");
        out << line;
    }
}

json comparisonJson(const std::vector<ComparisonRow>& rows)
{
    json out = json::array();
    for (const auto& r : rows) {
        json diags = json::array();
        for (const auto& d : r.diagnostics)
            diags.push_back({{"code", d.code}, {"message", d.message}});
        json row = {
            {"algorithm", r.algorithm}, {"ok", r.ok}, {"planning_time_s", r.planning_time_s}, {"diagnostics", diags}};
        if (!r.ok) {
            row["error"] = r.error;
        } else {
            row.update({{"config", r.config}, {"stages", r.stages}, {"pipelines", r.pipelines},
                {"devices_used", r.devices_used}, {"schedule", r.schedule}, {"microbatches", r.microbatches},
                {"microbatch_size", r.microbatch_size}, {"throughput_samples_per_s", r.throughput_samples_per_s},
                {"iteration_time_s", r.iteration_time_s}, {"bubble_fraction", r.bubble_fraction},
                {"peak_memory_bytes", r.peak_memory_bytes}, {"memory_capacity_bytes", r.memory_capacity_bytes},
                {"memory_ratio", r.memory_ratio}, {"fits_memory", r.memory_ratio <= 1},
                {"tensor_parallel", r.tensor_parallel}, {"context_parallel", r.context_parallel}, {"chunks", r.chunks},
                {"recompute", name(r.recompute)}});
            if (r.model_flops_per_s_per_gpu)
                row["model_flops_per_s_per_gpu"] = *r.model_flops_per_s_per_gpu;
            if (r.mfu)
                row["mfu"] = *r.mfu;
            if (r.hfu)
                row["hfu"] = *r.hfu;
        }
        out.push_back(std::move(row));
    }
    return out;
}

namespace {

std::string formatDuration(double s)
{
    char buf[48];
    if (s >= 86400)
        std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
    else if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
    else if (s >= 60)
        std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
    else
        std::snprintf(buf, sizeof buf, "%.1f s", s);
    return buf;
}

std::string formatDollars(double d)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, d >= 100 ? "$%.0f" : "$%.2f", d);
    return buf;
}

} // namespace

void printAdvice(std::ostream& out, const AdvisorResult& r, int top, double samples)
{
    char line[1024];
    out << "ranked by " << r.objective << "; " << r.evaluated << " allocations planned, " << r.rejected
        << " without a plan that fits memory\n";
    std::snprintf(line, sizeof line, "%-4s %-26s %-13s %-16s %11s %9s %10s", "rank", "allocation", "algorithm",
        "config", "samples/s", "$/h", "$/Msample");
    out << line;
    if (samples > 0)
        out << "  time to train       cost";
    out << "\n";
    for (int i = 0; i < top; ++i) {
        const auto& a = r.allocations[i];
        std::string config = a.config.size() > 16 ? a.config.substr(0, 13) + "..." : a.config;
        std::snprintf(line, sizeof line, "%-4d %-26s %-13s %-16s %11.1f %9.2f %10.3f", i + 1, a.label().c_str(),
            a.algorithm.c_str(), config.c_str(), a.throughput_samples_per_s, a.price_per_hour, a.cost_per_sample * 1e6);
        out << line;
        if (samples > 0) {
            std::snprintf(line, sizeof line, "  %13s %10s%s", formatDuration(a.time_s).c_str(),
                formatDollars(a.cost).c_str(), a.meets_constraints ? "" : "  (misses the constraint)");
            out << line;
        }
        out << "\n";
    }
    if (r.time_share) {
        out << (r.objective == "time within the budget"
                ? "time share (faster than any single allocation within the budget): "
                : "time share (cheaper than any single allocation in time): ");
        for (std::size_t k = 0; k < r.time_share->parts.size(); ++k) {
            const auto& [j, t] = r.time_share->parts[k];
            out << (k ? " then " : "") << formatDuration(t) << " on " << r.allocations[j].label();
        }
        out << ": " << formatDuration(r.time_share->time_s) << ", " << formatDollars(r.time_share->cost) << "\n";
    }
}

json adviceJson(const AdvisorResult& r, int top)
{
    json rows = json::array();
    for (int i = 0; i < top; ++i) {
        const auto& a = r.allocations[i];
        json mix = json::array();
        for (const auto& [type, count] : a.mix)
            mix.push_back({{"device_type", type}, {"count", count}});
        rows.push_back({{"rank", i + 1}, {"allocation", a.label()}, {"mix", mix}, {"devices", a.devices},
            {"algorithm", a.algorithm}, {"config", a.config}, {"schedule", a.schedule},
            {"throughput_samples_per_s", a.throughput_samples_per_s}, {"price_per_hour", a.price_per_hour},
            {"cost_per_sample", a.cost_per_sample}, {"time_s", a.time_s}, {"cost", a.cost},
            {"memory_ratio", a.memory_ratio}, {"meets_constraints", a.meets_constraints}});
    }
    json diags = json::array();
    for (const auto& d : r.diagnostics)
        diags.push_back({{"code", d.code}, {"message", d.message}});
    json j = {{"objective", r.objective}, {"evaluated", r.evaluated}, {"rejected", r.rejected}, {"allocations", rows},
        {"diagnostics", diags}};
    if (r.time_share) {
        json parts = json::array();
        for (const auto& [idx, t] : r.time_share->parts)
            parts.push_back({{"allocation", r.allocations[idx].label()}, {"rank", idx + 1}, {"time_s", t}});
        j["time_share"] = {{"parts", parts}, {"time_s", r.time_share->time_s}, {"cost", r.time_share->cost}};
    }
    return j;
}

} // namespace pw::cli
