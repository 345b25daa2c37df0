// SPDX-License-Identifier: MIT
// Single-process CPU training speed: the engine (one stage, in process) against PyTorch (Debian's python3-torch,
// tests/oracle/gpt2_torch.py --fused) on the same GPT-2, checkpoint, tokens, batch and threads. Both time the steps
// after the first (allocation and thread-pool warm-up). Prints tokens/s of each, the ratio (target >= 1.0) and the
// largest relative loss difference (the two must also agree). Without torch it prints the engine's numbers alone.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/llmc.h"
#include "engine/local_run.h"
#include "engine/ops.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;
namespace fs = std::filesystem;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

engine::Checkpoint randomCheckpoint(const engine::ModelConfig& config)
{
    engine::Checkpoint c;
    c.config = config;
    c.params.resize(engine::parameterCount(config));
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (auto& p : c.params)
        p = normal(rng);
    // Layer-norm scales at 1 (as GPT-2 initialises them).
    for (const auto& t : engine::checkpointTensors(config))
        if (t.init.kind == engine::TensorInit::Kind::Ones)
            std::fill_n(c.params.begin() + static_cast<long>(t.offset), t.size, 1.0f);
    return c;
}

bool torchAvailable()
{
    return std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

} // namespace

int main(int argc, char** argv)
{
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 8;
    // A GPT-2 of 6 blocks x 256 channels (4.8 M parameters), 8 sequences of 128 tokens per step.
    planner::TransformerConfig shape;
    shape.layers = 6;
    shape.hidden = 256;
    shape.heads = 8;
    shape.sequence = 128;
    shape.vocab = 512;
    shape.microbatch = 8;
    shape.bytes_per_element = 4;
    const auto plan = test::gpt2Plan(shape, {{0, shape.layers + 1, {0}}}, "gpipe", 1);
    engine::TrainingSetup setup = engine::trainingSetup(plan);
    setup.adam.lr = 3e-4;
    setup.adam.weight_decay = 0.0;
    const auto checkpoint = randomCheckpoint(setup.model);
    setup.model = checkpoint.config;
    setup.checkpoint = std::make_shared<const std::vector<float>>(checkpoint.params);

    const fs::path dir = fs::temp_directory_path() / ("pw-bench-torch-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    engine::writeCheckpoint(dir / "model.bin", checkpoint);
    engine::DataSpec spec;
    spec.synthetic_tokens = 200000;
    const auto tokens = engine::loadTokens(spec, shape.vocab);
    engine::writeTokens(dir / "tokens.bin", tokens);
    const engine::DataOrder data(tokens, 1, shape.microbatch, shape.sequence);

    engine::ops::setThreads(threads);
    // The engine: a first step alone (warm-up), then the timed steps from a fresh start.
    engine::runLocally(plan, setup, data, 1);
    const auto run = engine::runLocally(plan, setup, data, steps);
    // Time of the steps after the first, from the spans (the first step's last span ends it).
    double firstEnd = 0;
    double lastEnd = 0;
    const std::size_t perStep = run.spans.size() / static_cast<std::size_t>(steps);
    for (std::size_t i = 0; i < run.spans.size(); ++i) {
        lastEnd = std::max(lastEnd, run.spans[i].t1);
        if (i < perStep)
            firstEnd = std::max(firstEnd, run.spans[i].t1);
    }
    const double tokensPerStep = static_cast<double>(shape.microbatch) * shape.sequence;
    const double engineTps = (steps - 1) * tokensPerStep / (lastEnd - firstEnd);
    std::printf("engine vs PyTorch, GPT-2 %d x %d (%zu parameters), batch %d x %d tokens, %d threads, %d steps\n",
        shape.layers, shape.hidden, engine::parameterCount(setup.model), shape.microbatch, shape.sequence, threads,
        steps);
    std::printf("  engine (%s):  %.0f tokens/s\n", engine::ops::blasName().c_str(), engineTps);

    if (!torchAvailable()) {
        std::printf("  PyTorch: skipped (%s has no torch; apt install python3-torch)\n", kPython);
        fs::remove_all(dir);
        return 0;
    }
    // PyTorch's set_num_threads does not reach OpenBLAS's own thread pool (Debian's torch calls OpenBLAS for
    // fp32 matrix products): without these the baseline multiplies on every core.
    const std::string limit = std::to_string(threads);
    const std::string command = "OPENBLAS_NUM_THREADS=" + limit + " OMP_NUM_THREADS=" + limit + " " + kPython + " "
        + PW_SOURCE_DIR + std::string("/tests/oracle/gpt2_torch.py --fused") + " --checkpoint "
        + (dir / "model.bin").string() + " --tokens " + (dir / "tokens.bin").string() + " --microbatches 1 --batch "
        + std::to_string(shape.microbatch) + " --seq " + std::to_string(shape.sequence) + " --steps "
        + std::to_string(steps) + " --lr 3e-4 --threads " + std::to_string(threads);
    std::FILE* pipe = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[4096];
    for (std::size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
        out.append(buffer, n);
    if (!pipe || ::pclose(pipe) != 0) {
        std::printf("  PyTorch: failed (%s)\n", command.c_str());
        fs::remove_all(dir);
        return 1;
    }
    const auto report = nlohmann::json::parse(out);
    const double torchTps = report.at("tokens_per_s").get<double>();
    const auto torchLosses = report.at("losses").get<std::vector<double>>();
    double worst = 0;
    for (std::size_t i = 0; i < torchLosses.size() && i < run.losses.size(); ++i)
        worst = std::max(worst, std::abs(run.losses[i] - torchLosses[i]) / std::abs(torchLosses[i]));
    std::printf("  PyTorch (fused GELU, same threads): %.0f tokens/s\n", torchTps);
    std::printf("  ratio engine / PyTorch: %.2fx (target >= 1.0); largest relative loss difference %.1e\n",
        engineTps / torchTps, worst);
    fs::remove_all(dir);
    return 0;
}
