// SPDX-License-Identifier: MIT
// The run's setup around the executor (executor.h): which of a plan's settings the engine honours, the training
// setup and input checks made from a plan, and the schedule a run executes (one step repeated where it can be).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <utility>

#include "checkpoint.h"
#include "executor.h"
#include "llmc.h"
#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/schedule/traits.h"
#include "planner/transformer_shape.h"

namespace pw::engine {

using planner::InputError;

double monotonicSeconds()
{
    timespec ts {};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Precision checkEngineHonours(const planner::Plan& plan, TrainsOn where)
{
    const auto refuse
        = [](const std::string& field, const std::string& message) { throw InputError({}, 0, field, message); };
    const auto& o = plan.schedule;
    const std::string weights = planner::weightPrecision(o, *plan.model);
    const std::string gradients = o.gradient_precision.empty() ? weights : o.gradient_precision;
    const std::string weightsField
        = o.precision.empty() ? "/model/architecture/bytes_per_element" : "/schedule/precision";
    const std::string weightsWhy = o.precision.empty() ? " (the profile's 2 bytes per element)" : std::string();
    Precision precision = Precision::Fp32;
    if (weights == "bf16" && where == TrainsOn::Cuda)
        precision = Precision::Bf16Mixed;
    else if (weights == "bf16")
        refuse(weightsField,
            "the plan's weights are bf16" + weightsWhy
                + ", and the CPU engine trains in fp32 only (bf16 mixed precision trains on CUDA GPUs): make the "
                  "profile with `profile transformer --bytes-per-element 4`, or plan with `--precision fp32`");
    else if (weights != "fp32")
        refuse(weightsField,
            "the plan's weights are " + weights + weightsWhy
                + ", and the engine trains in fp32, or in bf16 mixed precision on CUDA GPUs: plan with `--precision "
                  "fp32` (or bf16 for a GPU run)");
    const std::string want = precision == Precision::Bf16Mixed ? "bf16" : "fp32";
    if (gradients != want)
        refuse("/schedule/gradient_precision",
            "the plan's gradients are " + gradients + ", and the engine keeps them in its weights' precision (" + want
                + "): plan without --gradient-precision");
    if (o.optimizer != "adam")
        refuse("/schedule/optimizer",
            "the plan's optimizer is '" + o.optimizer
                + "', and the engine trains with AdamW only (memory as \"adam\"): plan with `--optimizer adam`");
    // Megatron's distributed optimizer (ZeRO stage 1) it runs; the gradients and weights stay whole on every replica.
    if (o.shard_weights)
        refuse("/schedule/shard_weights",
            "the engine keeps every replica's weights whole (ZeRO stage 1, Megatron's distributed optimizer), not "
            "sharded as ZeRO stage 3 / FSDP does: plan with --zero 1 or without sharding");
    if (o.shard_gradients)
        refuse("/schedule/shard_gradients",
            "the engine keeps every replica's gradients whole (ZeRO stage 1, Megatron's distributed optimizer), not "
            "sharded as ZeRO stage 2 does: plan with --zero 1 or without sharding");
    if (o.distributed_optimizer && o.shard_group > 0)
        refuse("/schedule/shard_group",
            "the engine shards the optimizer over all of a stage's replicas, not over groups of them (HSDP): plan "
            "without --shard-group");
    if (o.distributed_optimizer && (planner::scheduleTraits(o.kind).update_per_backward || o.kind == "wsp"))
        refuse("/schedule/distributed_optimizer",
            "schedule '" + o.kind
                + "' updates each replica (or pipeline) on its own, so no replica can step another's shard of the "
                  "optimizer: plan without --distributed-optimizer, or with a flushing schedule");
    for (int pos = 0; pos < static_cast<int>(plan.layer_order.size()); ++pos)
        if (plan.layer_order[static_cast<std::size_t>(pos)] != pos)
            refuse("/layer_order", "the engine runs GPT-2's layers in their order");
    // The first field in which the model's block is neither GPT-2's nor Llama's, the blocks the engine builds.
    if (const auto& arch = plan.model->architecture) {
        try {
            familyOf(ModelConfig::fromTransformer(*arch));
        } catch (const InputError& e) {
            refuse(
                "/model/architecture/" + e.field(), "the model is a " + arch->family + " transformer: " + e.message());
        }
    }
    for (int p = 0; p < plan.pipelineCount(); ++p)
        if (plan.tiedWeightsStepApart(p))
            refuse("/stages",
                "schedule '" + o.kind
                    + "' steps each replica after each of its backwards, and the stages holding the token embedding "
                      "and the head (whose weights are tied) have different replica counts: their copies would step "
                      "different numbers of times, and no all-reduce can keep them equal; give both stages the same "
                      "replicas, or use another schedule");
    if (plan.tensor_parallel > 1 && plan.model->architecture) {
        // Megatron's split: heads, key/value heads, the MLP and the vocabulary by t, and with sequence parallelism
        // the microbatch's positions.
        const auto& arch = *plan.model->architecture;
        const ModelConfig config = ModelConfig::fromTransformer(arch);
        const int t = plan.tensor_parallel;
        const BatchShape shape {arch.microbatch, arch.sequence};
        const std::string field = cannotSplit(config, shape, {0, t, o.sequence_parallel});
        const std::map<std::string, std::string> values {{"heads", std::to_string(config.heads) + " heads"},
            {"kv_heads", std::to_string(config.kvHeads()) + " key/value heads"},
            {"ffn_hidden", "an MLP of " + std::to_string(config.ffnHidden())},
            {"vocab", "a padded vocabulary of " + std::to_string(config.padded_vocab)},
            {"sequence",
                std::to_string(shape.batch * shape.seq)
                    + " positions per microbatch (sequence parallelism splits them)"}};
        if (!field.empty())
            refuse("/tensor_parallel",
                "tensor parallelism splits the model over t = " + std::to_string(t) + " ranks, and it has "
                    + values.at(field) + ", not a multiple of " + std::to_string(t)
                    + (field == "kv_heads"
                            ? " nor a divisor of it (fewer key/value heads than ranks are shared by t / KV ranks each)"
                            : "")
                    + ": plan with a t that divides it");
    }
    if (o.tp_comm_overlap)
        refuse("/schedule/tp_comm_overlap",
            "the engine runs the tensor-parallel collectives between the products, not overlapped with them "
            "(Transformer Engine's userbuffers): plan without --tp-comm-overlap");
    if (plan.context_parallel > 1)
        refuse("/context_parallel",
            "context parallelism (c = " + std::to_string(plan.context_parallel)
                + ") is not run by the engine yet; plan with c = 1");
    return precision;
}

namespace {

/// The profile's layers against the architecture the engine will build from: the microbatch they were measured at
/// and every block's output and weights. A hand-edited architecture (another microbatch, hidden size or sequence)
/// would otherwise train a model other than the one planned, with other times and memory.
void checkLayersFitArchitecture(const planner::ModelProfile& model)
{
    const auto& arch = *model.architecture;
    if (arch.microbatch != model.microbatch_size)
        throw InputError({}, 0, "/model/architecture/microbatch",
            std::to_string(arch.microbatch) + ", but the profile's layers are of microbatches of "
                + std::to_string(model.microbatch_size)
                + " (/model/microbatch_size): the engine would train another microbatch than the plan's; make the "
                  "profile again with `profile transformer --microbatch N` (or plan --microbatch-size N)");
    const double element = arch.bytes_per_element;
    const double h = arch.hidden;
    const double output = element * arch.microbatch * static_cast<double>(arch.sequence) * h;
    const double weights = element * planner::transformerParameters(arch).per_layer;
    const auto agrees = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(std::abs(a), std::abs(b)); };
    const auto describe = [&](double want) {
        return std::string(" by the architecture (") + std::to_string(arch.microbatch) + " x "
            + std::to_string(arch.sequence) + " x " + std::to_string(arch.hidden) + ", "
            + std::to_string(arch.bytes_per_element)
            + " bytes per element: " + std::to_string(static_cast<long long>(want)) + " bytes)";
    };
    for (int l = 1; l <= arch.layers && l < model.layerCount(); ++l) {
        const auto& layer = model.layers[static_cast<std::size_t>(l)];
        const std::string path = "/model/layers/" + std::to_string(l);
        if (!agrees(layer.activation_bytes, output))
            throw InputError({}, 0, path + "/activation_bytes",
                "block " + std::to_string(l - 1) + " ('" + layer.name + "') outputs "
                    + std::to_string(static_cast<long long>(layer.activation_bytes)) + " bytes, not the ones given"
                    + describe(output) + ": the profile's layers and /model/architecture describe different models");
        if (!agrees(layer.weight_bytes, weights))
            throw InputError({}, 0, path + "/weight_bytes",
                "block " + std::to_string(l - 1) + " ('" + layer.name + "') has "
                    + std::to_string(static_cast<long long>(layer.weight_bytes)) + " bytes of weights, not the "
                    + std::to_string(static_cast<long long>(weights / element)) + " parameters of a " + arch.family
                    + " block at hidden " + std::to_string(arch.hidden) + " ("
                    + std::to_string(static_cast<long long>(weights))
                    + " bytes): the profile's layers and /model/architecture describe different models");
    }
}

} // namespace

TrainingSetup trainingSetup(const planner::Plan& plan, TrainsOn where)
{
    const auto& model = *plan.model;
    if (!model.architecture)
        throw InputError({}, 0, "/model/architecture",
            "the plan's model '" + model.name
                + "' has no transformer shape: only plans made with `profile transformer` (or `profile measure`) "
                  "can be trained, since the engine must know the layers' sizes");
    const auto& arch = *model.architecture;
    TrainingSetup s;
    s.model = ModelConfig::fromTransformer(arch);
    try {
        s.model.validate();
    } catch (const InputError& e) {
        if (e.field().empty())
            throw InputError({}, 0, "/model/architecture", e.message());
        throw InputError({}, 0, "/model/architecture/" + e.field(),
            "the model is a " + arch.family + " transformer: " + e.message());
    }
    if (model.layerCount() != s.model.layerCount())
        throw InputError({}, 0, "/model/layers",
            "the profile lists " + std::to_string(model.layerCount()) + " layers, but its architecture's "
                + std::to_string(arch.layers) + " transformer blocks make " + std::to_string(s.model.layerCount())
                + " layers to train: the embedding, the " + std::to_string(arch.layers)
                + " blocks and the head (/model/architecture/layers counts the blocks only); make the profile with "
                  "`profile transformer`");
    s.precision = checkEngineHonours(plan, where);
    checkLayersFitArchitecture(model);
    s.shape.batch = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : arch.microbatch;
    s.shape.seq = arch.sequence;
    s.microbatches = plan.microbatchesPerStep();
    s.recompute = plan.schedule.recompute;
    return s;
}

void checkRunInputs(const TrainingSetup& setup, const DataSpec& data, const std::filesystem::path& init)
{
    if (!init.empty())
        checkModelCheckpoint(init, setup.model, setup.shape.seq);
    if (data.kind != DataSpec::Kind::Synthetic)
        loadTokens(data, setup.model.vocab, static_cast<std::size_t>(setup.shape.batch) * setup.shape.seq);
}

planner::Schedule runSchedule(const planner::Plan& plan, int steps)
{
    if (steps <= 0)
        throw InputError("steps: must be positive, got " + std::to_string(steps));
    planner::Plan p = plan;
    p.schedule.iterations = steps;
    p.validate();
    return planner::generateSchedule(p);
}

planner::Action repeatedAction(const planner::Action& a, int repeat, int periodMicrobatches)
{
    planner::Action b = a;
    if (b.microbatch >= 0)
        b.microbatch += repeat * periodMicrobatches;
    if (planner::isCompute(b.kind)) // transfers and collectives carry no version
        b.weight_version += repeat;
    return b;
}

namespace {

/// Whether `two` (two steps) is `one` (one step) executed twice, all-reduce groups compared by their members.
bool repeatsOneStep(const planner::Schedule& one, const planner::Schedule& two)
{
    if (one.num_devices != two.num_devices || two.microbatches != 2 * one.microbatches)
        return false;
    const auto sameGroup = [&](int g1, int g2) {
        if (g1 < 0 || g2 < 0)
            return g1 == g2;
        return one.groups.at(static_cast<std::size_t>(g1)) == two.groups.at(static_cast<std::size_t>(g2));
    };
    for (int d = 0; d < one.num_devices; ++d) {
        const auto& a = one.devices[static_cast<std::size_t>(d)];
        const auto& b = two.devices[static_cast<std::size_t>(d)];
        if (b.size() != 2 * a.size())
            return false;
        for (std::size_t i = 0; i < b.size(); ++i) {
            auto expected = repeatedAction(a[i % a.size()], static_cast<int>(i / a.size()), one.microbatches);
            const auto& got = b[i];
            if (!sameGroup(expected.group, got.group))
                return false;
            expected.group = got.group;
            if (!(expected == got))
                return false;
        }
    }
    return true;
}

} // namespace

RunSchedule runProgram(const planner::Plan& plan, int steps)
{
    if (steps <= 1)
        return {runSchedule(plan, steps), 1};
    auto one = runSchedule(plan, 1);
    if (repeatsOneStep(one, runSchedule(plan, 2)))
        return {std::move(one), steps};
    return {runSchedule(plan, steps), 1};
}

} // namespace pw::engine
