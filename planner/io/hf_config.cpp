// SPDX-License-Identifier: MIT
#include "hf_config.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "../errors.h"
#include "../json_fields.h"
#include "json_file.h"

namespace pw::planner {

using nlohmann::json;
namespace f = fields;

namespace {

/// An integer field that must be > 0.
int positive(const json& j, const char* key)
{
    const int v = f::integer(j, key, "");
    if (v <= 0)
        f::fail(std::string("/") + key, "must be > 0, got " + std::to_string(v));
    return v;
}

bool nonZero(const json& j, const char* key)
{
    return j.contains(key) && !j.at(key).is_null() && f::number(j, key, "") > 0;
}

void refuseTrue(const json& j, const char* key, const std::string& why)
{
    if (f::booleanOr(j, key, "", false))
        f::fail(std::string("/") + key, "true: " + why);
}

/// Checks heads against hidden and kv heads against heads under the file's own names.
void checkHeads(const TransformerConfig& c, const char* hiddenKey, const char* headsKey, const char* kvKey)
{
    if (c.hidden % c.heads != 0)
        f::fail(std::string("/") + headsKey,
            std::to_string(c.heads) + " does not divide " + hiddenKey + " (" + std::to_string(c.hidden) + ")");
    if (c.heads % c.kvHeads() != 0)
        f::fail(std::string("/") + kvKey,
            std::to_string(c.kvHeads()) + " does not divide " + headsKey + " (" + std::to_string(c.heads)
                + "): each key and value head serves a whole group of query heads");
}

TransformerConfig gpt2(const json& j)
{
    TransformerConfig c;
    c.family = "gpt";
    c.layers = positive(j, "n_layer");
    c.hidden = positive(j, "n_embd");
    c.heads = positive(j, "n_head");
    c.vocab = positive(j, "vocab_size");
    c.max_positions = positive(j, "n_positions");
    if (j.contains("n_inner") && !j.at("n_inner").is_null())
        c.ffn_hidden = positive(j, "n_inner");
    const std::string act = f::stringOr(j, "activation_function", "", "gelu_new");
    if (act != "gelu_new" && act != "gelu" && act != "gelu_fast" && act != "gelu_pytorch_tanh")
        f::fail(
            "/activation_function", "'" + act + "' is not GELU, the activation of GPT-2's MLP that Pipewright models");
    c.tied_embeddings = f::booleanOr(j, "tie_word_embeddings", "", true);
    c.dropout = nonZero(j, "resid_pdrop") || nonZero(j, "attn_pdrop");
    c.norm_eps = f::nonNegativeOr(j, "layer_norm_epsilon", "", 1e-5);
    checkHeads(c, "n_embd", "n_head", "n_head");
    return c;
}

/// Llama, Mistral and Qwen2: pre-norm blocks with RMSNorm, rotary positions and a SwiGLU MLP.
TransformerConfig llamaLike(const json& j, const std::string& family)
{
    TransformerConfig c;
    c.family = family;
    c.layers = positive(j, "num_hidden_layers");
    c.hidden = positive(j, "hidden_size");
    c.heads = positive(j, "num_attention_heads");
    c.kv_heads = j.contains("num_key_value_heads") && !j.at("num_key_value_heads").is_null()
        ? positive(j, "num_key_value_heads")
        : c.heads;
    c.ffn_hidden = positive(j, "intermediate_size");
    c.vocab = positive(j, "vocab_size");
    c.max_positions = positive(j, "max_position_embeddings");
    c.mlp = MlpKind::SwiGlu;
    c.norm = NormKind::RmsNorm;
    c.positions = PositionKind::Rotary;
    c.bias = family == "qwen2" ? BiasKind::Qkv : BiasKind::None;
    c.tied_embeddings = f::booleanOr(j, "tie_word_embeddings", "", false);
    c.dropout = nonZero(j, "attention_dropout");
    c.norm_eps = f::nonNegativeOr(j, "rms_norm_eps", "", 1e-6); // transformers' LlamaConfig default
    c.rotary.theta = f::nonNegativeOr(j, "rope_theta", "", 10000.0);
    if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
        const json& r = f::object(j.at("rope_scaling"), "/rope_scaling");
        const std::string type = r.contains("rope_type") ? f::string(r, "rope_type", "/rope_scaling")
                                                         : f::stringOr(r, "type", "/rope_scaling", "");
        if (type != "llama3")
            f::fail("/rope_scaling/rope_type",
                "'" + type + "' is not a rotary scaling Pipewright models (llama3; none for plain rotary)");
        c.rotary.factor = f::nonNegative(r, "factor", "/rope_scaling");
        c.rotary.low_freq_factor = f::nonNegative(r, "low_freq_factor", "/rope_scaling");
        c.rotary.high_freq_factor = f::nonNegative(r, "high_freq_factor", "/rope_scaling");
        c.rotary.original_positions = f::integer(r, "original_max_position_embeddings", "/rope_scaling");
    }
    const std::string act = f::stringOr(j, "hidden_act", "", "silu");
    if (act != "silu" && act != "swish")
        f::fail(
            "/hidden_act", "'" + act + "' is not SiLU, the gate of " + family + "'s SwiGLU MLP that Pipewright models");
    refuseTrue(j, "attention_bias",
        "biases on the attention's four products are not modelled (Qwen2's on Q, K and V are; Llama has none)");
    refuseTrue(j, "mlp_bias", "biases on the MLP's products are not modelled (Llama has none)");
    checkHeads(c, "hidden_size", "num_attention_heads", "num_key_value_heads");
    if (j.contains("head_dim") && !j.at("head_dim").is_null() && f::integer(j, "head_dim", "") != c.hidden / c.heads)
        f::fail("/head_dim",
            std::to_string(f::integer(j, "head_dim", "")) + " is not hidden_size / num_attention_heads ("
                + std::to_string(c.hidden / c.heads) + "): heads of another width are not modelled");
    return c;
}

} // namespace

std::string knownHfArchitectures()
{
    return "gpt2, llama, mistral, qwen2";
}

bool isHfConfig(const json& j)
{
    return j.is_object() && (j.contains("model_type") || j.contains("architectures")) && !j.contains("layers");
}

TransformerConfig transformerFromHfConfig(const json& j, const RunShape& run)
{
    f::object(j, "");
    std::string type;
    std::string field = "/model_type";
    if (j.contains("model_type")) {
        type = f::string(j, "model_type", "");
    } else {
        const auto& archs = f::array(j, "architectures", "");
        field = "/architectures/0";
        if (archs.empty() || !archs[0].is_string())
            f::fail(field, "expected the model class's name (\"LlamaForCausalLM\")");
        const std::string cls = archs[0].get<std::string>();
        for (auto [name, model] : {std::pair {"GPT2LMHeadModel", "gpt2"}, {"LlamaForCausalLM", "llama"},
                 {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"}})
            if (cls == name)
                type = model;
        if (type.empty())
            f::fail(field, "'" + cls + "' is not an architecture Pipewright reads (" + knownHfArchitectures() + ")");
    }
    TransformerConfig c;
    if (type == "gpt2")
        c = gpt2(j);
    else if (type == "llama" || type == "mistral" || type == "qwen2")
        c = llamaLike(j, type);
    else
        f::fail(field, "'" + type + "' is not an architecture Pipewright reads (" + knownHfArchitectures() + ")");
    c.sequence = run.sequence > 0 ? run.sequence : c.max_positions;
    c.microbatch = run.microbatch;
    c.bytes_per_element = run.bytes_per_element;
    if (c.sequence > c.max_positions)
        throw InputError({}, 0, "--seq",
            std::to_string(c.sequence) + " tokens exceed the model's " + std::to_string(c.max_positions)
                + " positions (" + (type == "gpt2" ? "n_positions" : "max_position_embeddings") + ")");
    if (c.positions == PositionKind::Rotary)
        c.max_positions = 0; // rotary positions hold no table: the model's limit is checked, nothing to count
    c.validate();
    return c;
}

TransformerConfig loadHfConfig(const std::string& path, const RunShape& run)
{
    TransformerConfig config;
    std::optional<InputError> option; // an error of the run's options (--seq), not of the file
    convertJsonFile(path, [&](const json& j) {
        try {
            config = transformerFromHfConfig(j, run);
        } catch (const InputError& e) {
            if (e.field().rfind("--", 0) != 0)
                throw;
            option = e;
        }
    });
    if (option)
        throw *option;
    return config;
}

} // namespace pw::planner
