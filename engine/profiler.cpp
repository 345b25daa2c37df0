// SPDX-License-Identifier: MIT
#include "profiler.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "executor.h"
#include "model.h"
#include "ops.h"
#include "planner/errors.h"

namespace pw::engine {

using planner::InputError;

namespace {

std::size_t stashBytes(const LayerStash& s)
{
    std::size_t bytes = s.out.bytes();
    for (const Buffer& v : s.saved)
        bytes += v.bytes();
    return bytes;
}

/// A block's stash in the planner's parts, as the engine keeps it: the attention core is what selective recomputation
/// returns (released from `s` here, after the measurement); the [tokens, channels] tensors (the output, the norms'
/// inputs and outputs) and the per-token statistics are replicated on tensor-parallel ranks, the wider ones (q, k, v,
/// the MLP's inner activations) sharded; full recomputation keeps the input, [tokens, channels].
planner::ActivationParts activationParts(
    const Layer& layer, LayerStash& s, std::size_t tokensTimesChannels, double element)
{
    planner::ActivationParts parts;
    const std::size_t before = stashBytes(s);
    layer.release(s, planner::Recompute::Selective);
    parts.attention_core = static_cast<double>(before - stashBytes(s));
    parts.replicated = static_cast<double>(s.out.bytes());
    for (std::size_t i = 0; i < s.saved.size(); ++i) {
        const Buffer& b = s.saved[i];
        if (b.empty())
            continue;
        if (b.count() <= tokensTimesChannels)
            parts.replicated += static_cast<double>(b.bytes());
        else
            parts.sharded += static_cast<double>(b.bytes());
    }
    parts.input = element * static_cast<double>(tokensTimesChannels);
    return parts;
}

/// What a layer's backwardInput left in its stash for the backwardWeight (the output gradients W reads).
std::size_t weightGradientBytes(const LayerStash& s)
{
    std::size_t bytes = s.g_out.bytes();
    for (const Buffer& v : s.grads)
        bytes += v.bytes();
    return bytes;
}

} // namespace

void ProfileOptions::validate() const
{
    for (auto [name, value] : {std::pair {"--layers", shape.layers}, {"--hidden", shape.hidden},
             {"--heads", shape.heads}, {"--seq", shape.sequence}, {"--vocab", shape.vocab},
             {"--microbatch", shape.microbatch}, {"--threads", threads}, {"--repeats", repeats}})
        if (value <= 0)
            throw InputError({}, 0, name, "must be positive, got " + std::to_string(value));
    if (warmup < 0)
        throw InputError({}, 0, "--warmup", "must be >= 0, got " + std::to_string(warmup));
    if (shape.hidden % shape.heads != 0)
        throw InputError({}, 0, "--heads",
            "must divide --hidden (" + std::to_string(shape.hidden) + " is not a multiple of "
                + std::to_string(shape.heads) + ")");
}

double median(std::vector<double> values)
{
    if (values.empty())
        return 0;
    const std::size_t mid = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + static_cast<long>(mid), values.end());
    if (values.size() % 2 == 1)
        return values[mid];
    const double upper = values[mid];
    return (*std::max_element(values.begin(), values.begin() + static_cast<long>(mid)) + upper) / 2;
}

planner::ModelProfile measureProfile(const ProfileOptions& options, std::vector<LayerSamples>* samplesOut)
{
    options.validate();
    ModelConfig config = ModelConfig::fromTransformer(options.shape);
    config.validate();
    const BatchShape shape {options.shape.microbatch, options.shape.sequence};
    const int layers = config.layerCount();
    const int previousThreads = ops::threads();
    ops::setThreads(options.threads);
    const std::unique_ptr<Backend> backend = makeBackend(options.device);
    const auto timer = backend->makeTimer();

    // One model per layer: timing a layer alone is what the planner's per-layer costs mean, and its parameters
    // are exactly what a stage holding it stores.
    std::vector<std::unique_ptr<StageModel>> models;
    std::vector<StageStash> stashes(static_cast<std::size_t>(layers));
    for (int l = 0; l < layers; ++l) {
        models.push_back(std::make_unique<StageModel>(config, shape, l, l, *backend));
        models.back()->initialise(options.seed);
    }
    const std::size_t tokens = static_cast<std::size_t>(shape.batch) * shape.seq;
    std::vector<std::int32_t> inputs(tokens), targets(tokens);
    std::mt19937_64 rng(options.seed);
    std::uniform_int_distribution<std::int32_t> token(0, config.vocab - 1);
    for (std::size_t i = 0; i < tokens; ++i) {
        inputs[i] = token(rng);
        targets[i] = token(rng);
    }
    Buffer loss(*backend, 1, DType::F32);

    // Times are the device's (the backend's action timer): on a GPU the host only launches the work.
    std::vector<LayerSamples> samples(static_cast<std::size_t>(layers));
    std::vector<std::size_t> keptForWeight(static_cast<std::size_t>(layers)); // bytes each layer's I keeps for its W
    for (int pass = 0; pass < options.warmup + options.repeats; ++pass) {
        const bool timed = pass >= options.warmup;
        std::vector<std::uint64_t> forwardTickets, backwardTickets, inputTickets, weightTickets;
        Buffer x;
        for (int l = 0; l < layers; ++l) {
            auto& m = *models[static_cast<std::size_t>(l)];
            forwardTickets.push_back(timer->begin());
            const Buffer* out = m.forward(stashes[static_cast<std::size_t>(l)], m.params().data(), inputs,
                m.hasEmbedding() ? nullptr : &x, targets, 1.0f, loss.as<float>());
            timer->end(forwardTickets.back());
            if (out) {
                x.ensure(*backend, out->count(), out->dtype());
                backend->copy(x.data(), out->data(), out->bytes());
            }
        }
        Buffer dx;
        for (int l = layers - 1; l >= 0; --l) {
            auto& m = *models[static_cast<std::size_t>(l)];
            // The gradient of a step's loss over m microbatches: the scale only changes values, not the work.
            backwardTickets.push_back(timer->begin());
            const Buffer* din = m.backward(
                stashes[static_cast<std::size_t>(l)], m.params().data(), m.grads().data(), m.hasHead() ? nullptr : &dx);
            timer->end(backwardTickets.back());
            if (din) {
                dx.ensure(*backend, din->count(), din->dtype());
                backend->copy(dx.data(), din->data(), din->bytes());
            }
        }
        // The same backward split in two on the same stashes (the fused one leaves them as the forward made
        // them): I, then W at once, each timed alone.
        for (int l = layers - 1; l >= 0; --l) {
            auto& m = *models[static_cast<std::size_t>(l)];
            auto& stash = stashes[static_cast<std::size_t>(l)];
            inputTickets.push_back(timer->begin());
            const Buffer* din = m.backwardInput(stash, m.params().data(), m.hasHead() ? nullptr : &dx);
            timer->end(inputTickets.back());
            keptForWeight[static_cast<std::size_t>(l)] = weightGradientBytes(stash.layers.at(0));
            weightTickets.push_back(timer->begin());
            m.backwardWeight(stash, m.grads().data());
            timer->end(weightTickets.back());
            if (din) {
                dx.ensure(*backend, din->count(), din->dtype());
                backend->copy(dx.data(), din->data(), din->bytes());
            }
        }
        timer->resolve(
            [&](std::uint64_t ticket, double t0, double t1) {
                if (!timed)
                    return;
                for (int l = 0; l < layers; ++l) {
                    auto& sample = samples[static_cast<std::size_t>(l)];
                    if (forwardTickets[static_cast<std::size_t>(l)] == ticket)
                        sample.forward_s.push_back(t1 - t0);
                    const auto back = static_cast<std::size_t>(layers - 1 - l);
                    if (backwardTickets[back] == ticket)
                        sample.backward_s.push_back(t1 - t0);
                    if (inputTickets[back] == ticket)
                        sample.backward_input_s.push_back(t1 - t0);
                    if (weightTickets[back] == ticket)
                        sample.backward_weight_s.push_back(t1 - t0);
                }
            },
            true);
        for (auto& m : models)
            m->zeroGrads(); // keeps the gradients bounded however many passes run
    }
    ops::setThreads(previousThreads);

    planner::ModelProfile profile;
    const auto& a = options.shape;
    char name[160];
    const bool cpu = !options.device.cuda;
    const std::string where = cpu
        ? "cpu, " + std::to_string(options.threads) + (options.threads == 1 ? " thread" : " threads")
        : backend->name();
    std::snprintf(name, sizeof name, "%s (l=%d, h=%d, a=%d, s=%d, V=%d) measured on %s, b=%d", familyOf(config).name(),
        a.layers, a.hidden, a.heads, a.sequence, a.vocab, where.c_str(), a.microbatch);
    profile.name = name;
    profile.profiled_device = cpu ? "cpu" : backend->name();
    profile.microbatch_size = shape.batch;
    profile.architecture = options.shape;
    const double element = static_cast<double>(byteSize(backend->act()));
    profile.architecture->bytes_per_element = static_cast<int>(element); // what the backend trains in
    for (int l = 0; l < layers; ++l) {
        const auto& m = *models[static_cast<std::size_t>(l)];
        const auto& s = samples[static_cast<std::size_t>(l)];
        planner::Layer layer;
        layer.name = m.layer(l).name();
        layer.kind = m.layer(l).kind();
        layer.forward_ms = median(s.forward_s) * 1e3;
        layer.backward_ms = median(s.backward_s) * 1e3;
        layer.backward_input_ms = median(s.backward_input_s) * 1e3;
        layer.backward_weight_ms = median(s.backward_weight_s) * 1e3;
        layer.weight_bytes = element * static_cast<double>(m.parameterCount());
        layer.activation_bytes = m.hasHead() ? element * static_cast<double>(tokens) * config.vocab
                                             : element * static_cast<double>(m.activationCount());
        LayerStash& stash = stashes[static_cast<std::size_t>(l)].layers.at(0);
        layer.stashed_bytes = static_cast<double>(stashBytes(stash));
        if (m.layer(l).kind() == "transformer_layer")
            layer.activation_parts = activationParts(m.layer(l), stash, m.activationCount(), element);
        layer.weight_gradient_bytes = static_cast<double>(keptForWeight[static_cast<std::size_t>(l)]);
        layer.forward_flops = m.layer(l).forwardFlops(shape);
        profile.layers.push_back(std::move(layer));
    }
    profile.validate();
    if (samplesOut)
        *samplesOut = std::move(samples);
    return profile;
}

} // namespace pw::engine
