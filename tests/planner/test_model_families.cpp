// SPDX-License-Identifier: MIT
// Model families (issue 31 item 1): Hugging Face config.json files, exact parameter counts of the real models, FLOPs
// per product, the profile format's family fields, and Korthikanti et al.'s activation memory (item 2).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/analysis/flops.h"
#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/hf_config.h"
#include "planner/io/transformer.h"
#include "planner/transformer_shape.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

std::string hfFile(const std::string& name)
{
    return std::string(PW_TEST_DATA_DIR) + "/hf/" + name + ".config.json";
}

TransformerConfig hf(const std::string& name, int sequence = 2048)
{
    return loadHfConfig(hfFile(name), RunShape {sequence, 1, 2});
}

json modelFamiliesLlama8b()
{
    return json {{"model_type", "llama"}, {"num_hidden_layers", 32}, {"hidden_size", 4096}, {"num_attention_heads", 32},
        {"num_key_value_heads", 8}, {"intermediate_size", 14336}, {"vocab_size", 128256},
        {"max_position_embeddings", 8192}, {"hidden_act", "silu"}};
}

/// The InputError `config` raises, as one line.
std::string refusal(const json& config)
{
    try {
        transformerFromHfConfig(config, RunShape {2048, 1, 2});
    } catch (const InputError& e) {
        return e.what();
    }
    return "accepted";
}

} // namespace

TEST_CASE("config.json files give the real models' exact parameter counts", "[families]")
{
    // The model cards' and `sum(p.numel() for p in model.parameters())`'s counts.
    struct Row
    {
        const char* file;
        double parameters;
    };
    const Row rows[] = {
        {"gpt2", 124'439'808}, // GPT-2 small, with its final layer norm
        {"llama-3-8b", 8'030'261'248},
        {"llama-3-70b", 70'553'706'496},
        {"llama-3.1-405b", 405'853'388'800},
        {"mistral-7b-v0.1", 7'241'732'096},
        {"qwen2-7b", 7'615'616'512},
    };
    for (const auto& row : rows) {
        INFO(row.file);
        const auto c = hf(row.file, 1024);
        CHECK(transformerParameterCount(c) == row.parameters);
        // The profile's weights are those parameters, plus the head's copy of a tied embedding.
        const auto m = transformerProfile(c, *devicePreset("H100"));
        CHECK(m.totalWeightBytes() == Approx((row.parameters + c.tiedWeightBytes() / 2) * 2).epsilon(1e-12));
    }
}

TEST_CASE("the families' config.json fields become their blocks", "[families]")
{
    const auto gpt2 = hf("gpt2", 1024);
    CHECK(gpt2.isGpt2Block());
    CHECK(gpt2.family == "gpt");
    CHECK(gpt2.dropout);
    const auto llama = hf("llama-3-70b");
    CHECK(llama.family == "llama");
    CHECK(llama.mlp == MlpKind::SwiGlu);
    CHECK(llama.norm == NormKind::RmsNorm);
    CHECK(llama.positions == PositionKind::Rotary);
    CHECK(llama.bias == BiasKind::None);
    CHECK(!llama.tied_embeddings);
    CHECK(!llama.dropout);
    CHECK(llama.kvHeads() == 8);
    CHECK(llama.ffnHidden() == 28672);
    CHECK(hf("qwen2-7b").bias == BiasKind::Qkv);
    CHECK(hf("mistral-7b-v0.1").family == "mistral");
}

TEST_CASE("command-line family flags describe the same model as its config.json", "[families]")
{
    TransformerConfig c {32, 4096, 32, 2048, 128256, 1, 2};
    c.ffn_hidden = 14336;
    c.kv_heads = 8;
    c.mlp = MlpKind::SwiGlu;
    c.norm = NormKind::RmsNorm;
    c.positions = PositionKind::Rotary;
    c.bias = BiasKind::None;
    c.tied_embeddings = false;
    CHECK(transformerParameters(c) == transformerParameters(hf("llama-3-8b")));
}

TEST_CASE("bad config.json files are refused in one line naming the field", "[families]")
{
    auto unknown = modelFamiliesLlama8b();
    unknown["model_type"] = "falcon";
    CHECK(refusal(unknown)
        == "/model_type: 'falcon' is not an architecture Pipewright reads (gpt2, llama, mistral, qwen2)");
    auto missing = modelFamiliesLlama8b();
    missing.erase("intermediate_size");
    CHECK(refusal(missing) == "/intermediate_size: missing required field");
    auto heads = modelFamiliesLlama8b();
    heads["num_attention_heads"] = 30;
    CHECK(refusal(heads).rfind("/num_attention_heads: 30 does not divide hidden_size (4096)", 0) == 0);
    auto kv = modelFamiliesLlama8b();
    kv["num_key_value_heads"] = 5;
    CHECK(refusal(kv).rfind("/num_key_value_heads: 5 does not divide num_attention_heads (32)", 0) == 0);
    auto bias = modelFamiliesLlama8b();
    bias["attention_bias"] = true;
    CHECK(refusal(bias).rfind("/attention_bias: true: ", 0) == 0);
    auto act = modelFamiliesLlama8b();
    act["hidden_act"] = "gelu";
    CHECK(refusal(act).rfind("/hidden_act: 'gelu' is not SiLU", 0) == 0);
    auto cls = json {{"architectures", {"FalconForCausalLM"}}};
    CHECK(refusal(cls).rfind("/architectures/0: 'FalconForCausalLM' is not an architecture", 0) == 0);
    CHECK(refusal(json {{"model_type", "llama"}, {"num_hidden_layers", "32"}})
        == "/num_hidden_layers: expected an integer, got \"32\"");
    for (const auto& message : {refusal(unknown), refusal(missing), refusal(heads), refusal(kv)})
        CHECK(message.find('\n') == std::string::npos);

    // A file's error names the file and the line of its field.
    try {
        loadHfConfig(hfFile("llama-3-8b"), RunShape {9000, 1, 2});
        FAIL("a sequence beyond max_position_embeddings was accepted");
    } catch (const InputError& e) {
        CHECK(
            std::string(e.what()) == "--seq: 9000 tokens exceed the model's 8192 positions (max_position_embeddings)");
    }
    CHECK_THROWS_WITH(loadHfConfig(std::string(PW_TEST_DATA_DIR) + "/hf/README.md", RunShape {1024, 1, 2}),
        Catch::Contains("README.md"));
}

TEST_CASE("a block's FLOPs are 2 per multiply-add of its products plus the attention core", "[families]")
{
    const auto c = hf("llama-3-8b", 8192);
    const double T = 8192, h = 4096, s = 8192;
    const auto p = transformerParameters(c);
    const double linear = p.per_layer - 2 * h; // the products' weights: the block has no biases, two RMSNorms
    CHECK(blockForwardFlops(c, 1) == Approx(2 * T * linear + 4 * s * s * h).epsilon(1e-12));
    // A model's training FLOPs per token: 6 N plus the attention's 12 l s h (Llama 3 paper's convention, causal
    // attention counted whole) with N the parameters outside the embedding's lookup.
    const double N = p.total() - p.embedding;
    CHECK(transformerFlops(c, 1, Recompute::None) / T == Approx(6 * N + 12.0 * 32 * s * h).epsilon(1e-3));
    // Grouped-query attention shrinks K and V: QKV is h x (h + 2 x 8 x 128).
    CHECK(blockProducts(c)[0].n == 4096 + 2 * 1024);
    CHECK(blockProducts(c)[2].n == 2 * 14336); // SwiGLU's gate and up
}

TEST_CASE("the profile format carries the family's fields", "[families]")
{
    const auto c = hf("qwen2-7b", 4096);
    const auto m = transformerProfile(c, *devicePreset("H100"));
    const json j = toJson(m);
    CHECK(j["architecture"]["type"] == "transformer");
    CHECK(j["architecture"]["family"] == "qwen2");
    CHECK(j["architecture"]["kv_heads"] == 4);
    CHECK(j["architecture"]["mlp"] == "swiglu");
    CHECK(j["architecture"]["bias"] == "qkv");
    CHECK(modelFromJson(j) == m);

    // GPT-2's block keeps the first format: type "gpt" and no family fields.
    const auto g = transformerProfile(TransformerConfig {12, 768, 12, 1024, 50257, 1, 2}, *devicePreset("H100"));
    const json gj = toJson(g);
    CHECK(gj["architecture"]["type"] == "gpt");
    CHECK(!gj["architecture"].contains("mlp"));
    CHECK(modelFromJson(gj) == g);
    json bad = gj;
    bad["architecture"]["mlp"] = "swiglu";
    CHECK_THROWS_WITH(modelFromJson(bad), Catch::StartsWith("/architecture/mlp: describes a model family"));
    bad = j;
    bad["architecture"]["norm"] = "batchnorm";
    CHECK_THROWS_WITH(modelFromJson(bad), "/architecture/norm: 'batchnorm' is not one of layernorm | rmsnorm");
    bad = j;
    bad["layers"][1]["activation_parts"]["sharded"] = 1.0;
    CHECK_THROWS_WITH(modelFromJson(bad), Catch::StartsWith("/layers/1/activation_parts: its parts add up to"));
}

TEST_CASE(
    "a GPT block with materialized scores keeps Korthikanti et al.'s s b h (34 + 5 a s / h)", "[families][memory]")
{
    // "Reducing Activation Recomputation in Large Transformer Models" (2022), section 4.1, Eq. 1, at 16 bits with
    // dropout: 10 s b h replicated on tensor-parallel ranks, 24 s b h split, 5 a s^2 b in the attention core.
    for (auto [l, h, a] : {std::tuple {96, 12288, 96}, {105, 20480, 128}, {24, 1024, 16}}) {
        TransformerConfig c {l, h, a, 2048, 51200, 4, 2};
        c.flash_attention = false;
        const double s = 2048, b = 4, sbh = s * b * h;
        const auto parts = blockActivations(c);
        CHECK(parts.replicated == Approx(10 * sbh));
        CHECK(parts.sharded == Approx(24 * sbh));
        CHECK(parts.attention_core == Approx(5 * a * s * s * b));
        CHECK(parts.total() == Approx(sbh * (34 + 5.0 * a * s / h)));
        CHECK(parts.input == Approx(2 * sbh)); // full recomputation's 2 s b h
        // A flash-style kernel keeps no scores: a 4-byte log-sum-exp per head and token.
        c.flash_attention = true;
        CHECK(blockActivations(c).attention_core == Approx(4 * a * s * b));
    }
}

TEST_CASE("rotary frequencies and the norms' epsilon come from config.json and stay in the profile", "[families]")
{
    // Llama 3.1 8B's config.json: rope_theta 500000 and the llama3 rope_scaling; rms_norm_eps 1e-5.
    auto j = modelFamiliesLlama8b();
    j["rope_theta"] = 500000.0;
    j["rms_norm_eps"] = 1e-5;
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}};
    const auto c = transformerFromHfConfig(j, RunShape {2048, 1, 2});
    CHECK(c.rotary == RotaryConfig {500000.0, 8.0, 1.0, 4.0, 8192});
    CHECK(c.norm_eps == 1e-5);
    // Absent: transformers' defaults (theta 10000, no scaling, LlamaConfig's rms_norm_eps 1e-6).
    const auto plain = transformerFromHfConfig(modelFamiliesLlama8b(), RunShape {2048, 1, 2});
    CHECK(plain.rotary == RotaryConfig {});
    CHECK(plain.norm_eps == 1e-6);
    CHECK(hf("llama-3-8b").rotary.theta == 500000.0);
    // The profile keeps them.
    const auto m = transformerProfile(c, *devicePreset("H100"));
    const json pj = toJson(m);
    CHECK(pj["architecture"]["rotary"]["factor"] == 8.0);
    CHECK(modelFromJson(pj) == m);
    // A scaling Pipewright does not model is refused naming the field.
    auto yarn = j;
    yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    CHECK(refusal(yarn).rfind("/rope_scaling/rope_type: 'yarn' is not a rotary scaling", 0) == 0);
    auto bad = pj;
    bad["architecture"]["rotary"]["theta"] = 0;
    CHECK_THROWS_WITH(modelFromJson(bad), Catch::StartsWith("/architecture/rotary: theta must be > 0"));
}
