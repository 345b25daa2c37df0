// SPDX-License-Identifier: MIT
// The "megatron" partitioner: Megatron-LM's PTD-P configuration search (docs/algorithms/megatron.md).
#include "megatron.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "../costs.h"
#include "../errors.h"
#include "../schedule/generator.h"
#include "../sim/simulator.h"
#include "../units.h"
#include "builtin.h"

namespace pw::planner {
namespace {

using Severity = Diagnostic::Severity;
using megatron::Config;
using nlohmann::json;

std::string samplesPerSecond(double rate)
{
    char text[48];
    std::snprintf(text, sizeof text, "%.1f samples/s", rate);
    return text;
}

std::vector<int> divisors(int n)
{
    std::vector<int> out;
    for (int i = 1; i <= n; ++i)
        if (n % i == 0)
            out.push_back(i);
    return out;
}

/// One configuration the search looked at.
struct Entry
{
    Config config;
    megatron::Estimate estimate;
    Candidate candidate;
    bool simulated = false;
};

class MegatronPartitioner final : public OptionedPartitioner
{
public:
    std::string_view name() const override { return "megatron"; }
    SharedOptionUse sharedOptions() const override { return {true, true, false}; }
    std::string_view description() const override
    {
        return "Megatron-LM PTD-P: search pipeline x tensor x context x data sizes, microbatch size, interleaving and "
               "recomputation with the closed-form bubble, communication and memory model (SC'21 §4.3); the best "
               "analytical configurations are simulated";
    }

    std::vector<OptionSpec> options() const override
    {
        using T = OptionSpec::Type;
        return {
            {"global-batch", T::Integer, json(),
                "global batch B in samples; auto: --microbatches x the microbatch size (the batch every other "
                "algorithm plans)",
                1, 1e9, {}},
            {"microbatch-sizes", T::IntegerList, json(),
                "microbatch sizes b to try; auto: powers of two and the request's size, each dividing B / d", 1,
                1'000'000, {}},
            {"tensor-sizes", T::IntegerList, json(),
                "tensor-parallel sizes t to try; auto: every divisor of the devices (t = 1 without an architecture)", 1,
                1'000'000, {}},
            {"context-sizes", T::IntegerList, json(),
                "context-parallel sizes c to try (ring attention: each sequence split over c ranks, K and V passed "
                "round them under the attention compute; c must divide the devices and the sequence into 2c chunks); "
                "auto: 1 and the powers of two that leave every rank at least 4,096 tokens of the sequence",
                1, 1'000'000, {}},
            {"pipeline-sizes", T::IntegerList, json(),
                "pipeline depths p to try; auto: every divisor (--stages fixes one)", 1, 1'000'000, {}},
            {"chunks", T::IntegerList, json(),
                "interleaving degrees v to try (v > 1 needs p > 1 and m a multiple of p); auto: 1, 2, 3, 4", 1, 64, {}},
            {"recompute", T::Choice, "auto",
                "activation recomputation: none, selective (the attention core), full (every block from its input); "
                "auto tries the three (on: full, off: none)",
                std::nullopt, std::nullopt, {"auto", "none", "selective", "full", "on", "off"}},
            {"sequence-parallel", T::Choice, "auto",
                "Megatron's sequence parallelism with t > 1 (activations the tensor-parallel group keeps whole are "
                "split over it, same traffic); auto: on wherever t > 1, where it only saves memory",
                std::nullopt, std::nullopt, {"auto", "true", "false"}},
            {"distributed-optimizer", T::Choice, "auto",
                "Megatron's distributed optimizer (fp32 master weights and moments sharded over the d replicas, the "
                "same traffic as the all-reduce); auto: on wherever d > 1, where it only saves memory",
                std::nullopt, std::nullopt, {"auto", "true", "false"}},
            {"zero-stage", T::Choice, "auto",
                "ZeRO stage of every configuration with replicas: 0 none, 1 the distributed optimizer, 2 also the "
                "gradients sharded, 3 also the weights (FSDP: gathered layer by layer every microbatch); auto: "
                "distributed-optimizer's rule, the request's --zero-stage kept",
                std::nullopt, std::nullopt, {"auto", "0", "1", "2", "3"}},
            {"zero-bubble", T::Boolean, true,
                "also try the zero-bubble schedules zb-h1, zb-h2 and zbv (Qi et al. 2024), their controllable-memory "
                "v-half and v-min and DeepSeek's dualpipev where the request leaves the kind to the search; "
                "--schedule zb-h1, zb-h2, zbv, dualpipev, v-half, v-min or interleaved searches that kind alone",
                std::nullopt, std::nullopt, {}},
            {"tensor-within-node", T::Boolean, true,
                "rule of thumb 1 (Takeaway #1) as a constraint: every tensor-parallel group inside one node",
                std::nullopt, std::nullopt, {}},
            {"simulate-top", T::Integer, 8,
                "simulate the best configurations of the analytical ranking (at least one that fits) and choose by "
                "simulated throughput",
                1, 10'000, {}},
        };
    }

private:
    /// What the search may vary, read from the request and the options.
    struct Space
    {
        int devices = 1;
        int layers = 0;
        long long batch = 0; ///< B
        int base_size = 1; ///< the request's (else the profile's) microbatch size
        std::vector<int> tensor, context, pipeline, chunks, microbatch_sizes; ///< empty microbatch_sizes = auto
        std::vector<Recompute> recompute;
        std::string sequence_parallel = "auto"; ///< auto | true | false
        std::string distributed_optimizer = "auto"; ///< auto | true | false
        int zero_stage = -1; ///< -1 auto, else 0-3 for every configuration with replicas
        bool within_node = true;
        bool straight = false;
        int iterations = 1;
        bool zero_bubble = true; ///< try zb-h1, zb-h2, zbv, dualpipev, v-half and v-min beside 1f1b and interleaved
        std::string fixed_kind; ///< the request's kind when it is one this search makes: only that one

        /// Whether configurations of `kind` are searched.
        bool allows(const std::string& kind) const
        {
            if (!fixed_kind.empty())
                return kind == fixed_kind;
            return zero_bubble || kind == "1f1b" || kind == "interleaved";
        }
    };

    /// Configurations left out before estimation, for the diagnostics.
    struct Skipped
    {
        int heads = 0, batch = 0, interleave = 0, sequence = 0, shard_group = 0;
    };

    PartitionResult search(const PartitionRequest& request, const detail::OptionValues& values, const int N,
        const ProgressFn& progress, std::stop_token stop, std::vector<Diagnostic> diag) const override
    {
        Space space;
        if (auto failed = readSpace(request, values, N, space, diag))
            return std::move(*failed);
        Skipped skipped;
        std::vector<Entry> entries = enumerate(request, space, skipped);
        if (skipped.heads > 0)
            diag.push_back({Severity::Info, "heads",
                std::to_string(skipped.heads) + " tensor-parallel size(s) skipped: t must divide the "
                    + std::to_string(request.model->architecture->heads) + " attention heads"});
        if (skipped.sequence > 0)
            diag.push_back({Severity::Info, "sequence",
                std::to_string(skipped.sequence) + " context-parallel size(s) skipped: the sequence of "
                    + std::to_string(request.model->architecture->sequence) + " tokens must split into 2c chunks"});
        if (skipped.shard_group > 0)
            diag.push_back({Severity::Info, "shard-group",
                std::to_string(skipped.shard_group) + " (p, t, c) shape(s) skipped: the shard group of "
                    + std::to_string(request.options.schedule.shard_group)
                    + " (--shard-group) must divide their d c gradient replicas"});
        if (entries.empty()) {
            std::string why = "no (p, t, c, d, b, v) configuration of " + std::to_string(N)
                + " devices suits the global batch of " + std::to_string(space.batch) + " samples";
            if (skipped.batch > 0)
                why += ": B must be divisible by d x b (data-parallel size x microbatch size)";
            if (skipped.interleave > 0)
                why += "; interleaving needs p > 1, m a multiple of p and p v <= " + std::to_string(space.layers)
                    + " layers";
            if (skipped.shard_group > 0)
                why += "; --shard-group " + std::to_string(request.options.schedule.shard_group)
                    + " must divide d c where d c exceeds it";
            if (!space.fixed_kind.empty())
                why += "; --schedule " + space.fixed_kind
                    + " searches that kind alone (zero-bubble kinds need p > 1, zb-h2 and zbv m >= 2p - 1, dualpipev "
                      "m >= 2p, the V kinds (zbv, dualpipev, v-half, v-min) 2p <= the layers)";
            diag.push_back({Severity::Error, "bad-option", why});
            return {std::nullopt, std::move(diag)};
        }
        if (!estimateAll(request, entries, progress, stop))
            return detail::failure("cancelled", "partitioning was cancelled");
        std::vector<int> order(entries.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = static_cast<int>(i);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return better(entries[a], entries[b]); });
        int best = -1;
        if (!simulateLeaders(request, entries, order, values.integer("simulate-top"), progress, stop, best))
            return detail::failure("cancelled", "partitioning was cancelled");
        if (progress)
            progress(1.0);
        return finish(request, values, space, entries, order, best, std::move(diag));
    }

    /// Checks the request and fills the search space; a failure result for bad input.
    static std::optional<PartitionResult> readSpace(const PartitionRequest& request, const detail::OptionValues& values,
        int N, Space& space, std::vector<Diagnostic>& diag)
    {
        const auto& opt = request.options;
        const auto& model = request.model;
        if (opt.schedule.microbatch_size < 0)
            return detail::failure("bad-option",
                "the microbatch size must be >= 0 (0 = the profile's), got "
                    + std::to_string(opt.schedule.microbatch_size));
        if (opt.stages < 0)
            return detail::failure("bad-option", "the stage count must be >= 0, got " + std::to_string(opt.stages));
        space.devices = N;
        space.layers = model->layerCount();
        space.base_size
            = opt.schedule.microbatch_size > 0 ? opt.schedule.microbatch_size : std::max(1, model->microbatch_size);
        if (values.has("global-batch")) {
            space.batch = values.integer("global-batch");
        } else {
            if (opt.schedule.microbatches < 1)
                return detail::failure("bad-option",
                    "microbatches per batch must be >= 1, got " + std::to_string(opt.schedule.microbatches));
            space.batch = static_cast<long long>(opt.schedule.microbatches) * space.base_size;
        }
        if (space.batch > 1'000'000'000)
            return detail::failure("bad-option", "the global batch " + std::to_string(space.batch) + " is too large");
        space.tensor = values.has("tensor-sizes") ? values.integers("tensor-sizes") : divisors(N);
        if (values.has("context-sizes")) {
            space.context = values.integers("context-sizes");
        } else {
            // auto: shorter chunks a rank would rarely pay for its thinner products and the ring; the search space
            // stays that of c = 1 below 8,192 tokens.
            space.context = {1};
            for (int c = 2; model->architecture && c <= N; c *= 2)
                if (model->architecture->sequence % (2 * c) == 0 && model->architecture->sequence / c >= 4096)
                    space.context.push_back(c);
        }
        if (std::any_of(space.context.begin(), space.context.end(), [](int c) { return c > 1; })
            && !model->architecture)
            return detail::failure("bad-option",
                "context-sizes: context parallelism splits the sequence of a transformer; the profile has no "
                "architecture (make it with `profile transformer`)");
        space.pipeline = values.has("pipeline-sizes") ? values.integers("pipeline-sizes") : divisors(N);
        if (opt.stages > 0)
            space.pipeline = {opt.stages};
        space.chunks = values.has("chunks") ? values.integers("chunks") : std::vector<int> {1, 2, 3, 4};
        if (values.has("microbatch-sizes"))
            space.microbatch_sizes = values.integers("microbatch-sizes");
        const std::string rc = values.choice("recompute");
        if (rc == "auto")
            space.recompute = {Recompute::None, Recompute::Selective, Recompute::Full};
        else
            space.recompute = {rc == "on" ? Recompute::Full
                    : rc == "off"         ? Recompute::None
                                          : recomputeNamed(rc, "recompute")};
        space.sequence_parallel = values.choice("sequence-parallel");
        space.distributed_optimizer = values.choice("distributed-optimizer");
        if (const std::string z = values.choice("zero-stage"); z != "auto") {
            space.zero_stage = std::stoi(z);
            const bool dist = space.zero_stage >= 1;
            if ((space.distributed_optimizer == "false" && dist) || (space.distributed_optimizer == "true" && !dist)
                || (opt.schedule.distributed_optimizer && !dist)
                || (opt.schedule.shard_gradients && space.zero_stage < 2)
                || (opt.schedule.shard_weights && space.zero_stage < 3))
                return detail::failure("bad-option",
                    "zero-stage=" + z
                        + " contradicts the distributed optimizer setting or the request's --zero-stage; give one");
            space.distributed_optimizer = dist ? "auto" : "false";
        }
        if (space.distributed_optimizer == "false" && opt.schedule.distributed_optimizer)
            return detail::failure("bad-option",
                "--distributed-optimizer and --set distributed-optimizer=false contradict each other; give one");
        space.within_node = values.boolean("tensor-within-node");
        space.zero_bubble = values.boolean("zero-bubble");
        for (const char* kind : {"interleaved", "zb-h1", "zb-h2", "zbv", "dualpipev", "v-half", "v-min"})
            if (opt.schedule.kind == kind)
                space.fixed_kind = kind;
        space.straight = opt.straight;
        space.iterations = std::max(1, opt.schedule.iterations);
        if (!model->architecture && std::any_of(space.tensor.begin(), space.tensor.end(), [](int t) { return t > 1; }))
            diag.push_back({Severity::Info, "no-architecture",
                "the profile has no transformer architecture, so tensor parallelism cannot be split by heads: only "
                "t = 1 is searched"});
        if (opt.straight)
            diag.push_back({Severity::Info, "straight", "straight pipeline requested: only t = 1 and d = 1"});
        if (!request.cluster->isHomogeneous())
            diag.push_back({Severity::Warning, "heterogeneous",
                "Megatron assumes identical devices: stages are balanced with the first device's type (the "
                "simulator still uses each device's own)"});
        return std::nullopt;
    }

    /// Why tensor-parallel groups of t consecutive devices break rule of thumb 1, or empty.
    static std::string crossNodeGroup(const Cluster& cluster, int N, int t)
    {
        for (int g = 0; t > 1 && g < N; g += t)
            for (int i = 1; i < t; ++i)
                if (!cluster.sameNode(g, g + i))
                    return "tensor-parallel group of devices " + std::to_string(g) + ".." + std::to_string(g + t - 1)
                        + " spans nodes (rule of thumb 1: t within a node, Takeaway #1)";
        return {};
    }

    /// Every structurally valid (p, t, d, b, v, recompute); rule-of-thumb and size problems are kept as
    /// infeasible candidates, the rest is counted in `skipped`.
    static std::vector<Entry> enumerate(const PartitionRequest& request, const Space& space, Skipped& skipped)
    {
        const int N = space.devices;
        const auto& arch = request.model->architecture;
        std::vector<Entry> entries;
        // ZeRO above stage 1 on every configuration whose optimizer is sharded: the option's fixed stage, else
        // (auto) the request's --zero-stage.
        const auto& requested = request.options.schedule;
        const auto zero = [&space, &requested](megatron::Config c) {
            const bool fixed = space.zero_stage >= 0;
            const bool replicas = c.d * c.c > 1; // ZeRO shards over the data and context ranks
            c.shard_weights
                = c.distributed_optimizer && replicas && (fixed ? space.zero_stage >= 3 : requested.shard_weights);
            c.shard_gradients = c.distributed_optimizer && replicas
                && (c.shard_weights || (fixed ? space.zero_stage >= 2 : requested.shard_gradients));
            return c;
        };
        for (int t : space.tensor)
            for (int cp : space.context) {
                if (N % (t * cp) != 0 || (t > 1 && (!arch || space.straight)) || (cp > 1 && space.straight))
                    continue;
                if (t > 1 && arch->heads % t != 0) {
                    ++skipped.heads;
                    continue;
                }
                if (cp > 1 && arch->sequence % (2 * cp) != 0) {
                    ++skipped.sequence;
                    continue;
                }
                enumerateShapes(request, space, t, cp, zero, entries, skipped);
            }
        return entries;
    }

    /// enumerate() for one tensor- and context-parallel size: every p, d, b, v, recompute and kind.
    template <typename Zero>
    static void enumerateShapes(const PartitionRequest& request, const Space& space, int t, int cp, const Zero& zero,
        std::vector<Entry>& entries, Skipped& skipped)
    {
        const int N = space.devices;
        {
            const std::string rule = space.within_node ? crossNodeGroup(request.cluster, N, t) : std::string();
            const bool sp = t > 1 && space.sequence_parallel != "false";
            for (int p : space.pipeline) {
                if ((N / (t * cp)) % p != 0 || p > space.layers)
                    continue;
                const int d = N / (t * cp * p);
                // The distributed optimizer moves what the all-reduce moved (a reduce-scatter and an all-gather)
                // and keeps 12/(d c) of the 12 bytes per parameter: auto takes it wherever there are replicas.
                const bool dist = space.distributed_optimizer == "true"
                    || (space.distributed_optimizer == "auto" && d * cp > 1 && space.zero_stage != 0);
                if (space.straight && d > 1)
                    continue;
                // HSDP's groups (--shard-group s) must split the d c gradient replicas.
                if (const int s = request.options.schedule.shard_group; s > 1 && d * cp > s && (d * cp) % s != 0) {
                    ++skipped.shard_group;
                    continue;
                }
                if (space.batch % d != 0) {
                    ++skipped.batch;
                    continue;
                }
                for (int b : microbatchSizes(space, d)) {
                    if ((space.batch / d) % b != 0) {
                        ++skipped.batch;
                        continue;
                    }
                    const long long m = space.batch / d / b;
                    const int mi = static_cast<int>(std::min<long long>(m, INT32_MAX));
                    for (int v : space.chunks) {
                        if (!space.allows(v > 1 ? "interleaved" : "1f1b"))
                            continue;
                        // Interleaving: m (per pipeline copy) a multiple of p (interleaved.cpp).
                        if (v > 1 && (p == 1 || m % p != 0 || p * v > space.layers)) {
                            ++skipped.interleave;
                            continue;
                        }
                        for (Recompute r : space.recompute)
                            entries.push_back(
                                entry(zero({p, t, d, b, v, r, mi, {}, sp, dist, false, false, cp}), space, rule));
                    }
                    // Zero-bubble kinds need a pipeline; zb-h2 and zbv m >= 2p - 1, where their closed forms hold
                    // (fewer run, with a bubble the estimate does not model); dualpipev m >= 2p (it refuses fewer);
                    // v-half and v-min any m (their estimate replays their order); the V kinds two chunks of
                    // layers per device.
                    for (const std::string kind : {"zb-h1", "zb-h2", "zbv", "dualpipev", "v-half", "v-min"}) {
                        const bool v = megatron::vShaped(kind);
                        const bool closedForm = kind == "zb-h2" || kind == "zbv" || kind == "dualpipev";
                        if (!space.allows(kind) || p == 1 || (closedForm && m < 2LL * p - 1)
                            || (kind == "dualpipev" && m < 2LL * p) || (v && 2 * p > space.layers))
                            continue;
                        for (Recompute r : space.recompute)
                            entries.push_back(entry(
                                zero({p, t, d, b, v ? 2 : 1, r, mi, kind, sp, dist, false, false, cp}), space, rule));
                    }
                }
            }
        }
    }

    /// b values for data-parallel size d: the option's, else powers of two up to B / d and the request's.
    static std::vector<int> microbatchSizes(const Space& space, int d)
    {
        std::vector<int> sizes = space.microbatch_sizes;
        if (sizes.empty()) {
            for (long long b = 1; b <= space.batch / d; b *= 2)
                sizes.push_back(static_cast<int>(b));
            sizes.push_back(space.base_size);
        }
        std::sort(sizes.begin(), sizes.end());
        sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
        return sizes;
    }

    static Entry entry(const Config& config, const Space& space, const std::string& rule)
    {
        Entry e;
        e.config = config;
        auto& c = e.candidate;
        c.description = config.text();
        c.config = {{"p", config.p}, {"t", config.t}, {"c", config.c}, {"d", config.d}, {"b", config.b},
            {"v", config.v}, {"m", config.m}, {"recompute", planner::name(config.recompute)},
            {"sequence_parallel", config.sequence_parallel}, {"distributed_optimizer", config.distributed_optimizer},
            {"zero_stage",
                config.shard_weights               ? 3
                    : config.shard_gradients       ? 2
                    : config.distributed_optimizer ? 1
                                                   : 0},
            {"schedule", config.scheduleKind()}, {"global_batch", space.batch}};
        if (!rule.empty()) {
            c.feasible = false;
            c.reason = rule;
        }
        const long long perBatch = static_cast<long long>(config.m) * config.d * space.iterations;
        if (perBatch > kMaxMicrobatches || perBatch * config.p * config.v > kMaxStageMicrobatches) {
            c.feasible = false;
            c.reason = std::to_string(config.m) + " microbatches per pipeline are too many to simulate";
        }
        return e;
    }

    /// What balanceWeights depends on.
    using WeightKey = std::tuple<int, int, int, int, bool>;
    static WeightKey weightKey(const Config& c)
    {
        return {c.t, c.c, c.b, static_cast<int>(c.recompute), c.sequence_parallel};
    }

    /// What a configuration's costs depend on beyond the schedule kind (estimateCosts): the balance's key, p, the
    /// stage count, the V of zbv and the sharding.
    using CostKey = std::tuple<WeightKey, int, int, bool, bool, bool, bool>;
    static CostKey costKey(const Config& c)
    {
        return {weightKey(c), c.p, c.p * c.v, megatron::vShaped(c.kind), c.distributed_optimizer, c.shard_gradients,
            c.shard_weights};
    }

    /// The analytical model on one configuration (`bounds`: its balanced layer boundaries, `costs` its plan's
    /// estimateCosts, made when null and returned); over memory makes it infeasible.
    static void estimateEntry(
        const PartitionRequest& request, Entry& e, const std::vector<int>& bounds, std::optional<CostModel>& costs)
    {
        const Plan plan = megatron::configPlanCut(request, e.config, bounds);
        if (!costs)
            costs = megatron::estimateCosts(plan);
        e.estimate = megatron::estimate(plan, e.config, *costs);
        auto& c = e.candidate;
        c.throughput_samples_per_s = e.estimate.throughput_samples_per_s;
        c.peak_memory_bytes = e.estimate.peak_memory_bytes;
        c.memory_capacity_bytes = e.estimate.memory_capacity_bytes;
        c.config["analytic_batch_time_s"] = e.estimate.batch_time_s;
        c.config["analytic_throughput"] = e.estimate.throughput_samples_per_s;
        const double ideal = e.config.m * e.estimate.stage_time_s; // idle over ideal time, (p-1)/(v m) for 1F1B
        c.config["bubble"] = ideal > 0 ? e.estimate.bubble_s / ideal : 0.0;
        std::vector<int> layers;
        for (const auto& st : plan.stages)
            layers.push_back(st.layerCount());
        c.config["layers_per_stage"] = layers;
        if (c.feasible && !e.estimate.fits) {
            c.feasible = false;
            c.reason = "needs " + formatBytes(e.estimate.peak_memory_bytes) + " of "
                + formatBytes(e.estimate.memory_capacity_bytes) + " by the memory formula ("
                + e.estimate.memoryPartsText() + ")";
        }
    }

    /// estimateEntry on every configuration not already turned away (rule of thumb 1, too many microbatches to
    /// simulate: those keep their reason and no estimate). The configurations that cost alike (costKey: 1f1b, zb-h1
    /// and zb-h2 of the same sizes, ...) share one cost model, and at thousands of devices each costs a plan and a cost
    /// model, so the sets are shared out among threads; the calling thread reports progress. False when cancelled.
    static bool estimateAll(
        const PartitionRequest& request, std::vector<Entry>& entries, const ProgressFn& progress, std::stop_token stop)
    {
        // The layers' balancing weights, once per (t, c, b, recompute, sp), and their boundaries once per stage count:
        // thousands of configurations share them.
        std::map<WeightKey, std::vector<double>> weights;
        std::map<std::pair<WeightKey, int>, std::vector<int>> bounds;
        std::map<CostKey, std::vector<std::size_t>> alike;
        std::size_t total = 0;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            const auto& config = entries[i].config;
            if (!entries[i].candidate.feasible)
                continue;
            auto [w, added] = weights.try_emplace(weightKey(config));
            if (added)
                w->second = megatron::balanceWeights(request, config);
            auto [b, cut] = bounds.try_emplace({weightKey(config), config.p * config.v});
            if (cut)
                b->second = detail::balancedBoundaries(w->second, config.p * config.v);
            alike[costKey(config)].push_back(i);
            ++total;
        }
        std::vector<const std::vector<std::size_t>*> sets;
        for (const auto& [key, members] : alike)
            sets.push_back(&members);
        std::atomic<std::size_t> next {0}, finished {0};
        std::atomic<bool> cancelled {false};
        auto work = [&](bool reporter) {
            for (std::size_t k = next++; k < sets.size() && !cancelled; k = next++) {
                if (stop.stop_requested()) {
                    cancelled = true;
                    return;
                }
                std::optional<CostModel> costs;
                for (std::size_t i : *sets[k]) {
                    const auto& config = entries[i].config;
                    estimateEntry(request, entries[i], bounds.at({weightKey(config), config.p * config.v}), costs);
                }
                finished += sets[k]->size();
                if (reporter && progress)
                    progress(0.5 * static_cast<double>(finished) / std::max<std::size_t>(1, total));
            }
        };
        const auto threads = std::min<std::size_t>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u),
            std::max<std::size_t>(1, sets.size() / 4)); // a few configurations are not worth a thread
        std::vector<std::thread> pool;
        for (std::size_t t = 1; t < threads; ++t)
            pool.emplace_back(work, false);
        work(true);
        for (auto& t : pool)
            t.join();
        return !cancelled;
    }

    /// Feasible first, then throughput; ties go to the smaller t p (rule of thumb 2), smaller v, no recompute.
    static bool better(const Entry& x, const Entry& y)
    {
        if (x.candidate.feasible != y.candidate.feasible)
            return x.candidate.feasible;
        const double tx = x.candidate.throughput_samples_per_s, ty = y.candidate.throughput_samples_per_s;
        if (std::abs(tx - ty) > 1e-9 * std::max(tx, ty))
            return tx > ty;
        if (x.config.t * x.config.p != y.config.t * y.config.p)
            return x.config.t * x.config.p < y.config.t * y.config.p;
        if (x.config.c != y.config.c)
            return x.config.c < y.config.c; // no ring exchanges on a tie
        if (x.config.v != y.config.v)
            return x.config.v < y.config.v;
        if (x.config.kind.empty() != y.config.kind.empty())
            return x.config.kind.empty(); // Megatron's own schedule on a tie
        return x.config.recompute < y.config.recompute; // none, then selective, then full
    }

    /// Simulates the analytical leaders in `order` (`top` of them, and on until one fits the simulator's
    /// memory); `best` is the fastest simulated one that fits, or -1. False when cancelled. The simulations run a few
    /// at a time on threads (at most 4: each holds its schedule); their results are taken in order, so the leaders
    /// simulated and the choice are those of one after another.
    static bool simulateLeaders(const PartitionRequest& request, std::vector<Entry>& entries,
        const std::vector<int>& order, int top, const ProgressFn& progress, std::stop_token stop, int& best)
    {
        const std::size_t width = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
        int simulated = 0, fits = 0;
        std::size_t at = 0;
        while (at < order.size()) {
            // The next leaders the one-by-one loop would reach, were none of them to fit.
            std::vector<int> batch;
            for (std::size_t k = at; k < order.size() && batch.size() < width; ++k) {
                if (!entries[order[k]].candidate.feasible
                    || (simulated + static_cast<int>(batch.size()) >= top && fits > 0))
                    break;
                batch.push_back(order[k]);
            }
            if (batch.empty())
                break;
            std::vector<SimulationResult> results(batch.size());
            std::vector<std::string> errors(batch.size());
            std::atomic<bool> cancelled {false};
            std::atomic<std::size_t> next {0};
            auto work = [&] {
                for (std::size_t k = next++; k < batch.size(); k = next++) {
                    try {
                        results[k] = simulateDataParallel(megatron::configPlan(request, entries[batch[k]].config),
                            SimulationOptions {false, false, stop});
                    } catch (const InputError& err) {
                        errors[k] = std::string("does not simulate: ") + err.what();
                    } catch (const Cancelled&) {
                        cancelled = true;
                    }
                }
            };
            std::vector<std::thread> pool;
            for (std::size_t t = 1; t < std::min(width, batch.size()); ++t)
                pool.emplace_back(work);
            work();
            for (auto& t : pool)
                t.join();
            if (cancelled || stop.stop_requested())
                return false;
            for (std::size_t k = 0; k < batch.size(); ++k) {
                if (simulated >= top && fits > 0)
                    return true; // a leader past where one by one would have stopped: left unsimulated
                ++at;
                ++simulated;
                auto& e = entries[batch[k]];
                if (!errors[k].empty()) {
                    e.candidate.feasible = false;
                    e.candidate.reason = errors[k];
                    continue;
                }
                if (takeSimulation(e, results[k])) {
                    ++fits;
                    if (best < 0 || better(e, entries[best]))
                        best = batch[k];
                }
                if (progress)
                    progress(0.5 + 0.5 * std::min(1.0, static_cast<double>(simulated) / top));
            }
        }
        return true;
    }

    /// Records a leader's simulation in its candidate; false (and infeasible, saying why) when it is over memory.
    static bool takeSimulation(Entry& e, const SimulationResult& sim)
    {
        e.simulated = true;
        auto& c = e.candidate;
        c.config["simulated_batch_time_s"] = sim.iteration_time_s;
        c.config["simulated_bubble_overhead"] = sim.bubble_overhead;
        c.throughput_samples_per_s = sim.throughput_samples_per_s;
        double worst = -1;
        for (const auto& dm : sim.devices)
            if (dm.memory_capacity_bytes > 0 && dm.peak_memory_bytes / dm.memory_capacity_bytes > worst) {
                worst = dm.peak_memory_bytes / dm.memory_capacity_bytes;
                c.peak_memory_bytes = dm.peak_memory_bytes;
                c.memory_capacity_bytes = dm.memory_capacity_bytes;
            }
        if (sim.fitsMemory())
            return true;
        c.feasible = false;
        c.reason = "needs " + formatBytes(c.peak_memory_bytes) + " of " + formatBytes(c.memory_capacity_bytes)
            + " in simulation (by the memory formula " + formatBytes(e.estimate.peak_memory_bytes) + ": "
            + e.estimate.memoryPartsText() + ")";
        return false;
    }

    /// "; " and why the chosen schedule kind won, for the note: how much faster it is than 1F1B with the same sizes
    /// and at what memory, and the fastest kind that was over memory. Simulated throughputs where both have them.
    static std::string whyKind(const PartitionRequest& request, const std::vector<Entry>& entries, int best)
    {
        const auto& chosen = entries[best];
        const auto& cc = chosen.config;
        const auto percent = [](double x) {
            std::ostringstream out; // one decimal under 10 %: "0.4 %", not "0 %"
            out.precision(std::abs(x) < 0.1 ? 1 : 0);
            out << std::fixed << x * 100 << " %";
            return out.str();
        };
        const auto bubble = [](const Entry& e) { return e.candidate.config.value("bubble", 0.0); };
        std::string why;
        // Megatron's own 1F1B on the same p, t, d, b and recomputation.
        const Entry* plain = nullptr;
        for (const auto& e : entries)
            if (e.config.kind.empty() && e.config.v == 1 && e.config.p == cc.p && e.config.t == cc.t
                && e.config.c == cc.c && e.config.d == cc.d && e.config.b == cc.b && e.config.recompute == cc.recompute)
                plain = &e;
        const std::string kind = cc.scheduleKind();
        if (plain && &chosen != plain && cc.p > 1) {
            // The chosen plan was simulated; 1F1B is, for the note, when the ranking left it out.
            double simulatedPlain = plain->simulated ? plain->candidate.throughput_samples_per_s : 0.0;
            double plainPeak = plain->simulated ? plain->candidate.peak_memory_bytes : 0.0;
            if (!plain->simulated && chosen.simulated)
                try {
                    const auto sim = simulateDataParallel(
                        megatron::configPlan(request, plain->config), SimulationOptions {false, false});
                    simulatedPlain = sim.throughput_samples_per_s;
                    double worst = -1;
                    for (const auto& dm : sim.devices)
                        if (dm.memory_capacity_bytes > 0 && dm.peak_memory_bytes / dm.memory_capacity_bytes > worst) {
                            worst = dm.peak_memory_bytes / dm.memory_capacity_bytes;
                            plainPeak = dm.peak_memory_bytes;
                        }
                } catch (const InputError&) {
                }
            const bool bothSimulated = simulatedPlain > 0 && chosen.simulated;
            const double mine
                = bothSimulated ? chosen.candidate.throughput_samples_per_s : chosen.estimate.throughput_samples_per_s;
            const double theirs = bothSimulated ? simulatedPlain : plain->estimate.throughput_samples_per_s;
            why += "; " + kind + ": ";
            if (theirs > 0 && mine >= theirs)
                why += percent(mine / theirs - 1) + " faster than 1f1b";
            else if (theirs > 0)
                why += percent(1 - mine / theirs) + " slower than 1f1b";
            why += std::string(bothSimulated ? " (simulated)" : " (analytically)")
                + " with the same sizes, estimated bubble " + percent(bubble(chosen)) + " instead of "
                + percent(bubble(*plain));
            // Memory as simulated where both were (the estimate's zbv stashes are an upper bound).
            const double minePeak
                = bothSimulated ? chosen.candidate.peak_memory_bytes : chosen.estimate.peak_memory_bytes;
            const double theirPeak = bothSimulated && plainPeak > 0 ? plainPeak : plain->estimate.peak_memory_bytes;
            std::ostringstream mem;
            mem.precision(2);
            mem << std::fixed << (theirPeak > 0 ? minePeak / theirPeak : 1.0);
            why += ", at " + mem.str() + "x its memory (" + formatBytes(minePeak) + " of "
                + formatBytes(
                    bothSimulated ? chosen.candidate.memory_capacity_bytes : chosen.estimate.memory_capacity_bytes)
                + ")";
            if (!plain->candidate.feasible && !plain->candidate.reason.empty())
                why += "; 1f1b there: " + plain->candidate.reason;
        }
        // The fastest configuration turned away for memory that would have beaten the chosen one.
        const Entry* over = nullptr;
        for (const auto& e : entries)
            if (!e.candidate.feasible && e.estimate.memory_capacity_bytes > 0 && !e.estimate.fits
                && e.estimate.throughput_samples_per_s > chosen.estimate.throughput_samples_per_s
                && (!over || e.estimate.throughput_samples_per_s > over->estimate.throughput_samples_per_s))
                over = &e;
        if (over)
            why += "; " + over->config.scheduleKind() + " (" + over->config.text() + ") would be "
                + percent(over->estimate.throughput_samples_per_s / chosen.estimate.throughput_samples_per_s - 1)
                + " faster analytically but needs " + formatBytes(over->estimate.peak_memory_bytes) + " of "
                + formatBytes(over->estimate.memory_capacity_bytes) + " (over memory): chose " + kind;
        return why;
    }

    /// The chosen plan (or the over-memory error) with every candidate, the chosen one first.
    PartitionResult finish(const PartitionRequest& request, const detail::OptionValues& values, const Space& space,
        const std::vector<Entry>& entries, std::vector<int> order, int best, std::vector<Diagnostic> diag) const
    {
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            if (a == best || b == best)
                return a == best && b != best;
            const auto& x = entries[a];
            const auto& y = entries[b];
            if (x.candidate.feasible != y.candidate.feasible)
                return x.candidate.feasible;
            if (x.simulated != y.simulated)
                return x.simulated;
            return better(x, y);
        });
        std::vector<Candidate> candidates;
        for (int i : order) {
            auto c = entries[i].candidate;
            if (i != best && c.feasible && c.reason.empty())
                c.reason = entries[i].simulated ? "slower in simulation than the chosen one"
                                                : "analytically slower than the simulated leaders";
            candidates.push_back(std::move(c));
        }
        if (best < 0) {
            const std::string closest = detail::firstReason(candidates);
            diag.push_back({Severity::Error, "over-memory",
                "no configuration of " + std::to_string(space.devices) + " devices for a global batch of "
                    + std::to_string(space.batch) + " fits device memory"
                    + (closest.empty() ? "" : " (e.g. " + closest + ")")});
            PartitionResult r {std::nullopt, std::move(diag)};
            r.candidates = std::move(candidates);
            return r;
        }
        const auto& chosen = entries[best];
        Plan plan = megatron::configPlan(request, chosen.config);
        json options = values.effective();
        options["global_batch"] = space.batch;
        options["chosen"] = chosen.candidate.config;
        plan.algorithm_options = std::move(options);
        plan.objective_s = chosen.estimate.stage_time_s; // slowest device per microbatch (F + B)
        diag.push_back({Severity::Info, "megatron",
            "chose " + chosen.config.text() + (chosen.config.kind.empty() ? " (" + plan.schedule.kind + ")" : "")
                + " of " + std::to_string(entries.size())
                + " configurations: " + samplesPerSecond(chosen.candidate.throughput_samples_per_s) + " simulated, "
                + samplesPerSecond(chosen.estimate.throughput_samples_per_s) + " analytically"
                + whyKind(request, entries, best)});
        const auto& kind = request.options.schedule.kind;
        if (detail::replacesRequestedKind(request, plan.schedule.kind))
            diag.push_back({Severity::Info, "schedule-kind",
                "megatron chooses between 1f1b, interleaved, zb-h1, zb-h2, zbv, dualpipev, v-half and v-min; the "
                "requested "
                "kind '"
                    + kind + "' was replaced by '" + plan.schedule.kind + "'"});
        auto result = detail::validated(std::move(plan), std::move(diag));
        result.candidates = std::move(candidates);
        return result;
    }
};

} // namespace

const Partitioner& megatronPartitioner()
{
    static const MegatronPartitioner instance;
    return instance;
}

} // namespace pw::planner
