// SPDX-License-Identifier: MIT
// The "pipedream" partitioner: the paper's DP by default, the reference optimizer's variant on request.
#include <algorithm>
#include <cmath>

#include "../costs.h"
#include "../errors.h"
#include "../sim/simulator.h"
#include "builtin.h"
#include "pipedream_dp.h"
#include "pipedream_reference.h"

namespace pw::planner {
namespace {

using Severity = Diagnostic::Severity;

class PipeDreamPartitioner final : public Partitioner
{
public:
    std::string_view name() const override { return "pipedream"; }
    std::string_view description() const override
    {
        return "PipeDream's hierarchical DP: stages and replication minimising the slowest stage";
    }

    PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop) const override
    {
        const auto& opt = request.options;
        if (opt.pipedream_variant == "reference")
            return partitionPipeDreamReference(request, progress, stop);
        if (opt.pipedream_variant != "paper")
            return detail::failure("bad-option",
                "--pipedream-variant must be 'paper' or 'reference', got '" + opt.pipedream_variant + "'");
        std::vector<Diagnostic> diag;
        auto devices = detail::usableDevices(request, diag);
        if (!devices)
            return {std::nullopt, diag};
        Plan plan = detail::basePlan(request, name());
        const auto& model = request.model;
        const auto& type = request.cluster.typeOf(0);
        for (int d = 1; d < *devices; ++d)
            if (request.cluster.typeOf(d).name != type.name) {
                diag.push_back({Severity::Warning, "heterogeneous",
                    "PipeDream's DP assumes one device type; costs use " + type.name
                        + " (try hetpipe or bapipe for mixed clusters)"});
                break;
            }

        PipeDreamProblem problem;
        problem.levels = detail::pipeDreamLevels(request, *devices, diag);
        problem.straight = opt.straight;
        problem.per_worker_allreduce = opt.per_worker_allreduce;
        const double scale = microbatchScale(plan);
        // Replication is what the DP decides: it plans without sharding the optimizer (the simulator shards it).
        const double optFactor = optimizerStateFactor(plan.schedule, model);
        problem.cut_bytes = model.cutBytes();
        for (auto& b : problem.cut_bytes)
            b *= scale;
        const double speed = deviceSpeed(type, model, request.cluster.device_types).factor;
        for (const auto& layer : model.layers) {
            auto t = layerTimesOn(layer, type, speed);
            // Recomputation runs the forward pass again before every backward pass.
            const double forwards = plan.schedule.recompute ? 2.0 : 1.0;
            problem.compute_s.push_back((forwards * t.forward_ms + t.backward_ms) * 1e-3 * scale);
            problem.weight_bytes.push_back(layer.weight_bytes);
            problem.activation_bytes.push_back(layer.stashed_bytes.value_or(layer.activation_bytes) * scale);
            problem.optimizer_bytes.push_back(layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes));
        }
        if (opt.memory_limit) {
            problem.memory_capacity_bytes = type.memory_bytes;
            for (int d = 1; d < *devices; ++d)
                problem.memory_capacity_bytes
                    = std::min(problem.memory_capacity_bytes, request.cluster.typeOf(d).memory_bytes);
            problem.schedule_kind = plan.schedule.kind;
            problem.microbatches = plan.schedule.microbatches;
            problem.recompute = plan.schedule.recompute;
        }

        // Lower levels keep an N x N table per level; past this many layers that is gigabytes.
        constexpr int kMaxHierarchicalLayers = 12'000;
        if (problem.levels.size() > 1 && model.layerCount() > kMaxHierarchicalLayers) {
            diag.push_back({Severity::Error, "too-large",
                std::to_string(model.layerCount()) + " layers are too many for the hierarchical DP (at most "
                    + std::to_string(kMaxHierarchicalLayers) + "); plan with --flat"});
            return {std::nullopt, diag};
        }
        PipeDreamSolveOptions solveOptions;
        solveOptions.progress = progress;
        solveOptions.stop = stop;
        bool cancelled = false;
        auto sol = solvePipeDream(problem, solveOptions, &cancelled);
        if (cancelled)
            return detail::failure("cancelled", "partitioning was cancelled");
        if (!sol.feasible) {
            std::string why = opt.straight && model.layerCount() < *devices
                ? "a straight pipeline needs at least one layer per device"
                : opt.memory_limit ? "no partition fits device memory"
                                   : "no finite-cost partition exists";
            diag.push_back({Severity::Error, "infeasible", why});
            return {std::nullopt, diag};
        }
        plan.stages = std::move(sol.stages);
        plan.objective_s = sol.objective_s;
        plan.algorithm_options
            = {{"variant", "paper"}, {"levels", detail::levelsText(problem.levels)}, {"straight", opt.straight},
                {"per_worker_allreduce", opt.per_worker_allreduce}, {"memory_limit", opt.memory_limit}};
        interleave(plan, diag);
        checkMemory(plan, diag);
        return detail::validated(std::move(plan), std::move(diag));
    }

private:
    /// With chunks v > 1 the DP's p stages keep their devices and the layers are re-cut into p*v virtual
    /// stages of balanced compute (the DP has no notion of chunks).
    static void interleave(Plan& plan, std::vector<Diagnostic>& diag)
    {
        const int v = std::max(1, plan.schedule.chunks);
        if (v == 1)
            return;
        const int p = plan.stageCount();
        const int n = plan.model.layerCount();
        if (p * v > n) {
            plan.schedule.chunks = 1;
            diag.push_back({Severity::Warning, "chunks",
                "too few layers for " + std::to_string(v) + " chunks per stage; planning without interleaving"});
            return;
        }
        const auto& type = plan.cluster.typeOf(plan.stages[0].devices[0]);
        const double speed = deviceSpeed(type, plan.model, plan.cluster.device_types).factor;
        std::vector<double> compute;
        for (const auto& l : plan.model.layers) {
            auto t = layerTimesOn(l, type, speed);
            compute.push_back((plan.schedule.recompute ? 2 : 1) * t.forward_ms + t.backward_ms);
        }
        auto cuts = detail::balancedBoundaries(compute, p * v);
        std::vector<PlanStage> stages;
        int first = 0;
        for (int s = 0; s < p * v; ++s) {
            int last = s + 1 < p * v ? cuts[s] : n - 1;
            stages.push_back({first, last, plan.stages[s % p].devices});
            first = last + 1;
        }
        plan.stages = std::move(stages);
        diag.push_back({Severity::Info, "chunks",
            "layers re-cut into " + std::to_string(p * v) + " compute-balanced virtual stages for interleaving"});
    }

    /// Peak memory of every stage with the true in-flight count ceil(W_s / r_s).
    /// Peak memory of every stage as the simulator sees it (interleaved chunks and true in-flight counts
    /// included); falls back to the analytic model when the schedule cannot be generated for these options.
    static void checkMemory(const Plan& plan, std::vector<Diagnostic>& diag)
    {
        auto report = [&](int s, double need, double capacity, const std::string& type) {
            diag.push_back({Severity::Warning, "over-memory",
                "stage " + std::to_string(s) + " needs " + std::to_string(need / 1e9) + " GB per device, " + type
                    + " has " + std::to_string(capacity / 1e9) + " GB"});
        };
        try {
            auto sim = simulate(plan, SimulationOptions {false, false});
            for (int s = 0; s < plan.pipelineDepth(); ++s) {
                const auto& m = sim.stages[s];
                if (m.peak_memory_bytes > m.memory_capacity_bytes)
                    report(s, m.peak_memory_bytes, m.memory_capacity_bytes,
                        plan.cluster.typeOf(plan.stages[s].devices[0]).name);
            }
            return;
        } catch (const InputError&) {
        }
        const int p = plan.pipelineDepth();
        int after = 0;
        for (int s = p - 1; s >= 0; --s) {
            const auto& st = plan.stages[s];
            after += st.replicas();
            const auto& type = plan.cluster.typeOf(st.devices[0]);
            auto totals = stageTotals(plan, s, type);
            StageMemoryInput in {totals.weight_bytes, totals.activation_bytes, totals.input_bytes,
                totals.optimizer_bytes, (after + st.replicas() - 1) / st.replicas(),
                (plan.schedule.microbatches + st.replicas() - 1) / st.replicas(), plan.schedule.recompute};
            double need = stageMemoryBytes(plan.schedule.kind, in);
            if (need > type.memory_bytes)
                report(s, need, type.memory_bytes, type.name);
        }
    }
};

} // namespace

const Partitioner& pipeDreamPartitioner()
{
    static const PipeDreamPartitioner instance;
    return instance;
}

} // namespace pw::planner
