// SPDX-License-Identifier: MIT
// How well the planner predicts a real run: a small GPT-2 profiled on this machine with `pipewright-agent
// --profile`, partitioned into 2 stages (PipeDream's DP, straight) under 1F1B, trained locally by two agent
// processes (the controller, Gloo, the history) for 20 steps. Prints the measured iteration time, the planner's
// prediction from the measured profile and its error, then the prediction of costs calibrated from that run
// (planner/sim/calibration.h; medians and means of the spans) against the same run and a second run of the plan.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/history/history.h"
#include "app/run/comparison.h"
#include "app/run/controller.h"
#include "planner/device_presets.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/calibration.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace pw;

namespace {

constexpr int kSteps = 20;
constexpr int kThreads = 1; // per agent: two agents on two cores

planner::ModelProfile measureWithAgent(const fs::path& dir)
{
    const std::string out = (dir / "measured.json").string();
    std::vector<std::string> args
        = {PW_AGENT_EXE, "--profile", "--layers", "4", "--hidden", "128", "--heads", "4", "--seq", "64", "--vocab",
            "512", "--microbatch", "4", "--threads", std::to_string(kThreads), "--repeats", "10", "-o", out};
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, PW_AGENT_EXE, nullptr, nullptr, argv.data(), environ) != 0)
        throw std::runtime_error("cannot start " + std::string(PW_AGENT_EXE));
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error("pipewright-agent --profile failed");
    return planner::loadModel(out);
}

planner::Plan twoStagePlan(const planner::ModelProfile& model)
{
    planner::Cluster cluster;
    cluster.name = "local";
    cluster.device_types = {*planner::devicePreset("cpu")};
    cluster.nodes.push_back({"local", "", 22, "", "cpu", 2, 1e10, 1e-6});
    planner::PartitionRequest request {model, cluster, {}};
    request.options.straight = true;
    request.options.schedule.kind = "1f1b";
    request.options.schedule.microbatches = 8;
    auto result = planner::findPartitioner("pipedream")->partition(request, {}, {});
    if (!result.ok())
        throw std::runtime_error("pipedream: " + result.errorText());
    return *result.plan;
}

struct Measured
{
    std::string run_id;
    planner::Timeline timeline;
    planner::Timeline predicted;
    int steps = 0;
    int predicted_steps = 0;
};

Measured runLocally(const planner::Plan& plan, app::HistoryStore& history)
{
    app::RunRequest request;
    request.plan = plan;
    request.plan_label = "bench_run_prediction";
    request.training.steps = kSteps;
    request.threads = kThreads;
    request.agent_executable = PW_AGENT_EXE;
    app::RunController controller(request, history);
    const auto outcome = controller.run();
    if (outcome.status != app::RunStatus::Succeeded)
        throw std::runtime_error("the run failed: " + outcome.message);
    Measured m;
    m.run_id = outcome.run_id;
    m.timeline = history.measuredTimeline(m.run_id);
    m.predicted = history.predictedTimeline(m.run_id);
    m.steps = static_cast<int>(outcome.losses.size());
    m.predicted_steps = static_cast<int>(history.run(m.run_id)->predicted_steps);
    return m;
}

} // namespace

int main()
{
    char pattern[] = "/tmp/pw-bench-run-XXXXXX";
    const fs::path dir = mkdtemp(pattern);
    try {
        const auto model = measureWithAgent(dir);
        const auto plan = twoStagePlan(model);
        std::printf(
            "model: %s\n  %d layers, forward %.3f ms + backward %.3f ms per microbatch of %d on %d thread(s)\n",
            model.name.c_str(), model.layerCount(),
            [&] {
                double t = 0;
                for (const auto& l : model.layers)
                    t += l.forward_ms;
                return t;
            }(),
            [&] {
                double t = 0;
                for (const auto& l : model.layers)
                    t += l.backward_ms;
                return t;
            }(),
            model.microbatch_size, kThreads);
        std::printf("plan: %s, stages", plan.configString().c_str());
        for (const auto& s : plan.stages)
            std::printf(" [%d-%d]", s.first_layer, s.last_layer);
        std::printf(", %s, %d microbatches, %d steps, local agents\n\n", plan.schedule.kind.c_str(),
            plan.schedule.microbatches, kSteps);

        auto history = app::HistoryStore::open(dir / "history.sqlite");
        const auto first = runLocally(plan, history);
        const auto profile = app::compareRun(plan, first.predicted, first.predicted_steps, first.timeline, first.steps);
        const auto costs = planner::calibrate(plan, first.timeline);
        const auto model1 = planner::calibratedCostModel(costs, plan);
        const auto inSample = app::compareRun(plan, app::predictSteps(plan, first.predicted_steps, model1),
            first.predicted_steps, first.timeline, first.steps, &model1);
        const auto meanModel = planner::calibratedCostModel(
            planner::calibrate(plan, first.timeline, planner::SpanStatistic::Mean), plan);
        const auto inSampleMean = app::compareRun(plan, app::predictSteps(plan, first.predicted_steps, meanModel),
            first.predicted_steps, first.timeline, first.steps, &meanModel);
        const auto second = runLocally(plan, history);
        const auto outOfSampleMean = app::compareRun(plan, app::predictSteps(plan, second.predicted_steps, meanModel),
            second.predicted_steps, second.timeline, second.steps, &meanModel);
        const auto outOfSample = app::compareRun(plan, app::predictSteps(plan, second.predicted_steps, model1),
            second.predicted_steps, second.timeline, second.steps, &model1);
        const auto profile2
            = app::compareRun(plan, second.predicted, second.predicted_steps, second.timeline, second.steps);

        // Error = predicted / measured - 1: -10 % predicts 10 % too fast.
        auto error
            = [](const app::RunComparison& c) { return (c.predicted_iteration_s / c.measured_iteration_s - 1) * 100; };
        std::printf("%-44s %12s %12s %9s\n", "", "measured", "predicted", "error");
        auto row = [&](const char* what, const app::RunComparison& c) {
            std::printf("%-44s %9.2f ms %9.2f ms %+8.1f %%\n", what, c.measured_iteration_s * 1e3,
                c.predicted_iteration_s * 1e3, error(c));
        };
        row("run 1, planner (measured profile)", profile);
        row("run 1, calibrated from run 1 (medians)", inSample);
        row("run 1, calibrated from run 1 (means)", inSampleMean);
        row("run 2, planner (measured profile)", profile2);
        row("run 2, calibrated from run 1 (medians)", outOfSample);
        row("run 2, calibrated from run 1 (means)", outOfSampleMean);
        std::printf("\nper stage and microbatch   profile F/B (ms)   medians F/B (ms)      optimizer step (ms)\n");
        const auto fromProfile = planner::CostModel::fromPlan(plan);
        for (int s = 0; s < plan.stageCount(); ++s)
            std::printf("  stage %d                  %6.3f / %6.3f    %6.3f / %6.3f         %6.3f\n", s,
                fromProfile.forward(s, 0) * 1e3, fromProfile.backward(s, 0) * 1e3,
                costs.stages[static_cast<std::size_t>(s)].forward_s[0] * 1e3,
                costs.stages[static_cast<std::size_t>(s)].backward_s[0] * 1e3,
                costs.stages[static_cast<std::size_t>(s)].optimizer_step_s[0] * 1e3);
        const auto& link = costs.node_links[0];
        std::printf("  link: %d usable transfers of %d size(s), median %.3f ms (%s)\n", link.transfers, link.sizes,
            link.median_transfer_s * 1e3, link.fitted ? "fitted" : "the cluster's link kept");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_run_prediction: %s\n", e.what());
        fs::remove_all(dir);
        return 1;
    }
    fs::remove_all(dir);
    return 0;
}
