// SPDX-License-Identifier: MIT
// The Llama family against an independent oracle: tests/oracle/llama_torch.py (PyTorch, transformers' Llama written
// out: RMSNorm, rotate_half rotary embeddings, grouped-query attention, SwiGLU, untied head) trains the same
// safetensors checkpoint on the same tokens; every plan's per-step losses must equal PyTorch's to 1e-5 relative.
// The model is the small Llama: 4 layers, hidden 256, 8 heads sharing 2 key/value heads, ffn 688, vocabulary
// 4,096. Skipped where the interpreter ($PW_PYTHON, else /usr/bin/python3) has no torch, as in CI; the model's
// parts are checked without PyTorch by test_model.cpp (finite differences, stage cuts, split backward).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/llmc.h"
#include "engine/local_run.h"
#include "engine/safetensors.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/engine/python_oracle.h"
#include "tests/skip.h"

using namespace pw::engine;
using nlohmann::json;
using pw::test::gpt2Plan;
using pw::test::python;
using pw::test::pythonHas;
using pw::test::runCommand;
using pw::test::ScratchDir;
using pw::test::shellQuoted;
using pw::test::StageCut;
namespace fs = std::filesystem;

namespace {

constexpr double kTolerance = 1e-5;

/// The small Llama, microbatches of 2 x 32 tokens.
pw::planner::TransformerConfig smallLlama()
{
    pw::planner::TransformerConfig c = pw::test::tinyGpt2(4);
    c.hidden = 256;
    c.heads = 8;
    c.vocab = 4096;
    c.sequence = 32;
    c = pw::test::asLlama(c, 2, 688);
    c.rotary.theta = 500000.0; // Llama 3's
    return c;
}

/// Runs the oracle; its report.
json runTorch(const fs::path& dir, const pw::planner::TransformerConfig& s, int microbatches, int steps, double lr,
    double decay, const std::string& extra = "")
{
    std::ostringstream cmd;
    cmd << shellQuoted(python()) << " " << shellQuoted(fs::path(PW_SOURCE_DIR) / "tests" / "oracle" / "llama_torch.py")
        << " --checkpoint " << shellQuoted(dir / "model.safetensors") << " --tokens " << shellQuoted(dir / "tokens.bin")
        << " --layers " << s.layers << " --hidden " << s.hidden << " --heads " << s.heads << " --kv-heads "
        << s.kvHeads() << " --microbatches " << microbatches << " --batch " << s.microbatch << " --seq " << s.sequence
        << " --steps " << steps << " --lr " << lr << " --weight-decay " << decay << " --eps " << s.norm_eps
        << " --theta " << s.rotary.theta << (s.tied_embeddings ? " --tied" : "") << extra;
    const std::string out = runCommand(cmd.str(), dir / "stderr.txt");
    return json::parse(out);
}

} // namespace

TEST_CASE("a small Llama trains to PyTorch's losses on every plan", "[engine][llama][oracle]")
{
    if (!pythonHas("torch"))
        PW_SKIP("no PyTorch for " + python() + " (Debian's python3-torch; PW_PYTHON picks another interpreter)");
    const auto shape = smallLlama();
    const int m = 4, steps = 20;
    const double lr = 1e-3, decay = 0.1;
    struct Case
    {
        std::string name;
        std::vector<StageCut> stages;
        std::string kind;
        int chunks = 1;
    };
    const std::vector<Case> cases = {
        {"one stage", {{0, 5, {0}}}, "gpipe"},
        {"2 stages, 1F1B", {{0, 2, {0}}, {3, 5, {1}}}, "1f1b"},
        {"4 stages, 1F1B", {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 5, {3}}}, "1f1b"},
        {"2 stages, zb-h1", {{0, 2, {0}}, {3, 5, {1}}}, "zb-h1"},
        {"4 stages, zb-h1", {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 5, {3}}}, "zb-h1"},
        {"interleaved, 2 devices x 2 chunks", {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {0}}, {4, 5, {1}}}, "interleaved", 2},
    };
    const auto first = gpt2Plan(shape, cases.front().stages, "gpipe", m);
    const TrainingSetup base = trainingSetup(first);
    REQUIRE(std::string(familyOf(base.model).name()) == "llama");
    // Weights of a trainable scale (logits of about unit deviation), norm scales 1 + N(0, 0.1) so that they matter.
    std::vector<float> params(parameterCount(base.model));
    std::mt19937_64 rng(2026);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& t : checkpointTensors(base.model))
        for (std::size_t i = 0; i < t.size; ++i)
            params[t.offset + i] = t.init.kind == TensorInit::Kind::Ones ? 1.0f + 0.1f * normal(rng)
                                                                         : (t.decayed ? 0.05f : 0.02f) * normal(rng);
    const auto tokens = MarkovSource(shape.vocab, 7).generate(20000, 8);

    ScratchDir dir("llama-oracle");
    saveSafetensorsModel(dir.path / "model.safetensors", base.model, params);
    writeTokens(dir.path / "tokens.bin", tokens);
    const json report = runTorch(dir.path, shape, m, steps, lr, decay);
    const auto expected = report.at("losses").get<std::vector<double>>();
    REQUIRE(expected.size() == static_cast<std::size_t>(steps));
    CHECK(expected.back() < expected.front()); // it learns

    const auto flat
        = std::make_shared<const std::vector<float>>(loadSafetensorsModel(dir.path / "model.safetensors", base.model));
    std::ostringstream summary;
    for (const auto& c : cases) {
        INFO(c.name);
        const auto plan = gpt2Plan(shape, c.stages, c.kind, m, c.chunks);
        TrainingSetup setup = trainingSetup(plan);
        setup.checkpoint = flat;
        setup.adam.lr = lr;
        setup.adam.weight_decay = decay;
        const auto result
            = runLocally(plan, setup, DataOrder(tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), steps);
        REQUIRE(result.losses.size() == expected.size());
        double worst = 0;
        for (std::size_t k = 0; k < expected.size(); ++k) {
            INFO("step " << k);
            CHECK(result.losses[k] == Approx(expected[k]).epsilon(kTolerance));
            worst = std::max(worst, std::abs(result.losses[k] - expected[k]) / std::abs(expected[k]));
        }
        summary << "\n  " << c.name << ": " << worst;
    }
    WARN("max relative difference from PyTorch " << report.at("torch") << " over " << steps << " steps (losses "
                                                 << expected.front() << " -> " << expected.back()
                                                 << "):" << summary.str());
}
