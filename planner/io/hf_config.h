// SPDX-License-Identifier: MIT
// Reading a Hugging Face `config.json` (GPT-2, Llama, Mistral, Qwen2) as a TransformerConfig.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "../model_profile.h"

namespace pw::planner {

/// @brief What a config.json does not say about a training run.
struct RunShape
{
    /// Tokens per sample (at most max_position_embeddings / n_positions); 0: the model's limit, to learn it.
    int sequence = 0;
    int microbatch = 1;
    int bytes_per_element = 2;

    bool operator==(const RunShape&) const = default;
};

/// The architectures config.json files name that Pipewright reads (their model_type): "gpt2, llama, mistral, qwen2".
std::string knownHfArchitectures();
/// Whether `j` looks like a Hugging Face config (an object with "model_type" or "architectures") rather than a
/// Pipewright profile (which has "layers").
bool isHfConfig(const nlohmann::json& j);
/// The model `config` describes, trained at `run`. GPT-2 (n_layer, n_embd, n_head, n_inner, n_positions, GELU,
/// tied head, dropout when resid_pdrop or attn_pdrop > 0); Llama and Mistral (num_hidden_layers, hidden_size,
/// num_attention_heads, num_key_value_heads, intermediate_size, SwiGLU from hidden_act "silu", RMSNorm, rotary
/// positions, no biases, untied unless tie_word_embeddings); Qwen2 as Llama with biases on Q, K and V. Throws
/// InputError at the JSON pointer of the field at fault (the architecture's own name, "/num_key_value_heads"), one
/// line: an unknown architecture, a missing or non-integer size, heads not dividing hidden, kv heads not dividing
/// heads, a setting the model cannot express (attention_bias on Llama, an activation other than the family's).
TransformerConfig transformerFromHfConfig(const nlohmann::json& config, const RunShape& run);
/// Reads the file; errors name it (and the line of the field).
TransformerConfig loadHfConfig(const std::string& path, const RunShape& run);

} // namespace pw::planner
