// SPDX-License-Identifier: MIT
#include "model_profile.h"

#include <cmath>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_fields.h"

namespace pw::planner {

using nlohmann::json;

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
        auto check = [&](double v, const char* field) {
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

void TransformerConfig::validate(const std::string& path) const
{
    auto field = [&](const char* name) { return path.empty() ? std::string(name) : path + "/" + name; };
    for (auto [name, value] :
        {std::pair {"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"sequence", sequence}, {"vocab", vocab},
            {"microbatch", microbatch}, {"bytes_per_element", bytes_per_element}})
        if (value <= 0)
            throw InputError({}, 0, field(name), "must be > 0, got " + std::to_string(value));
    if (hidden % heads != 0)
        throw InputError({}, 0, field("heads"),
            "must divide hidden (" + std::to_string(hidden) + " is not a multiple of " + std::to_string(heads) + ")");
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
    if (model.architecture) {
        const auto& a = *model.architecture;
        j["architecture"] = {{"type", "gpt"}, {"layers", a.layers}, {"hidden", a.hidden}, {"heads", a.heads},
            {"sequence", a.sequence}, {"vocab", a.vocab}, {"microbatch", a.microbatch},
            {"bytes_per_element", a.bytes_per_element}};
        if (!a.tied_embeddings)
            j["architecture"]["tied_embeddings"] = false; // written only when not GPT-2's tying
    }
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
        const auto& a = f::object(j.at("architecture"), "/architecture");
        // The one model family the profile's layers and the engine know: GPT-2's blocks (learned positions, layer
        // norms, GELU MLP, tied head). Another family's shape is refused, not read as GPT-2's.
        if (const std::string type = f::stringOr(a, "type", "/architecture", "gpt"); type != "gpt")
            f::fail("/architecture/type",
                "'" + type
                    + "' is not a model family Pipewright knows: the architecture is a GPT-style transformer "
                      "(type \"gpt\")");
        TransformerConfig c;
        c.layers = f::integer(a, "layers", "/architecture");
        c.hidden = f::integer(a, "hidden", "/architecture");
        c.heads = f::integer(a, "heads", "/architecture");
        c.sequence = f::integer(a, "sequence", "/architecture");
        c.vocab = f::integer(a, "vocab", "/architecture");
        c.microbatch = f::integerOr(a, "microbatch", "/architecture", 1);
        c.bytes_per_element = f::integerOr(a, "bytes_per_element", "/architecture", 2);
        c.tied_embeddings = f::booleanOr(a, "tied_embeddings", "/architecture", true);
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
