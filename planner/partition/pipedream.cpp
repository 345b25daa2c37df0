// SPDX-License-Identifier: MIT
// The "pipedream" partitioner: the paper's DP by default, the reference optimizer's variant on request.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../costs.h"
#include "../errors.h"
#include "../schedule/traits.h"
#include "../sim/simulator.h"
#include "../units.h"
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
    SharedOptionUse sharedOptions() const override { return {false, true, true}; }
    std::string_view description() const override
    {
        return "PipeDream's hierarchical DP: stages and replication minimising the slowest stage";
    }

    PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop) const override
    {
        const auto& opt = request.options;
        if (opt.pipedream_variant == "reference") {
            auto result = partitionPipeDreamReference(request, progress, stop);
            if (result.ok())
                finish(*result.plan, opt, true, result.diagnostics);
            return result;
        }
        if (opt.pipedream_variant != "paper")
            return detail::failure("bad-option",
                "--pipedream-variant must be 'paper' or 'reference', got '" + opt.pipedream_variant + "'");
        std::vector<Diagnostic> diag;
        auto devices = detail::usableDevices(request, diag);
        if (!devices)
            return {std::nullopt, diag};
        Plan plan = detail::basePlan(request, name());
        const auto& model = request.model;
        const auto& type = request.cluster->typeOf(0);
        for (int d = 1; d < *devices; ++d)
            if (request.cluster->typeOf(d).name != type.name) {
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
        problem.cut_bytes = model->cutBytes();
        for (auto& b : problem.cut_bytes)
            b *= scale;
        const double speed = deviceSpeed(type, model, request.cluster->device_types).factor;
        for (const auto& layer : model->layers) {
            auto t = layerTimesOn(layer, type, speed);
            // Recomputation runs the forward pass again before every backward pass.
            const double forwards = plan.schedule.recompute == Recompute::Full ? 2.0 : 1.0;
            problem.compute_s.push_back((forwards * t.forward_ms + t.backward_ms) * 1e-3 * scale);
            problem.weight_bytes.push_back(layer.weight_bytes);
            problem.activation_bytes.push_back(layer.stashed_bytes.value_or(layer.activation_bytes) * scale);
            problem.optimizer_bytes.push_back(layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes));
            problem.weight_gradient_bytes.push_back(layer.weight_gradient_bytes * scale);
        }
        if (opt.memory_limit) {
            problem.memory_capacity_bytes = type.memory_bytes;
            for (int d = 1; d < *devices; ++d)
                problem.memory_capacity_bytes
                    = std::min(problem.memory_capacity_bytes, request.cluster->typeOf(d).memory_bytes);
            problem.schedule_kind = plan.schedule.kind;
            problem.microbatches = plan.schedule.microbatches;
            problem.recompute = plan.schedule.recompute == Recompute::Full;
        }

        // Lower levels keep an N x N table per level; past this many layers that is gigabytes.
        constexpr int kMaxHierarchicalLayers = 12'000;
        if (problem.levels.size() > 1 && model->layerCount() > kMaxHierarchicalLayers) {
            diag.push_back({Severity::Error, "too-large",
                std::to_string(model->layerCount()) + " layers are too many for the hierarchical DP (at most "
                    + std::to_string(kMaxHierarchicalLayers) + "); plan with --flat"});
            return {std::nullopt, diag};
        }
        PipeDreamSolveOptions solveOptions;
        solveOptions.progress = progress;
        solveOptions.stop = stop;
        bool cancelled = false;
        // Zero-bubble kinds stash the first stage's count on every stage, which the DP knows only once it has chosen
        // the first stage: start from the most it can be (all devices in one straight pipeline).
        const auto* traits = findScheduleTraits(plan.schedule.kind);
        const bool firstStage = traits && traits->in_flight_limit == InFlightLimit::FirstStage;
        if (opt.memory_limit && firstStage)
            problem.first_stage_in_flight = firstStageInFlight(*traits, *devices, 1);
        auto sol = solvePipeDream(problem, solveOptions, &cancelled);
        if (!cancelled && problem.first_stage_in_flight > 0 && sol.feasible)
            sol = lowerFirstStageBound(problem, solveOptions, *traits, std::move(sol), cancelled);
        // Chunks over replicated stages run as equal copies of the pipeline (interleaving's rounds, a V): an answer
        // with unequal replicas cannot be re-cut into chunks, so the DP plans a straight pipeline instead.
        const bool equalCopies = plan.schedule.chunks > 1 && traits
            && (traits->chunks == ChunkRule::WholeRounds || traits->chunks == ChunkRule::V);
        if (!cancelled && sol.feasible && equalCopies && !problem.straight) {
            std::string config;
            bool unequal = false;
            for (const auto& s : sol.stages) {
                config += (config.empty() ? "" : "-") + std::to_string(s.replicas());
                unequal = unequal || s.replicas() != sol.stages.front().replicas();
            }
            if (unequal) {
                problem.straight = true;
                if (problem.first_stage_in_flight > 0)
                    problem.first_stage_in_flight = firstStageInFlight(*traits, *devices, 1);
                sol = solvePipeDream(problem, solveOptions, &cancelled);
                if (!cancelled && problem.first_stage_in_flight > 0 && sol.feasible)
                    sol = lowerFirstStageBound(problem, solveOptions, *traits, std::move(sol), cancelled);
                diag.push_back({Severity::Info, "straight",
                    "'" + plan.schedule.kind + "' runs its " + std::to_string(plan.schedule.chunks)
                        + " chunks per device over equal replicas of every stage; the DP's answer (" + config
                        + ") has unequal ones, so it planned a straight pipeline (one device per stage)"});
            }
        }
        if (cancelled)
            return detail::failure("cancelled", "partitioning was cancelled");
        if (!sol.feasible) {
            std::string why = problem.straight && model->layerCount() < *devices
                ? "a straight pipeline needs at least one layer per device"
                : opt.memory_limit ? "no partition fits device memory"
                                   : "no finite-cost partition exists";
            diag.push_back({Severity::Error, "infeasible", why});
            return {std::nullopt, diag};
        }
        plan.stages = std::move(sol.stages);
        plan.objective_s = sol.objective_s;
        plan.algorithm_options
            = {{"variant", "paper"}, {"levels", detail::levelsText(problem.levels)}, {"straight", problem.straight},
                {"per_worker_allreduce", opt.per_worker_allreduce}, {"memory_limit", opt.memory_limit}};
        interleave(plan, diag);
        finish(plan, opt, false, diag);
        if (firstStage)
            diag.push_back({Severity::Info, "zero-bubble", zeroBubbleNote(plan, *traits, opt.memory_limit)});
        return detail::validated(std::move(plan), std::move(diag));
    }

private:
    /// Microbatches every stage stashes under a FirstStage kind whose first stage has `replicas` of `devices`:
    /// in_flight_factor x n_0 - (in_flight_factor - 1), n_0 = ceil(devices / replicas) (zb-h1 p, zb-h2 2p - 1 on a
    /// straight pipeline).
    static int firstStageInFlight(const ScheduleTraits& traits, int devices, int replicas)
    {
        const int n0 = (devices + std::max(1, replicas) - 1) / std::max(1, replicas);
        return traits.in_flight_factor * n0 - (traits.in_flight_factor - 1);
    }

    static int firstStageInFlight(const ScheduleTraits& traits, const std::vector<PlanStage>& stages)
    {
        int devices = 0;
        for (const auto& st : stages)
            devices += st.replicas();
        return stages.empty() ? 1 : firstStageInFlight(traits, devices, stages.front().replicas());
    }

    /// The DP's answer under the bound of `problem` stashes only its own first stage's count: lower the bound to
    /// that and solve again, which can only find a faster split, kept while its own count stays within the bound
    /// (a split whose first stage holds more would not fit as checked). At most 16 rounds.
    static PipeDreamSolution lowerFirstStageBound(PipeDreamProblem& problem, const PipeDreamSolveOptions& options,
        const ScheduleTraits& traits, PipeDreamSolution sol, bool& cancelled)
    {
        for (int round = 0; round < 16; ++round) {
            const int need = firstStageInFlight(traits, sol.stages);
            if (need >= problem.first_stage_in_flight)
                break;
            const int previous = problem.first_stage_in_flight;
            problem.first_stage_in_flight = need;
            auto next = solvePipeDream(problem, options, &cancelled);
            if (cancelled)
                break;
            if (!next.feasible || firstStageInFlight(traits, next.stages) > need) {
                problem.first_stage_in_flight = previous;
                break;
            }
            sol = std::move(next);
        }
        return sol;
    }

    /// What a zero-bubble kind costs on this plan, for its Info diagnostic: the stashes of every stage and the bubble
    /// it leaves (docs/algorithms/zero-bubble.md).
    static std::string zeroBubbleNote(const Plan& plan, const ScheduleTraits& traits, bool memoryLimit)
    {
        int devices = 0;
        for (int s = 0; s < plan.pipelineDepth(); ++s)
            devices += plan.stages[s].replicas();
        const int stashes = firstStageInFlight(traits, devices, plan.stages.front().replicas());
        const auto& kind = plan.schedule.kind;
        std::string note = kind + " stashes " + std::to_string(stashes)
            + " microbatches on every stage (the first stage's count"
            + (traits.in_flight_factor > 1 ? ", about twice 1F1B's" : ", 1F1B's peak") + ")";
        if (kind == "zb-h1")
            note += "; bubble (p-1)(T_F + T_B - T_W), a third of 1F1B's when the three are equal";
        else if (kind == "zb-h2" || kind == "zbv")
            note += "; bubble (p-1) max(0, T_F + T_B - 2 T_W) with at least 2p - 1 microbatches";
        note += memoryLimit ? "; the DP's memory check counted them" : "; --memory-limit makes the DP count them";
        return note;
    }

    /// Replicas that add nothing (warned, or dropped with use_fewer_machines), microbatches the asynchronous
    /// schedule can run, then the memory check on the final plan.
    static void finish(Plan& plan, const PartitionOptions& opt, bool reference, std::vector<Diagnostic>& diag)
    {
        if (plan.schedule.chunks == 1 && plan.pipelineCount() == 1)
            trimReplicas(plan, opt, reference, diag);
        fitMicrobatches(plan, diag);
        checkMemory(plan, diag);
    }

    /// Seconds per microbatch of stage s on its first r replicas, in the one-level form of the DP's stage cost
    /// (hierarchical plans are judged by their flattened device-level stages): the paper's
    /// max(C, 2 (r-1) W / B) / r (2 (r-1)/r W / B with per-worker all-reduce), the reference's
    /// (C + 4 (r-1) W / (B r)) / r; B is the slowest link among those replicas.
    static double stageSeconds(
        const Plan& plan, const std::vector<double>& compute, int s, int r, const PartitionOptions& opt, bool reference)
    {
        const auto& st = plan.stages[s];
        double C = 0, W = 0;
        for (int pos = st.first_layer; pos <= st.last_layer; ++pos) {
            C += compute[plan.layerAt(pos)];
            W += plan.model->layers[plan.layerAt(pos)].weight_bytes;
        }
        if (r <= 1 || W == 0)
            return C / std::max(1, r);
        const std::vector<int> group(st.devices.begin(), st.devices.begin() + r);
        const double bw = plan.cluster->groupBandwidth(group);
        if (!(bw > 0))
            return std::numeric_limits<double>::infinity();
        if (reference)
            return (C + 4.0 * (r - 1) * W / (bw * r)) / r;
        double sync = 2.0 * (r - 1) * W / bw;
        if (opt.per_worker_allreduce)
            sync /= r;
        return std::max(C, sync) / r;
    }

    /// PipeDream's objective is the slowest stage: a faster stage may hold any number of replicas, and the DP
    /// keeps whatever its split search met first (88 GPUs on a 0.23 ms embedding stage at 1,024 GPUs). For
    /// every stage: the fastest replica count (fewest on ties; the reference's fallback to r-1 workers), then
    /// the fewest replicas that keep it within the slowest stage. Never slower than the plan as planned.
    static void trimReplicas(Plan& plan, const PartitionOptions& opt, bool reference, std::vector<Diagnostic>& diag)
    {
        const auto& model = plan.model;
        const double scale = microbatchScale(plan);
        const auto speeds = deviceSpeeds(model, plan.cluster);
        const auto& type = plan.cluster->typeOf(plan.stages[0].devices[0]);
        const double speed = speeds[plan.cluster->device(plan.stages[0].devices[0]).type].factor;
        std::vector<double> compute;
        for (const auto& layer : model->layers) {
            const auto t = layerTimesOn(layer, type, speed);
            compute.push_back(
                ((plan.schedule.recompute == Recompute::Full ? 2 : 1) * t.forward_ms + t.backward_ms) * 1e-3 * scale);
        }
        const int S = plan.stageCount();
        std::vector<int> fastest(S);
        double bottleneck = 0;
        for (int s = 0; s < S; ++s) {
            const int r = plan.stages[s].replicas();
            double best = std::numeric_limits<double>::infinity();
            for (int k = 1; k <= r; ++k)
                if (const double t = stageSeconds(plan, compute, s, k, opt, reference); t < best * (1 - 1e-12)) {
                    best = t;
                    fastest[s] = k;
                }
            bottleneck = std::max(bottleneck, best);
        }
        int freed = 0;
        std::string where;
        for (int s = 0; s < S; ++s) {
            const int r = plan.stages[s].replicas();
            int need = fastest[s];
            while (need > 1 && stageSeconds(plan, compute, s, need - 1, opt, reference) <= bottleneck * (1 + 1e-9))
                --need;
            if (need == r)
                continue;
            freed += r - need;
            if (where.empty())
                where = "stage " + std::to_string(s) + " (layers " + std::to_string(plan.stages[s].first_layer) + "-"
                    + std::to_string(plan.stages[s].last_layer) + ") runs on " + std::to_string(r) + " devices where "
                    + std::to_string(need) + " keep it within the slowest stage (" + std::to_string(bottleneck * 1e3)
                    + " ms per microbatch)";
            if (opt.use_fewer_machines)
                plan.stages[s].devices.resize(need);
        }
        if (freed == 0)
            return;
        if (opt.use_fewer_machines)
            diag.push_back({Severity::Info, "fewer-machines",
                "left " + std::to_string(freed) + " devices idle that would add nothing (" + where + ")"});
        else
            diag.push_back({Severity::Warning, "idle-replicas",
                std::to_string(freed) + " devices add nothing to the partitioner's throughput model: " + where
                    + "; --use-fewer-machines leaves them out"});
    }

    /// Schedules whose traits say replicas_divide_inputs ("pipedream": inputs dealt round-robin over a stage's
    /// replicas) need every replica count to divide microbatches x iterations: raise the microbatches to the
    /// next count that does.
    static void fitMicrobatches(Plan& plan, std::vector<Diagnostic>& diag)
    {
        const auto* traits = findScheduleTraits(plan.schedule.kind);
        if (!traits || !traits->replicas_divide_inputs)
            return;
        const int m = plan.schedule.microbatches;
        const int valid = pipeDreamMicrobatches(plan);
        if (valid == m)
            return;
        if (valid <= 0 || valid > kMaxMicrobatches
            || static_cast<long long>(valid) * plan.schedule.iterations * plan.stageCount() > kMaxStageMicrobatches) {
            diag.push_back({Severity::Warning, "microbatches",
                "'" + plan.schedule.kind
                    + "' needs microbatches x iterations to be a multiple of every stage's replica count; no count "
                      "within the plan's limits is"});
            return;
        }
        plan.schedule.microbatches = valid;
        diag.push_back({Severity::Info, "microbatches",
            "microbatches raised from " + std::to_string(m) + " to " + std::to_string(valid)
                + " so that every stage's replica count divides the inputs of the '" + plan.schedule.kind
                + "' schedule"});
    }
    /// With chunks v > 1 the DP's p stages keep their devices and the layers are re-cut into p*v virtual
    /// stages of balanced compute (the DP has no notion of chunks).
    static void interleave(Plan& plan, std::vector<Diagnostic>& diag)
    {
        const int v = std::max(1, plan.schedule.chunks);
        if (v == 1)
            return;
        const int p = plan.stageCount();
        const int n = plan.model->layerCount();
        if (p * v > n) {
            plan.schedule.chunks = 1;
            diag.push_back({Severity::Warning, "chunks",
                "too few layers for " + std::to_string(v) + " chunks per stage; planning without interleaving"});
            return;
        }
        const auto& type = plan.cluster->typeOf(plan.stages[0].devices[0]);
        const double speed = deviceSpeed(type, plan.model, plan.cluster->device_types).factor;
        std::vector<double> compute;
        for (const auto& l : plan.model->layers) {
            auto t = layerTimesOn(l, type, speed);
            compute.push_back((plan.schedule.recompute == Recompute::Full ? 2 : 1) * t.forward_ms + t.backward_ms);
        }
        auto cuts = detail::balancedBoundaries(compute, p * v);
        const auto* traits = findScheduleTraits(plan.schedule.kind);
        const bool vShape = traits && traits->chunks == ChunkRule::V && v == 2; // zbv: s, then 2p - 1 - s
        std::vector<PlanStage> stages;
        int first = 0;
        for (int s = 0; s < p * v; ++s) {
            int last = s + 1 < p * v ? cuts[s] : n - 1;
            stages.push_back({first, last, plan.stages[vShape && s >= p ? 2 * p - 1 - s : s % p].devices});
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
                "stage " + std::to_string(s) + " needs " + formatBytes(need) + " per device, " + type + " has "
                    + formatBytes(capacity)});
        };
        try {
            auto sim = simulate(plan, SimulationOptions {false, false});
            for (int s = 0; s < plan.pipelineDepth(); ++s) {
                const auto& m = sim.stages[s];
                if (m.peak_memory_bytes > m.memory_capacity_bytes)
                    report(s, m.peak_memory_bytes, m.memory_capacity_bytes,
                        plan.cluster->typeOf(plan.stages[s].devices[0]).name);
            }
            return;
        } catch (const InputError&) {
        }
        const int p = plan.pipelineDepth();
        const auto& traits = scheduleTraits(plan.schedule.kind);
        int after = 0;
        for (int s = p - 1; s >= 0; --s) {
            const auto& st = plan.stages[s];
            after += st.replicas();
            const auto& type = plan.cluster->typeOf(st.devices[0]);
            auto totals = stageTotals(plan, s, type);
            const auto in = memoryInput(totals, traits.in_flight_factor * ((after + st.replicas() - 1) / st.replicas()),
                (plan.schedule.microbatches + st.replicas() - 1) / st.replicas());
            double need = stageMemoryBytes(traits, in);
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
