// SPDX-License-Identifier: MIT
// The "madpipe" partitioner: MadPipe's memory-aware phase-1 DP with Algorithm 1, then a contiguous allocation
// scheduled with 1F1B* (2BW-style, no flush) and checked by simulation (docs/algorithms/madpipe.md).
#include "madpipe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "../costs.h"
#include "../errors.h"
#include "../schedule/generator.h"
#include "../sim/simulator.h"
#include "../units.h"
#include "builtin.h"

namespace pw::planner {
namespace {

using Severity = Diagnostic::Severity;
using madpipe::Chain;
using madpipe::Cuts;
using nlohmann::json;

constexpr int kMaxGpus = 255; ///< the DP packs p into 8 bits

std::string num(double x)
{
    std::ostringstream s;
    s.precision(4);
    s << x;
    return s.str();
}

json finite(double x)
{
    return std::isfinite(x) ? json(x) : json();
}

/// Per-layer costs on the planning device type, and the grouping of layers into blocks.
struct Layers
{
    std::vector<double> forward, backward, weight, optimizer, stash, cut;
};

Layers layerCosts(const PartitionRequest& request, const DeviceType& type)
{
    const auto& model = request.model;
    const auto& so = request.options.schedule;
    const double scale
        = so.microbatch_size > 0 ? static_cast<double>(so.microbatch_size) / std::max(1, model->microbatch_size) : 1.0;
    const double optFactor = optimizerStateFactor(so, model);
    const double speed = deviceSpeed(type, model, request.cluster->device_types).factor;
    Layers c;
    const auto cut = model->cutBytes();
    for (int l = 0; l < model->layerCount(); ++l) {
        const auto& layer = model->layers[l];
        const auto t = layerTimesOn(layer, type, speed);
        const double f = t.forward_ms * 1e-3 * scale;
        c.forward.push_back(f);
        c.backward.push_back(t.backward_ms * 1e-3 * scale + (so.recompute == Recompute::Full ? f : 0.0));
        c.weight.push_back(layer.weight_bytes);
        c.optimizer.push_back(layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes));
        c.stash.push_back(model->stashedBytes(l) * scale);
        c.cut.push_back(cut[l] * scale);
    }
    return c;
}

/// Block starts (ending with L): at most `maxBlocks` blocks of about equal F+B (0 = one block per layer).
std::vector<int> blockStarts(const Layers& layers, int maxBlocks)
{
    const int L = static_cast<int>(layers.forward.size());
    std::vector<int> starts;
    if (maxBlocks <= 0 || L <= maxBlocks) {
        for (int l = 0; l <= L; ++l)
            starts.push_back(l);
        return starts;
    }
    std::vector<double> prefix(L + 1, 0.0);
    for (int l = 0; l < L; ++l)
        prefix[l + 1] = prefix[l] + layers.forward[l] + layers.backward[l];
    starts.push_back(0);
    for (int b = 1; b < maxBlocks; ++b) {
        int pos;
        if (prefix[L] > 0)
            pos = static_cast<int>(
                std::lower_bound(prefix.begin(), prefix.end(), prefix[L] * b / maxBlocks) - prefix.begin());
        else
            pos = static_cast<int>(static_cast<long long>(L) * b / maxBlocks);
        pos = std::clamp(pos, starts.back() + 1, L - (maxBlocks - b));
        starts.push_back(pos);
    }
    starts.push_back(L);
    return starts;
}

Chain blockChain(const Layers& layers, const std::vector<int>& starts)
{
    Chain c;
    c.layers = static_cast<int>(starts.size()) - 1;
    auto prefixOver = [&](const std::vector<double>& v) {
        std::vector<double> p(c.layers + 1, 0.0);
        for (int b = 0; b < c.layers; ++b) {
            double sum = 0;
            for (int l = starts[b]; l < starts[b + 1]; ++l)
                sum += v[l];
            p[b + 1] = p[b] + sum;
        }
        return p;
    };
    c.forward_prefix = prefixOver(layers.forward);
    c.backward_prefix = prefixOver(layers.backward);
    c.weight_prefix = prefixOver(layers.weight);
    c.optimizer_prefix = prefixOver(layers.optimizer);
    c.stash_prefix = prefixOver(layers.stash);
    for (int b = 0; b < c.layers; ++b)
        c.cut_bytes.push_back(layers.cut[starts[b + 1] - 1]);
    return c;
}

/// A contiguous allocation scheduled with 1F1B*.
struct Scheduled
{
    Cuts cuts; ///< over blocks
    madpipe::StarPeriod star;
};

std::optional<Scheduled> scheduleContiguous(const Chain& chain, Cuts cuts)
{
    auto star = madpipe::minimalStarPeriod(chain, cuts);
    if (!star)
        return std::nullopt;
    return Scheduled {std::move(cuts), std::move(*star)};
}

std::string rangeText(const std::vector<int>& starts, int first, int end)
{
    const int a = starts[first], b = starts[end] - 1;
    return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
}

class MadPipePartitioner final : public OptionedPartitioner
{
public:
    std::string_view name() const override { return "madpipe"; }
    SharedOptionUse sharedOptions() const override { return {true, false, false}; }
    std::string_view description() const override
    {
        return "MadPipe: memory-aware DP over allocations with one special GPU (Algorithm 1 over the target "
               "period), then a contiguous allocation run with 1F1B* (2BW-style, no flush) at its least valid period";
    }

    std::vector<OptionSpec> options() const override
    {
        using T = OptionSpec::Type;
        return {
            {"t-grid", T::Integer, 101, "phase 1: values of the special GPU's load t_P in [0, U(1,L)]", 2, 4000, {}},
            {"m-grid", T::Integer, 11, "phase 1: values of the special GPU's memory m_P in [0, M]", 2, 4000, {}},
            {"v-grid", T::Integer, 51, "phase 1: values of the delay V in [0, U(1,L) + sum C]", 2, 4000, {}},
            {"v-rounding", T::Choice, "up",
                "phase 1: round V up (over-estimates activations: safe) or down (t_P and m_P always round up)",
                std::nullopt, std::nullopt, {"up", "down"}},
            {"iterations", T::Integer, 10, "Algorithm 1: bisection steps K over the target period", 1, 100, {}},
            {"lb-update", T::Choice, "corrected",
                "Algorithm 1's lower bound: corrected lb = max(lb, min(T, T^)) [M:211], or literal as printed "
                "(max(lb, min(T, T~)), which fails after an infeasible first call)",
                std::nullopt, std::nullopt, {"corrected", "literal"}},
            {"comm-buffers", T::Boolean, true,
                "count MadPipe's 2a receive/send buffers on both sides of every cut (the simulator does not)",
                std::nullopt, std::nullopt, {}},
            {"refine", T::Boolean, true,
                "also search all contiguous allocations exactly (1F1B* period) and keep whichever is shorter than "
                "phase 1's allocation",
                std::nullopt, std::nullopt, {}},
            {"max-blocks", T::Integer, 128,
                "group consecutive layers into at most this many blocks of about equal time before planning "
                "(0 = never; long graph profiles)",
                0, 100000, {}},
        };
    }

private:
    PartitionResult search(const PartitionRequest& request, const detail::OptionValues& values, int devices,
        const ProgressFn& progress, std::stop_token stop, std::vector<Diagnostic> diag) const override
    {
        const auto& opt = request.options;
        const auto& model = request.model;
        if (auto bad = detail::checkOneStagePerDevice(request, name(), devices))
            return std::move(*bad);
        const int P = opt.stages > 0 ? opt.stages : devices;
        if (P > kMaxGpus)
            return detail::failure(
                "bad-option", "madpipe plans at most " + std::to_string(kMaxGpus) + " GPUs, got " + std::to_string(P));

        // MadPipe assumes P identical GPUs linked all-to-all at one bandwidth [M:88].
        std::vector<int> group;
        double capacity = madpipe::kInf;
        bool mixed = false;
        for (int d = 0; d < P; ++d) {
            group.push_back(d);
            capacity = std::min(capacity, request.cluster->typeOf(d).memory_bytes);
            mixed = mixed || request.cluster->typeOf(d).name != request.cluster->typeOf(0).name;
        }
        const auto& type = request.cluster->typeOf(0);
        if (mixed)
            diag.push_back({Severity::Warning, "heterogeneous",
                "MadPipe assumes identical GPUs: planning with " + type.name
                    + "'s times and the smallest memory of the first " + std::to_string(P)
                    + " devices; the simulation uses every device's own speed"});
        if (!(capacity > 0))
            return detail::failure("bad-option", "the devices have no memory size (memory_bytes = 0)");

        const Layers layers = layerCosts(request, type);
        const auto starts = blockStarts(layers, values.integer("max-blocks"));
        Chain chain = blockChain(layers, starts);
        chain.capacity = capacity;
        chain.bandwidth = P > 1 ? request.cluster->groupBandwidth(group) : madpipe::kInf;
        chain.latency = P > 1 ? request.cluster->groupLatency(group) : 0.0;
        chain.recompute = opt.schedule.recompute == Recompute::Full;
        chain.comm_buffers = values.boolean("comm-buffers");
        if (chain.layers < model->layerCount())
            diag.push_back({Severity::Info, "blocks",
                std::to_string(model->layerCount()) + " layers grouped into " + std::to_string(chain.layers)
                    + " blocks of about equal time (max-blocks); stages cut between blocks"});

        // Phase 1: Algorithm 1 around MadPipe-DP.
        madpipe::Phase1Settings settings;
        settings.t_grid = values.integer("t-grid");
        settings.m_grid = values.integer("m-grid");
        settings.v_grid = values.integer("v-grid");
        settings.v_round_up = values.choice("v-rounding") == "up";
        settings.iterations = values.integer("iterations");
        settings.literal_lb_update = values.choice("lb-update") == "literal";
        auto phase1 = madpipe::algorithm1(chain, P, settings, stop, [&](double f) {
            if (progress)
                progress(0.8 * f);
        });
        json trace = json::array();
        for (const auto& s : phase1.steps)
            trace.push_back({{"target_s", s.target}, {"dp_s", finite(s.dp)}, {"exact", s.exact}, {"lb_s", finite(s.lb)},
                {"ub_s", finite(s.ub)}});
        if (phase1.diverged) {
            PartitionResult r = detail::failure("algorithm1-diverged",
                "Algorithm 1 with the literal lower-bound update diverged: an infeasible MadPipe-DP call made lb "
                "infinite (use lb-update=corrected)");
            return r;
        }

        // Phase 1's allocation: adjacent stages on the special GPU are one stage; it is contiguous when the
        // special GPU holds at most one stage.
        std::vector<Candidate> candidates;
        json phase1Info = {{"trace", trace}, {"dp_states", phase1.states}};
        std::optional<Scheduled> fromPhase1;
        std::string phase1Text;
        bool nonContiguous = false;
        if (phase1.best) {
            std::vector<madpipe::Phase1Stage> merged;
            for (const auto& s : phase1.best->stages) {
                if (!merged.empty() && s.special && merged.back().special && merged.back().end == s.first)
                    merged.back().end = s.end;
                else
                    merged.push_back(s);
            }
            int specials = 0;
            json alloc = json::array();
            for (const auto& s : merged) {
                specials += s.special ? 1 : 0;
                alloc.push_back(
                    {{"layers", rangeText(starts, s.first, s.end)}, {"gpu", s.special ? "special" : "normal"}});
                phase1Text += (phase1Text.empty() ? "" : ", ") + std::string(s.special ? "S:" : "")
                    + rangeText(starts, s.first, s.end);
            }
            nonContiguous = specials > 1;
            phase1Info["allocation"] = alloc;
            phase1Info["period_estimate_s"] = phase1.best_period;
            phase1Info["target_s"] = phase1.best_target;
            phase1Info["contiguous"] = !nonContiguous;
            Candidate c;
            c.description = "phase 1 [" + phase1Text + "]";
            c.config = {{"allocation", alloc}, {"phase1_period_s", phase1.best_period}};
            if (!nonContiguous) {
                Cuts cuts {0};
                for (const auto& s : merged)
                    cuts.push_back(s.end);
                fromPhase1 = scheduleContiguous(chain, cuts);
                if (!fromPhase1) {
                    c.feasible = false;
                    c.reason = "no 1F1B* period fits memory (phase 1 under-estimates the special GPU)";
                }
            } else {
                c.feasible = false;
                c.reason = "non-contiguous: the special GPU holds several non-adjacent stages, which a Plan (one "
                           "stage per device) cannot express";
            }
            if (fromPhase1) {
                c.config["period_1f1b_star_s"] = fromPhase1->star.period;
                c.throughput_samples_per_s = samples(request) / fromPhase1->star.period;
            }
            candidates.push_back(std::move(c));
        } else {
            diag.push_back({Severity::Warning, "phase1-infeasible",
                "MadPipe-DP found no allocation that fits memory at any target period tried; searching contiguous "
                "allocations with 1F1B* directly"});
        }
        if (progress)
            progress(0.8);

        // The exact contiguous search: the fallback, and the comparison when `refine` is on.
        std::optional<Scheduled> contiguous;
        const bool refine = values.boolean("refine");
        if (refine || !fromPhase1) {
            if (auto cuts = madpipe::bestContiguous(chain, P, stop))
                contiguous = scheduleContiguous(chain, *cuts);
        }
        std::optional<Scheduled> chosen;
        std::string source;
        if (fromPhase1 && (!contiguous || fromPhase1->star.period <= contiguous->star.period * (1 + 1e-12))) {
            chosen = fromPhase1;
            source = "phase 1";
        } else if (contiguous) {
            chosen = contiguous;
            source = "contiguous search";
            if (nonContiguous)
                diag.push_back({Severity::Warning, "non-contiguous",
                    "phase 1 chose a non-contiguous allocation [" + phase1Text + "] (estimate "
                        + num(phase1.best_period) + " s); a Plan gives each device one stage, so it cannot run here: "
                        + "using the best contiguous allocation re-checked with 1F1B* (period "
                        + num(contiguous->star.period) + " s)"});
            else if (fromPhase1)
                diag.push_back({Severity::Info, "refined",
                    "the exact contiguous search found a shorter 1F1B* period (" + num(contiguous->star.period)
                        + " s) than phase 1's allocation [" + phase1Text + "] (" + num(fromPhase1->star.period)
                        + " s)"});
            else if (phase1.best)
                diag.push_back({Severity::Warning, "phase1-unschedulable",
                    "phase 1's allocation [" + phase1Text
                        + "] has no 1F1B* period that fits memory; using the best contiguous allocation"});
        }
        if (!chosen) {
            diag.push_back({Severity::Error, "over-memory",
                "no contiguous allocation of the model over " + std::to_string(P) + " GPUs of " + formatBytes(capacity)
                    + " fits memory with 1F1B* (3W + optimizer state + g activations"
                    + (chain.comm_buffers ? " + buffers" : std::string()) + " per stage)"});
            PartitionResult r {std::nullopt, std::move(diag)};
            r.candidates = std::move(candidates);
            return r;
        }

        // Build, simulate, and tighten the memory budget if the simulator disagrees (it should not: the model
        // above is the simulator's 2BW memory plus the buffers).
        std::optional<Plan> plan;
        SimulationResult sim;
        for (int round = 0; round < 4; ++round) {
            plan = makePlan(request, values, starts, *chosen, diag);
            sim = simulate(*plan, SimulationOptions {false, false});
            if (sim.fitsMemory())
                break;
            double excess = 0;
            for (const auto& d : sim.devices)
                excess = std::max(excess, d.peak_memory_bytes - d.memory_capacity_bytes);
            chain.capacity -= excess;
            plan.reset();
            auto cuts = madpipe::bestContiguous(chain, P, stop);
            chosen = cuts ? scheduleContiguous(chain, *cuts) : std::nullopt;
            if (!chosen)
                break;
            source = "contiguous search (memory re-fitted after simulation)";
        }
        if (!plan) {
            diag.push_back({Severity::Error, "over-memory",
                "the simulated peak memory exceeds a device's capacity for every allocation tried"});
            PartitionResult r {std::nullopt, std::move(diag)};
            r.candidates = std::move(candidates);
            return r;
        }
        if (progress)
            progress(0.95);
        for (int s = 0; s < plan->stageCount(); ++s)
            if (sim.stages[s].peak_stashed_microbatches != plan->schedule.in_flight[s])
                diag.push_back({Severity::Warning, "stash-mismatch",
                    "stage " + std::to_string(s) + " stashed " + std::to_string(sim.stages[s].peak_stashed_microbatches)
                        + " microbatches in simulation, 1F1B* expects " + std::to_string(plan->schedule.in_flight[s])});

        Candidate c;
        c.description = source + " [" + [&] {
            std::string t;
            for (std::size_t s = 0; s + 1 < chosen->cuts.size(); ++s)
                t += (s ? ", " : "") + rangeText(starts, chosen->cuts[s], chosen->cuts[s + 1]);
            return t;
        }() + "]";
        c.config = {{"period_1f1b_star_s", chosen->star.period}, {"in_flight", chosen->star.in_flight},
            {"simulated_batch_time_s", sim.iteration_time_s}};
        c.throughput_samples_per_s = sim.throughput_samples_per_s;
        for (const auto& d : sim.devices)
            if (d.memory_capacity_bytes > 0
                && d.peak_memory_bytes / d.memory_capacity_bytes
                    >= c.peak_memory_bytes / std::max(1.0, c.memory_capacity_bytes)) {
                c.peak_memory_bytes = d.peak_memory_bytes;
                c.memory_capacity_bytes = d.memory_capacity_bytes;
            }
        candidates.insert(candidates.begin(), c);
        if (contiguous && source == "phase 1") {
            Candidate other;
            other.description = "contiguous search";
            other.config = {{"period_1f1b_star_s", contiguous->star.period}};
            other.throughput_samples_per_s = samples(request) / contiguous->star.period;
            other.reason = "not shorter than phase 1's allocation";
            candidates.push_back(std::move(other));
        }

        json options = values.effective();
        options["phase1"] = phase1Info;
        options["chosen"] = {{"source", source}, {"period_1f1b_star_s", chosen->star.period},
            {"in_flight", chosen->star.in_flight}, {"blocks", chain.layers}};
        plan->algorithm_options = std::move(options);
        plan->objective_s = chosen->star.period;
        if (detail::replacesRequestedKind(request, plan->schedule.kind))
            diag.push_back({Severity::Info, "schedule-kind",
                "madpipe runs 1F1B* as the '2bw' kind with per-stage in-flight counts; the requested kind '"
                    + opt.schedule.kind + "' was replaced"});
        diag.push_back({Severity::Info, "madpipe",
            "1F1B* period " + num(chosen->star.period) + " s per microbatch (" + source + "), phase 1 estimate "
                + (phase1.best ? num(phase1.best_period) + " s" : std::string("none"))});
        if (progress)
            progress(1.0);
        auto result = detail::validated(std::move(*plan), std::move(diag));
        result.candidates = std::move(candidates);
        return result;
    }

    static double samples(const PartitionRequest& request)
    {
        const auto& so = request.options.schedule;
        return so.microbatch_size > 0 ? so.microbatch_size : std::max(1, request.model->microbatch_size);
    }

    Plan makePlan(const PartitionRequest& request, const detail::OptionValues& values, const std::vector<int>& starts,
        const Scheduled& s, std::vector<Diagnostic>& diag) const
    {
        (void)values;
        Plan plan = detail::basePlan(request, name());
        plan.schedule.kind = "2bw";
        plan.schedule.chunks = 1;
        plan.schedule.in_flight = s.star.in_flight;
        const int n = static_cast<int>(s.cuts.size()) - 1;
        for (int st = 0; st < n; ++st)
            plan.stages.push_back({starts[s.cuts[st]], starts[s.cuts[st + 1]] - 1, {st}});
        // 2BW needs m >= stages, and m >= the largest in-flight count so that version t - 1 exists in time.
        const int need = std::max(n, *std::max_element(s.star.in_flight.begin(), s.star.in_flight.end()));
        if (plan.schedule.microbatches < need) {
            bool said = false;
            for (const auto& d : diag)
                said = said || d.code == "microbatches";
            if (!said)
                diag.push_back({Severity::Warning, "microbatches",
                    "microbatches per batch raised from " + std::to_string(plan.schedule.microbatches) + " to "
                        + std::to_string(need) + ": 1F1B* keeps up to " + std::to_string(need)
                        + " microbatches in flight and 2BW updates once per batch"});
            plan.schedule.microbatches = need;
        }
        // 2BW's steady state (and its once-per-batch update) shows from the second batch on (simulator.cpp).
        plan.schedule.iterations = simulatedIterations(plan);
        return plan;
    }
};

} // namespace

const Partitioner& madPipePartitioner()
{
    static const MadPipePartitioner instance;
    return instance;
}

} // namespace pw::planner
