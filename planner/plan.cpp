// SPDX-License-Identifier: MIT
#include "plan.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <set>

#include "errors.h"
#include "json_fields.h"
#include "schedule/generator.h"
#include "schedule/traits.h"

namespace pw::planner {

using nlohmann::json;

int zeroStage(const ScheduleOptions& options)
{
    return options.shard_weights ? 3 : options.shard_gradients ? 2 : options.distributed_optimizer ? 1 : 0;
}

void setZeroStage(ScheduleOptions& options, int stage)
{
    options.distributed_optimizer = stage >= 1;
    options.shard_gradients = stage >= 2;
    options.shard_weights = stage >= 3;
}

double precisionBytes(const std::string& precision, const std::string& path)
{
    if (precision == "fp32")
        return 4;
    if (precision == "bf16" || precision == "fp16")
        return 2;
    if (precision == "fp8" && path == "/schedule/precision") // FP8 products keep 16-bit weights
        return 2;
    throw InputError({}, 0, path,
        "unknown precision '" + precision + "' ("
            + (path == "/schedule/precision" ? "fp32, bf16, fp16 or fp8" : "fp32, bf16 or fp16") + ")");
}

std::string weightPrecision(const ScheduleOptions& options, const ModelProfile& model)
{
    if (!options.precision.empty())
        return options.precision;
    if (model.architecture && model.architecture->fp8)
        return "fp8";
    if (model.architecture && model.architecture->bytes_per_element == 2)
        return "bf16";
    return "fp32";
}

namespace {

int moments(const std::string& optimizer)
{
    if (optimizer == "sgd")
        return 0;
    if (optimizer == "momentum")
        return 1;
    if (optimizer == "adam")
        return 2;
    throw InputError({}, 0, "/schedule/optimizer", "unknown optimizer '" + optimizer + "' (sgd, momentum or adam)");
}

} // namespace

int shardGroupSize(const ScheduleOptions& options, int replicas)
{
    const int all = std::max(1, replicas);
    return options.shard_group > 0 ? std::min(options.shard_group, all) : all;
}

ResidentShares residentShares(const ScheduleOptions& options, int dataParallel)
{
    const double d = shardGroupSize(options, dataParallel);
    return {options.shard_weights ? 1.0 / d : 1.0, options.shard_gradients ? 1.0 / d : 1.0};
}

double trainingBytesPerParameter(const ScheduleOptions& options, const ModelProfile& model, int dataParallel)
{
    const double weights = precisionBytes(weightPrecision(options, model));
    const double gradients = options.gradient_precision.empty()
        ? weights
        : precisionBytes(options.gradient_precision, "/schedule/gradient_precision");
    double state = 4.0 * moments(options.optimizer) + (weights < 4 ? 4.0 : 0.0);
    if (options.distributed_optimizer)
        state /= shardGroupSize(options, dataParallel);
    const auto shares = residentShares(options, dataParallel);
    return weights * shares.weights + gradients * shares.gradients + state;
}

double gradientBytesPerWeightByte(const ScheduleOptions& options, const ModelProfile& model)
{
    const double weights = precisionBytes(weightPrecision(options, model));
    return options.gradient_precision.empty()
        ? 1.0
        : precisionBytes(options.gradient_precision, "/schedule/gradient_precision") / weights;
}

double optimizerStateFactor(const ScheduleOptions& options, const ModelProfile& model, int dataParallel)
{
    const double weights = precisionBytes(weightPrecision(options, model));
    const auto shares = residentShares(options, dataParallel);
    // What is left once the weights and one weight-sized gradient are counted at their shares.
    return (trainingBytesPerParameter(options, model, dataParallel) - weights * shares.weights
               - weights * shares.gradients)
        / weights;
}

std::vector<int> Plan::devicesUsed() const
{
    std::vector<int> out;
    for (const PlanStage& s : stages)
        out.insert(out.end(), s.devices.begin(), s.devices.end());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

int Plan::pipelineDepth() const
{
    int v = std::max(1, schedule.chunks);
    return stageCount() / v;
}

int Plan::pipelineBegin(int stage) const
{
    while (stage > 0 && !firstInPipeline(stage))
        --stage;
    return stage;
}

int Plan::pipelineEnd(int stage) const
{
    while (!lastInPipeline(stage))
        ++stage;
    return stage + 1;
}

std::vector<std::vector<int>> Plan::tiedWeightGroups(int pipeline) const
{
    if (model->tiedWeightBytes() <= 0 || stages.empty())
        return {};
    int last = 0; // the head's position
    for (const auto& ps : stages)
        last = std::max(last, ps.last_layer);
    const PlanStage* embedding = nullptr;
    const PlanStage* head = nullptr;
    for (const auto& ps : stages) {
        if (ps.pipeline != pipeline)
            continue;
        if (ps.first_layer == 0)
            embedding = &ps;
        if (ps.last_layer == last)
            head = &ps;
    }
    if (!embedding || !head || embedding == head)
        return {};
    std::vector<int> e = embedding->devices, h = head->devices;
    std::sort(e.begin(), e.end());
    std::sort(h.begin(), h.end());
    if (e == h)
        return {};
    // PipeDream's kind steps each replica after each of its backwards: replicas of stages with other replica counts
    // step other numbers of times, and no all-reduce can pair their steps (tiedWeightsStepApart()).
    if (tiedWeightsStepApart(pipeline))
        return {};
    std::vector<std::vector<int>> groups;
    if (embedding->devices.size() == head->devices.size()) {
        for (std::size_t j = 0; j < embedding->devices.size(); ++j) {
            std::vector<int> pair {embedding->devices[j], head->devices[j]};
            std::sort(pair.begin(), pair.end());
            if (pair[0] != pair[1])
                groups.push_back(std::move(pair));
        }
        if (groups.size() == embedding->devices.size())
            return groups;
        groups.clear(); // some device holds both copies of its replica but not of all: one group of all
    }
    std::vector<int> all = e;
    all.insert(all.end(), h.begin(), h.end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    groups.push_back(std::move(all));
    return groups;
}

bool Plan::tiedWeightsStepApart(int pipeline) const
{
    const auto* traits = findScheduleTraits(schedule.kind);
    if (!traits || !traits->update_per_backward || model->tiedWeightBytes() <= 0 || stages.empty())
        return false;
    int last = 0;
    for (const auto& ps : stages)
        last = std::max(last, ps.last_layer);
    std::size_t embedding = 0, head = 0;
    for (const auto& ps : stages) {
        if (ps.pipeline != pipeline)
            continue;
        if (ps.first_layer == 0)
            embedding = ps.devices.size();
        if (ps.last_layer == last)
            head = ps.devices.size();
    }
    return embedding != head;
}

int steadyIterations(const Plan& plan, int minimum)
{
    const long long m = std::max(1, plan.schedule.microbatches);
    const long long stages = std::max(1, plan.stageCount());
    int it = std::max(plan.schedule.iterations, minimum);
    while (it > plan.schedule.iterations && (m * it > kMaxMicrobatches || m * it * stages > kMaxStageMicrobatches))
        --it;
    return it;
}

int pipeDreamMicrobatches(const Plan& plan)
{
    long long L = 1;
    for (const auto& st : plan.stages) {
        L = std::lcm(L, static_cast<long long>(std::max(1, st.replicas())));
        if (L > kMaxMicrobatches * std::max(1, plan.schedule.iterations))
            return -1;
    }
    // m x iterations must be a multiple of L: m a multiple of L / gcd(L, iterations).
    const long long step = L / std::gcd(L, static_cast<long long>(std::max(1, plan.schedule.iterations)));
    const long long m = (std::max(1, plan.schedule.microbatches) + step - 1) / step * step;
    return m > kMaxMicrobatches ? -1 : static_cast<int>(m);
}

int Plan::effectiveConcurrentMinibatches() const
{
    if (schedule.concurrent_minibatches > 0)
        return schedule.concurrent_minibatches;
    int deepest = 1;
    for (int s = 0; s < stageCount(); s = pipelineEnd(s))
        deepest = std::max(deepest, pipelineEnd(s) - s);
    return deepest;
}

std::string Plan::deviceRole(int device) const
{
    const int t = std::max(1, tensor_parallel) * std::max(1, context_parallel);
    std::string out;
    int count = 0;
    std::string where;
    for (int s = 0; s < stageCount(); ++s) {
        const auto& devs = stages[static_cast<std::size_t>(s)].devices;
        const auto at = std::find(devs.begin(), devs.end(), device);
        if (at == devs.end())
            continue;
        out += (count++ ? "+" : "") + std::to_string(s);
        if (!where.empty())
            continue;
        const auto place = static_cast<int>(at - devs.begin());
        if (static_cast<int>(devs.size()) > t)
            where += ", replica " + std::to_string(place / t);
        if (t > 1)
            where += ", tensor rank " + std::to_string(place % t) + "/" + std::to_string(t);
    }
    return count == 0 ? std::string() : (count > 1 ? "stages " : "stage ") + out + where;
}

std::string Plan::configString() const
{
    std::string s;
    for (int i = 0; i < pipelineDepth(); ++i) {
        if (i)
            s += firstInPipeline(i) ? "|" : "-";
        s += std::to_string(dataReplicas(i));
    }
    if (tensor_parallel > 1)
        s += " t=" + std::to_string(tensor_parallel);
    if (context_parallel > 1)
        s += " c=" + std::to_string(context_parallel);
    return s;
}

void Plan::validate() const
{
    if (stages.empty())
        throw InputError({}, 0, "/stages", "a plan needs at least one stage");
    validateLayerOrder();
    validateStages();
    validateSchedule();
    validateParallelism();
}

void Plan::validateLayerOrder() const
{
    if (layer_order.empty())
        return;
    const int n = model->layerCount();
    if (static_cast<int>(layer_order.size()) != n)
        throw InputError({}, 0, "/layer_order", "must list all " + std::to_string(n) + " layers");
    std::vector<bool> seen(n, false);
    for (std::size_t i = 0; i < layer_order.size(); ++i) {
        int l = layer_order[i];
        if (l < 0 || l >= n || seen[l])
            throw InputError({}, 0, "/layer_order/" + std::to_string(i), "not a permutation of the layers");
        seen[l] = true;
    }
    // The order must still be topological: every producer before its consumers (a chain keeps its order).
    std::vector<int> position(n);
    for (int pos = 0; pos < n; ++pos)
        position[layer_order[pos]] = pos;
    for (int l = 0; l < n; ++l) {
        if (!model->is_graph && position[l] != l)
            throw InputError({}, 0, "/layer_order/" + std::to_string(l), "a chain profile keeps its layer order");
        for (int producer : model->layers[l].inputs)
            if (position[producer] > position[l])
                throw InputError({}, 0, "/layer_order/" + std::to_string(position[l]),
                    "layer " + std::to_string(l) + " comes before its input " + std::to_string(producer));
    }
}

/// Stages: contiguous, covering every layer once per pipeline, on distinct devices of the cluster.
void Plan::validateStages() const
{
    const int n = model->layerCount();
    const int devices = cluster->deviceCount();
    int expectFirst = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto& st = stages[s];
        auto path = "/stages/" + std::to_string(s);
        // Several pipelines (HetPipe's virtual workers): numbered 0, 1, ... in order, each covering every layer.
        const int previous = s == 0 ? -1 : stages[s - 1].pipeline;
        if (st.pipeline != std::max(previous, 0) && st.pipeline != previous + 1)
            throw InputError({}, 0, path + "/pipeline",
                "pipelines must be numbered 0, 1, ... with each pipeline's stages together: expected "
                    + std::to_string(std::max(previous, 0))
                    + (previous >= 0 ? " or " + std::to_string(previous + 1) : std::string()) + ", got "
                    + std::to_string(st.pipeline));
        if (s > 0 && st.pipeline != previous) {
            if (expectFirst != n)
                throw InputError({}, 0, path + "/pipeline",
                    "pipeline " + std::to_string(previous) + " covers layers 0.." + std::to_string(expectFirst - 1)
                        + " of " + std::to_string(n) + "; every pipeline must place every layer");
            expectFirst = 0;
        }
        if (st.first_layer != expectFirst)
            throw InputError({}, 0, path + "/first_layer",
                "stages must be contiguous: expected " + std::to_string(expectFirst) + ", got "
                    + std::to_string(st.first_layer));
        if (st.last_layer < st.first_layer || st.last_layer >= n)
            throw InputError({}, 0, path + "/last_layer",
                "must be in [" + std::to_string(st.first_layer) + ", " + std::to_string(n - 1) + "], got "
                    + std::to_string(st.last_layer));
        if (st.devices.empty())
            throw InputError({}, 0, path + "/devices", "a stage needs at least one device");
        std::set<int> unique;
        for (std::size_t r = 0; r < st.devices.size(); ++r) {
            int d = st.devices[r];
            if (d < 0 || d >= devices)
                throw InputError({}, 0, path + "/devices/" + std::to_string(r),
                    "device " + std::to_string(d) + " is not in the cluster (it has " + std::to_string(devices) + ")");
            if (!unique.insert(d).second)
                throw InputError(
                    {}, 0, path + "/devices/" + std::to_string(r), "device " + std::to_string(d) + " listed twice");
        }
        expectFirst = st.last_layer + 1;
    }
    if (expectFirst != n)
        throw InputError({}, 0, "/stages",
            "stages cover layers 0.." + std::to_string(expectFirst - 1) + " of " + std::to_string(n)
                + "; every layer must be placed");
}

/// The schedule options: counts in range, the size limits of one simulated run, the kind's extras.
void Plan::validateSchedule() const
{
    if (pipelineCount() > 1 && schedule.chunks != 1)
        throw InputError({}, 0, "/schedule/chunks",
            "a plan with " + std::to_string(pipelineCount()) + " pipelines does not interleave (chunks must be 1)");
    const auto& o = schedule;
    if (o.microbatches < 1)
        throw InputError({}, 0, "/schedule/microbatches", "must be >= 1");
    if (o.iterations < 1)
        throw InputError({}, 0, "/schedule/iterations", "must be >= 1");
    // Bounds that keep one simulated run within memory: a schedule holds about six actions per stage
    // and microbatch.
    if (static_cast<long long>(o.microbatches) * o.iterations > kMaxMicrobatches)
        throw InputError({}, 0, "/schedule/microbatches",
            "microbatches x iterations must be at most " + std::to_string(kMaxMicrobatches));
    if (static_cast<long long>(o.microbatches) * o.iterations * stageCount() > kMaxStageMicrobatches)
        throw InputError({}, 0, "/schedule/microbatches",
            "stages x microbatches x iterations must be at most " + std::to_string(kMaxStageMicrobatches));
    if (o.microbatch_size < 0)
        throw InputError({}, 0, "/schedule/microbatch_size", "must be >= 0 (0 = the profile's)");
    if (o.chunks < 1)
        throw InputError({}, 0, "/schedule/chunks", "must be >= 1");
    if (stageCount() % o.chunks != 0)
        throw InputError({}, 0, "/schedule/chunks",
            std::to_string(stageCount()) + " virtual stages cannot form " + std::to_string(o.chunks)
                + " chunks per device");
    optimizerStateFactor(o, model);
    if (!o.precision.empty() && model->architecture
        && precisionBytes(o.precision) != model->architecture->bytes_per_element)
        throw InputError({}, 0, "/schedule/precision",
            o.precision + " weights are " + std::to_string(static_cast<int>(precisionBytes(o.precision)))
                + " bytes per value but the profile's are " + std::to_string(model->architecture->bytes_per_element)
                + " (architecture.bytes_per_element): make the profile in that precision");
    if (!o.precision.empty()) {
        const bool fp8Profile = model->architecture && model->architecture->fp8;
        if (o.precision == "fp8" && !fp8Profile)
            throw InputError({}, 0, "/schedule/precision",
                "fp8: the profile's products are timed in 16 bits; make it with `pipewright-cli profile transformer "
                "--precision fp8` (its times and memory are FP8's)");
        if (o.precision != "fp8" && fp8Profile)
            throw InputError({}, 0, "/schedule/precision",
                o.precision
                    + ": the profile's block products are FP8 (architecture.fp8); give fp8, or make the profile in "
                    + o.precision);
    }
    if (o.concurrent_minibatches < 0)
        throw InputError(
            {}, 0, "/schedule/concurrent_minibatches", "must be >= 0 (0 = the deepest pipeline's stage count)");
    if (o.staleness < 0)
        throw InputError({}, 0, "/schedule/staleness", "must be >= 0");
    if (o.local_parameter_servers) {
        // ED-local placement: stage q of every pipeline holds the same layers on one node.
        const auto field = "/schedule/local_parameter_servers";
        const int depth = pipelineEnd(0);
        for (int s = 0; s < stageCount(); ++s) {
            const int q = s - pipelineBegin(s);
            if (pipelineEnd(s) - pipelineBegin(s) != depth)
                throw InputError({}, 0, field, "local parameter servers need pipelines of equal depth");
            const auto& first = stages[q];
            if (stages[s].first_layer != first.first_layer || stages[s].last_layer != first.last_layer)
                throw InputError({}, 0, field,
                    "local parameter servers need the same layers at stage " + std::to_string(q)
                        + " of every pipeline");
            for (int d : stages[s].devices)
                if (d < 0 || d >= cluster->deviceCount() || first.devices.empty()
                    || !cluster->sameNode(d, first.devices[0]))
                    throw InputError({}, 0, field,
                        "local parameter servers need stage " + std::to_string(q) + " of every pipeline on one node");
        }
    }
    if (!o.in_flight.empty()) {
        if (static_cast<int>(o.in_flight.size()) != stageCount())
            throw InputError({}, 0, "/schedule/in_flight",
                "has " + std::to_string(o.in_flight.size()) + " entries for " + std::to_string(stageCount())
                    + " stages");
        for (std::size_t s = 0; s < o.in_flight.size(); ++s)
            if (o.in_flight[s] < 1)
                throw InputError({}, 0, "/schedule/in_flight/" + std::to_string(s), "must be >= 1");
    }
}

/// Tensor parallelism, and devices owned by one physical stage each (virtual stages reuse them).
void Plan::validateParallelism() const
{
    if (tensor_parallel < 1)
        throw InputError({}, 0, "/tensor_parallel", "must be >= 1, got " + std::to_string(tensor_parallel));
    if (schedule.tp_comm_overlap && (tensor_parallel < 2 || !schedule.sequence_parallel))
        throw InputError({}, 0, "/schedule/tp_comm_overlap",
            "overlaps the all-gathers and reduce-scatters of sequence parallelism with the GEMMs beside them: it needs "
            "tensor_parallel > 1 and sequence_parallel (Megatron's --tp-comm-overlap needs --sequence-parallel)");
    if (schedule.shard_gradients && !schedule.distributed_optimizer)
        throw InputError({}, 0, "/schedule/shard_gradients",
            "shards the gradients over the data-parallel replicas (ZeRO stage 2): it needs distributed_optimizer "
            "(stage "
            "1) too");
    if (schedule.shard_group < 0)
        throw InputError({}, 0, "/schedule/shard_group",
            "must be >= 0 (0: ZeRO shards over every replica), got " + std::to_string(schedule.shard_group));
    if (schedule.shard_group > 0 && !schedule.distributed_optimizer)
        throw InputError({}, 0, "/schedule/shard_group",
            "splits ZeRO's shards over groups of replicas (HSDP): it needs distributed_optimizer (ZeRO stage 1 or "
            "more)");
    if (schedule.shard_group > 1)
        for (int s = 0; s < stageCount(); ++s)
            if (const int g = gradientReplicas(s); g > schedule.shard_group && g % schedule.shard_group != 0)
                throw InputError({}, 0, "/schedule/shard_group",
                    std::to_string(schedule.shard_group) + " does not divide stage " + std::to_string(s) + "'s "
                        + std::to_string(g) + " gradient replicas (data-parallel replicas x context ranks)");
    if (schedule.shard_weights && !schedule.shard_gradients)
        throw InputError({}, 0, "/schedule/shard_weights",
            "shards the weights over the data-parallel replicas (ZeRO stage 3, FSDP): it needs shard_gradients (stage "
            "2) and distributed_optimizer (stage 1) too");
    if (schedule.shard_gradients && scheduleTraits(schedule.kind).weight_versions != WeightVersions::One)
        throw InputError({}, 0, "/schedule/shard_gradients",
            "the '" + schedule.kind
                + "' schedule keeps several weight versions; sharding gradients or weights (ZeRO 2 and 3) needs a "
                  "flushed schedule with one version");
    if (schedule.overlap_param_gather && !schedule.distributed_optimizer)
        throw InputError({}, 0, "/schedule/overlap_param_gather",
            "overlaps the all-gather of the distributed optimizer's updated parameters with the next forward: it needs "
            "distributed_optimizer (Megatron's --overlap-param-gather needs --use-distributed-optimizer)");
    if (context_parallel < 1)
        throw InputError({}, 0, "/context_parallel", "must be >= 1, got " + std::to_string(context_parallel));
    if (tensor_parallel > 1 && pipelineCount() > 1)
        throw InputError({}, 0, "/tensor_parallel",
            "a plan with " + std::to_string(pipelineCount())
                + " pipelines (virtual workers) has no tensor parallelism");
    if (context_parallel > 1 && pipelineCount() > 1)
        throw InputError({}, 0, "/context_parallel",
            "a plan with " + std::to_string(pipelineCount())
                + " pipelines (virtual workers) has no context parallelism");
    for (std::size_t s = 0; s < stages.size(); ++s)
        if (stages[s].replicas() % modelParallel() != 0)
            throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                "has " + std::to_string(stages[s].replicas()) + " devices, not a multiple of tensor_parallel "
                    + std::to_string(tensor_parallel)
                    + (context_parallel > 1 ? " x context_parallel " + std::to_string(context_parallel) : ""));
    if (context_parallel > 1 && model->architecture) {
        // Megatron's load-balanced ring splits every sequence into 2c chunks, two per rank.
        const int sequence = model->architecture->sequence;
        if (sequence % (2 * context_parallel) != 0)
            throw InputError({}, 0, "/context_parallel",
                "context parallelism of " + std::to_string(context_parallel) + " splits each sequence into "
                    + std::to_string(2 * context_parallel) + " chunks (two per rank), which the sequence length "
                    + std::to_string(sequence) + " is not a multiple of");
    }
    // Physical stages own their devices; virtual stage s of an interleaved plan reuses stage s mod p's, or with
    // two chunks in a V (schedule "zbv") stage 2p - 1 - s's. Each generator checks the placement it runs.
    const int p = pipelineDepth();
    bool v = schedule.chunks == 2 && p > 1;
    for (int s = p; s < stageCount() && v; ++s)
        v = stages[s].devices == stages[2 * p - 1 - s].devices;
    std::set<int> used;
    for (int s = 0; s < p; ++s)
        for (int d : stages[s].devices)
            if (!used.insert(d).second)
                throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                    "device " + std::to_string(d) + " is in two stages");
    for (int s = p; s < stageCount(); ++s)
        if (!v && stages[s].devices != stages[s % p].devices)
            throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                "virtual stage " + std::to_string(s) + " must run on the devices of stage " + std::to_string(s % p)
                    + (schedule.chunks == 2 ? " (or, with two chunks in a V, of stage " + std::to_string(2 * p - 1 - s)
                                + " for every virtual stage)"
                                            : std::string()));
}

std::string digestOf(const json& j)
{
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : j.dump()) {
        h ^= c;
        h *= 1099511628211ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

json toJson(const Plan& plan)
{
    json stages = json::array();
    for (const auto& s : plan.stages) {
        stages.push_back({{"first_layer", s.first_layer}, {"last_layer", s.last_layer}, {"devices", s.devices}});
        if (plan.pipelineCount() > 1)
            stages.back()["pipeline"] = s.pipeline;
    }
    const auto& o = plan.schedule;
    json model = toJson(plan.model);
    json cluster = toJson(plan.cluster);
    json j = {{"format_version", kPlanFormatVersion}, {"config", plan.configString()}, {"stages", std::move(stages)},
        {"algorithm", plan.algorithm}, {"algorithm_options", plan.algorithm_options}, {"objective_s", plan.objective_s},
        {"schedule", toJson(o)},
        {"provenance", {{"model_digest", digestOf(model)}, {"cluster_digest", digestOf(cluster)}}},
        {"model", std::move(model)}, {"cluster", std::move(cluster)}};
    if (!plan.layer_order.empty())
        j["layer_order"] = plan.layer_order;
    if (plan.tensor_parallel > 1)
        j["tensor_parallel"] = plan.tensor_parallel;
    if (plan.context_parallel > 1)
        j["context_parallel"] = plan.context_parallel;
    if (plan.predicted) {
        const auto& p = *plan.predicted;
        j["predicted"]
            = {{"iteration_time_s", p.iteration_time_s}, {"throughput_samples_per_s", p.throughput_samples_per_s},
                {"bubble_fraction", p.bubble_fraction}, {"stage_peak_memory_bytes", p.stage_peak_memory_bytes}};
    }
    return j;
}

Plan planFromJson(const json& j)
{
    namespace f = fields;
    f::object(j, "");
    f::checkVersion(j, "plan", kPlanFormatVersion);
    // A project file (the app's .pwproj) holds a plan under "plan": say so instead of a missing field.
    if (!j.contains("stages") && f::stringOr(j, "kind", "", "") == "pipewright-project")
        f::fail("/kind",
            "this is a Pipewright project file, not a plan: save its plan from the app (File > Save plan) or make "
            "one with `pipewright-cli plan ... -o plan.json`");
    Plan plan;
    // "/model: missing required field" is found outside the prefixing of the model's own fields (it said
    // "/model/model"), and so is the cluster's.
    const auto& model = f::required(j, "model", "");
    try {
        plan.model = modelFromJson(model);
    } catch (const InputError& e) {
        throw InputError({}, 0, "/model" + (e.field() == "/" ? std::string() : e.field()), e.message());
    }
    const auto& cluster = f::required(j, "cluster", "");
    try {
        plan.cluster = clusterFromJson(cluster);
    } catch (const InputError& e) {
        throw InputError({}, 0, "/cluster" + (e.field() == "/" ? std::string() : e.field()), e.message());
    }
    const auto& stages = f::array(j, "stages", "");
    for (std::size_t i = 0; i < stages.size(); ++i) {
        auto path = f::child("/stages", i);
        const auto& js = f::object(stages[i], path);
        PlanStage s;
        s.first_layer = f::integer(js, "first_layer", path);
        s.last_layer = f::integer(js, "last_layer", path);
        s.pipeline = f::integerOr(js, "pipeline", path, 0);
        const auto& devices = f::array(js, "devices", path);
        for (std::size_t r = 0; r < devices.size(); ++r) {
            s.devices.push_back(f::index(devices[r], f::child(f::child(path, "devices"), r)));
        }
        plan.stages.push_back(std::move(s));
    }
    if (j.contains("layer_order")) {
        const auto& order = f::array(j, "layer_order", "");
        for (std::size_t i = 0; i < order.size(); ++i) {
            plan.layer_order.push_back(f::index(order[i], f::child("/layer_order", i)));
        }
    }
    plan.algorithm = f::stringOr(j, "algorithm", "", "manual");
    if (j.contains("algorithm_options"))
        plan.algorithm_options = j.at("algorithm_options");
    plan.objective_s = f::nonNegativeOr(j, "objective_s", "", 0);
    plan.tensor_parallel = f::integerOr(j, "tensor_parallel", "", 1);
    plan.context_parallel = f::integerOr(j, "context_parallel", "", 1);
    if (j.contains("schedule"))
        plan.schedule = scheduleOptionsFromJson(j.at("schedule"), "/schedule");
    if (j.contains("predicted")) { // written by toJson(); read back so that a saved plan keeps its prediction
        const auto& pj = f::object(j.at("predicted"), "/predicted");
        PredictedMetrics p;
        p.iteration_time_s = f::nonNegative(pj, "iteration_time_s", "/predicted");
        p.throughput_samples_per_s = f::nonNegative(pj, "throughput_samples_per_s", "/predicted");
        p.bubble_fraction = f::nonNegative(pj, "bubble_fraction", "/predicted");
        if (pj.contains("stage_peak_memory_bytes")) {
            const auto& peaks = f::array(pj, "stage_peak_memory_bytes", "/predicted");
            for (std::size_t i = 0; i < peaks.size(); ++i) {
                const std::string path = f::child("/predicted/stage_peak_memory_bytes", i);
                if (!peaks[i].is_number() || !(peaks[i].get<double>() >= 0))
                    f::fail(path, "expected a number >= 0");
                p.stage_peak_memory_bytes.push_back(peaks[i].get<double>());
            }
        }
        plan.predicted = std::move(p);
    }
    if (!findScheduleGenerator(plan.schedule.kind)) { // here, where the file's line is still known
        std::string known;
        for (const auto* g : scheduleGenerators())
            known += (known.empty() ? "" : ", ") + std::string(g->name());
        f::fail("/schedule/kind", "unknown schedule kind '" + plan.schedule.kind + "' (known: " + known + ")");
    }
    plan.validate();
    return plan;
}

namespace {
const std::pair<const char*, Recompute> kRecomputeNames[]
    = {{"none", Recompute::None}, {"selective", Recompute::Selective}, {"full", Recompute::Full}};
} // namespace

const char* name(Recompute recompute)
{
    return fields::enumName(recompute, kRecomputeNames);
}

Recompute recomputeNamed(const std::string& text, const std::string& field)
{
    return fields::enumNamed(text, field, kRecomputeNames);
}

json toJson(const ScheduleOptions& o)
{
    json j = {{"kind", o.kind}, {"microbatches", o.microbatches}, {"microbatch_size", o.microbatch_size},
        {"chunks", o.chunks}, {"iterations", o.iterations}, {"recompute", name(o.recompute)},
        {"optimizer", o.optimizer}, {"overlap_communication", o.overlap_communication}};
    if (!o.in_flight.empty())
        j["in_flight"] = o.in_flight;
    if (o.concurrent_minibatches != 0)
        j["concurrent_minibatches"] = o.concurrent_minibatches;
    if (o.staleness != 0)
        j["staleness"] = o.staleness;
    if (o.local_parameter_servers)
        j["local_parameter_servers"] = true;
    if (!o.precision.empty())
        j["precision"] = o.precision;
    if (!o.gradient_precision.empty())
        j["gradient_precision"] = o.gradient_precision;
    if (o.distributed_optimizer)
        j["distributed_optimizer"] = true;
    if (o.sequence_parallel)
        j["sequence_parallel"] = true;
    if (o.tp_comm_overlap)
        j["tp_comm_overlap"] = true;
    if (!o.overlap_grad_reduce)
        j["overlap_grad_reduce"] = false;
    if (o.overlap_param_gather)
        j["overlap_param_gather"] = true;
    if (o.shard_gradients)
        j["shard_gradients"] = true;
    if (o.shard_weights)
        j["shard_weights"] = true;
    if (o.shard_group > 0)
        j["shard_group"] = o.shard_group;
    return j;
}

ScheduleOptions scheduleOptionsFromJson(const json& j, const std::string& path)
{
    namespace f = fields;
    const auto& js = f::object(j, path);
    ScheduleOptions o;
    o.kind = f::stringOr(js, "kind", path, o.kind);
    o.microbatches = f::integerOr(js, "microbatches", path, o.microbatches);
    o.microbatch_size = f::integerOr(js, "microbatch_size", path, o.microbatch_size);
    o.chunks = f::integerOr(js, "chunks", path, o.chunks);
    o.iterations = f::integerOr(js, "iterations", path, o.iterations);
    // "none" | "selective" | "full"; the first format's booleans read as none and full.
    if (const auto it = js.find("recompute"); it != js.end() && it->is_boolean())
        o.recompute = it->get<bool>() ? Recompute::Full : Recompute::None;
    else
        o.recompute = recomputeNamed(f::stringOr(js, "recompute", path, "none"), path + "/recompute");
    o.sequence_parallel = f::booleanOr(js, "sequence_parallel", path, false);
    o.tp_comm_overlap = f::booleanOr(js, "tp_comm_overlap", path, false);
    o.overlap_grad_reduce = f::booleanOr(js, "overlap_grad_reduce", path, true);
    o.overlap_param_gather = f::booleanOr(js, "overlap_param_gather", path, false);
    o.shard_gradients = f::booleanOr(js, "shard_gradients", path, false);
    o.shard_weights = f::booleanOr(js, "shard_weights", path, false);
    o.shard_group = f::integerOr(js, "shard_group", path, 0);
    o.optimizer = f::stringOr(js, "optimizer", path, o.optimizer);
    o.overlap_communication = f::booleanOr(js, "overlap_communication", path, o.overlap_communication);
    o.concurrent_minibatches = f::integerOr(js, "concurrent_minibatches", path, 0);
    o.staleness = f::integerOr(js, "staleness", path, 0);
    o.local_parameter_servers = f::booleanOr(js, "local_parameter_servers", path, false);
    o.precision = f::stringOr(js, "precision", path, "");
    o.gradient_precision = f::stringOr(js, "gradient_precision", path, "");
    o.distributed_optimizer = f::booleanOr(js, "distributed_optimizer", path, false);
    if (js.contains("in_flight")) {
        const auto& a = f::array(js, "in_flight", path);
        for (std::size_t i = 0; i < a.size(); ++i)
            o.in_flight.push_back(f::index(a[i], path + "/in_flight/" + std::to_string(i)));
    }
    return o;
}

} // namespace pw::planner
