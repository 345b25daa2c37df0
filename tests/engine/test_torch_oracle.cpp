// SPDX-License-Identifier: MIT
// The engine against an independent oracle: tests/oracle/gpt2_torch.py trains the same checkpoint on the same
// tokens with PyTorch (autograd, torch.optim.AdamW); every plan's per-step losses must equal PyTorch's. Skipped
// with a warning where /usr/bin/python3 has no torch (CI does not install it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
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
#include "tests/engine/engine_fixtures.h"

using namespace pw::engine;
using pw::test::gpt2Plan;
using pw::test::StageCut;
namespace fs = std::filesystem;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

struct TempDir
{
    fs::path path = fs::temp_directory_path() / ("pw-oracle-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

std::string quoted(const fs::path& p)
{
    return "'" + p.string() + "'";
}

bool torchAvailable()
{
    const std::string command = std::string(kPython) + " -c 'import torch' >/dev/null 2>&1";
    return std::system(command.c_str()) == 0;
}

/// Random parameters well away from GPT-2's small initialisation, so attention, biases and layer-norm scales all
/// matter from the first step: matrices and embeddings N(0, 0.15), biases and shifts N(0, 0.05), layer-norm
/// scales 1 + N(0, 0.1).
Checkpoint randomCheckpoint(const Gpt2Config& config, std::uint64_t seed)
{
    Checkpoint c;
    c.config = config;
    c.params.resize(parameterCount(config));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int t = 0; t < kTensorCount; ++t) {
        const auto tensor = static_cast<Tensor>(t);
        const bool scale = tensor == Tensor::Ln1w || tensor == Tensor::Ln2w || tensor == Tensor::Lnfw;
        const float mean = scale ? 1.0f : 0.0f;
        const float stddev = scale ? 0.1f : isDecayed(tensor) ? 0.15f : 0.05f;
        const int copies = isPerBlock(tensor) ? config.layers : 1;
        const std::size_t begin = checkpointOffset(config, tensor, 0);
        for (std::size_t i = 0; i < tensorSize(config, tensor) * static_cast<std::size_t>(copies); ++i)
            c.params[begin + i] = mean + stddev * normal(rng);
    }
    return c;
}

struct OracleArgs
{
    fs::path checkpoint, tokens;
    int microbatches, batch, seq, steps;
    double lr, weight_decay;
};

/// Runs tests/oracle/gpt2_torch.py; its per-step losses.
std::vector<double> torchLosses(const OracleArgs& a, const fs::path& dir)
{
    const fs::path script = fs::path(PW_SOURCE_DIR) / "tests" / "oracle" / "gpt2_torch.py";
    const fs::path errors = dir / "oracle-stderr.txt";
    std::ostringstream command;
    command.precision(17);
    command << kPython << " " << quoted(script) << " --checkpoint " << quoted(a.checkpoint) << " --tokens "
            << quoted(a.tokens) << " --microbatches " << a.microbatches << " --batch " << a.batch << " --seq " << a.seq
            << " --steps " << a.steps << " --lr " << a.lr << " --weight-decay " << a.weight_decay << " 2>"
            << quoted(errors);
    std::FILE* pipe = ::popen(command.str().c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string out;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
        out.append(buffer, n);
    const int status = ::pclose(pipe);
    std::ifstream errIn(errors);
    const std::string stderrText((std::istreambuf_iterator<char>(errIn)), std::istreambuf_iterator<char>());
    INFO("oracle: " << command.str() << "\nstdout: " << out << "\nstderr: " << stderrText);
    REQUIRE(status == 0);
    const auto json = nlohmann::json::parse(out);
    return json.at("losses").get<std::vector<double>>();
}

} // namespace

TEST_CASE("every plan trains to PyTorch's losses", "[engine][oracle]")
{
    if (!torchAvailable()) {
        WARN("PyTorch not installed: oracle skipped (" << kPython << " -c 'import torch' failed)");
        return;
    }
    constexpr int kSteps = 20;
    constexpr int kMicrobatches = 4;
    // 3 blocks, C = 32 in 4 heads, T = 16, V = 64 (padded to Vp = 128: the padding rows are exercised).
    auto shape = pw::test::tinyGpt2(3, 2);
    shape.hidden = 32;
    shape.heads = 4;
    shape.sequence = 16;
    shape.vocab = 64;

    struct Case
    {
        const char* name;
        std::vector<StageCut> stages;
        const char* kind;
    };
    const std::vector<Case> cases = {
        {"one stage", {{0, 4, {0}}}, "gpipe"},
        {"2 stages, 1F1B", {{0, 1, {0}}, {2, 4, {1}}}, "1f1b"},
        {"4 stages, GPipe", {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 4, {3}}}, "gpipe"},
        {"a replicated first stage", {{0, 1, {0, 1}}, {2, 4, {2}}}, "1f1b"},
    };

    TempDir dir;
    const Gpt2Config config = trainingSetup(gpt2Plan(shape, cases.front().stages, "gpipe", kMicrobatches)).model;
    REQUIRE(config.padded_vocab == 128);
    writeCheckpoint(dir.path / "model.bin", randomCheckpoint(config, 2024));
    const auto tokens = MarkovSource(config.vocab, 7).generate(20000, 8);
    writeTokens(dir.path / "tokens.bin", tokens);
    const auto checkpoint = std::make_shared<const std::vector<float>>(readCheckpoint(dir.path / "model.bin").params);

    OracleArgs args {dir.path / "model.bin", dir.path / "tokens.bin", kMicrobatches, shape.microbatch, shape.sequence,
        kSteps, 1e-3, 0.1};
    const auto expected = torchLosses(args, dir.path);
    REQUIRE(expected.size() == kSteps);

    std::ostringstream summary;
    for (const auto& c : cases) {
        INFO(c.name);
        const auto plan = gpt2Plan(shape, c.stages, c.kind, kMicrobatches);
        TrainingSetup setup = trainingSetup(plan);
        REQUIRE(setup.model == config);
        REQUIRE(setup.shape.batch == args.batch);
        setup.checkpoint = checkpoint;
        setup.adam.lr = args.lr;
        setup.adam.weight_decay = args.weight_decay;
        const auto result = runLocally(
            plan, setup, DataOrder(tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), kSteps);
        REQUIRE(result.losses.size() == kSteps);
        double worst = 0;
        for (int k = 0; k < kSteps; ++k) {
            INFO("step " << k);
            const double engine = result.losses[static_cast<std::size_t>(k)];
            const double torch = expected[static_cast<std::size_t>(k)];
            CHECK(engine == Approx(torch).epsilon(1e-4));
            worst = std::max(worst, std::abs(engine - torch) / std::abs(torch));
        }
        summary << "\n  " << c.name << ": " << worst;
    }
    WARN("max relative difference from PyTorch over " << kSteps << " steps (losses " << expected.front() << " -> "
                                                      << expected.back() << "):" << summary.str());
}
