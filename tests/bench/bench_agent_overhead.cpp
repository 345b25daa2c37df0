// SPDX-License-Identifier: MIT
// What running through an agent costs: one GPT-2 stage trained by the controller and one pipewright-agent process
// (telemetry, heartbeats, history) against engine::runLocally in this process, on the same model, batch, steps and
// threads (1, or the first argument). Tokens per second of each (best of 3) and their ratio; the target is >= 0.95.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "app/history/history.h"
#include "app/run/controller.h"
#include "engine/data.h"
#include "engine/executor.h"
#include "engine/local_run.h"
#include "engine/ops.h"
#include "planner/device_presets.h"
#include "planner/io/transformer.h"

namespace fs = std::filesystem;
using namespace pw;

namespace {

constexpr int kSteps = 20;
constexpr int kRepeats = 3;

planner::Plan oneStagePlan()
{
    planner::TransformerConfig shape {4, 128, 4, 64, 512, 4, 4}; // blocks, hidden, heads, seq, vocab, batch, fp32
    const auto cpu = *planner::devicePreset("cpu");
    planner::Plan plan;
    plan.model = planner::transformerProfile(shape, cpu);
    planner::Cluster cluster;
    cluster.device_types = {cpu};
    cluster.nodes.push_back({"local", "", 22, "", cpu.name, 1, 0, 0});
    plan.cluster = cluster;
    plan.stages = {{0, shape.layers + 1, {0}}};
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = 4;
    plan.validate();
    return plan;
}

} // namespace

int main(int argc, char** argv)
{
    // Threads of both (BLAS and OpenMP): 1 unless given; with more than the cores left free, spinning BLAS and
    // OpenMP workers make both sides slower and noisier.
    const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
    const auto plan = oneStagePlan();
    const auto setup = engine::trainingSetup(plan);
    const double tokensPerStep = static_cast<double>(setup.microbatches) * setup.shape.batch * setup.shape.seq;
    engine::DataSpec spec; // the agents' default: the synthetic corpus, seed 1234
    const engine::DataOrder data(
        engine::loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq);

    char pattern[] = "/tmp/pw-bench-agent-XXXXXX";
    const fs::path dir = mkdtemp(pattern);
    double inProcess = 0, agent = 0;
    try {
        auto history = app::HistoryStore::open(dir / "history.sqlite");
        for (int i = 0; i < kRepeats; ++i) {
            engine::ops::setThreads(threads);
            const auto local = engine::runLocally(plan, setup, data, kSteps);
            inProcess = std::max(inProcess, tokensPerStep * kSteps / local.seconds);

            app::RunRequest request;
            request.plan = plan;
            request.plan_label = "bench_agent_overhead";
            request.training.steps = kSteps;
            request.threads = threads;
            request.agent_executable = PW_AGENT_EXE;
            app::RunController controller(request, history);
            const auto outcome = controller.run();
            if (outcome.status != app::RunStatus::Succeeded)
                throw std::runtime_error("the run failed: " + outcome.message);
            agent = std::max(agent, outcome.tokens_per_s);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_agent_overhead: %s\n", e.what());
        fs::remove_all(dir);
        return 1;
    }
    fs::remove_all(dir);
    std::printf("GPT-2 l=%d h=%d s=%d V=%d, one stage, %d microbatches of %d, %d steps, %d thread(s), best of %d\n",
        setup.model.layers, setup.model.channels, setup.shape.seq, setup.model.vocab, setup.microbatches,
        setup.shape.batch, kSteps, threads, kRepeats);
    std::printf("  engine::runLocally (in process)     %10.0f tokens/s\n", inProcess);
    std::printf("  controller + pipewright-agent       %10.0f tokens/s\n", agent);
    std::printf("  ratio agent / in-process            %10.3f   (target >= 0.95)\n", agent / inProcess);
    return 0;
}
