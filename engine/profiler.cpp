// SPDX-License-Identifier: MIT
#include "profiler.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "executor.h"
#include "gpt2.h"
#include "ops.h"
#include "planner/errors.h"

namespace pw::engine {

using planner::InputError;

namespace {

std::size_t stashBytes(const LayerStash& s)
{
    std::size_t bytes = 0;
    for (const auto* v : {&s.out, &s.ln1, &s.ln1_mean, &s.ln1_rstd, &s.qkv, &s.att, &s.atty, &s.res2, &s.ln2,
             &s.ln2_mean, &s.ln2_rstd, &s.fch, &s.fch_gelu, &s.logits, &s.losses, &s.tokens})
        bytes += v->bytes();
    return bytes;
}

/// What a layer's backwardInput left in its stash for the backwardWeight (the output gradients W reads).
std::size_t weightGradientBytes(const LayerStash& s)
{
    std::size_t bytes = 0;
    for (const auto* v : {&s.g_out, &s.g_res2, &s.g_fch, &s.g_ln2, &s.g_qkv, &s.g_ln1})
        bytes += v->bytes();
    return bytes;
}

std::string layerName(const Gpt2Config& config, int layer)
{
    switch (layerKind(config, layer)) {
    case LayerKind::Embedding:
        return "embedding";
    case LayerKind::Block:
        return "transformer_" + std::to_string(layer);
    case LayerKind::Head:
        break;
    }
    return "head";
}

std::string layerKindName(const Gpt2Config& config, int layer)
{
    switch (layerKind(config, layer)) {
    case LayerKind::Embedding:
        return "embedding";
    case LayerKind::Block:
        return "transformer_layer";
    case LayerKind::Head:
        break;
    }
    return "head";
}

/// Forward FLOPs of a layer by Megatron's count (as planner/io/transformer.cpp): none for the lookup, 24BTC^2 +
/// 4BT^2C per block, 2BTCV for the logits.
double forwardFlops(const Gpt2Config& config, BatchShape shape, int layer)
{
    const double B = shape.batch, T = shape.seq, C = config.channels, V = config.vocab;
    switch (layerKind(config, layer)) {
    case LayerKind::Embedding:
        return 0;
    case LayerKind::Block:
        return 24.0 * B * T * C * C + 4.0 * B * T * T * C;
    case LayerKind::Head:
        break;
    }
    return 2.0 * B * T * C * V;
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
    if (shape.vocab > 65536)
        throw InputError(
            {}, 0, "--vocab", "the engine reads uint16 tokens: at most 65536, got " + std::to_string(shape.vocab));
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
    Gpt2Config config = Gpt2Config::fromTransformer(options.shape);
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
    std::snprintf(name, sizeof name, "gpt2 (l=%d, h=%d, a=%d, s=%d, V=%d) measured on %s, b=%d", a.layers, a.hidden,
        a.heads, a.sequence, a.vocab, where.c_str(), a.microbatch);
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
        layer.name = layerName(config, l);
        layer.kind = layerKindName(config, l);
        layer.forward_ms = median(s.forward_s) * 1e3;
        layer.backward_ms = median(s.backward_s) * 1e3;
        layer.backward_input_ms = median(s.backward_input_s) * 1e3;
        layer.backward_weight_ms = median(s.backward_weight_s) * 1e3;
        layer.weight_bytes = element * static_cast<double>(m.parameterCount());
        layer.activation_bytes = m.hasHead() ? element * static_cast<double>(tokens) * config.vocab
                                             : element * static_cast<double>(m.activationCount());
        layer.stashed_bytes = static_cast<double>(stashBytes(stashes[static_cast<std::size_t>(l)].layers.at(0)));
        layer.weight_gradient_bytes = static_cast<double>(keptForWeight[static_cast<std::size_t>(l)]);
        layer.forward_flops = forwardFlops(config, shape, l);
        profile.layers.push_back(std::move(layer));
    }
    profile.validate();
    if (samplesOut)
        *samplesOut = std::move(samples);
    return profile;
}

} // namespace pw::engine
