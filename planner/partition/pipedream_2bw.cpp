// SPDX-License-Identifier: MIT
// The "pipedream-2bw" partitioner: PipeDream-2BW's planner (docs/algorithms/pipedream-2bw.md). A search over
// data-parallel width d, pipeline depth p (d p = devices), microbatch size b and activation recomputation, with
// equi-replicated stages, ranked by the closed-form throughput model and kept only when the memory model fits.
#include "pipedream_2bw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "../costs.h"
#include "../errors.h"
#include "../schedule/generator.h"
#include "../sim/simulator.h"
#include "../units.h"
#include "builtin.h"

namespace pw::planner {

namespace twobw {

double pipelinedTime(const std::vector<StageCost>& stages, int microbatches_per_sync)
{
    const int m = std::max(1, microbatches_per_sync);
    double t = 0;
    for (const auto& s : stages)
        t = std::max(t, std::max(s.compute_s + s.comm_s, s.allreduce_s / m));
    return t;
}

double unpipelinedTime(const std::vector<StageCost>& stages, int microbatches_per_sync)
{
    const int m = std::max(1, microbatches_per_sync);
    double t = 0;
    for (const auto& s : stages)
        t += std::max(s.compute_s + s.comm_s, s.allreduce_s / m);
    return t;
}

double flushBubble(int depth, int microbatches)
{
    return static_cast<double>(std::max(0, depth - 1)) / std::max(1, microbatches);
}

double paperMemoryBytes(double weight_bytes, double activation_total_bytes, double activation_input_bytes, int depth,
    bool recompute, bool input_term)
{
    const double p = std::max(1, depth);
    const double weights = 2 * weight_bytes / p;
    if (recompute)
        return weights + activation_total_bytes / p + p * activation_input_bytes;
    return weights + p * activation_total_bytes / p + (input_term ? p * activation_input_bytes : 0.0);
}

double ringAllReduceBytes(double bytes, int workers)
{
    if (workers <= 1)
        return 0;
    return 2.0 * (workers - 1) / workers * bytes;
}

} // namespace twobw

namespace {

using Severity = Diagnostic::Severity;
using nlohmann::json;

/// How the search executes a (d, p): the three executions of D:1177-1181.
enum class Execution { Unpipelined, Pipelined, Recompute };

const char* executionName(Execution e)
{
    switch (e) {
    case Execution::Unpipelined:
        return "no pipelining";
    case Execution::Pipelined:
        return "pipelined";
    case Execution::Recompute:
        return "pipelined + recompute";
    }
    return "";
}

struct Config
{
    int d = 1;
    int p = 1;
    int b = 1;
    Execution execution = Execution::Pipelined;
    bool pipelines_together = false; ///< placement: a pipeline's stages on consecutive devices
};

struct Settings
{
    long long batch = 0; ///< maximum safe global batch size B (samples)
    bool flush = false; ///< PipeDream-Flush: 1F1B with a flush per batch instead of 2BW
    bool equal_layers = false; ///< the paper's equal block counts instead of time-balanced stages
    bool input_term = true;
    bool rank_by_simulation = false;
};

class TwoBwPlanner
{
public:
    TwoBwPlanner(const PartitionRequest& request, const Settings& settings, int devices)
        : m_request(request)
        , m_model(request.model)
        , m_cluster(request.cluster)
        , m_settings(settings)
        , m_devices(devices)
        , m_baseSize(std::max(1, request.model->microbatch_size))
        , m_cutBytes(request.model->cutBytes())
        , m_speeds(deviceSpeeds(request.model, request.cluster))
    {
    }

    /// @brief A configuration with the closed-form model's verdict and, when it is worth building, its plan.
    struct Evaluated
    {
        Config config;
        Candidate candidate;
        double time_per_microbatch_s = 0;
    };

    Evaluated evaluate(const Config& c) const
    {
        Evaluated e;
        e.config = c;
        auto& cand = e.candidate;
        const long long m = m_settings.batch / (static_cast<long long>(c.d) * c.b); // microbatches per sync
        const bool pipelined = c.execution != Execution::Unpipelined;
        describe(c, m, cand);
        if (auto why = unsuitable(c, m)) {
            cand.feasible = false;
            cand.reason = *why;
            return e;
        }
        const auto bounds = *boundaries(c.p, c.execution == Execution::Recompute);
        std::vector<twobw::StageCost> costs(c.p);
        double peak = 0, capacityAtPeak = 0, worstRatio = -1, paperPeak = 0;
        bool fits = true;
        int first = 0;
        for (int s = 0; s < c.p; ++s) {
            const int last = s + 1 < c.p ? bounds[s] : m_model.layerCount() - 1;
            const StageEstimate st = estimateStage(c, s, first, last, m);
            costs[s] = st.cost;
            if (st.memory_bytes > st.capacity_bytes)
                fits = false;
            if (st.memory_bytes / st.capacity_bytes > worstRatio) {
                worstRatio = st.memory_bytes / st.capacity_bytes;
                peak = st.memory_bytes;
                capacityAtPeak = st.capacity_bytes;
            }
            paperPeak = std::max(paperPeak, st.paper_memory_bytes);
            first = last + 1;
        }
        double t = pipelined ? twobw::pipelinedTime(costs, static_cast<int>(m))
                             : twobw::unpipelinedTime(costs, static_cast<int>(m));
        if (pipelined && m_settings.flush)
            t *= 1 + twobw::flushBubble(c.p, static_cast<int>(m)); // D:1122-1132: Flush pays (p-1)/m
        e.time_per_microbatch_s = t;
        cand.throughput_samples_per_s = t > 0 ? c.d * c.b / t : 0;
        cand.peak_memory_bytes = peak;
        cand.memory_capacity_bytes = capacityAtPeak;
        cand.config["time_per_microbatch_s"] = t;
        cand.config["boundaries"] = bounds;
        if (paperPeak > 0)
            cand.config["paper_memory_bytes"] = paperPeak;
        if (!fits) {
            cand.feasible = false;
            cand.reason = "needs " + formatBytes(peak) + " on a device of " + formatBytes(capacityAtPeak);
        }
        return e;
    }

    /// The candidate's description and configuration, before it is evaluated.
    static void describe(const Config& c, long long m, Candidate& cand)
    {
        const bool recompute = c.execution == Execution::Recompute;
        cand.description = "d=" + std::to_string(c.d) + " p=" + std::to_string(c.p) + " b=" + std::to_string(c.b) + " "
            + executionName(c.execution);
        if (c.d > 1 && c.p > 1)
            cand.description += c.pipelines_together ? ", pipelines packed" : ", replicas packed";
        cand.config = {{"data_parallel", c.d}, {"pipeline_depth", c.p}, {"microbatch_size", c.b},
            {"execution", executionName(c.execution)}, {"recompute", recompute},
            {"placement", c.pipelines_together ? "pipelines-together" : "replicas-together"},
            {"microbatches_per_pipeline", m}, {"global_batch", m * c.d * c.b}};
    }

    /// Why a configuration cannot be evaluated at all (batch, 2BW's m >= p, simulation limits, block count).
    std::optional<std::string> unsuitable(const Config& c, long long m) const
    {
        if (m < 1)
            return "d x b = " + std::to_string(c.d * c.b) + " exceeds the batch of " + std::to_string(m_settings.batch);
        if (c.execution != Execution::Unpipelined && c.p > 1 && m < c.p)
            return "m = " + std::to_string(m) + " microbatches per pipeline < p = " + std::to_string(c.p)
                + " stages (2BW needs m >= p)";
        const long long simulated = m * c.d * std::max(1, m_request.options.schedule.iterations);
        if (simulated > kMaxMicrobatches || simulated * c.p > kMaxStageMicrobatches)
            return "too many microbatches to simulate (" + std::to_string(simulated) + ")";
        if (!boundaries(c.p, c.execution == Execution::Recompute))
            return "p = " + std::to_string(c.p) + " does not divide the model's " + std::to_string(blockCount())
                + " blocks";
        return std::nullopt;
    }

    /// One stage of a configuration under the closed-form model: its times, its memory and the smallest capacity
    /// among its devices.
    struct StageEstimate
    {
        twobw::StageCost cost;
        double memory_bytes = 0;
        double capacity_bytes = std::numeric_limits<double>::infinity();
        double paper_memory_bytes = 0; ///< the dissertation's formula, for the candidate's record
    };

    StageEstimate estimateStage(const Config& c, int s, int first, int last, long long m) const
    {
        const bool pipelined = c.execution != Execution::Unpipelined;
        const bool recompute = c.execution == Execution::Recompute;
        const double scale = static_cast<double>(c.b) / m_baseSize;
        StageEstimate st;
        const auto devs = stageDevices(c, s);
        double compute = 0;
        for (int dev : devs) {
            const auto& type = m_cluster.typeOf(dev);
            const double speed = m_speeds[m_cluster.device(dev).type].factor;
            double t = 0;
            for (int l = first; l <= last; ++l) {
                auto lt = layerTimesOn(m_model.layers[l], type, speed);
                t += (recompute ? 2 * lt.forward_ms : lt.forward_ms) + lt.backward_ms;
            }
            compute = std::max(compute, t * 1e-3 * scale);
            st.capacity_bytes = std::min(st.capacity_bytes, type.memory_bytes);
        }
        double weights = 0, stash = 0, optimizer = 0;
        const double optFactor = optimizerStateFactor(m_request.options.schedule, m_model, c.d);
        for (int l = first; l <= last; ++l) {
            const auto& layer = m_model.layers[l];
            weights += layer.weight_bytes;
            stash += m_model.stashedBytes(l) * scale;
            optimizer += layer.optimizer_state_bytes.value_or(optFactor * layer.weight_bytes);
        }
        const double inBytes = first > 0 ? m_cutBytes[first - 1] * scale : 0;
        const double outBytes = s + 1 < c.p ? m_cutBytes[last] * scale : 0;
        // D:1219-1221: 2 |A^{inp.+out.}(b)| / bwdth_in-pipeline, the 2 for the gradients flowing back.
        double comm = 0;
        if (s > 0)
            comm += 2 * inBytes / linkBandwidth(c, s - 1) + 2 * linkLatency(c, s - 1);
        if (s + 1 < c.p)
            comm += 2 * outBytes / linkBandwidth(c, s) + 2 * linkLatency(c, s);
        double allreduce = 0;
        if (c.d > 1)
            allreduce = twobw::ringAllReduceBytes(weights, c.d) / m_cluster.groupBandwidth(devs)
                + 2.0 * (c.d - 1) * m_cluster.groupLatency(devs);
        st.cost = {compute, comm, allreduce};

        StageMemoryInput in;
        in.weight_bytes = weights;
        in.activation_bytes = stash;
        in.input_bytes = inBytes;
        in.optimizer_bytes = optimizer;
        in.in_flight = pipelined ? c.p - s : 1;
        in.microbatches = static_cast<int>(std::min<long long>(m, kMaxMicrobatches));
        in.recompute = recompute;
        st.memory_bytes = stageMemoryBytes(scheduleKind(c), in);
        if (pipelined && !m_settings.flush)
            st.paper_memory_bytes
                = twobw::paperMemoryBytes(weights * c.p, stash * c.p, inBytes, c.p, recompute, m_settings.input_term);
        return st;
    }

    Plan buildPlan(const Evaluated& e) const
    {
        const auto& c = e.config;
        Plan plan = detail::basePlan(m_request, "pipedream-2bw");
        auto bounds = *boundaries(c.p, c.execution == Execution::Recompute);
        int first = 0;
        for (int s = 0; s < c.p; ++s) {
            PlanStage st;
            st.first_layer = first;
            st.last_layer = s + 1 < c.p ? bounds[s] : m_model.layerCount() - 1;
            st.devices = stageDevices(c, s);
            first = st.last_layer + 1;
            plan.stages.push_back(std::move(st));
        }
        const long long m = m_settings.batch / (static_cast<long long>(c.d) * c.b);
        plan.schedule.kind = scheduleKind(c);
        plan.schedule.iterations = simulatedIterations(plan); // 2BW's steady state needs batches (traits)
        plan.schedule.chunks = 1;
        plan.schedule.microbatch_size = c.b;
        plan.schedule.microbatches = static_cast<int>(m * c.d); // the project counts a batch over all replicas
        plan.schedule.recompute = c.execution == Execution::Recompute ? Recompute::Full : Recompute::None;
        plan.schedule.in_flight.clear();
        if (c.execution == Execution::Unpipelined)
            plan.schedule.in_flight.assign(c.p, 1);
        plan.objective_s = e.time_per_microbatch_s;
        return plan;
    }

    int blockCount() const
    {
        int blocks = 0;
        for (const auto& l : m_model.layers)
            blocks += l.kind == "transformer_layer";
        return blocks > 0 ? blocks : m_model.layerCount();
    }

private:
    std::string scheduleKind(const Config& c) const
    {
        if (c.execution == Execution::Unpipelined || m_settings.flush)
            return "1f1b";
        return "2bw";
    }

    /// Replicas packed: stage s on devices s d .. s d + d - 1 (all-reduce on the closest links). Pipelines
    /// packed: replica j of stage s on device j p + s (activations on the closest links).
    std::vector<int> stageDevices(const Config& c, int s) const
    {
        std::vector<int> devs;
        for (int j = 0; j < c.d; ++j)
            devs.push_back(c.pipelines_together ? j * c.p + s : s * c.d + j);
        return devs;
    }

    double linkBandwidth(const Config& c, int s) const
    {
        double bw = std::numeric_limits<double>::infinity();
        for (int j = 0; j < c.d; ++j)
            bw = std::min(bw, m_cluster.bandwidth(stageDevices(c, s)[j], stageDevices(c, s + 1)[j]));
        return bw;
    }

    double linkLatency(const Config& c, int s) const
    {
        double lat = 0;
        for (int j = 0; j < c.d; ++j)
            lat = std::max(lat, m_cluster.latency(stageDevices(c, s)[j], stageDevices(c, s + 1)[j]));
        return lat;
    }

    /// Last layer of every stage but the final one; nullopt when equal block counts do not divide.
    std::optional<std::vector<int>> boundaries(int p, bool recompute) const
    {
        const int L = m_model.layerCount();
        if (p <= 1)
            return std::vector<int> {};
        if (m_settings.equal_layers) {
            std::vector<int> blocks; // positions of the blocks in layer order
            for (int l = 0; l < L; ++l)
                if (m_model.layers[l].kind == "transformer_layer")
                    blocks.push_back(l);
            if (blocks.empty())
                for (int l = 0; l < L; ++l)
                    blocks.push_back(l);
            const int n = static_cast<int>(blocks.size());
            if (n % p != 0)
                return std::nullopt;
            std::vector<int> out;
            for (int s = 1; s < p; ++s)
                out.push_back(blocks[s * (n / p) - 1]); // embeddings ride with the first stage, the head with the last
            return out;
        }
        const auto& type = m_cluster.typeOf(0);
        const double speed = m_speeds[m_cluster.device(0).type].factor;
        std::vector<double> weights(L);
        for (int l = 0; l < L; ++l) {
            auto t = layerTimesOn(m_model.layers[l], type, speed);
            weights[l] = (recompute ? 2 * t.forward_ms : t.forward_ms) + t.backward_ms;
        }
        return detail::balancedBoundaries(weights, p);
    }

    const PartitionRequest& m_request;
    const ModelProfile& m_model;
    const Cluster& m_cluster;
    Settings m_settings;
    int m_devices;
    int m_baseSize;
    std::vector<double> m_cutBytes;
    std::vector<DeviceSpeed> m_speeds; ///< by device type index
};

class PipeDream2BwPartitioner final : public OptionedPartitioner
{
public:
    std::string_view name() const override { return "pipedream-2bw"; }
    SharedOptionUse sharedOptions() const override { return {true, true, false}; }
    std::string_view description() const override
    {
        return "PipeDream-2BW's planner: data-parallel width x pipeline depth x microbatch size x recomputation "
               "with equi-replicated stages, the closed-form throughput model and memory fitting";
    }

    std::vector<OptionSpec> options() const override
    {
        using T = OptionSpec::Type;
        return {
            {"batch-size", T::Integer, json(),
                "maximum safe global batch size B in samples (D:1146); auto: --microbatches x the microbatch size", 1,
                1e9, {}},
            {"microbatch-sizes", T::IntegerList, json(),
                "microbatch sizes b to try; auto: powers of two up to B / d, and the profile's", 1, 1'000'000, {}},
            {"recompute", T::Choice, "auto",
                "auto: compare with and without activation recomputation (D:1177-1181); on; off", std::nullopt,
                std::nullopt, {"auto", "on", "off"}},
            {"pipelining", T::Choice, "auto",
                "auto: also consider model + data parallelism without pipelining (D:1177); on: pipelined only",
                std::nullopt, std::nullopt, {"auto", "on"}},
            {"flush", T::Boolean, false,
                "plan for PipeDream-Flush (1F1B with a flush per batch, one weight version) instead of 2BW; "
                "the model then pays the (p-1)/m bubble",
                std::nullopt, std::nullopt, {}},
            {"split", T::Choice, "balanced",
                "balanced: stages cut to balance compute time; equal-blocks: the paper's n_blocks/p transformer "
                "layers per stage (D:1215), p must divide the block count",
                std::nullopt, std::nullopt, {"balanced", "equal-blocks"}},
            {"placement", T::Choice, "auto",
                "replicas-together: a stage's d replicas on neighbouring devices (all-reduce on fast links); "
                "pipelines-together: a pipeline's stages on neighbouring devices; auto: both",
                std::nullopt, std::nullopt, {"auto", "replicas-together", "pipelines-together"}},
            {"rank", T::Choice, "model",
                "model: rank configurations by the closed-form throughput (the paper); simulation: by the "
                "simulator's throughput",
                std::nullopt, std::nullopt, {"model", "simulation"}},
            {"input-term", T::Boolean, true,
                "report D:1235's memory with its p|A^input| term (the digest reads it as double counting)",
                std::nullopt, std::nullopt, {}},
        };
    }

private:
    PartitionResult search(const PartitionRequest& request, const detail::OptionValues& values, int N,
        const ProgressFn& progress, std::stop_token stop, std::vector<Diagnostic> diag) const override
    {
        const auto& opt = request.options;
        const auto& model = request.model;
        if (auto bad = detail::checkOneStagePerDevice(request, name(), N))
            return std::move(*bad);
        if (!request.cluster->isHomogeneous())
            diag.push_back({Severity::Warning, "heterogeneous",
                "PipeDream-2BW's planner assumes identical workers: a stage is costed at its slowest replica and "
                "its smallest memory, and stages are balanced for the first device's type"});

        Settings settings;
        const int baseSize
            = opt.schedule.microbatch_size > 0 ? opt.schedule.microbatch_size : std::max(1, model->microbatch_size);
        settings.batch = values.given("batch-size") ? values.integer("batch-size")
                                                    : static_cast<long long>(opt.schedule.microbatches) * baseSize;
        settings.flush = values.boolean("flush");
        settings.equal_layers = values.choice("split") == "equal-blocks";
        settings.input_term = values.boolean("input-term");
        settings.rank_by_simulation = values.choice("rank") == "simulation";
        TwoBwPlanner planner(request, settings, N);

        std::vector<int> sizes;
        if (values.has("microbatch-sizes")) {
            sizes = values.integers("microbatch-sizes");
        } else {
            for (long long b = 1; b <= settings.batch; b *= 2)
                sizes.push_back(static_cast<int>(b));
            if (settings.batch >= std::max(1, model->microbatch_size))
                sizes.push_back(std::max(1, model->microbatch_size));
        }
        std::sort(sizes.begin(), sizes.end());
        sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

        std::vector<Execution> executions;
        const auto recompute = values.choice("recompute");
        if (values.choice("pipelining") == "auto")
            executions.push_back(Execution::Unpipelined);
        if (recompute != "on")
            executions.push_back(Execution::Pipelined);
        if (recompute != "off")
            executions.push_back(Execution::Recompute);
        std::vector<bool> placements;
        const auto placement = values.choice("placement");
        if (placement != "pipelines-together")
            placements.push_back(false);
        if (placement != "replicas-together")
            placements.push_back(true);

        // Only parallel pipelines with d p = N (digest §4.1 [derived]: g = B / (N b) needs d p = N);
        // --stages fixes p.
        std::vector<Config> configs;
        for (int d = 1; d <= N; ++d) {
            if (N % d != 0)
                continue;
            const int p = N / d;
            if (opt.stages > 0 && p != opt.stages)
                continue;
            if (p > model->layerCount())
                continue;
            if (opt.straight && d > 1)
                continue;
            for (int b : sizes) {
                if (static_cast<long long>(d) * b > settings.batch)
                    continue;
                for (auto ex : executions) {
                    if (ex == Execution::Unpipelined && p == 1 && executions.size() > 1)
                        continue; // p = 1: identical to the pipelined execution
                    for (bool packedPipelines : placements) {
                        if (packedPipelines && (d == 1 || p == 1) && placements.size() > 1)
                            continue; // both placements are the same device sets
                        configs.push_back({d, p, b, ex, packedPipelines});
                    }
                }
            }
        }
        if (configs.empty())
            return detail::failure("no-configuration",
                "no (d, p, b) with d x p = " + std::to_string(N)
                    + " devices, p <= " + std::to_string(model->layerCount()) + " layers and d x b <= the batch of "
                    + std::to_string(settings.batch) + " samples; raise --microbatches or batch-size");

        std::vector<TwoBwPlanner::Evaluated> all;
        all.reserve(configs.size());
        for (std::size_t i = 0; i < configs.size(); ++i) {
            if (stop.stop_requested())
                return detail::failure("cancelled", "partitioning was cancelled");
            all.push_back(planner.evaluate(configs[i]));
            if (progress)
                progress(0.5 * static_cast<double>(i + 1) / configs.size());
        }

        if (settings.rank_by_simulation) {
            int done = 0, feasible = 0;
            for (const auto& e : all)
                feasible += e.candidate.feasible;
            for (auto& e : all) {
                if (!e.candidate.feasible)
                    continue;
                if (stop.stop_requested())
                    return detail::failure("cancelled", "partitioning was cancelled");
                Plan plan = planner.buildPlan(e);
                SimulationOptions so;
                so.record_spans = false;
                so.record_memory = false;
                auto sim = simulate(plan, so);
                e.candidate.config["model_throughput_samples_per_s"] = e.candidate.throughput_samples_per_s;
                e.candidate.throughput_samples_per_s = sim.throughput_samples_per_s;
                if (progress)
                    progress(0.5 + 0.5 * (++done) / std::max(1, feasible));
            }
        }

        std::vector<int> order(all.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = static_cast<int>(i);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            const auto& x = all[a].candidate;
            const auto& y = all[b].candidate;
            if (x.feasible != y.feasible)
                return x.feasible;
            return x.throughput_samples_per_s > y.throughput_samples_per_s * (1 + 1e-12);
        });

        // The best feasible configuration whose plan also fits when simulated (the closed-form memory model
        // and the simulator's must agree; a disagreement is reported, and the next configuration is tried).
        std::optional<Plan> chosen;
        int chosenIndex = -1;
        for (int i : order) {
            auto& e = all[i];
            if (!e.candidate.feasible)
                break;
            if (stop.stop_requested())
                return detail::failure("cancelled", "partitioning was cancelled");
            Plan plan = planner.buildPlan(e);
            SimulationOptions so;
            so.record_spans = false;
            auto sim = simulate(plan, so);
            if (!sim.fitsMemory()) {
                e.candidate.feasible = false;
                e.candidate.reason = "the simulator finds it over device memory";
                diag.push_back({Severity::Warning, "model-disagrees",
                    e.candidate.description + ": fits the memory model but not the simulation"});
                continue;
            }
            e.candidate.config["simulated_throughput_samples_per_s"] = sim.throughput_samples_per_s;
            chosen = std::move(plan);
            chosenIndex = i;
            break;
        }
        if (progress)
            progress(1.0);

        std::vector<Candidate> candidates;
        if (chosenIndex >= 0)
            candidates.push_back(all[chosenIndex].candidate);
        for (int i : order) {
            if (i == chosenIndex)
                continue;
            auto c = all[i].candidate;
            if (c.feasible && c.reason.empty())
                c.reason = "slower than the chosen one";
            candidates.push_back(std::move(c));
        }

        if (!chosen) {
            const std::string closest = detail::firstReason(candidates);
            diag.push_back({Severity::Error, "over-memory",
                "no configuration of " + std::to_string(N) + " devices fits device memory"
                    + (closest.empty() ? "" : " (closest: " + closest + ")")});
            PartitionResult r {std::nullopt, std::move(diag)};
            r.candidates = std::move(candidates);
            return r;
        }

        const auto& best = all[chosenIndex];
        json options = values.effective();
        options["batch-size"] = settings.batch;
        options["chosen"] = best.candidate.config;
        chosen->algorithm_options = std::move(options);
        diag.push_back({Severity::Info, "pipedream-2bw",
            "chose " + best.candidate.description + ": " + std::to_string(best.candidate.throughput_samples_per_s)
                + " samples/s by the " + (settings.rank_by_simulation ? "simulator" : "closed-form model") + ", "
                + std::to_string(static_cast<long long>(best.candidate.config.value("global_batch", 0LL)))
                + " samples per batch"});
        if (detail::replacesRequestedKind(request, chosen->schedule.kind))
            diag.push_back({Severity::Info, "schedule-kind",
                "pipedream-2bw chooses its own schedule; the requested kind '" + opt.schedule.kind
                    + "' was replaced by '" + chosen->schedule.kind + "' (set flush=true for PipeDream-Flush)"});
        auto result = detail::validated(std::move(*chosen), std::move(diag));
        result.candidates = std::move(candidates);
        return result;
    }
};

} // namespace

const Partitioner& pipeDream2BwPartitioner()
{
    static const PipeDream2BwPartitioner instance;
    return instance;
}

} // namespace pw::planner
