// SPDX-License-Identifier: MIT
// The list of partitioners and the helpers they share.
#include "../costs.h"
#include "../errors.h"
#include "../schedule/generator.h"
#include "builtin.h"
#include "partitioner.h"

namespace pw::planner {

bool PartitionResult::hasError() const
{
    for (const auto& d : diagnostics)
        if (d.severity == Diagnostic::Severity::Error)
            return true;
    return false;
}

std::string PartitionResult::errorText() const
{
    std::string out;
    for (const auto& d : diagnostics) {
        if (d.severity != Diagnostic::Severity::Error)
            continue;
        if (!out.empty())
            out += "; ";
        out += d.message;
    }
    return out.empty() ? "no plan" : out;
}

std::vector<std::string> unusedSharedOptions(const Partitioner& partitioner, const PartitionOptions& options)
{
    const auto use = partitioner.sharedOptions();
    std::vector<std::string> unused;
    if (options.stages != 0 && !use.stages)
        unused.emplace_back("--stages");
    if (options.straight && !use.straight)
        unused.emplace_back("--straight");
    if (options.flat && !use.flat)
        unused.emplace_back("--flat");
    return unused;
}

PartitionResult OptionedPartitioner::partition(
    const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop) const
{
    std::vector<Diagnostic> diagnostics;
    detail::OptionValues values(options(), request.options.params, diagnostics);
    if (!values.ok())
        return {std::nullopt, diagnostics};
    auto devices = detail::usableDevices(request, diagnostics);
    if (!devices)
        return {std::nullopt, diagnostics};
    // What the checks found stays with the result when the search throws.
    const auto failed = [&](std::string code, std::string message) {
        diagnostics.push_back({Diagnostic::Severity::Error, std::move(code), std::move(message)});
        return PartitionResult {std::nullopt, std::move(diagnostics)};
    };
    try {
        return search(request, values, *devices, progress, stop, diagnostics);
    } catch (const PartitionCancelled&) {
        return failed("cancelled", "partitioning was cancelled");
    } catch (const InputError& e) {
        return failed("invalid-input", e.what());
    } catch (const std::exception& e) {
        return failed("internal-error", std::string(name()) + ": " + e.what());
    }
}

const std::vector<const Partitioner*>& partitioners()
{
    static const std::vector<const Partitioner*> list = {
        &pipeDreamPartitioner(),
        &pipeDream2BwPartitioner(),
        &megatronPartitioner(),
        &hetPipePartitioner(),
        &baPipePartitioner(),
        &madPipePartitioner(),
        &uniformPartitioner(),
        &parametersPartitioner(),
        &manualPartitioner(),
    };
    return list;
}

const Partitioner* findPartitioner(std::string_view name)
{
    for (const auto* p : partitioners())
        if (p->name() == name)
            return p;
    return nullptr;
}

namespace detail {

Plan basePlan(const PartitionRequest& request, std::string_view algorithm)
{
    Plan plan;
    plan.model = request.model;
    plan.cluster = request.cluster;
    plan.algorithm = std::string(algorithm);
    plan.schedule = request.options.schedule;
    return plan;
}

bool replacesRequestedKind(const PartitionRequest& request, std::string_view chosen)
{
    const auto& requested = request.options.schedule.kind;
    return requested != ScheduleOptions {}.kind && requested != chosen;
}

std::optional<int> usableDevices(const PartitionRequest& request, std::vector<Diagnostic>& diagnostics)
{
    const int total = request.cluster->deviceCount();
    if (total < 1) {
        diagnostics.push_back({Diagnostic::Severity::Error, "no-devices", "the cluster has no devices"});
        return std::nullopt;
    }
    if (request.options.devices < 0) {
        diagnostics.push_back({Diagnostic::Severity::Error, "bad-option",
            "the device count must be >= 0 (0 = all), got " + std::to_string(request.options.devices)});
        return std::nullopt;
    }
    int n = request.options.devices > 0 ? request.options.devices : total;
    if (n > total) {
        diagnostics.push_back({Diagnostic::Severity::Error, "too-many-devices",
            "asked for " + std::to_string(n) + " devices but the cluster has " + std::to_string(total)});
        return std::nullopt;
    }
    if (request.model->layers.empty()) {
        diagnostics.push_back({Diagnostic::Severity::Error, "empty-model", "the model has no layers"});
        return std::nullopt;
    }
    return n;
}

PartitionResult failure(std::string code, std::string message)
{
    PartitionResult r;
    r.diagnostics.push_back({Diagnostic::Severity::Error, std::move(code), std::move(message)});
    return r;
}

std::string firstReason(const std::vector<Candidate>& candidates)
{
    for (const auto& c : candidates)
        if (!c.reason.empty())
            return c.description + ": " + c.reason;
    return {};
}

std::optional<PartitionResult> checkOneStagePerDevice(
    const PartitionRequest& request, std::string_view algorithm, int devices)
{
    const auto& opt = request.options;
    if (opt.schedule.chunks > 1)
        return failure("bad-option",
            std::string(algorithm)
                + " plans one stage per device (chunks = 1), got chunks = " + std::to_string(opt.schedule.chunks));
    if (opt.stages < 0)
        return failure("bad-option", "the stage count must be >= 0, got " + std::to_string(opt.stages));
    if (opt.stages > devices)
        return failure("too-many-stages",
            std::to_string(opt.stages) + " stages need " + std::to_string(opt.stages) + " devices, only "
                + std::to_string(devices) + " available");
    if (opt.schedule.microbatches < 1 || opt.schedule.microbatches > kMaxMicrobatches)
        return failure("bad-option",
            "microbatches per batch must be in [1, " + std::to_string(kMaxMicrobatches) + "], got "
                + std::to_string(opt.schedule.microbatches));
    if (opt.schedule.microbatch_size < 0)
        return failure("bad-option",
            "the microbatch size must be >= 0 (0 = the profile's), got "
                + std::to_string(opt.schedule.microbatch_size));
    return std::nullopt;
}

PartitionResult validated(Plan plan, std::vector<Diagnostic> diagnostics)
{
    // A kind whose steady state shows only from batch to batch (zb-h2, zbv, 2bw) is simulated over the batches it
    // needs whichever partitioner made the plan: zb-h2 over one batch is zb-h1 (the panel showed the same time).
    plan.schedule.iterations = simulatedIterations(plan);
    try {
        plan.validate();
    } catch (const InputError& e) {
        diagnostics.push_back({Diagnostic::Severity::Error, "invalid-plan", e.what()});
        return {std::nullopt, std::move(diagnostics)};
    }
    const auto speeds = deviceSpeeds(plan.model, plan.cluster);
    std::vector<bool> used(speeds.size(), false);
    for (const auto& stage : plan.stages)
        for (int d : stage.devices)
            used[plan.cluster->device(d).type] = true;
    for (std::size_t t = 0; t < speeds.size(); ++t)
        if (used[t] && speeds[t].estimated())
            diagnostics.push_back({Diagnostic::Severity::Warning, "estimated-speed",
                speedNote(plan.cluster->device_types[t], plan.model, speeds[t])});
    return {std::move(plan), std::move(diagnostics)};
}

} // namespace detail
} // namespace pw::planner
