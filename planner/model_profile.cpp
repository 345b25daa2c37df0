// SPDX-License-Identifier: MIT
#include "model_profile.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_fields.h"

namespace pw::planner {

using nlohmann::json;

namespace {

const std::pair<const char*, MlpKind> kMlpNames[] = {{"gelu", MlpKind::Gelu}, {"swiglu", MlpKind::SwiGlu}};
const std::pair<const char*, NormKind> kNormNames[]
    = {{"layernorm", NormKind::LayerNorm}, {"rmsnorm", NormKind::RmsNorm}};
const std::pair<const char*, PositionKind> kPositionNames[]
    = {{"learned", PositionKind::Learned}, {"rotary", PositionKind::Rotary}};
const std::pair<const char*, BiasKind> kBiasNames[]
    = {{"all", BiasKind::All}, {"qkv", BiasKind::Qkv}, {"none", BiasKind::None}};

} // namespace

const char* name(MlpKind kind)
{
    return fields::enumName(kind, kMlpNames);
}
const char* name(NormKind kind)
{
    return fields::enumName(kind, kNormNames);
}
const char* name(PositionKind kind)
{
    return fields::enumName(kind, kPositionNames);
}
const char* name(BiasKind kind)
{
    return fields::enumName(kind, kBiasNames);
}
MlpKind mlpKindNamed(const std::string& text, const std::string& field)
{
    return fields::enumNamed(text, field, kMlpNames);
}
NormKind normKindNamed(const std::string& text, const std::string& field)
{
    return fields::enumNamed(text, field, kNormNames);
}
PositionKind positionKindNamed(const std::string& text, const std::string& field)
{
    return fields::enumNamed(text, field, kPositionNames);
}
BiasKind biasKindNamed(const std::string& text, const std::string& field)
{
    return fields::enumNamed(text, field, kBiasNames);
}

bool isDataSource(const Layer& layer)
{
    return layer.kind.rfind("Input", 0) == 0;
}

double backwardWeightShare(const Layer& layer)
{
    if (layer.backward_input_ms && layer.backward_weight_ms) {
        const double sum = *layer.backward_input_ms + *layer.backward_weight_ms;
        return sum > 0 ? *layer.backward_weight_ms / sum : 0.0;
    }
    return layer.weight_bytes > 0 ? 0.5 : 0.0;
}

double ModelProfile::totalWeightBytes() const
{
    double sum = 0;
    for (const auto& l : layers)
        sum += l.weight_bytes;
    return sum;
}

double ModelProfile::totalComputeMs() const
{
    double sum = 0;
    for (const auto& l : layers)
        if (!isDataSource(l))
            sum += l.forward_ms + l.backward_ms;
    return sum;
}

std::vector<double> ModelProfile::cutBytes(const std::vector<int>& order) const
{
    const int n = layerCount();
    std::vector<double> cut(n, 0.0);
    if (!is_graph) {
        for (int pos = 0; pos < n; ++pos)
            cut[pos] = layers[order.empty() ? pos : order[pos]].activation_bytes;
        return cut;
    }
    // position of each layer in the order; a layer's output is live across cut c when it sits at or
    // before c and its last consumer sits after c.
    std::vector<int> position(n);
    for (int pos = 0; pos < n; ++pos)
        position[order.empty() ? pos : order[pos]] = pos;
    std::vector<int> lastUse(n, -1);
    for (int i = 0; i < n; ++i)
        for (int producer : layers[i].inputs)
            lastUse[producer] = std::max(lastUse[producer], position[i]);
    std::vector<double> delta(n + 1, 0.0);
    for (int i = 0; i < n; ++i) {
        if (lastUse[i] > position[i]) {
            delta[position[i]] += layers[i].activation_bytes;
            delta[lastUse[i]] -= layers[i].activation_bytes;
        }
    }
    double running = 0;
    for (int pos = 0; pos < n; ++pos) {
        running += delta[pos];
        cut[pos] = std::max(0.0, running);
    }
    return cut;
}

void ModelProfile::validate() const
{
    if (layers.empty())
        throw InputError({}, 0, "/layers", "a model needs at least one layer");
    if (microbatch_size < 1)
        throw InputError({}, 0, "/microbatch_size", "must be >= 1");
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto& l = layers[i];
        auto path = "/layers/" + std::to_string(i);
        auto check = [&](double v, const std::string& field) {
            if (!std::isfinite(v) || v < 0)
                throw InputError({}, 0, path + "/" + field, "must be a finite number >= 0");
        };
        check(l.forward_ms, "forward_ms");
        check(l.backward_ms, "backward_ms");
        check(l.activation_bytes, "activation_bytes");
        check(l.weight_bytes, "weight_bytes");
        if (l.optimizer_state_bytes)
            check(*l.optimizer_state_bytes, "optimizer_state_bytes");
        if (l.stashed_bytes)
            check(*l.stashed_bytes, "stashed_bytes");
        if (l.backward_input_ms.has_value() != l.backward_weight_ms.has_value())
            throw InputError({}, 0, path + (l.backward_input_ms ? "/backward_weight_ms" : "/backward_input_ms"),
                "backward_input_ms and backward_weight_ms split the backward together: give both or neither");
        if (l.backward_input_ms) {
            check(*l.backward_input_ms, "backward_input_ms");
            check(*l.backward_weight_ms, "backward_weight_ms");
        }
        check(l.weight_gradient_bytes, "weight_gradient_bytes");
        check(l.key_value_bytes, "key_value_bytes");
        check(l.fp8_weight_bytes, "fp8_weight_bytes");
        check(l.selective_recompute_ms, "selective_recompute_ms");
        if (const auto& p = l.activation_parts) {
            for (auto [v, field] :
                {std::pair {p->replicated, "activation_parts/replicated"}, {p->sharded, "activation_parts/sharded"},
                    {p->attention_core, "activation_parts/attention_core"}, {p->input, "activation_parts/input"}})
                check(v, field);
            const double stash = l.stashed_bytes.value_or(l.activation_bytes);
            if (std::abs(p->total() - stash) > 1e-9 * std::max(1.0, stash))
                throw InputError({}, 0, path + "/activation_parts",
                    "its parts add up to " + std::to_string(p->total()) + " bytes, the layer stashes "
                        + std::to_string(stash) + " (stashed_bytes): they describe the same memory");
        }
        for (std::size_t k = 0; k < l.tensor_parallel_times.size(); ++k) {
            const auto& e = l.tensor_parallel_times[k];
            const std::string ep = "tensor_parallel_times/" + std::to_string(k);
            if (e.size < 2)
                throw InputError({}, 0, path + "/" + ep + "/size", "must be a group of 2 devices or more");
            for (std::size_t j = 0; j < k; ++j)
                if (l.tensor_parallel_times[j].size == e.size)
                    throw InputError(
                        {}, 0, path + "/" + ep + "/size", "size " + std::to_string(e.size) + " is listed twice");
            for (auto [v, field] : {std::pair {e.forward_ms, "/forward_ms"}, {e.backward_ms, "/backward_ms"},
                     {e.backward_weight_ms, "/backward_weight_ms"}, {e.replicated_forward_ms, "/replicated_forward_ms"},
                     {e.replicated_backward_ms, "/replicated_backward_ms"}})
                check(v, ep + field);
            if (e.backward_weight_ms > e.backward_ms)
                throw InputError(
                    {}, 0, path + "/" + ep + "/backward_weight_ms", "is part of backward_ms and exceeds it");
        }
        for (std::size_t k = 0; k < l.context_parallel_times.size(); ++k) {
            const auto& e = l.context_parallel_times[k];
            const std::string ep = "context_parallel_times/" + std::to_string(k);
            if (e.size < 2)
                throw InputError({}, 0, path + "/" + ep + "/size", "must be 2 ranks or more");
            for (std::size_t j = 0; j < k; ++j)
                if (l.context_parallel_times[j].size == e.size)
                    throw InputError(
                        {}, 0, path + "/" + ep + "/size", "size " + std::to_string(e.size) + " is listed twice");
            for (auto [v, field] : {std::pair {e.forward_ms, "/forward_ms"}, {e.backward_ms, "/backward_ms"},
                     {e.backward_weight_ms, "/backward_weight_ms"}})
                check(v, ep + field);
            if (e.backward_weight_ms > e.backward_ms)
                throw InputError(
                    {}, 0, path + "/" + ep + "/backward_weight_ms", "is part of backward_ms and exceeds it");
        }
        for (const auto& [type, t] : l.device_times) {
            if (!std::isfinite(t.forward_ms) || t.forward_ms < 0 || !std::isfinite(t.backward_ms) || t.backward_ms < 0)
                throw InputError({}, 0, path + "/device_times/" + type, "times must be finite numbers >= 0");
        }
        for (int producer : l.inputs) {
            if (producer < 0 || producer >= static_cast<int>(i))
                throw InputError({}, 0, path + "/inputs",
                    "input " + std::to_string(producer)
                        + " is not an earlier layer (layers must be in topological order)");
        }
    }
}

std::string TransformerConfig::gpt2BlockDifference() const
{
    const std::pair<bool, const char*> differences[] = {
        {mlp != MlpKind::Gelu, "mlp"},
        {ffnHidden() != 4 * hidden, "ffn_hidden"},
        {kvHeads() != heads, "kv_heads"},
        {norm != NormKind::LayerNorm, "norm"},
        {positions != PositionKind::Learned, "positions"},
        {bias != BiasKind::All, "bias"},
        {!tied_embeddings, "tied_embeddings"},
    };
    for (const auto& [differs, field] : differences)
        if (differs)
            return field;
    return {};
}

void TransformerConfig::validate(const std::string& path) const
{
    auto field = [&](const char* name) { return path.empty() ? std::string(name) : path + "/" + name; };
    for (auto [name, value] :
        {std::pair {"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"sequence", sequence}, {"vocab", vocab},
            {"microbatch", microbatch}, {"bytes_per_element", bytes_per_element}})
        if (value <= 0)
            throw InputError({}, 0, field(name), "must be > 0, got " + std::to_string(value));
    for (auto [name, value] :
        {std::pair {"ffn_hidden", ffn_hidden}, {"kv_heads", kv_heads}, {"max_positions", max_positions}})
        if (value < 0)
            throw InputError({}, 0, field(name), "must be > 0 (or 0 for the default), got " + std::to_string(value));
    if (hidden % heads != 0)
        throw InputError({}, 0, field("heads"),
            "must divide hidden (" + std::to_string(hidden) + " is not a multiple of " + std::to_string(heads) + ")");
    if (heads % kvHeads() != 0)
        throw InputError({}, 0, field("kv_heads"),
            "must divide heads (" + std::to_string(heads) + " is not a multiple of " + std::to_string(kvHeads())
                + "): each key and value head serves a whole group of query heads");
    if (!(norm_eps > 0))
        throw InputError({}, 0, field("norm_eps"), "must be > 0, got " + std::to_string(norm_eps));
    if (!(rotary.theta > 0) || (rotary.factor > 0 && !(rotary.high_freq_factor > rotary.low_freq_factor)))
        throw InputError({}, 0, field("rotary"),
            "theta must be > 0 and, with a scaling factor, high_freq_factor above low_freq_factor");
    if (rotary.original_positions <= 0)
        throw InputError({}, 0, field("rotary") + "/original_positions", "must be > 0");
    if (fp8 && bytes_per_element != 2)
        throw InputError({}, 0, field("fp8"),
            "FP8 products keep 16-bit weights and activations (bytes_per_element 2), got "
                + std::to_string(bytes_per_element));
    if (positions == PositionKind::Learned && positionRows() < sequence)
        throw InputError({}, 0, field("max_positions"),
            "the learned position table has " + std::to_string(positionRows()) + " rows, fewer than the sequence ("
                + std::to_string(sequence) + ")");
}

json architectureJson(const TransformerConfig& a, bool everyField)
{
    // GPT-2's block keeps the first format's fields alone ("gpt"); any other family writes every one of its own.
    const bool gpt2 = a.isGpt2Block() && !everyField;
    json arch = {{"type", gpt2 ? "gpt" : "transformer"}, {"layers", a.layers}, {"hidden", a.hidden}, {"heads", a.heads},
        {"sequence", a.sequence}, {"vocab", a.vocab}, {"microbatch", a.microbatch},
        {"bytes_per_element", a.bytes_per_element}};
    if (!a.tied_embeddings || everyField)
        arch["tied_embeddings"] = a.tied_embeddings; // written only when not GPT-2's tying
    if (!gpt2) {
        arch["family"] = a.family;
        arch["ffn_hidden"] = a.ffnHidden();
        arch["kv_heads"] = a.kvHeads();
        arch["mlp"] = name(a.mlp);
        arch["norm"] = name(a.norm);
        arch["positions"] = name(a.positions);
        arch["bias"] = name(a.bias);
        arch["norm_eps"] = a.norm_eps;
        if (a.positions == PositionKind::Rotary) {
            json& r = arch["rotary"];
            r = {{"theta", a.rotary.theta}};
            if (a.rotary.factor > 0)
                r.update({{"factor", a.rotary.factor}, {"low_freq_factor", a.rotary.low_freq_factor},
                    {"high_freq_factor", a.rotary.high_freq_factor},
                    {"original_positions", a.rotary.original_positions}});
        }
    }
    if (a.max_positions > 0 || everyField)
        arch["max_positions"] = a.positionRows();
    if (!a.dropout || everyField)
        arch["dropout"] = a.dropout;
    if (!a.flash_attention || everyField)
        arch["flash_attention"] = a.flash_attention;
    if (!a.fp32_cross_entropy || everyField)
        arch["fp32_cross_entropy"] = a.fp32_cross_entropy;
    if (a.fp8 || everyField)
        arch["fp8"] = a.fp8;
    return arch;
}

json toJson(const ModelProfile& model)
{
    json layers = json::array();
    for (const auto& l : model.layers) {
        json jl = {{"name", l.name}, {"kind", l.kind}, {"forward_ms", l.forward_ms}, {"backward_ms", l.backward_ms},
            {"activation_bytes", l.activation_bytes}, {"weight_bytes", l.weight_bytes}};
        if (l.stashed_bytes)
            jl["stashed_bytes"] = *l.stashed_bytes;
        if (l.optimizer_state_bytes)
            jl["optimizer_state_bytes"] = *l.optimizer_state_bytes;
        if (l.forward_flops)
            jl["forward_flops"] = *l.forward_flops;
        if (l.backward_input_ms)
            jl["backward_input_ms"] = *l.backward_input_ms;
        if (l.backward_weight_ms)
            jl["backward_weight_ms"] = *l.backward_weight_ms;
        if (l.weight_gradient_bytes > 0)
            jl["weight_gradient_bytes"] = l.weight_gradient_bytes;
        if (l.key_value_bytes > 0)
            jl["key_value_bytes"] = l.key_value_bytes;
        if (l.fp8_weight_bytes > 0)
            jl["fp8_weight_bytes"] = l.fp8_weight_bytes;
        if (l.activation_parts) {
            const auto& p = *l.activation_parts;
            jl["activation_parts"] = {{"replicated", p.replicated}, {"sharded", p.sharded},
                {"attention_core", p.attention_core}, {"input", p.input}};
        }
        if (l.selective_recompute_ms > 0)
            jl["selective_recompute_ms"] = l.selective_recompute_ms;
        if (!l.tensor_parallel_times.empty()) {
            json tpt = json::array();
            for (const auto& e : l.tensor_parallel_times)
                tpt.push_back({{"size", e.size}, {"forward_ms", e.forward_ms}, {"backward_ms", e.backward_ms},
                    {"backward_weight_ms", e.backward_weight_ms}, {"replicated_forward_ms", e.replicated_forward_ms},
                    {"replicated_backward_ms", e.replicated_backward_ms}});
            jl["tensor_parallel_times"] = std::move(tpt);
        }
        if (!l.context_parallel_times.empty()) {
            json cpt = json::array();
            for (const auto& e : l.context_parallel_times)
                cpt.push_back({{"size", e.size}, {"forward_ms", e.forward_ms}, {"backward_ms", e.backward_ms},
                    {"backward_weight_ms", e.backward_weight_ms}});
            jl["context_parallel_times"] = std::move(cpt);
        }
        if (model.is_graph)
            jl["inputs"] = l.inputs;
        if (!l.device_times.empty()) {
            json dt = json::object();
            for (const auto& [type, t] : l.device_times)
                dt[type] = {{"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}};
            jl["device_times"] = dt;
        }
        layers.push_back(std::move(jl));
    }
    json j = {{"format_version", kModelFormatVersion}, {"name", model.name}, {"profiled_device", model.profiled_device},
        {"microbatch_size", model.microbatch_size}, {"is_graph", model.is_graph}, {"layers", std::move(layers)}};
    if (model.architecture)
        j["architecture"] = architectureJson(*model.architecture);
    return j;
}

ModelProfile modelFromJson(const json& j)
{
    namespace f = fields;
    f::object(j, "");
    f::checkVersion(j, "model", kModelFormatVersion);
    ModelProfile m;
    m.name = f::stringOr(j, "name", "", "model");
    m.profiled_device = f::stringOr(j, "profiled_device", "", "");
    m.microbatch_size = f::integerOr(j, "microbatch_size", "", 1);
    m.is_graph = f::booleanOr(j, "is_graph", "", false);
    const auto& layers = f::array(j, "layers", "");
    for (std::size_t i = 0; i < layers.size(); ++i) {
        auto path = f::child("/layers", i);
        const auto& jl = f::object(layers[i], path);
        Layer l;
        l.name = f::stringOr(jl, "name", path, "layer" + std::to_string(i));
        l.kind = f::stringOr(jl, "kind", path, "");
        l.forward_ms = f::nonNegative(jl, "forward_ms", path);
        l.backward_ms = f::nonNegative(jl, "backward_ms", path);
        l.activation_bytes = f::nonNegative(jl, "activation_bytes", path);
        l.weight_bytes = f::nonNegative(jl, "weight_bytes", path);
        if (jl.contains("stashed_bytes"))
            l.stashed_bytes = f::nonNegative(jl, "stashed_bytes", path);
        if (jl.contains("optimizer_state_bytes"))
            l.optimizer_state_bytes = f::nonNegative(jl, "optimizer_state_bytes", path);
        if (jl.contains("forward_flops"))
            l.forward_flops = f::nonNegative(jl, "forward_flops", path);
        if (jl.contains("backward_input_ms"))
            l.backward_input_ms = f::nonNegative(jl, "backward_input_ms", path);
        if (jl.contains("backward_weight_ms"))
            l.backward_weight_ms = f::nonNegative(jl, "backward_weight_ms", path);
        if (jl.contains("weight_gradient_bytes"))
            l.weight_gradient_bytes = f::nonNegative(jl, "weight_gradient_bytes", path);
        if (jl.contains("key_value_bytes"))
            l.key_value_bytes = f::nonNegative(jl, "key_value_bytes", path);
        l.fp8_weight_bytes = f::nonNegativeOr(jl, "fp8_weight_bytes", path, 0.0);
        if (jl.contains("activation_parts")) {
            const auto pp = f::child(path, "activation_parts");
            const auto& jp = f::object(jl.at("activation_parts"), pp);
            l.activation_parts
                = ActivationParts {f::nonNegative(jp, "replicated", pp), f::nonNegative(jp, "sharded", pp),
                    f::nonNegative(jp, "attention_core", pp), f::nonNegative(jp, "input", pp)};
        }
        l.selective_recompute_ms = f::nonNegativeOr(jl, "selective_recompute_ms", path, 0.0);
        if (jl.contains("tensor_parallel_times")) {
            const auto& arr = f::array(jl, "tensor_parallel_times", path);
            for (std::size_t k = 0; k < arr.size(); ++k) {
                const auto ep = f::child(f::child(path, "tensor_parallel_times"), k);
                const auto& je = f::object(arr[k], ep);
                l.tensor_parallel_times.push_back({f::integer(je, "size", ep), f::nonNegative(je, "forward_ms", ep),
                    f::nonNegative(je, "backward_ms", ep), f::nonNegative(je, "backward_weight_ms", ep),
                    f::nonNegative(je, "replicated_forward_ms", ep), f::nonNegative(je, "replicated_backward_ms", ep)});
            }
        }
        if (jl.contains("context_parallel_times")) {
            const auto& arr = f::array(jl, "context_parallel_times", path);
            for (std::size_t k = 0; k < arr.size(); ++k) {
                const auto ep = f::child(f::child(path, "context_parallel_times"), k);
                const auto& je = f::object(arr[k], ep);
                l.context_parallel_times.push_back({f::integer(je, "size", ep), f::nonNegative(je, "forward_ms", ep),
                    f::nonNegative(je, "backward_ms", ep), f::nonNegative(je, "backward_weight_ms", ep)});
            }
        }
        if (jl.contains("inputs")) {
            const auto& in = f::array(jl, "inputs", path);
            for (std::size_t k = 0; k < in.size(); ++k) {
                l.inputs.push_back(f::index(in[k], f::child(f::child(path, "inputs"), k)));
            }
        }
        if (jl.contains("device_times")) {
            const auto& dt = f::object(jl.at("device_times"), f::child(path, "device_times"));
            for (const auto& [type, t] : dt.items()) {
                auto tp = f::child(f::child(path, "device_times"), type);
                f::object(t, tp);
                l.device_times[type] = {f::nonNegative(t, "forward_ms", tp), f::nonNegative(t, "backward_ms", tp)};
            }
        }
        m.layers.push_back(std::move(l));
    }
    if (j.contains("architecture") && !j.at("architecture").is_null()) {
        const std::string at = "/architecture";
        const auto& a = f::object(j.at("architecture"), at);
        // "gpt": GPT-2's block, the first format (its family fields may not appear); "transformer": any family, its
        // fields given or at GPT-2's defaults. Another type is refused, not read as GPT-2's.
        const std::string type = f::stringOr(a, "type", at, "gpt");
        if (type != "gpt" && type != "transformer")
            f::fail(at + "/type",
                "'" + type
                    + "' is not a model type Pipewright knows: \"gpt\" (GPT-2's block) or \"transformer\" (a "
                      "decoder-only transformer described by family, ffn_hidden, kv_heads, mlp, norm, positions, "
                      "bias)");
        TransformerConfig c;
        c.layers = f::integer(a, "layers", at);
        c.hidden = f::integer(a, "hidden", at);
        c.heads = f::integer(a, "heads", at);
        c.sequence = f::integer(a, "sequence", at);
        c.vocab = f::integer(a, "vocab", at);
        c.microbatch = f::integerOr(a, "microbatch", at, 1);
        c.bytes_per_element = f::integerOr(a, "bytes_per_element", at, 2);
        c.tied_embeddings = f::booleanOr(a, "tied_embeddings", at, true);
        c.max_positions = f::integerOr(a, "max_positions", at, 0);
        c.dropout = f::booleanOr(a, "dropout", at, true);
        c.flash_attention = f::booleanOr(a, "flash_attention", at, true);
        c.fp32_cross_entropy = f::booleanOr(a, "fp32_cross_entropy", at, true);
        c.fp8 = f::booleanOr(a, "fp8", at, false);
        if (type == "transformer") {
            c.family = f::stringOr(a, "family", at, "gpt");
            c.ffn_hidden = f::integerOr(a, "ffn_hidden", at, 0);
            c.kv_heads = f::integerOr(a, "kv_heads", at, 0);
            c.mlp = mlpKindNamed(f::stringOr(a, "mlp", at, "gelu"), at + "/mlp");
            c.norm = normKindNamed(f::stringOr(a, "norm", at, "layernorm"), at + "/norm");
            c.positions = positionKindNamed(f::stringOr(a, "positions", at, "learned"), at + "/positions");
            c.bias = biasKindNamed(f::stringOr(a, "bias", at, "all"), at + "/bias");
            c.norm_eps = f::nonNegativeOr(a, "norm_eps", at, 1e-5);
            if (a.contains("rotary")) {
                const std::string rat = at + "/rotary";
                const auto& r = f::object(a.at("rotary"), rat);
                c.rotary.theta = f::nonNegativeOr(r, "theta", rat, 10000.0);
                c.rotary.factor = f::nonNegativeOr(r, "factor", rat, 0.0);
                c.rotary.low_freq_factor = f::nonNegativeOr(r, "low_freq_factor", rat, 1.0);
                c.rotary.high_freq_factor = f::nonNegativeOr(r, "high_freq_factor", rat, 4.0);
                c.rotary.original_positions = f::integerOr(r, "original_positions", rat, 8192);
            }
        } else {
            for (const char* field :
                {"family", "ffn_hidden", "kv_heads", "mlp", "norm", "positions", "bias", "norm_eps", "rotary"})
                if (a.contains(field))
                    f::fail(at + "/" + field,
                        "describes a model family; type \"gpt\" is GPT-2's block: give type \"transformer\"");
        }
        c.validate("/architecture");
        m.architecture = c;
    }
    if (!m.is_graph) {
        for (auto& l : m.layers)
            l.inputs.clear();
    }
    m.validate();
    return m;
}

} // namespace pw::planner
