// SPDX-License-Identifier: MIT
// Analytic GPT profile: Megatron's FLOP and parameter formulas turned into per-layer times and bytes.
#include "transformer.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "../device_presets.h"
#include "../errors.h"
#include "../gpu_cost_model.h"
#include "../transformer_shape.h"

namespace pw::planner {

namespace {

void requirePositive(double value, const char* field)
{
    if (!(value > 0) || !std::isfinite(value))
        throw InputError({}, 0, field, "must be > 0, got " + std::to_string(value));
}

void validateConfig(const TransformerConfig& c)
{
    c.validate();
}

std::string modelName(const TransformerConfig& c)
{
    double params = transformerParameterCount(c);
    char size[32];
    if (params >= 1e9)
        std::snprintf(size, sizeof size, "%.1fB", params / 1e9);
    else if (params >= 1e6)
        std::snprintf(size, sizeof size, "%.0fM", params / 1e6);
    else
        std::snprintf(size, sizeof size, "%.0fK", params / 1e3);
    std::string shape
        = "l=" + std::to_string(c.layers) + ", h=" + std::to_string(c.hidden) + ", a=" + std::to_string(c.heads);
    if (c.kvHeads() != c.heads)
        shape += ", kv=" + std::to_string(c.kvHeads());
    return c.family + "-" + std::string(size) + " (" + shape + ", s=" + std::to_string(c.sequence)
        + (c.fp8 ? ", fp8)" : ")");
}

} // namespace

double transformerParameterCount(const TransformerConfig& config)
{
    return transformerParameters(config).total();
}

TransformerTimeModel resolvedTimeModel(
    const TransformerConfig& config, const DeviceType& device, const TransformerProfileOptions& options)
{
    if (options.time_model != TransformerTimeModel::Auto)
        return options.time_model;
    if (options.efficiency)
        return TransformerTimeModel::FlatEfficiency;
    if (options.gemm_table)
        return TransformerTimeModel::Shapes;
    // The default curves describe 16-bit tensor cores: fp32 models keep the flat efficiency.
    return config.bytes_per_element == 2 && defaultGpuCurve(device) ? TransformerTimeModel::Shapes
                                                                    : TransformerTimeModel::FlatEfficiency;
}

ModelProfile transformerProfile(
    const TransformerConfig& config, const DeviceType& type, const TransformerProfileOptions& options)
{
    validateConfig(config);
    DeviceType device = type; // a cluster type that does not give its FP8 peak takes its preset's
    device.peak_fp8_tflops = peakFp8Tflops(type);
    requirePositive(device.peak_tflops, "peak_tflops");
    const double efficiency = options.efficiency.value_or(0.5);
    if (!(efficiency > 0 && efficiency <= 1))
        throw InputError({}, 0, "efficiency", "must be in (0, 1], got " + std::to_string(efficiency));
    if (!(options.backward_factor >= 0) || !std::isfinite(options.backward_factor))
        throw InputError({}, 0, "backward_factor", "must be a finite number >= 0");
    const bool byShapes = resolvedTimeModel(config, device, options) == TransformerTimeModel::Shapes;
    if (byShapes && options.gemm_table) {
        if (options.gemm_table->dtype == "fp8")
            throw InputError({}, 0, "gemm_table",
                "the table's products are fp8, which check the device's FP8 curve; a profile's table is bf16 or fp32 "
                "(its model's element size)");
        const bool bf16 = options.gemm_table->dtype == "bf16";
        if ((bf16 && config.bytes_per_element != 2) || (!bf16 && config.bytes_per_element != 4))
            throw InputError({}, 0, "gemm_table",
                "the table's products are " + options.gemm_table->dtype + ", the model has "
                    + std::to_string(config.bytes_per_element) + "-byte elements");
    }
    if (byShapes && !options.gemm_table && !defaultGpuCurve(device))
        throw InputError({}, 0, "gemm_table",
            "'" + device.name + "' has no default GPU curve (H100, H200 and A100 SXM have): give its GEMM table");
    if (config.fp8) {
        if (!(device.peak_fp8_tflops > 0))
            throw InputError({}, 0, "precision",
                "fp8: '" + device.name
                    + "' has no FP8 tensor cores (its peak_fp8_tflops is 0; H100, H200, B200 and MI300X have them)");
        if (byShapes && options.gemm_table)
            throw InputError({}, 0, "gemm_table",
                "fp8: the table's products are " + options.gemm_table->dtype
                    + "; FP8 products are timed by the device's curve (leave --gemm-table out) or by --efficiency");
        if (byShapes && !(defaultGpuCurve(device)->fp8_eff_max > 0))
            throw InputError({}, 0, "precision",
                "fp8: '" + device.name + "' has no FP8 curve (H100 and H200 SXM have): give --efficiency");
    }
    std::optional<GpuCostModel> gpu;
    if (byShapes)
        gpu.emplace(device, options.gemm_table, defaultGpuCurve(device));

    const double B = config.microbatch, s = config.sequence, h = config.hidden;
    const double bpe = config.bytes_per_element;
    const double flopsPerMs = device.peak_tflops * 1e12 * efficiency / 1e3;
    const double fp8FlopsPerMs = device.peak_fp8_tflops * 1e12 * efficiency / 1e3;
    const auto params = transformerParameters(config);
    // The shape model's estimate replaces a layer's flat times (its FLOPs, bytes and parameters stay the same).
    auto applyEstimate = [](Layer& layer, const LayerEstimate& e) {
        layer.forward_ms = e.forward_ms;
        layer.backward_ms = e.backwardMs();
        layer.backward_input_ms = e.backward_input_ms;
        layer.backward_weight_ms = e.backward_weight_ms;
    };
    const double hiddenBytes = B * s * h * bpe; // one [B, s, h] activation tensor

    auto makeLayer = [&](std::string name, std::string kind, double forwardFlops, double weights, double outBytes) {
        Layer layer;
        layer.name = std::move(name);
        layer.kind = std::move(kind);
        layer.forward_flops = forwardFlops;
        layer.forward_ms = forwardFlops / flopsPerMs;
        layer.backward_ms = layer.forward_ms * options.backward_factor;
        layer.weight_bytes = weights * bpe;
        layer.activation_bytes = outBytes;
        return layer;
    };
    // Splits a layer's backward into its input and weight gradients by their FLOPs (zero-bubble schedules).
    auto splitBackward = [](Layer& layer, double inputFlops, double weightFlops) {
        const double sum = inputFlops + weightFlops;
        layer.backward_weight_ms = sum > 0 ? layer.backward_ms * weightFlops / sum : 0.0;
        layer.backward_input_ms = layer.backward_ms - *layer.backward_weight_ms;
    };

    ModelProfile model;
    model.name = modelName(config);
    model.profiled_device = device.name;
    model.microbatch_size = config.microbatch;
    model.architecture = config;
    model.layers.reserve(static_cast<std::size_t>(config.layers) + 2);

    // Token (+ learned position) lookup: no GEMM, so no FLOPs in Megatron's count (and none here, so that the FLOPs
    // of the layers add up to Eq. 4.2). It is memory-bound: read the word and position rows, write their
    // sum. Its time comes from memory bandwidth when the device has one, and is 0 otherwise.
    Layer embedding = makeLayer("embedding", "embedding", 0.0, params.embedding + params.positions, hiddenBytes);
    if (device.memory_bandwidth_bytes_per_s > 0) {
        embedding.forward_ms = 3.0 * hiddenBytes / device.memory_bandwidth_bytes_per_s * 1e3;
        embedding.backward_ms = embedding.forward_ms * options.backward_factor;
    }
    // Its input is token ids: the whole backward is the weight gradient (the rows' scatter-add), which reads the
    // output gradient: a split backward keeps that from I to W.
    splitBackward(embedding, 0.0, 1.0);
    embedding.weight_gradient_bytes = hiddenBytes;
    model.layers.push_back(std::move(embedding));

    // The block's products (transformer_shape.h; GPT: QKV 6Bsh^2, projection 2Bsh^2, MLP 16Bsh^2) and its
    // attention core (scores and values, 4Bs^2h).
    const double layerFlops = blockForwardFlops(config, B);
    const double coreFlops = attentionCoreFlops(config, B);
    // The backward of a product with weights costs its forward FLOPs twice: once for the input gradient, once for
    // the weight gradient. The score and value products multiply two activations and have no weights: both of
    // their operands' gradients (twice their FLOPs) are input gradient.
    const double layerWeightGradFlops = layerFlops - coreFlops;
    const double layerInputGradFlops = layerFlops - coreFlops + 2.0 * coreFlops;
    // What a layer keeps for its backward pass, in Korthikanti et al.'s parts (transformer_shape.h): GPT with
    // materialized scores s b h (34 + 5 a s / h) bytes at 16 bits.
    const ActivationParts parts = blockActivations(config);
    // A split backward's W multiplies the output gradients of the products (GPT: QKV 3h, attention projection h, MLP
    // up 4h, MLP down h) by their stashed inputs and reduces the two norms' (2h): I keeps those values until W (what
    // the engine's backwardInput leaves in the stash; the paper's M_W). GPT: 11 B s h.
    double gradientValues = 2 * h;
    for (const auto& p : blockProducts(config))
        gradientValues += p.n;
    const double layerWeightGradientBytes = B * s * gradientValues * bpe;
    const LayerEstimate block = gpu ? transformerBlockEstimate(config, *gpu) : LayerEstimate {};
    // One rank's times at each tensor-parallel size the search may try (powers of two dividing the heads, up to 64),
    // each product by the rank's own shape (gpu_cost_model.h); the flat model has no shapes, so it divides by t.
    std::vector<int> groupSizes;
    for (int t = 2; t <= 64 && gpu; t *= 2)
        if (config.heads % t == 0)
            groupSizes.push_back(t);
    auto rankTimes = [&](auto estimate) {
        std::vector<TensorParallelTimes> out;
        for (int t : groupSizes) {
            const RankEstimate r = estimate(config, *gpu, t);
            out.push_back({t, r.split.forward_ms, r.split.backwardMs(), r.split.backward_weight_ms,
                r.replicated_forward_ms, r.replicated_backward_ms});
        }
        return out;
    };
    const auto blockRanks = rankTimes(transformerBlockRankEstimate);
    // One context rank's times at each size that splits the sequence into 2c chunks (powers of two up to 64): its
    // 1/c of the tokens through the products (their own, thinner shapes), and its queries against every key, 1/c of
    // the whole attention core (Megatron's load-balanced ring). The flat model has no shapes: it divides by c.
    std::vector<int> contextSizes;
    for (int c = 2; c <= 64 && gpu; c *= 2)
        if (config.sequence % (2 * c) == 0)
            contextSizes.push_back(c);
    auto contextTimes = [&](auto estimate, bool attention) {
        std::vector<ContextParallelTimes> out;
        for (int c : contextSizes) {
            TransformerConfig part = config;
            part.sequence = config.sequence / c;
            part.max_positions = config.positionRows();
            LayerEstimate e = estimate(part, *gpu);
            if (attention) { // the short sequence's own core out, the rank's share of the whole one in
                e.forward_ms
                    += (attentionCoreSeconds(config, *gpu, false) / c - attentionCoreSeconds(part, *gpu, false)) * 1e3;
                e.backward_input_ms
                    += (attentionCoreSeconds(config, *gpu, true) / c - attentionCoreSeconds(part, *gpu, true)) * 1e3;
            }
            out.push_back({c, e.forward_ms, e.backwardMs(), e.backward_weight_ms});
        }
        return out;
    };
    const auto blockContext = contextTimes(transformerBlockEstimate, true);
    const double coreMs = gpu ? attentionCoreSeconds(config, *gpu, false) * 1e3 : coreFlops / flopsPerMs;
    for (int i = 0; i < config.layers; ++i) {
        auto layer = makeLayer(
            "transformer_" + std::to_string(i + 1), "transformer_layer", layerFlops, params.per_layer, hiddenBytes);
        if (config.fp8) { // the flat model: the products at the FP8 peak, the attention core at the 16-bit one
            layer.forward_ms = (layerFlops - coreFlops) / fp8FlopsPerMs + coreFlops / flopsPerMs;
            layer.backward_ms = layer.forward_ms * options.backward_factor;
        }
        layer.fp8_weight_bytes = blockFp8WeightBytes(config);
        layer.stashed_bytes = parts.total();
        layer.activation_parts = parts;
        layer.selective_recompute_ms = coreMs;
        splitBackward(layer, layerInputGradFlops, layerWeightGradFlops);
        layer.weight_gradient_bytes = layerWeightGradientBytes;
        layer.key_value_bytes = B * s * 2.0 * config.kvHeads() * config.headDim() * bpe;
        if (gpu)
            applyEstimate(layer, block);
        layer.tensor_parallel_times = blockRanks;
        layer.context_parallel_times = blockContext;
        model.layers.push_back(std::move(layer));
    }

    // Final norm + logits (h -> V). Tied weights (GPT-2, Megatron's GPT) are the word embedding, which the exact
    // count holds once (in "embedding"); the head still records V*h weights: with more than one stage the last
    // stage keeps its own copy of the word embedding (and its optimizer state), and a planner that left it out
    // would under-count that stage's memory. Untied (Llama), they are the head's own. Either way
    // totalWeightBytes() = (parameters + (tied ? V h : 0)) * bytes_per_element.
    const double logits = headForwardFlops(config, B);
    const double headWeights = static_cast<double>(config.vocab) * h + params.final_norm;
    Layer head = makeLayer("head", "head", logits, headWeights, B * s * config.vocab * bpe);
    splitBackward(head, logits, logits); // the logits product: one of each
    // Its W reads the logits' gradient, which the forward's fused loss already wrote over the stashed logits
    // (activation_bytes), and the final norm's output gradient, which I keeps.
    head.weight_gradient_bytes = hiddenBytes;
    if (gpu) {
        applyEstimate(head, transformerHeadEstimate(config, *gpu));
        head.tensor_parallel_times = rankTimes(transformerHeadRankEstimate);
        head.context_parallel_times = contextTimes(transformerHeadEstimate, false);
    }
    model.layers.push_back(std::move(head));
    return model;
}

} // namespace pw::planner
