// SPDX-License-Identifier: MIT
// Checkpoints in Hugging Face's safetensors layout: written whole or by stages (as a run's --save writes them, each
// stage's process its own tensors), read back equal, refused naming the file and the field when they are not the
// model's; read by an independent reader of the format (tests/oracle/safetensors_read.py, Python's standard library
// alone); and round-tripped with PyTorch: a file PyTorch wrote loads, trains one step here and is written, and
// PyTorch's own step from the same file gives the same tensors.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/llmc.h"
#include "engine/local_run.h"
#include "engine/safetensors.h"
#include "planner/errors.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/engine/python_oracle.h"
#include "tests/skip.h"

using namespace pw::engine;
using nlohmann::json;
namespace fs = std::filesystem;
namespace planner = pw::planner;
using pw::test::python;
using pw::test::pythonHas;
using pw::test::runCommand;
using pw::test::ScratchDir;
using pw::test::shellQuoted;

namespace {

/// A small Llama with a padded vocabulary (V 50, Vp 128: files hold 50 rows) and grouped-query attention.
planner::TransformerConfig safetensorsLlama()
{
    planner::TransformerConfig c = pw::test::tinyGpt2(2);
    c.hidden = 32;
    c.heads = 4;
    c.vocab = 50;
    return pw::test::asLlama(c, 2, 40);
}

std::vector<float> randomParams(const ModelConfig& config, unsigned seed)
{
    std::vector<float> p(parameterCount(config), 0.0f);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    for (const auto& t : checkpointTensors(config))
        for (std::size_t i = 0; i < t.size; ++i)
            if (!t.padded_rows
                || i / static_cast<std::size_t>(config.channels) < static_cast<std::size_t>(config.vocab))
                p[t.offset + i] = (t.init.kind == TensorInit::Kind::Ones ? 1.0f : 0.0f) + normal(rng);
    return p;
}

json readBack(const std::vector<fs::path>& files, const fs::path& dir)
{
    std::string command = shellQuoted(python()) + " "
        + shellQuoted(fs::path(PW_SOURCE_DIR) / "tests" / "oracle" / "safetensors_read.py");
    for (const auto& f : files)
        command += " " + shellQuoted(f);
    return json::parse(runCommand(command, dir / "reader-stderr.txt"));
}

/// Writes the model `params` as a two-stage run does: each stage its own part of one file, the head's first.
void writeByStages(const fs::path& path, const ModelConfig& config, const std::vector<float>& params)
{
    StageModel first(config, {1, 8}, 0, 1), second(config, {1, 8}, 2, config.layerCount() - 1);
    first.loadFrom(params);
    second.loadFrom(params);
    writeModelCheckpointPart(path, second);
    writeModelCheckpointPart(path, first);
}

} // namespace

TEST_CASE("safetensors: a model written whole or by stages reads back equal", "[engine][safetensors]")
{
    const ModelConfig config = ModelConfig::fromTransformer(safetensorsLlama());
    REQUIRE(config.padded_vocab == 128);
    const auto params = randomParams(config, 1);
    ScratchDir dir("safetensors");
    saveSafetensorsModel(dir.path / "whole.safetensors", config, params);
    writeByStages(dir.path / "staged.safetensors", config, params);
    for (const char* name : {"whole.safetensors", "staged.safetensors"}) {
        INFO(name);
        CHECK(isSafetensors(dir.path / name));
        CHECK(loadSafetensorsModel(dir.path / name, config) == params);
        CHECK(readModelCheckpoint(dir.path / name, config, 8).params == params);
    }
    // The vocabulary's matrices hold V rows in the file, and the header lists every tensor with transformers' names.
    const auto header = readSafetensorsHeader(dir.path / "staged.safetensors");
    CHECK(header.at("model.embed_tokens.weight").shape == std::vector<std::size_t> {50, 32});
    CHECK(header.at("lm_head.weight").shape == std::vector<std::size_t> {50, 32});
    CHECK(header.at("model.layers.1.self_attn.k_proj.weight").shape == std::vector<std::size_t> {16, 32});
    CHECK(header.size() == checkpointTensors(config).size());
    // bf16: rounded, so within bf16's 2^-8 of each value.
    saveSafetensorsModel(dir.path / "bf16.safetensors", config, params, true);
    CHECK(readSafetensorsHeader(dir.path / "bf16.safetensors").at("model.norm.weight").dtype == "BF16");
    const auto rounded = loadSafetensorsModel(dir.path / "bf16.safetensors", config);
    for (std::size_t i = 0; i < params.size(); i += 17)
        CHECK(rounded[i] == Approx(params[i]).epsilon(1.0 / 256).margin(1e-30));
    // An llm.c checkpoint is not one; a GPT-2 model still saves to llm.c's format by default.
    const ModelConfig gpt2 = {8, 50, 64, 2, 2, 16};
    writeCheckpoint(dir.path / "gpt2.bin", {gpt2, std::vector<float>(parameterCount(gpt2), 0.5f)});
    CHECK_FALSE(isSafetensors(dir.path / "gpt2.bin"));
    CHECK(readModelCheckpoint(dir.path / "gpt2.bin", gpt2, 8).params.front() == 0.5f);
}

TEST_CASE(
    "safetensors: files that are not the model's are refused naming the file and the field", "[engine][safetensors]")
{
    const ModelConfig config = ModelConfig::fromTransformer(safetensorsLlama());
    const auto params = randomParams(config, 2);
    ScratchDir dir("safetensors");
    const fs::path good = dir.path / "m.safetensors";
    saveSafetensorsModel(good, config, params);
    const auto refused
        = [&](const fs::path& path, const ModelConfig& c, const std::string& field, const std::string& what) {
              INFO(path.filename().string() << ": " << field);
              try {
                  checkModelCheckpoint(path, c, 8);
                  FAIL("accepted");
              } catch (const planner::InputError& e) {
                  CHECK(e.source() == path.string());
                  CHECK(e.field() == field);
                  CHECK_THAT(e.message(), Catch::Contains(what));
              }
          };
    ModelConfig wider = config;
    wider.ffn_hidden = 48;
    refused(good, wider, "model.layers.0.mlp.gate_proj.weight/shape", "[40, 32], the plan's model has [48, 32]");
    ModelConfig tied = config;
    tied.tied_embeddings = true;
    refused(good, tied, "lm_head.weight", "the plan ties the head to the embedding");
    ModelConfig untied = tied;
    saveSafetensorsModel(dir.path / "tied.safetensors", tied, std::vector<float>(parameterCount(tied), 0.0f));
    untied.tied_embeddings = false;
    refused(dir.path / "tied.safetensors", untied, "lm_head.weight", "missing");
    // Truncated: the last tensor's range runs past the end.
    const auto size = fs::file_size(good);
    fs::copy_file(good, dir.path / "short.safetensors");
    fs::resize_file(dir.path / "short.safetensors", size - 4);
    refused(dir.path / "short.safetensors", config, "lm_head.weight/data_offsets", "truncated");
    // A header that is not JSON.
    {
        std::ofstream out(dir.path / "bad.safetensors", std::ios::binary);
        const std::uint64_t n = 8;
        out.write(reinterpret_cast<const char*>(&n), 8);
        out << "{not json}xxxx";
    }
    refused(dir.path / "bad.safetensors", config, "header", "not JSON");
    // An llm.c file of another model, and a plan whose block llm.c's format cannot hold.
    const ModelConfig gpt2 = {8, 50, 64, 2, 2, 16};
    writeCheckpoint(dir.path / "gpt2.bin", {gpt2, std::vector<float>(parameterCount(gpt2), 0.0f)});
    refused(dir.path / "gpt2.bin", config, "header magic", "give a safetensors checkpoint");
    CHECK_THROWS_WITH(checkSaveDestination(dir.path / "out.bin", config), Catch::Contains(".safetensors"));
    CHECK_NOTHROW(checkSaveDestination(dir.path / "out.safetensors", config));
    CHECK_NOTHROW(checkSaveDestination(dir.path / "out.bin", gpt2));
}

TEST_CASE("safetensors: an independent reader of the format sees the model's tensors", "[engine][safetensors]")
{
    if (!pythonHas("json"))
        PW_SKIP("no Python at " + python() + " (PW_PYTHON picks another interpreter)");
    const ModelConfig config = ModelConfig::fromTransformer(safetensorsLlama());
    const auto params = randomParams(config, 3);
    ScratchDir dir("safetensors");
    writeByStages(dir.path / "m.safetensors", config, params);
    const json report = readBack({dir.path / "m.safetensors"}, dir.path);
    const json& tensors = report.at("files").at(0).at("tensors");
    const auto all = checkpointTensors(config);
    CHECK(tensors.size() == all.size());
    for (const auto& t : all) {
        INFO(t.name);
        REQUIRE(tensors.contains(t.name));
        const json& e = tensors.at(t.name);
        CHECK(e.at("dtype") == "F32");
        auto shape = t.shape;
        if (t.padded_rows)
            shape.front() = static_cast<std::size_t>(config.vocab);
        CHECK(e.at("shape").get<std::vector<std::size_t>>() == shape);
        double sum = 0;
        for (std::size_t i = 0; i < t.size; ++i)
            sum += params[t.offset + i];
        CHECK(e.at("sum").get<double>() == Approx(sum).margin(1e-4));
    }
}

TEST_CASE("safetensors: PyTorch's file loads, trains a step here, and is PyTorch's step when written back",
    "[engine][safetensors][oracle]")
{
    if (!pythonHas("torch"))
        PW_SKIP("no PyTorch for " + python() + " (Debian's python3-torch; PW_PYTHON picks another interpreter)");
    const auto shape = safetensorsLlama();
    const auto plan = pw::test::gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 2);
    TrainingSetup setup = trainingSetup(plan);
    ScratchDir dir("safetensors");
    const auto tokens = MarkovSource(shape.vocab, 3).generate(4000, 4);
    writeTokens(dir.path / "tokens.bin", tokens);
    saveSafetensorsModel(dir.path / "start.safetensors", setup.model, randomParams(setup.model, 4));
    const std::string oracle = shellQuoted(python()) + " "
        + shellQuoted(fs::path(PW_SOURCE_DIR) / "tests" / "oracle" / "llama_torch.py") + " --tokens "
        + shellQuoted(dir.path / "tokens.bin") + " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --microbatches 2 "
        + "--batch 2 --seq 8 --lr 0.001 --weight-decay 0.1 --eps 1e-05";
    // PyTorch writes the starting file again with its own writer (no step), then takes one step from it.
    runCommand(oracle + " --checkpoint " + shellQuoted(dir.path / "start.safetensors") + " --steps 0 --save "
            + shellQuoted(dir.path / "torch-start.safetensors"),
        dir.path / "oracle-stderr.txt");
    runCommand(oracle + " --checkpoint " + shellQuoted(dir.path / "torch-start.safetensors") + " --steps 1 --save "
            + shellQuoted(dir.path / "torch-step.safetensors"),
        dir.path / "oracle-stderr.txt");
    // Here: the run's reader, one step of the two-stage plan, each stage writing its part.
    const auto start = readModelCheckpoint(dir.path / "torch-start.safetensors", setup.model, 8);
    setup.checkpoint = std::make_shared<const std::vector<float>>(start.params);
    setup.adam.lr = 1e-3;
    setup.adam.weight_decay = 0.1;
    const auto result
        = runLocally(plan, setup, DataOrder(tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), 1);
    writeByStages(dir.path / "ours.safetensors", setup.model, result.final_parameters);
    const json report = readBack({dir.path / "ours.safetensors", dir.path / "torch-step.safetensors"}, dir.path);
    const json& ours = report.at("files").at(0).at("tensors");
    const json& theirs = report.at("files").at(1).at("tensors");
    CHECK(ours.size() == theirs.size());
    for (const auto& [name, e] : theirs.items()) {
        INFO(name);
        REQUIRE(ours.contains(name));
        CHECK(ours.at(name).at("shape") == e.at("shape"));
        CHECK(ours.at(name).at("dtype") == e.at("dtype"));
    }
    WARN("largest difference from PyTorch's step, relative to each tensor's largest value: "
        << report.at("max_relative").get<double>());
    CHECK(report.at("max_relative").get<double>() < 1e-5);
}
