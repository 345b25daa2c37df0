// SPDX-License-Identifier: MIT
// GPT-2 124M training on one GPU (issue 20, item 8): the engine's tokens/s and MFU in bf16 mixed precision at
// batch 16, 32 and 64 x 1024 against PyTorch eager and torch.compile measured in the same run
// (tests/oracle/gpt2_torch_gpu_bench.py: bf16 autocast, fused AdamW, flash attention, random tokens); a 2- and a
// 4-stage pipeline (1F1B, zb-h1) whose stages share the GPU (each its own stream, transfers and the tied embedding's
// all-reduce over the device fabric; and, for comparison, through host memory as before issue 33) against the
// one-stage run of the same microbatches, with their losses; tensor parallelism (t = 2, 4, issue 34) with its ranks on
// the GPU beside them; and the iteration time the planner predicts from a
// profile measured on
// the GPU (engine::measureProfile) against the measured one. Every run times the steps after its warm-up steps.
// Prints a table; where no CUDA device is visible it says "skipped: no CUDA device" and exits 0.
//
// MFU = tokens/s x (6 N + 6 L C T) / peak (llm.c's count, gpt2_estimate_mfu: N the parameters with the padded
// vocabulary, the second term attention's score and value products), peak the GPU's dense bf16 tensor FLOP/s from
// its name. Last, where one block's time goes (issue 33 item 3): each kernel call of a GPT-2-small block at the
// first batch, forward and backward, timed by CUDA events (engine/kernel_timing.h), beside what the planner's shape
// model (planner/gpu_cost_model.h, its default curve for the GPU) charges for the same work.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/kernel_timing.h"
#include "engine/local_run.h"
#include "engine/profiler.h"
#include "planner/device_presets.h"
#include "planner/gpu_cost_model.h"
#include "planner/sim/simulator.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw;
using nlohmann::json;

namespace {

struct Options
{
    int steps = 10; ///< timed steps per run
    int warmup = 3; ///< untimed steps first (the arena's allocations, cuBLASLt's heuristics, torch.compile)
    std::vector<int> batches = {16, 32, 64};
    std::string python = "python3";
    std::string oracle; ///< the PyTorch script (empty: this source tree's, else tests/oracle/ under the cwd)
    bool torch = true;
    double peak_tflops = 0; ///< 0: from the GPU's name
    std::string json_path; ///< where to write the results too (empty: nowhere)
    bool kernels_only = false; ///< only the block's kernel table (part 4)
};

/// GPT-2 124M as llm.c trains it: 12 blocks, 768 channels in 12 heads, 1024 positions, vocabulary 50257 (padded
/// to 50304 by the engine); `microbatch` sequences per microbatch. An fp32 plan shape (what the engine's planning
/// checks accept): the precision is the backend's.
planner::TransformerConfig gpt2Small(int microbatch)
{
    planner::TransformerConfig c;
    c.layers = 12;
    c.hidden = 768;
    c.heads = 12;
    c.sequence = 1024;
    c.vocab = 50257;
    c.microbatch = microbatch;
    c.bytes_per_element = 4;
    return c;
}

/// A Llama of GPT-2 small's size (about 125 M parameters): 12 blocks of 768 channels, 12 query heads sharing 4 key
/// and value heads, SwiGLU of 2048, vocabulary 32000 (Llama 2's), untied head, rotary positions, 1024 positions.
planner::TransformerConfig llamaSmall(int microbatch)
{
    planner::TransformerConfig c = test::asLlama(gpt2Small(microbatch), 4, 2048);
    c.vocab = 32000;
    c.rotary.theta = 500000.0;
    return c;
}

engine::BackendFactory onTheGpu()
{
    return [](int) {
        engine::DeviceChoice choice;
        choice.cuda = 0;
        choice.precision = engine::Precision::Bf16Mixed;
        return std::shared_ptr<engine::Backend>(engine::makeBackend(choice));
    };
}

/// The dense bf16 tensor peak of the GPU named `name` (datasheet, no sparsity); 0 when unknown.
double peakFlops(const std::string& name, std::string& source)
{
    const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    if ((has("H100") || has("H200")) && has("PCIe")) {
        source = "H100 PCIe datasheet, dense bf16";
        return 756e12;
    }
    if (has("H100") || has("H200") || has("GH200")) {
        source = "H100/H200 SXM datasheet, dense bf16";
        return 989e12;
    }
    if (has("A100")) {
        source = "A100 datasheet, dense bf16";
        return 312e12;
    }
    source = "unknown GPU: give --peak-tflops";
    return 0;
}

/// @brief One training run's speed: tokens/s over the timed steps, the step time, the device memory's peak (every
/// stage's backend together: they share the GPU) and the losses.
struct Speed
{
    double tokens_per_s = 0;
    double step_s = 0;
    double peak_bytes = 0;
    std::vector<double> losses;
    /// Per device, the time its timed steps spent in each kind of action (ms per step; the pipelines' breakdown).
    std::vector<std::map<std::string, double>> ms_per_kind;
    std::string error; ///< why the run failed (then nothing else is set)
};

std::vector<std::int32_t> randomTokens(std::size_t count, int vocab)
{
    std::mt19937_64 rng(1234);
    std::uniform_int_distribution<int> token(0, vocab - 1);
    std::vector<std::int32_t> tokens(count);
    for (auto& t : tokens)
        t = static_cast<std::int32_t>(token(rng));
    return tokens;
}

/// Trains `plan` for warm-up + timed steps on the GPU, random tokens, GPT-2's initialisation; stages that share
/// the GPU linked as `links` says (the device fabric by default).
Speed trainEngine(const planner::Plan& plan, const Options& o, engine::LocalLinks links = engine::LocalLinks::Auto)
{
    Speed s;
    try {
        engine::TrainingSetup setup = engine::trainingSetup(plan);
        setup.adam.lr = 3e-4;
        setup.adam.beta2 = 0.95;
        setup.adam.weight_decay = 0.1;
        const int steps = o.warmup + o.steps;
        const std::size_t perStep = static_cast<std::size_t>(setup.microbatches) * setup.shape.batch * setup.shape.seq;
        const engine::DataOrder data(randomTokens(perStep * static_cast<std::size_t>(steps) + 1, setup.model.vocab),
            setup.microbatches, setup.shape.batch, setup.shape.seq);
        const auto run = engine::runLocally(plan, setup, data, steps, onTheGpu(), links);
        const double start = o.warmup > 0 ? run.step_ends.at(static_cast<std::size_t>(o.warmup - 1)) : 0.0;
        const double seconds = run.step_ends.back() - start;
        s.step_s = seconds / o.steps;
        s.tokens_per_s = static_cast<double>(perStep) / s.step_s;
        for (const auto& m : run.memory)
            s.peak_bytes += static_cast<double>(m.peak);
        s.losses = run.losses;
        for (const planner::Span& span : run.spans) {
            if (span.t0 < start)
                continue;
            if (s.ms_per_kind.size() <= static_cast<std::size_t>(span.device))
                s.ms_per_kind.resize(static_cast<std::size_t>(span.device) + 1);
            s.ms_per_kind[static_cast<std::size_t>(span.device)][std::string(planner::toString(span.kind))]
                += (span.t1 - span.t0) * 1e3 / o.steps;
        }
    } catch (const std::exception& e) {
        s.error = e.what();
    }
    return s;
}

/// @brief PyTorch's numbers for one batch (tests/oracle/gpt2_torch_gpu_bench.py's JSON), or why there are none.
struct TorchSpeed
{
    std::optional<double> eager, compiled; ///< tokens/s
    double compile_s = 0;
    double eager_first_loss = 0;
    std::string version, note;
};

TorchSpeed runTorch(int batch, const Options& o)
{
    TorchSpeed t;
    if (!o.torch) {
        t.note = "not run (--no-torch)";
        return t;
    }
    // A build carried to a GPU machine finds its source tree elsewhere: then the script under the working directory.
    std::string script = o.oracle;
    if (script.empty()) {
        script = std::string(PW_SOURCE_DIR) + "/tests/oracle/gpt2_torch_gpu_bench.py";
        if (!std::filesystem::exists(script))
            script = "tests/oracle/gpt2_torch_gpu_bench.py";
    }
    const std::string command = o.python + " '" + script + "' --batch " + std::to_string(batch) + " --steps "
        + std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup);
    std::fflush(stdout);
    std::FILE* pipe = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[4096];
    for (std::size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
        out.append(buffer, n);
    const int status = pipe ? ::pclose(pipe) : -1;
    const json report = json::parse(out, nullptr, false);
    if (status != 0 || report.is_discarded()) {
        t.note = "failed (" + command + ")";
        return t;
    }
    t.version = report.value("torch", "?");
    const auto speedOf = [&](const char* mode, std::optional<double>& into) {
        if (!report.contains(mode))
            return;
        const json& m = report[mode];
        if (m.contains("tokens_per_s"))
            into = m["tokens_per_s"].get<double>();
        else
            t.note += std::string(mode) + ": " + m.value("error", "?") + " ";
    };
    speedOf("eager", t.eager);
    speedOf("compile", t.compiled);
    if (report.contains("compile"))
        t.compile_s = report["compile"].value("compile_s", 0.0);
    if (report.contains("eager") && report["eager"].contains("losses") && !report["eager"]["losses"].empty())
        t.eager_first_loss = report["eager"]["losses"][0].get<double>();
    return t;
}

/// A profile of GPT-2 small at `microbatch` measured on this GPU (bf16 mixed, CUDA events).
planner::ModelProfile measuredProfile(int microbatch)
{
    engine::ProfileOptions po;
    po.shape = gpt2Small(microbatch);
    po.device.cuda = 0;
    po.device.precision = engine::Precision::Bf16Mixed;
    po.warmup = 2;
    po.repeats = 5;
    return engine::measureProfile(po);
}

/// The iteration time the planner predicts for `plan` with `profile`, every device of the plan on this one GPU (the
/// node's `gpus` all 0: the simulator lets stages that share it take turns). The GPU's own times as they are
/// (relative speed 1); the preset gives its memory and bandwidth (the optimizer step's cost).
double predictOnThisGpu(planner::Plan plan, const planner::ModelProfile& profile, const std::string& gpu)
{
    plan.model = profile;
    auto type = *planner::devicePreset(gpu.find("H200") != std::string::npos ? "H200" : "H100");
    type.relative_speed = 1.0;
    auto cluster = *plan.cluster;
    cluster.device_types = {type};
    cluster.nodes.at(0).device_type = type.name;
    cluster.nodes.at(0).gpus.assign(static_cast<std::size_t>(cluster.nodes.at(0).count), 0);
    plan.cluster = cluster;
    plan.validate();
    return planner::simulate(plan).iteration_time_s;
}

std::string rate(const std::optional<double>& tokensPerS, double flopsPerToken, double peak)
{
    if (!tokensPerS)
        return "n/a";
    char text[64];
    if (peak > 0)
        std::snprintf(text, sizeof text, "%.0f (%.1f %%)", *tokensPerS, *tokensPerS * flopsPerToken / peak * 100);
    else
        std::snprintf(text, sizeof text, "%.0f", *tokensPerS);
    return text;
}

std::string ratio(double a, const std::optional<double>& b)
{
    if (!b || *b <= 0 || a <= 0)
        return "n/a";
    char text[32];
    std::snprintf(text, sizeof text, "%.2fx", a / *b);
    return text;
}

std::vector<int> parseList(const char* text)
{
    std::vector<int> out;
    for (const char* p = text; *p;) {
        char* end = nullptr;
        const long value = std::strtol(p, &end, 10);
        if (end == p || value <= 0)
            break; // not a number: the list ends here
        out.push_back(static_cast<int>(value));
        p = *end == ',' ? end + 1 : end;
    }
    return out;
}

Options parse(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_gpu_train: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--steps")
            o.steps = std::max(1, std::atoi(value()));
        else if (a == "--warmup")
            o.warmup = std::max(1, std::atoi(value()));
        else if (a == "--batches")
            o.batches = parseList(value());
        else if (a == "--python")
            o.python = value();
        else if (a == "--oracle")
            o.oracle = value();
        else if (a == "--no-torch")
            o.torch = false;
        else if (a == "--peak-tflops")
            o.peak_tflops = std::atof(value());
        else if (a == "--json")
            o.json_path = value();
        else if (a == "--kernels-only")
            o.kernels_only = true;
        else {
            std::fprintf(stderr,
                "usage: bench_gpu_train [--steps N] [--warmup N] [--batches 16,32,64] [--python python3] "
                "[--oracle gpt2_torch_gpu_bench.py] [--no-torch] [--peak-tflops T] [--json FILE] [--kernels-only]\n");
            std::exit(a == "--help" ? 0 : 2);
        }
    }
    return o;
}

} // namespace

int main(int argc, char** argv)
{
    const Options o = parse(argc, argv);
    if (engine::cudaDeviceCount() == 0) {
        std::printf(
            "bench_gpu_train: skipped: no CUDA device%s\n", engine::cudaCompiledIn() ? "" : " (CUDA not compiled in)");
        return 0;
    }
    std::string gpu;
    {
        engine::DeviceChoice choice;
        choice.cuda = 0;
        choice.precision = engine::Precision::Bf16Mixed;
        gpu = engine::makeBackend(choice)->name();
    }
    // Which kernels run attention in bf16 (cuDNN's where it loads and takes GPT-2's shape): one call decides.
    std::string attentionKernels;
    try {
        const auto probe = engine::makeCudaBackend(0, engine::Precision::Bf16Mixed);
        const engine::AttentionShape a {1, 64, 12, 12, 64};
        engine::Buffer qkv(*probe, a.rows() * a.qkvColumns(), engine::DType::BF16);
        engine::Buffer out(*probe, a.rows() * a.channels(), engine::DType::BF16);
        engine::Buffer lse(*probe, probe->attentionStashCount(a), engine::DType::F32);
        probe->zero(qkv.data(), a.rows() * a.qkvColumns() * 2);
        probe->synchronize();
        const auto t0 = std::chrono::steady_clock::now(); // the first call builds cuDNN's plan (NVRTC compiles it)
        probe->attentionForward(out.data(), lse.as<float>(), qkv.data(), a);
        probe->synchronize();
        const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        attentionKernels = engine::cudaAttentionKernels(*probe);
        if (attentionKernels.rfind("cuDNN", 0) == 0) {
            char built[64];
            std::snprintf(built, sizeof built, " (a forward plan built in %.2f s)", first);
            attentionKernels += built;
        }
    } catch (const std::exception& e) {
        attentionKernels = std::string("unknown (") + e.what() + ")";
    }
    std::string peakSource;
    double peak = peakFlops(gpu, peakSource);
    if (o.peak_tflops > 0) {
        peak = o.peak_tflops * 1e12;
        peakSource = "--peak-tflops";
    }
    const auto config = engine::ModelConfig::fromTransformer(gpt2Small(1));
    const double N = static_cast<double>(engine::parameterCount(config));
    const double flopsPerToken = 6 * N + 6.0 * config.layers * config.channels * config.max_seq;
    std::printf("GPU training benchmark: GPT-2 124M (L %d, C %d, NH %d, V %d padded to %d, T %d), bf16 mixed, "
                "%d timed steps after %d warm-up\n",
        config.layers, config.channels, config.heads, config.vocab, config.padded_vocab, config.max_seq, o.steps,
        o.warmup);
    std::printf("  device: %s\n  N = %.0f parameters, %.3g FLOP/token (6N + 6 L C T); peak %.0f TFLOP/s (%s)\n"
                "  attention: %s\n\n",
        gpu.c_str(), N, flopsPerToken, peak / 1e12, peakSource.c_str(), attentionKernels.c_str());
    std::fflush(stdout);

    json results = {{"gpu", gpu}, {"peak_flops", peak}, {"flops_per_token", flopsPerToken},
        {"attention_kernels", attentionKernels}};
    bool failed = false;

    if (!o.kernels_only) {
        // 1. One stage, the whole batch as one microbatch, against PyTorch.
        struct Row
        {
            int batch;
            Speed engine;
            TorchSpeed torch;
        };
        std::vector<Row> rows;
        for (int batch : o.batches) {
            Row row {batch, trainEngine(test::gpt2Plan(gpt2Small(batch), {{0, 13, {0}}}, "gpipe", 1), o), {}};
            if (!row.engine.error.empty()) {
                failed = true;
                std::printf("  engine, batch %d: failed: %s\n", batch, row.engine.error.c_str());
            }
            row.torch = runTorch(batch, o);
            rows.push_back(std::move(row));
        }
        std::printf("%-10s %-22s %-22s %-22s %-12s %-14s %s\n", "batch", "engine tok/s (MFU)", "eager tok/s (MFU)",
            "compile tok/s (MFU)", "vs eager", "vs compile", "engine peak");
        for (const auto& r : rows) {
            const std::optional<double> engineRate
                = r.engine.error.empty() ? std::optional<double>(r.engine.tokens_per_s) : std::nullopt;
            char memory[32];
            std::snprintf(memory, sizeof memory, "%.1f GiB", r.engine.peak_bytes / (1 << 30));
            std::printf("%-10s %-22s %-22s %-22s %-12s %-14s %s\n",
                (std::to_string(r.batch) + " x " + std::to_string(config.max_seq)).c_str(),
                rate(engineRate, flopsPerToken, peak).c_str(), rate(r.torch.eager, flopsPerToken, peak).c_str(),
                rate(r.torch.compiled, flopsPerToken, peak).c_str(),
                ratio(r.engine.tokens_per_s, r.torch.eager).c_str(),
                ratio(r.engine.tokens_per_s, r.torch.compiled).c_str(), memory);
            json j = {{"batch", r.batch}, {"engine_tokens_per_s", r.engine.tokens_per_s},
                {"engine_peak_bytes", r.engine.peak_bytes}};
            if (!r.engine.error.empty())
                j["engine_error"] = r.engine.error;
            if (r.torch.eager)
                j["eager_tokens_per_s"] = *r.torch.eager;
            if (r.torch.compiled)
                j["compile_tokens_per_s"] = *r.torch.compiled;
            results["batches"].push_back(j);
        }
        // What cuDNN's attention buys over the engine's own kernels, at the first batch.
        if (!rows.empty() && rows.front().engine.error.empty() && attentionKernels.rfind("cuDNN", 0) == 0) {
            const int batch = rows.front().batch;
            setenv("PW_CUDA_ATTENTION", "own", 1);
            const Speed own = trainEngine(test::gpt2Plan(gpt2Small(batch), {{0, 13, {0}}}, "gpipe", 1), o);
            unsetenv("PW_CUDA_ATTENTION");
            if (own.error.empty()) {
                std::printf("  engine at %d x %d with its own attention kernels: %.0f tok/s; with cuDNN's %.0f tok/s "
                            "(cuDNN / own %.2f)\n",
                    batch, config.max_seq, own.tokens_per_s, rows.front().engine.tokens_per_s,
                    rows.front().engine.tokens_per_s / own.tokens_per_s);
                results["own_attention"] = {{"batch", batch}, {"engine_tokens_per_s", own.tokens_per_s}};
            } else
                std::printf("  engine with its own attention kernels: failed: %s\n", own.error.c_str());
        }
        for (const auto& r : rows)
            if (r.batch == 16 && r.engine.error.empty() && r.torch.eager)
                std::printf("  target (issue 20): engine >= 1.00x PyTorch eager at 16 x %d: %s (%.2fx)\n",
                    config.max_seq, r.engine.tokens_per_s >= *r.torch.eager ? "met" : "NOT met",
                    r.engine.tokens_per_s / *r.torch.eager);
        for (const auto& r : rows) {
            if (!r.torch.note.empty())
                std::printf("  PyTorch, batch %d: %s\n", r.batch, r.torch.note.c_str());
            if (r.engine.error.empty() && r.torch.eager)
                std::printf("  batch %d: first loss engine %.3f, PyTorch %.3f (ln V = %.3f); torch %s compiled in "
                            "%.0f s\n",
                    r.batch, r.engine.losses.front(), r.torch.eager_first_loss, std::log(config.vocab),
                    r.torch.version.c_str(), r.torch.compile_s);
        }

        // 2. Pipelines on one GPU: 16 sequences as 4 microbatches of 4, one stage (gradient accumulation) against 2 and
        // 4 stages under 1F1B. The layers: embedding 0, blocks 1..12, head 13 (the head's classifier over 50304
        // columns costs about five blocks, so the cuts give it fewer blocks).
        std::printf("\nPipelines on one GPU, 16 x %d per step as 4 microbatches of 4 (stages share the GPU, each on "
                    "its own stream; links: the device fabric, or host memory as before issue 33):\n",
            config.max_seq);
        const std::vector<test::StageCut> two {{0, 8, {0}}, {9, 13, {1}}};
        const std::vector<test::StageCut> four {{0, 4, {0}}, {5, 8, {1}}, {9, 12, {2}}, {13, 13, {3}}};
        struct Pipeline
        {
            std::string name;
            std::vector<test::StageCut> cuts;
            std::string kind;
            engine::LocalLinks links = engine::LocalLinks::Auto;
            int t = 1; ///< tensor-parallel ranks of each stage (issue 34: their collectives over the fabric)
            bool sequence = false;
        };
        const std::vector<Pipeline> pipelines = {
            {"one stage", {{0, 13, {0}}}, "1f1b"},
            {"2 stages 1F1B", two, "1f1b"},
            {"4 stages 1F1B", four, "1f1b"},
            {"4 stages zb-h1", four, "zb-h1"},
            {"2 stages 1F1B, host links", two, "1f1b", engine::LocalLinks::Host},
            {"4 stages 1F1B, host links", four, "1f1b", engine::LocalLinks::Host},
            {"t 2 (2 ranks, one stage)", {{0, 13, {0, 1}}}, "1f1b", engine::LocalLinks::Auto, 2},
            {"t 2, sequence parallel", {{0, 13, {0, 1}}}, "1f1b", engine::LocalLinks::Auto, 2, true},
            {"t 4, sequence parallel", {{0, 13, {0, 1, 2, 3}}}, "1f1b", engine::LocalLinks::Auto, 4, true},
        };
        double oneStage = 0;
        std::vector<double> oneStageLosses;
        std::optional<planner::ModelProfile> profile4; // measured at microbatch 4, for the predictions
        try {
            profile4 = measuredProfile(4);
        } catch (const std::exception& e) {
            failed = true;
            std::printf("  no profile for the predictions: %s\n", e.what());
        }
        for (const auto& [name, cuts, kind, links, t, sequence] : pipelines) {
            auto plan = test::gpt2Plan(gpt2Small(4), cuts, kind, 4);
            plan.tensor_parallel = t;
            plan.schedule.sequence_parallel = sequence;
            plan.validate();
            const Speed s = trainEngine(plan, o, links);
            if (!s.error.empty()) {
                failed = true;
                std::printf("  %-26s failed: %s\n", name.c_str(), s.error.c_str());
                continue;
            }
            if (oneStage == 0) {
                oneStage = s.tokens_per_s;
                oneStageLosses = s.losses;
            }
            // The losses against the one-stage run's: the same microbatches, the same initialisation.
            double worst = 0;
            for (std::size_t k = 0; k < std::min(s.losses.size(), oneStageLosses.size()); ++k)
                worst = std::max(worst, std::abs(s.losses[k] - oneStageLosses[k]) / std::abs(oneStageLosses[k]));
            const double predicted = profile4 ? predictOnThisGpu(plan, *profile4, gpu) : 0.0;
            std::printf("  %-26s %9.0f tok/s  %7.2f ms/step (predicted %.2f, %+.1f %%)  %.2fx the one-stage run  peak "
                        "%.1f GiB  losses within %.1e of one stage's\n",
                name.c_str(), s.tokens_per_s, s.step_s * 1e3, predicted * 1e3, (predicted / s.step_s - 1) * 100,
                oneStage > 0 ? s.tokens_per_s / oneStage : 0.0, s.peak_bytes / (1 << 30), worst);
            // Where each device's step goes (span time per action kind; transfers include their waits).
            for (std::size_t d = 0; d < s.ms_per_kind.size() && cuts.size() > 1 && t == 1; ++d) {
                std::printf("    device %zu, ms per step:", d);
                for (const auto& [kind, ms] : s.ms_per_kind[d])
                    std::printf("  %s %.1f", kind.c_str(), ms);
                std::printf("\n");
            }
            results["pipelines"].push_back(
                {{"name", name}, {"tensor_parallel", t}, {"tokens_per_s", s.tokens_per_s}, {"step_s", s.step_s},
                    {"ms_per_kind", s.ms_per_kind}, {"losses", s.losses}, {"predicted_s", predicted}});
        }

        // 2b. The Llama family beside GPT-2 at the same size, 16 x 1024 tokens per step as 4 microbatches of 4.
        std::printf("\nLlama beside GPT-2 on one stage, 16 x %d per step as 4 microbatches of 4:\n", config.max_seq);
        for (const auto& [name, shape] : {std::pair {std::string("GPT-2 124M"), gpt2Small(4)},
                 std::pair {std::string("Llama ~125M"), llamaSmall(4)}}) {
            const auto model = engine::ModelConfig::fromTransformer(shape);
            const Speed s = trainEngine(test::gpt2Plan(shape, {{0, 13, {0}}}, "gpipe", 4), o);
            if (!s.error.empty()) {
                failed = true;
                std::printf("  %-12s failed: %s\n", name.c_str(), s.error.c_str());
                continue;
            }
            std::printf("  %-12s %5.1f M parameters  %9.0f tok/s  %7.2f ms/step  loss %.3f -> %.3f  peak %.1f GiB\n",
                name.c_str(), static_cast<double>(engine::parameterCount(model)) / 1e6, s.tokens_per_s, s.step_s * 1e3,
                s.losses.empty() ? 0.0 : s.losses.front(), s.losses.empty() ? 0.0 : s.losses.back(),
                s.peak_bytes / (1 << 30));
            results["families"].push_back({{"name", name}, {"parameters", engine::parameterCount(model)},
                {"tokens_per_s", s.tokens_per_s}, {"step_s", s.step_s}, {"losses", s.losses}});
        }

        // 3. The planner's prediction from a profile measured on this GPU, against the one-stage batch-16 run.
        const int predictedBatch = 16;
        try {
            const planner::ModelProfile profile = measuredProfile(predictedBatch);
            const double predicted
                = predictOnThisGpu(test::gpt2Plan(gpt2Small(predictedBatch), {{0, 13, {0}}}, "gpipe", 1), profile, gpu);
            // The one-stage run of that batch from the first table, or a run of its own when it was not measured.
            const auto same
                = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.batch == predictedBatch; });
            const Speed measured = same != rows.end()
                ? same->engine
                : trainEngine(test::gpt2Plan(gpt2Small(predictedBatch), {{0, 13, {0}}}, "gpipe", 1), o);
            if (!measured.error.empty())
                throw std::runtime_error(measured.error);
            double forward = 0, backward = 0;
            for (const auto& l : profile.layers) {
                forward += l.forward_ms;
                backward += l.backward_ms;
            }
            std::printf("\nPrediction from a profile measured on the GPU (%d x %d, one stage): measured %.2f ms/step, "
                        "predicted %.2f ms (%+.1f %%); the profile's layers: forward %.2f ms, backward %.2f ms\n",
                predictedBatch, config.max_seq, measured.step_s * 1e3, predicted * 1e3,
                (predicted / measured.step_s - 1) * 100, forward, backward);
            results["prediction"]
                = {{"batch", predictedBatch}, {"measured_s", measured.step_s}, {"predicted_s", predicted}};
        } catch (const std::exception& e) {
            failed = true;
            std::printf("\nPrediction: failed: %s\n", e.what());
        }
    }

    // 4. Where one block's time goes, kernel by kernel, against the planner's shape model.
    try {
        const int batch = o.batches.empty() ? 16 : o.batches.front();
        engine::ProfileOptions po;
        po.shape = gpt2Small(batch);
        po.shape.bytes_per_element = 2; // bf16: what the model's memory traffic is priced in
        po.device.cuda = 0;
        po.device.precision = engine::Precision::Bf16Mixed;
        po.warmup = 3;
        po.repeats = 10;
        const std::vector<engine::KernelCall> calls = engine::measureLayerKernels(po, 1);
        const planner::DeviceType type
            = *planner::devicePreset(gpu.find("H200") != std::string::npos ? "H200" : "H100");
        const planner::GpuCostModel model(type, nullptr, planner::defaultGpuCurve(type));
        const planner::LayerEstimate estimate = planner::transformerBlockEstimate(po.shape, model);
        std::printf("\nOne GPT-2-small block at %d x %d, kernel by kernel (median of %d passes, CUDA events), "
                    "against the planner's shape model for %s (default curve):\n",
            batch, config.max_seq, po.repeats, type.name.c_str());
        std::printf("  %-20s %-36s %10s %10s %8s\n", "kernel", "shape", "measured", "model", "ratio");
        double measured[2] = {0, 0}, priced[2] = {0, 0};
        json rowsJson = json::array();
        for (const engine::KernelCall& c : calls) {
            const bool backward = c.backward;
            const double m = engine::modelSeconds(c, model);
            measured[backward] += c.seconds;
            priced[backward] += m;
            char r[16] = "-";
            if (m > 0)
                std::snprintf(r, sizeof r, "%.2fx", c.seconds / m);
            std::printf("  %-20s %-36s %7.1f us %7.1f us %8s\n", c.kernel.c_str(), c.shape.c_str(), c.seconds * 1e6,
                m * 1e6, r);
            rowsJson.push_back({{"kernel", c.kernel}, {"shape", c.shape}, {"measured_s", c.seconds}, {"model_s", m}});
        }
        std::printf("  forward:  kernels %.3f ms, their model %.3f ms; the planner's block estimate %.3f ms\n",
            measured[0] * 1e3, priced[0] * 1e3, estimate.forward_ms);
        std::printf("  backward: kernels %.3f ms, their model %.3f ms; the planner's block estimate %.3f ms "
                    "(I %.3f + W %.3f)\n",
            measured[1] * 1e3, priced[1] * 1e3, estimate.backwardMs(), estimate.backward_input_ms,
            estimate.backward_weight_ms);
        results["block_kernels"] = {{"batch", batch}, {"calls", rowsJson}, {"estimate_forward_ms", estimate.forward_ms},
            {"estimate_backward_ms", estimate.backwardMs()}};

        // The same block's attention through the engine's own kernels (PW_CUDA_ATTENTION=own), beside the above.
        if (attentionKernels.rfind("cuDNN", 0) == 0) {
            setenv("PW_CUDA_ATTENTION", "own", 1);
            const std::vector<engine::KernelCall> own = engine::measureLayerKernels(po, 1);
            unsetenv("PW_CUDA_ATTENTION");
            std::printf("  attention through the engine's own kernels instead of cuDNN:\n");
            json ownJson = json::array();
            for (std::size_t i = 0; i < own.size() && i < calls.size(); ++i)
                if (own[i].kernel.rfind("attention", 0) == 0) {
                    std::printf("  %-20s own %7.1f us, cuDNN %7.1f us (own / cuDNN %.2f)\n", own[i].kernel.c_str(),
                        own[i].seconds * 1e6, calls[i].seconds * 1e6, own[i].seconds / calls[i].seconds);
                    ownJson.push_back(
                        {{"kernel", own[i].kernel}, {"own_s", own[i].seconds}, {"cudnn_s", calls[i].seconds}});
                }
            results["block_kernels"]["attention_own_vs_cudnn"] = ownJson;
        }
    } catch (const std::exception& e) {
        failed = true;
        std::printf("\nBlock kernels: failed: %s\n", e.what());
    }

    if (!o.json_path.empty())
        std::ofstream(o.json_path) << results.dump(2) << "\n";
    return failed ? 1 : 0;
}
