// SPDX-License-Identifier: MIT
// Training on a GPU against the CPU engine, the oracle of every CUDA kernel: the same plan, checkpoint and tokens
// give the CPU's losses in fp32 (one stage, 1F1B and GPipe pipelines whose stages share the GPU, PipeDream's
// weight stashing); bf16 mixed precision learns the Markov corpus as the CPU does and stays near fp32; a long run
// holds no more device memory than its second step did; the spans are the schedule's actions, each within its
// step. Every case is skipped where no CUDA device is visible.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/backend.h"
#include "engine/llmc.h"
#include "engine/local_run.h"
#include "tests/cuda/comparison.h"
#include "tests/engine/checkpoint_fixtures.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/skip.h"

using namespace pw::engine;
using pw::planner::ActionKind;
using pw::test::Comparison;
using pw::test::comparison;
using pw::test::gpt2Plan;
using pw::test::randomCheckpoint;
using pw::test::setupOf;
using pw::test::StageCut;
namespace fs = std::filesystem;

namespace {

/// Every device of a plan on CUDA device 0, each with a backend (a stream) of its own: stages that share the
/// GPU exchange activations and gradients in its memory over the run's device fabric.
BackendFactory onTheGpu(Precision precision)
{
    return [precision](int) {
        DeviceChoice choice;
        choice.cuda = 0;
        choice.precision = precision;
        return std::shared_ptr<Backend>(makeBackend(choice));
    };
}

/// The plan's losses over r.steps, on the CPU (`backends` empty) or on the GPU.
LocalRunResult cudaTrainingTrain(
    const Comparison& r, const std::vector<StageCut>& stages, const std::string& kind, const BackendFactory& backends)
{
    const auto plan = gpt2Plan(r.shape, stages, kind, r.microbatches);
    TrainingSetup setup = setupOf(r, plan);
    auto result = runLocally(
        plan, setup, DataOrder(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), r.steps, backends);
    REQUIRE(result.losses.size() == static_cast<std::size_t>(r.steps));
    for (const auto& name : result.backends)
        CHECK((backends ? name.rfind("cuda", 0) == 0 : name.rfind("cuda", 0) != 0));
    return result;
}

/// Per step, relative: the GPU's losses against the CPU's (or bf16's against fp32's).
void cudaTrainingRequireClose(const std::vector<double>& got, const std::vector<double>& expected, double tolerance)
{
    REQUIRE(got.size() == expected.size());
    double worst = 0;
    for (std::size_t k = 0; k < expected.size(); ++k) {
        INFO("step " << k << ": " << got[k] << " against " << expected[k]);
        REQUIRE(std::isfinite(got[k]));
        CHECK(got[k] == Approx(expected[k]).epsilon(tolerance));
        worst = std::max(worst, std::abs(got[k] - expected[k]) / std::abs(expected[k]));
    }
    WARN("largest relative difference over " << expected.size() << " steps: " << worst << " (losses "
                                             << expected.front() << " -> " << expected.back() << ")");
}

/// fp32 on the GPU (TF32 off) gives the CPU engine's losses to 1e-4 for `stages` under `kind`.
void fp32MatchesCpu(const std::vector<StageCut>& stages, const std::string& kind, const Comparison& r = comparison())
{
    const auto cpu = cudaTrainingTrain(r, stages, kind, {});
    CHECK(cpu.losses.back() < cpu.losses.front());
    const auto gpu = cudaTrainingTrain(r, stages, kind, onTheGpu(Precision::Fp32));
    cudaTrainingRequireClose(gpu.losses, cpu.losses, 1e-4);
}

} // namespace

TEST_CASE("CUDA fp32 gives the CPU engine's losses: one stage", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    fp32MatchesCpu({{0, 3, {0}}}, "gpipe");
}

TEST_CASE("CUDA fp32 gives the CPU engine's losses: 2-stage 1F1B on one GPU", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    fp32MatchesCpu({{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
}

TEST_CASE("CUDA fp32 gives the CPU engine's losses: 4-stage GPipe on one GPU", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    fp32MatchesCpu({{0, 0, {0}}, {1, 1, {1}}, {2, 2, {2}}, {3, 3, {3}}}, "gpipe");
}

TEST_CASE("CUDA fp32 gives the CPU engine's losses: PipeDream weight stashing", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    fp32MatchesCpu({{0, 1, {0}}, {2, 3, {1}}}, "pipedream");
}

TEST_CASE("CUDA fp32 gives the CPU engine's Llama losses: one stage, 2-stage 1F1B and zb-h1", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const Comparison r = pw::test::llamaComparison();
    fp32MatchesCpu({{0, 3, {0}}}, "gpipe", r);
    fp32MatchesCpu({{0, 1, {0}}, {2, 3, {1}}}, "1f1b", r);
    fp32MatchesCpu({{0, 1, {0}}, {2, 3, {1}}}, "zb-h1", r);
}

TEST_CASE("CUDA bf16 mixed precision trains the Llama within 2e-2 of fp32, and it learns", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const Comparison r = pw::test::llamaComparison();
    const std::vector<StageCut> stages = {{0, 3, {0}}};
    const auto fp32 = cudaTrainingTrain(r, stages, "gpipe", onTheGpu(Precision::Fp32));
    const auto bf16 = cudaTrainingTrain(r, stages, "gpipe", onTheGpu(Precision::Bf16Mixed));
    cudaTrainingRequireClose(bf16.losses, fp32.losses, 2e-2);
    CHECK(bf16.losses.back() < bf16.losses.front());
}

TEST_CASE("CUDA bf16 mixed precision stays within 2e-2 of fp32 over 20 steps", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const Comparison r = comparison();
    const std::vector<StageCut> stages = {{0, 3, {0}}};
    const auto fp32 = cudaTrainingTrain(r, stages, "gpipe", onTheGpu(Precision::Fp32));
    const auto bf16 = cudaTrainingTrain(r, stages, "gpipe", onTheGpu(Precision::Bf16Mixed));
    cudaTrainingRequireClose(bf16.losses, fp32.losses, 2e-2);
}

TEST_CASE("CUDA bf16 mixed precision learns the Markov corpus down to its entropy rate", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    // test_executor.cpp's learning run (2 blocks, C = 32, 8 sequences of 8 tokens, 2 microbatches, 500 steps of
    // warm-up and cosine decay) on the CPU and in bf16 on the GPU: both must end within 0.1 nats of the floor.
    constexpr int kSteps = 500;
    auto shape = pw::test::tinyGpt2(2, 8);
    shape.hidden = 32;
    const auto plan = gpt2Plan(shape, {{0, 3, {0}}}, "gpipe", 2);
    TrainingSetup setup = trainingSetup(plan);
    setup.adam.lr = 1e-2;
    setup.adam.warmup_steps = 20;
    setup.adam.cosine = true;
    setup.adam.lr_min_fraction = 0.1;
    setup.adam.total_steps = kSteps;
    DataSpec spec;
    spec.synthetic_tokens = 100000;
    const double floor = syntheticEntropy(spec, setup.model.vocab);
    const DataOrder data(loadTokens(spec, setup.model.vocab), 2, setup.shape.batch, setup.shape.seq);
    const auto tail = [](const LocalRunResult& run) {
        double sum = 0;
        for (int i = kSteps - 50; i < kSteps; ++i)
            sum += run.losses.at(static_cast<std::size_t>(i)) / 50;
        return sum;
    };
    const auto cpu = runLocally(plan, setup, data, kSteps);
    const auto gpu = runLocally(plan, setup, data, kSteps, onTheGpu(Precision::Bf16Mixed));
    INFO("floor " << floor << " nats; CPU fp32: start " << cpu.losses.front() << " last 50 steps " << tail(cpu)
                  << "; GPU bf16: start " << gpu.losses.front() << " last 50 steps " << tail(gpu) << " (" << gpu.seconds
                  << " s)");
    CHECK(gpu.losses.front() > floor + 1.5);
    CHECK(tail(cpu) < floor + 0.1);
    CHECK(tail(gpu) < floor + 0.1);
    CHECK(std::abs(tail(gpu) - tail(cpu)) < 0.1);
}

TEST_CASE("200 CUDA steps hold the device memory the second step held", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    // One executor of 200 steps on a backend the test keeps: the sink reads the backend's allocated bytes after
    // the second optimizer step (every buffer of a step exists by then) and after the last.
    constexpr int kSteps = 200;
    const Comparison r = comparison();
    const auto plan = gpt2Plan(r.shape, {{0, 3, {0}}}, "gpipe", r.microbatches);
    TrainingSetup setup = trainingSetup(plan);
    setup.checkpoint = r.checkpoint;
    const DataOrder data(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq);
    const RunSchedule program = runProgram(plan, kSteps);
    for (const Precision precision : {Precision::Bf16Mixed, Precision::Fp32}) {
        INFO(toString(precision));
        const std::shared_ptr<Backend> backend = onTheGpu(precision)(0);
        LocalFabric fabric(1);
        int steps = 0;
        MemoryStats second, last;
        ExecutorSink sink;
        sink.step = [&](int, int) {
            ++steps;
            if (steps == 2)
                second = backend->memory();
            if (steps == kSteps)
                last = backend->memory();
        };
        DeviceExecutor executor(
            plan, program.period, 0, setup, data, fabric.endpoint(0), std::move(sink), program.repeats, backend);
        const std::atomic<bool> stop {false};
        REQUIRE(executor.run(stop));
        REQUIRE(steps == kSteps);
        INFO("after step 2: " << second.allocated << " B allocated, " << second.reserved << " B reserved; after step "
                              << kSteps << ": " << last.allocated << " B allocated, " << last.reserved
                              << " B reserved; peak " << last.peak << " B");
        CHECK(second.allocated > 0);
        CHECK(last.allocated == second.allocated);
    }
}

TEST_CASE("CUDA spans are every action once in the schedule's order and each compute span fits in its step", "[cuda]")
{
    if (cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device");
    const Comparison r = comparison();
    constexpr int kSteps = 5;
    const auto plan = gpt2Plan(r.shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", r.microbatches);
    TrainingSetup setup = trainingSetup(plan);
    setup.checkpoint = r.checkpoint;
    const auto result
        = runLocally(plan, setup, DataOrder(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), kSteps,
            onTheGpu(Precision::Bf16Mixed));
    const auto schedule = runSchedule(plan, kSteps);
    REQUIRE(result.spans.size() == schedule.actionCount());
    REQUIRE(result.step_ends.size() == static_cast<std::size_t>(kSteps));
    // Per device, the spans arrive in the order the device ran them: the schedule's, starting in that order on
    // the device's stream.
    std::map<int, std::vector<pw::planner::Span>> byDevice;
    for (const auto& s : result.spans)
        byDevice[s.device].push_back(s);
    REQUIRE(byDevice.size() == static_cast<std::size_t>(schedule.num_devices));
    // The device's times are on the host's monotonic clock: the run's own start and end bound them (up to the
    // clock's alignment, well under a millisecond).
    constexpr double kAlignment = 1e-3;
    for (const auto& [device, spans] : byDevice) {
        INFO("device " << device);
        const auto& actions = schedule.devices.at(static_cast<std::size_t>(device));
        REQUIRE(spans.size() == actions.size());
        for (std::size_t i = 0; i < spans.size(); ++i) {
            const auto& s = spans[i];
            INFO("span " << i << ": " << pw::planner::toString(s.kind) << " stage " << s.stage << " microbatch "
                         << s.microbatch << " [" << s.t0 << ", " << s.t1 << "]");
            CHECK(s.action == static_cast<int>(i));
            CHECK(s.kind == actions[i].kind);
            CHECK(s.microbatch == actions[i].microbatch);
            CHECK(s.t1 >= s.t0);
            CHECK(s.t0 >= -kAlignment);
            CHECK(s.t1 <= result.seconds + kAlignment);
            if (i > 0)
                CHECK(s.t0 >= spans[i - 1].t0 - 1e-6);
            if (s.kind == ActionKind::Forward || s.kind == ActionKind::Backward) {
                // The step's wall time on the host: from the end of the previous step (or the run's start) until
                // the step's losses were read back.
                const auto step = static_cast<std::size_t>(s.microbatch / schedule.microbatches);
                REQUIRE(step < result.step_ends.size());
                const double wall = result.step_ends[step] - (step > 0 ? result.step_ends[step - 1] : 0.0);
                INFO("step " << step << " took " << wall << " s on the host");
                CHECK(s.t1 - s.t0 <= wall);
            }
        }
    }
}
