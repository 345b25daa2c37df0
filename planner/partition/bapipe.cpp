// SPDX-License-Identifier: MIT
// The "bapipe" partitioner: BaPipe's balanced partition and schedule exploration (docs/algorithms/bapipe.md).
#include "bapipe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "../costs.h"
#include "../errors.h"
#include "../sim/simulator.h"
#include "../units.h"
#include "builtin.h"

namespace pw::planner {
namespace {

using Severity = Diagnostic::Severity;
using bapipe::Chain;
using bapipe::Cuts;
using nlohmann::json;

/// A schedule BaPipe may choose: its name in the paper, the project's kind, and how the memory formula
/// counts stashed microbatches (1: N-i+1, 2: 2(N-i+1)).
struct ScheduleChoice
{
    std::string paper; ///< "1F1B-SNO"
    std::string kind; ///< "1f1b"; empty for FBP-AS (closed form only)
    int stash_factor = 1;
    bool streaming = false;
};

const ScheduleChoice kSno {"1F1B-SNO", "1f1b", 1, false};
const ScheduleChoice kSo {"1F1B-SO", "1f1b-so", 2, false};
const ScheduleChoice kAs {"1F1B-AS", "1f1b-as", 1, true};
const ScheduleChoice kFbp {"FBP-AS", "", 2, true};

/// What one (schedule, microbatch size, partition) came to.
struct Evaluated
{
    Candidate candidate;
    std::optional<Plan> plan;
    double iteration_s = 0;
};

class BaPipePartitioner final : public OptionedPartitioner
{
public:
    std::string_view name() const override { return "bapipe"; }
    SharedOptionUse sharedOptions() const override { return {true, false, false}; }
    std::string_view description() const override
    {
        return "BaPipe: speed-proportional balanced partition over the cluster's device order, memory fitting, "
               "and the fastest fitting 1F1B-SNO / 1F1B-SO (or 1F1B-AS on streaming accelerators)";
    }

    std::vector<OptionSpec> options() const override
    {
        using T = OptionSpec::Type;
        return {
            {"schedule", T::Choice, "auto",
                "auto: compare the schedules valid for the devices (1F1B-SNO and 1F1B-SO; 1F1B-AS when every "
                "device streams); or fix one",
                std::nullopt, std::nullopt, {"auto", "1f1b-sno", "1f1b-so", "1f1b-as"}},
            {"microbatch-sizes", T::IntegerList, json(),
                "microbatch sizes to compare at the same mini-batch (microbatches x size must stay the same); "
                "auto: the request's size only",
                1, 1'000'000, {}},
            {"local-search", T::Boolean, true,
                "after the greedy Eq. 1 cut, move boundary layers while the slowest stage gets faster", std::nullopt,
                std::nullopt, {}},
            {"coarse", T::Choice, "compare",
                "when communication is a bottleneck: compare the fine and the coarse-grained partition by "
                "simulation (compare), use the coarse one as the paper does (paper), or never (off)",
                std::nullopt, std::nullopt, {"compare", "paper", "off"}},
            {"bottleneck-ratio", T::Number, 1.0,
                "communication is a bottleneck when a boundary's one-way transfer takes longer than this times "
                "the forward time of a stage next to it",
                0.001, 1000, {}},
            {"coarse-threshold", T::Number, 1.0,
                "coarse partition: cut only where the output crosses the slowest link within this times the "
                "ideal forward stage time (Eq. 1 on forward times)",
                0.001, 1000, {}},
            {"exact-fallback", T::Boolean, true,
                "when moving boundary layers cannot make the stages fit memory, use an exact memory-constrained "
                "min-max DP over the same cut points",
                std::nullopt, std::nullopt, {}},
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
        const int N = opt.stages > 0 ? opt.stages : devices;
        if (N > model->layerCount())
            return detail::failure("too-many-stages",
                std::to_string(N) + " stages (one per device) for " + std::to_string(model->layerCount())
                    + " layers; use --devices or --stages to plan fewer");

        // The chain is the cluster's device order: BaPipe balances a fixed daisy chain and explores no orders.
        bool allStreaming = true;
        for (int d = 0; d < N; ++d)
            allStreaming = allStreaming && request.cluster->typeOf(d).streaming_execution;

        std::vector<ScheduleChoice> schedules;
        const std::string wanted = values.choice("schedule");
        if (wanted == "auto") {
            if (allStreaming)
                schedules = {kAs, kFbp};
            else
                schedules = {kSno, kSo};
        } else if (wanted == "1f1b-sno") {
            schedules = {kSno};
        } else if (wanted == "1f1b-so") {
            schedules = {kSo};
        } else {
            if (!allStreaming)
                return detail::failure("bad-option",
                    "schedule=1f1b-as needs streaming accelerators: set \"streaming_execution\": true on the "
                    "device types of the first "
                        + std::to_string(N) + " devices");
            schedules = {kAs};
        }

        // Microbatch sizes at a fixed mini-batch (BaPipe explores them, digest §2.4 step 5).
        const int baseSize
            = opt.schedule.microbatch_size > 0 ? opt.schedule.microbatch_size : std::max(1, model->microbatch_size);
        const long long miniBatch = static_cast<long long>(baseSize) * opt.schedule.microbatches;
        std::vector<int> sizes {baseSize};
        std::vector<Candidate> rejectedSizes;
        if (values.has("microbatch-sizes")) {
            sizes.clear();
            for (int s : values.integers("microbatch-sizes")) {
                if (std::find(sizes.begin(), sizes.end(), s) != sizes.end())
                    continue;
                if (miniBatch % s != 0 || miniBatch / s > kMaxMicrobatches) {
                    Candidate c;
                    c.description = "microbatch size " + std::to_string(s);
                    c.config = {{"microbatch_size", s}};
                    c.feasible = false;
                    c.reason = "does not divide the mini-batch of " + std::to_string(miniBatch) + " samples";
                    rejectedSizes.push_back(std::move(c));
                    continue;
                }
                sizes.push_back(s);
            }
            if (sizes.empty())
                return detail::failure("bad-option",
                    "no microbatch size in 'microbatch-sizes' divides the mini-batch of " + std::to_string(miniBatch)
                        + " samples (" + std::to_string(opt.schedule.microbatches) + " microbatches of "
                        + std::to_string(baseSize) + ")");
        }

        std::vector<Evaluated> all;
        const int total = static_cast<int>(schedules.size() * sizes.size());
        int done = 0;
        Settings settings {values.boolean("local-search"), values.choice("coarse"), values.number("bottleneck-ratio"),
            values.number("coarse-threshold"), values.boolean("exact-fallback")};
        for (const auto& sc : schedules)
            for (int size : sizes) {
                if (stop.stop_requested())
                    return detail::failure("cancelled", "partitioning was cancelled");
                auto got = evaluate(request, settings, N, sc, size, static_cast<int>(miniBatch / size), diag);
                for (auto& e : got)
                    all.push_back(std::move(e));
                if (progress)
                    progress(static_cast<double>(++done) / total);
            }

        // The fastest simulated candidate that fits; FBP-AS (closed form only) is listed, never chosen.
        int best = -1;
        for (int i = 0; i < static_cast<int>(all.size()); ++i)
            if (all[i].candidate.feasible && all[i].plan
                && (best < 0
                    || all[i].candidate.throughput_samples_per_s
                        > all[best].candidate.throughput_samples_per_s * (1 + 1e-12)))
                best = i;
        std::vector<Candidate> candidates;
        if (best >= 0)
            candidates.push_back(all[best].candidate);
        std::vector<int> rest;
        for (int i = 0; i < static_cast<int>(all.size()); ++i)
            if (i != best)
                rest.push_back(i);
        std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) {
            const auto& x = all[a].candidate;
            const auto& y = all[b].candidate;
            if (x.feasible != y.feasible)
                return x.feasible;
            return x.throughput_samples_per_s > y.throughput_samples_per_s;
        });
        for (int i : rest) {
            auto c = all[i].candidate;
            if (c.feasible && c.reason.empty())
                c.reason = "slower than the chosen one";
            candidates.push_back(std::move(c));
        }
        for (auto& c : rejectedSizes)
            candidates.push_back(std::move(c));

        if (best < 0) {
            const std::string closest = detail::firstReason(candidates);
            diag.push_back({Severity::Error, "over-memory",
                "no schedule, microbatch size or partition of the " + std::to_string(N)
                    + "-device chain fits device memory" + (closest.empty() ? "" : " (" + closest + ")")});
            PartitionResult r {std::nullopt, std::move(diag)};
            r.candidates = std::move(candidates);
            return r;
        }

        Plan plan = std::move(*all[best].plan);
        const auto& chosen = all[best].candidate;
        json options = values.effective();
        options["chosen"] = chosen.config;
        options["device_order"] = "cluster order (BaPipe does not explore device orders)";
        plan.algorithm_options = std::move(options);
        plan.objective_s = all[best].candidate.config.value("max_stage_time_s", 0.0);
        diag.push_back({Severity::Info, "bapipe",
            "chose " + chosen.description + ": " + std::to_string(chosen.throughput_samples_per_s)
                + " samples/s simulated"});
        if (detail::replacesRequestedKind(request, plan.schedule.kind))
            diag.push_back({Severity::Info, "schedule-kind",
                "bapipe chooses its own schedule; the requested kind '" + opt.schedule.kind + "' was replaced by '"
                    + plan.schedule.kind + "' (fix it with --set schedule=...)"});
        auto result = detail::validated(std::move(plan), std::move(diag));
        result.candidates = std::move(candidates);
        return result;
    }

    struct Settings
    {
        bool local_search = true;
        std::string coarse = "compare";
        double bottleneck_ratio = 1.0;
        double coarse_threshold = 1.0;
        bool exact_fallback = true;
    };

    static Chain buildChain(const PartitionRequest& request, int N, const ScheduleChoice& sc, double scale, int M)
    {
        const auto& model = request.model;
        const int L = model->layerCount();
        const auto& so = request.options.schedule;
        const double optFactor = optimizerStateFactor(so, model); // one replica per stage
        Chain c;
        c.layers = L;
        c.stages = N;
        c.kind = sc.kind.empty() ? "1f1b-so" : sc.kind;
        c.microbatches = M;
        c.recompute = so.recompute == Recompute::Full;
        c.time_prefix.assign(N, std::vector<double>(L + 1, 0.0));
        c.forward_prefix.assign(N, std::vector<double>(L + 1, 0.0));
        for (int n = 0; n < N; ++n) {
            const auto& type = request.cluster->typeOf(n);
            const double speed = deviceSpeed(type, model, request.cluster->device_types).factor;
            for (int l = 0; l < L; ++l) {
                auto t = layerTimesOn(model->layers[l], type, speed);
                const double f = t.forward_ms * 1e-3 * scale, b = t.backward_ms * 1e-3 * scale;
                c.forward_prefix[n][l + 1] = c.forward_prefix[n][l] + f;
                c.time_prefix[n][l + 1] = c.time_prefix[n][l] + (so.recompute == Recompute::Full ? 2 * f : f) + b;
            }
            c.capacity.push_back(type.memory_bytes);
            c.in_flight.push_back(sc.stash_factor * (N - n));
        }
        c.weight_prefix.assign(L + 1, 0.0);
        c.stash_prefix.assign(L + 1, 0.0);
        c.optimizer_prefix.assign(L + 1, 0.0);
        for (int l = 0; l < L; ++l) {
            const auto& layer = model->layers[l];
            c.weight_prefix[l + 1] = c.weight_prefix[l] + layer.weight_bytes;
            c.stash_prefix[l + 1] = c.stash_prefix[l] + model->stashedBytes(l) * scale;
            c.optimizer_prefix[l + 1]
                = c.optimizer_prefix[l] + layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes);
        }
        c.cut_bytes = model->cutBytes();
        for (auto& b : c.cut_bytes)
            b *= scale;
        return c;
    }

    /// One-way transfer time of the activation crossing boundary k (after stage k) per microbatch.
    static double linkTime(const PartitionRequest& request, const Chain& chain, const Cuts& cuts, int k)
    {
        const double bytes = chain.cut_bytes[cuts[k + 1] - 1];
        const double bw = request.cluster->bandwidth(k, k + 1);
        const double lat = request.cluster->latency(k, k + 1);
        return lat + (bytes <= 0 ? 0.0 : bw > 0 ? bytes / bw : std::numeric_limits<double>::infinity());
    }

    /// Step 2's test: a boundary whose one-way transfer outlasts ratio x the forward of a stage next to it.
    static int bottleneckBoundary(const PartitionRequest& request, const Chain& chain, const Cuts& cuts, double ratio)
    {
        for (int k = 0; k + 1 < chain.stages; ++k) {
            const double f = std::min(
                chain.stageForward(k, cuts[k], cuts[k + 1]), chain.stageForward(k + 1, cuts[k + 1], cuts[k + 2]));
            if (linkTime(request, chain, cuts, k) > ratio * f)
                return k;
        }
        return -1;
    }

    /// Table I/II's mini-batch time evaluated with the slowest stage's F, B and the slowest hop's SR.
    static double closedForm(
        const PartitionRequest& request, const Chain& chain, const Cuts& cuts, const ScheduleChoice& sc)
    {
        const int N = chain.stages, M = chain.microbatches;
        double F = 0, B = 0, SR = 0, sum = 0, worst = 0;
        for (int i = 0; i < N; ++i) {
            const double f = chain.stageForward(i, cuts[i], cuts[i + 1]);
            const double fb = chain.stageTime(i, cuts[i], cuts[i + 1]);
            F = std::max(F, f);
            B = std::max(B, fb - f);
            sum += fb;
            worst = std::max(worst, fb);
            if (i + 1 < N)
                SR = std::max(SR, linkTime(request, chain, cuts, i));
        }
        if (sc.paper == "FBP-AS")
            return sum + (M - 1) * worst; // (M+N-1)(F+B) for balanced stages
        double t = (M + N - 1) * (F + B);
        if (sc.paper == "1F1B-SNO")
            t += (N + M - 2 - (M - 1 + N - 1) / N) * 2 * SR;
        else if (sc.paper == "1F1B-SO")
            t += (N - 1) * 2 * SR;
        return t;
    }

    /// Steps 1-4 for one schedule and microbatch size, then the simulator's verdict on each partition.
    std::vector<Evaluated> evaluate(const PartitionRequest& request, const Settings& settings, int N,
        const ScheduleChoice& sc, int size, int M, std::vector<Diagnostic>& diag) const
    {
        const double scale = static_cast<double>(size) / std::max(1, request.model->microbatch_size);
        Chain chain = buildChain(request, N, sc, scale, M);
        const std::string where
            = sc.paper + " microbatch size " + std::to_string(size) + " (M = " + std::to_string(M) + ")";

        // Step 1: Eq. 1 and the greedy cumulative cut, then the local search on compute time.
        const auto everywhere = bapipe::allowedCuts(chain, std::numeric_limits<double>::infinity());
        Cuts fine = bapipe::speedProportionalCuts(chain, everywhere);
        if (fine.empty())
            return {};
        if (settings.local_search)
            bapipe::localSearch(chain, fine, everywhere, false);

        struct Option
        {
            std::string label;
            Cuts cuts;
            std::vector<char> allowed;
        };
        std::vector<Option> partitions {{"fine", fine, everywhere}};

        // Step 2: communication bottleneck -> coarse-grained partition (cuts only where outputs are small).
        const int hot = bottleneckBoundary(request, chain, fine, settings.bottleneck_ratio);
        if (hot >= 0 && settings.coarse != "off") {
            double minBw = std::numeric_limits<double>::infinity(), maxLat = 0;
            for (int k = 0; k + 1 < N; ++k) {
                minBw = std::min(minBw, request.cluster->bandwidth(k, k + 1));
                maxLat = std::max(maxLat, request.cluster->latency(k, k + 1));
            }
            double forwardInverse = 0;
            for (int n = 0; n < N; ++n) {
                const double f = chain.stageForward(n, 0, chain.layers);
                forwardInverse += f > 0 ? 1.0 / f : 0;
            }
            const double idealForward = forwardInverse > 0 ? 1.0 / forwardInverse : 0;
            const double threshold = std::max(0.0, settings.coarse_threshold * idealForward - maxLat) * minBw;
            const auto coarseAllowed = bapipe::allowedCuts(chain, threshold);
            Cuts coarse = bapipe::speedProportionalCuts(chain, coarseAllowed);
            if (coarse.empty()) {
                diag.push_back({Severity::Info, "coarse",
                    where + ": communication is a bottleneck at boundary " + std::to_string(hot) + ", but fewer than "
                        + std::to_string(N - 1) + " cut points have outputs under " + formatBytes(threshold)
                        + "; keeping the fine partition"});
            } else {
                if (settings.local_search)
                    bapipe::localSearch(chain, coarse, coarseAllowed, false);
                if (settings.coarse == "paper")
                    partitions.clear();
                if (partitions.empty() || coarse != fine)
                    partitions.push_back({"coarse", coarse, coarseAllowed});
            }
        }

        std::vector<Evaluated> out;
        for (auto& part : partitions) {
            Evaluated e;
            auto& c = e.candidate;
            c.config = {{"schedule", sc.paper}, {"kind", sc.kind.empty() ? json() : json(sc.kind)},
                {"microbatch_size", size}, {"microbatches", M}, {"partition", part.label},
                {"communication_bottleneck", hot >= 0}};
            c.description = sc.paper + " mbs=" + std::to_string(size) + " M=" + std::to_string(M) + " " + part.label;

            // Step 4: memory with the schedule's formula; move boundary layers (then the exact DP) until it fits.
            Chain local = chain; // capacities tighten when the simulator disagrees with the formula
            bool fits = fitMemory(local, part.cuts, part.allowed, settings);
            std::string why;
            for (int round = 0; fits && round < 4; ++round) {
                if (sc.kind.empty())
                    break; // FBP-AS: closed form only
                e.plan = makePlan(request, sc, size, M, part.cuts);
                SimulationResult sim;
                try {
                    sim = simulate(*e.plan, SimulationOptions {false, false});
                } catch (const InputError& err) {
                    why = std::string("does not simulate: ") + err.what();
                    e.plan.reset();
                    break;
                }
                fillMemory(c, sim);
                c.throughput_samples_per_s = sim.throughput_samples_per_s;
                e.iteration_s = sim.iteration_time_s;
                c.config["simulated_batch_time_s"] = sim.iteration_time_s;
                if (sim.fitsMemory())
                    break;
                // The simulator's peak exceeds what the formula promised: tighten those devices and refit.
                for (int s = 0; s < N; ++s) {
                    const auto& m = sim.devices[s];
                    if (m.peak_memory_bytes > m.memory_capacity_bytes)
                        local.capacity[s] -= m.peak_memory_bytes - m.memory_capacity_bytes;
                }
                e.plan.reset();
                fits = fitMemory(local, part.cuts, part.allowed, settings);
            }
            if (!fits) {
                why = "no boundary placement fits memory with " + std::to_string(sc.stash_factor)
                    + "(N-i+1) stashed "
                      "microbatches";
                fillFormulaMemory(c, chain, part.cuts);
            }
            std::vector<int> layersPerStage;
            for (int s = 0; s < N; ++s)
                layersPerStage.push_back(part.cuts[s + 1] - part.cuts[s]);
            c.config["layers_per_stage"] = layersPerStage;
            c.config["max_stage_time_s"] = bapipe::maxStageTime(chain, part.cuts);
            c.config["ideal_stage_time_s"] = bapipe::idealStageTime(chain);
            c.config["closed_form_batch_time_s"] = closedForm(request, chain, part.cuts, sc);
            if (sc.kind.empty()) {
                fillFormulaMemory(c, chain, part.cuts);
                const double t = closedForm(request, chain, part.cuts, sc);
                c.throughput_samples_per_s = t > 0 ? static_cast<double>(M) * size / t : 0;
                c.feasible = false;
                c.reason = std::string(fits ? "fits memory by the formula, but " : "does not fit memory; ")
                    + "closed form only (Table I, stages unbalanced: sum(F+B) + (M-1) max(F+B)): the simulator runs "
                      "one op at a time per device, so FBP's concurrent F and B cannot be simulated or exported";
            } else if (!e.plan || !why.empty()) {
                c.feasible = false;
                c.reason = why.empty() ? "the simulator's peak memory exceeds a device's capacity" : why;
                e.plan.reset();
            }
            out.push_back(std::move(e));
        }
        return out;
    }

    /// Moves boundary layers (memory first, then balance) and, if that gets stuck, the exact DP.
    static bool fitMemory(const Chain& chain, Cuts& cuts, const std::vector<char>& allowed, const Settings& settings)
    {
        if (bapipe::memoryExcess(chain, cuts) <= 0)
            return true;
        bapipe::localSearch(chain, cuts, allowed, true);
        if (bapipe::memoryExcess(chain, cuts) <= 0)
            return true;
        if (!settings.exact_fallback)
            return false;
        Cuts exact = bapipe::exactMemoryFit(chain, allowed);
        if (exact.empty())
            return false;
        cuts = std::move(exact);
        if (settings.local_search)
            bapipe::localSearch(chain, cuts, allowed, true); // rebalance the non-bottleneck stages
        return bapipe::memoryExcess(chain, cuts) <= 0;
    }

    Plan makePlan(const PartitionRequest& request, const ScheduleChoice& sc, int size, int M, const Cuts& cuts) const
    {
        Plan plan = detail::basePlan(request, name());
        plan.schedule.kind = sc.kind;
        plan.schedule.microbatches = M;
        plan.schedule.chunks = 1;
        plan.schedule.in_flight.clear();
        const int profileSize = std::max(1, request.model->microbatch_size);
        plan.schedule.microbatch_size = request.options.schedule.microbatch_size == 0 && size == profileSize ? 0 : size;
        for (int s = 0; s + 1 < static_cast<int>(cuts.size()); ++s)
            plan.stages.push_back({cuts[s], cuts[s + 1] - 1, {s}});
        return plan;
    }

    static void fillMemory(Candidate& c, const SimulationResult& sim)
    {
        double worst = -1;
        for (const auto& d : sim.devices) {
            if (d.memory_capacity_bytes <= 0)
                continue;
            const double ratio = d.peak_memory_bytes / d.memory_capacity_bytes;
            if (ratio > worst) {
                worst = ratio;
                c.peak_memory_bytes = d.peak_memory_bytes;
                c.memory_capacity_bytes = d.memory_capacity_bytes;
            }
        }
    }

    static void fillFormulaMemory(Candidate& c, const Chain& chain, const Cuts& cuts)
    {
        double worst = -1;
        for (int s = 0; s < chain.stages; ++s) {
            const double need = chain.stageMemory(s, cuts[s], cuts[s + 1]);
            const double ratio = need / chain.capacity[s];
            if (ratio > worst) {
                worst = ratio;
                c.peak_memory_bytes = need;
                c.memory_capacity_bytes = chain.capacity[s];
            }
        }
    }
};

} // namespace

const Partitioner& baPipePartitioner()
{
    static const BaPipePartitioner instance;
    return instance;
}

} // namespace pw::planner
