// SPDX-License-Identifier: MIT
#include "measure_commands.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/run/comparison.h"
#include "app/run/controller.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/sim/calibration.h"
#include "report.h"
#include "run_commands.h"

extern char** environ;

namespace pw::cli {

using planner::InputError;

namespace {

std::filesystem::path agentExecutable()
{
    const char* env = std::getenv("PIPEWRIGHT_AGENT");
    return env && *env ? std::filesystem::path(env) : app::defaultAgentExecutable("/proc/self/exe");
}

/// Runs `exe args...` with stdin and stdout on /dev/null; returns its exit status and what it wrote to stderr.
std::pair<int, std::string> runQuietly(const std::filesystem::path& exe, const std::vector<std::string>& args)
{
    int errPipe[2];
    if (pipe2(errPipe, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<std::string> all = {exe.string()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, errPipe[1], STDERR_FILENO);
    pid_t pid = 0;
    // posix_spawnp: an agent named without a folder ("pipewright-agent") is looked up on PATH.
    const int rc = posix_spawnp(&pid, all[0].c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(errPipe[1]);
    if (rc != 0) {
        close(errPipe[0]);
        throw InputError("cannot start the agent " + exe.string() + ": " + std::strerror(rc)
            + " (build pipewright-agent, or point PIPEWRIGHT_AGENT at it)");
    }
    std::string text;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = read(errPipe[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            text.append(buffer, static_cast<std::size_t>(n));
    close(errPipe[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return {code, text};
}

std::string firstLine(const std::string& text)
{
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty())
            return line;
    return {};
}

std::string ms(double seconds)
{
    return fixedText(seconds * 1e3, 3) + " ms";
}

std::string describeLink(const planner::LinkFit& l)
{
    std::string s = fixedText(l.link.bandwidth_bytes_per_s / 1e9, 3) + " GB/s, " + fixedText(l.link.latency_s * 1e6, 1)
        + " us latency";
    if (l.fitted)
        return "fitted " + s + " to " + std::to_string(l.transfers) + " transfers of " + std::to_string(l.sizes)
            + " sizes (rms residual " + ms(l.rms_residual_s) + ")";
    if (l.transfers == 0)
        return "no measured transfer: the cluster's " + s + " kept";
    return "the cluster's " + s + " kept (" + std::to_string(l.transfers) + " transfers of " + std::to_string(l.sizes)
        + " size" + (l.sizes == 1 ? "" : "s") + ": too few to fit; median " + ms(l.median_transfer_s)
        + ", the link says " + ms(l.link.seconds(0)) + " + bytes / bandwidth)";
}

} // namespace

std::optional<int> measureDeviceIndex(const std::string& device)
{
    if (device == "cpu")
        return -1;
    if (device == "cuda")
        return 0;
    if (device.rfind("cuda:", 0) != 0 || device.size() == 5
        || device.find_first_not_of("0123456789", 5) != std::string::npos || device.size() > 14)
        return std::nullopt;
    return std::stoi(device.substr(5));
}

void profileMeasure(const MeasureOptions& o, std::ostream& out)
{
    const auto device = measureDeviceIndex(o.device);
    if (!device)
        throw InputError({}, 0, "--device", "'" + o.device + "' is not cpu, cuda or cuda:N");
    if (o.precision != "fp32" && o.precision != "bf16")
        throw InputError({}, 0, "--precision", "'" + o.precision + "' is not fp32 or bf16");
    if (*device < 0 && o.precision != "fp32")
        throw InputError({}, 0, "--precision", "the CPU trains in fp32 only: give --device cuda[:N] for bf16");
    std::vector<std::string> args = {"--profile"};
    for (auto [name, value] : {std::pair {"--layers", o.layers}, {"--hidden", o.hidden}, {"--heads", o.heads},
             {"--seq", o.seq}, {"--vocab", o.vocab}, {"--microbatch", o.microbatch}})
        if (value != 0) {
            args.push_back(name);
            args.push_back(std::to_string(value));
        }
    if (!o.plan.empty()) {
        if (!std::filesystem::is_regular_file(o.plan))
            throw InputError(o.plan, 0, "", "no such plan file");
        args.push_back("--plan");
        args.push_back(std::filesystem::absolute(o.plan).string());
    }
    if (!o.hf_config.empty()) {
        if (!std::filesystem::is_regular_file(o.hf_config))
            throw InputError(o.hf_config, 0, "", "no such config.json file");
        args.push_back("--hf-config");
        args.push_back(std::filesystem::absolute(o.hf_config).string());
    }
    for (auto [name, value] : {std::pair {"--threads", o.threads}, {"--repeats", o.repeats}, {"--warmup", o.warmup}}) {
        args.push_back(name);
        args.push_back(std::to_string(value));
    }
    args.push_back("--seed");
    args.push_back(std::to_string(o.seed));
    // The agent checks the device against its own build and the devices it sees, before it measures anything.
    args.insert(args.end(), {"--device", o.device, "--precision", o.precision});
    args.push_back("-o");
    args.push_back(std::filesystem::absolute(o.output).string());
    const auto exe = agentExecutable();
    const auto [code, err] = runQuietly(exe, args);
    if (code != 0) {
        std::string why = firstLine(err);
        const std::string prefix = "pipewright-agent --profile: ";
        if (why.rfind(prefix, 0) == 0)
            why.erase(0, prefix.size());
        throw InputError(exe.filename().string() + " --profile failed (exit status " + std::to_string(code)
            + "): " + (why.empty() ? "no message" : why));
    }
    const auto model = planner::loadModel(o.output);
    double forward = 0, backward = 0, input = 0, weight = 0; // the backward split: I and W, timed apart
    for (const auto& l : model.layers) {
        forward += l.forward_ms;
        backward += l.backward_ms;
        input += l.backward_input_ms.value_or(0);
        weight += l.backward_weight_ms.value_or(0);
    }
    if (o.json) {
        out << nlohmann::json(
            {{"model", model.name}, {"layers", model.layerCount()}, {"device", model.profiled_device},
                {"microbatch_size", model.microbatch_size}, {"forward_ms", forward}, {"backward_ms", backward},
                {"backward_input_ms", input}, {"backward_weight_ms", weight},
                {"weight_bytes", model.totalWeightBytes()}, {"output", o.output}})
                   .dump(2)
            << "\n";
        return;
    }
    out << "measured " << model.layerCount() << " layers of " << model.name << ": " << fixedText(forward, 3)
        << " ms forward, " << fixedText(backward, 3) << " ms backward (split: " << fixedText(input, 3) << " ms input + "
        << fixedText(weight, 3) << " ms weight gradients) per microbatch of " << model.microbatch_size << " -> "
        << o.output << "\n";
}

void calibrate(const CalibrateOptions& o, std::ostream& out)
{
    auto history = readHistory(o.history);
    const auto run = findRun(history, o.run);
    const auto plan = planner::planFromJson(nlohmann::json::parse(run.plan_json));
    const auto measured = history.measuredTimeline(run.id);
    const int steps = static_cast<int>(history.metrics(run.id, "loss").size());
    if (steps == 0)
        throw InputError("run " + run.id + " finished no step: nothing to calibrate from");
    auto costs = planner::calibrate(plan, measured, planner::spanStatisticFromString(o.statistic, "--statistic"));
    costs.run_id = run.id;
    planner::writeJsonFile(o.output, planner::toJson(costs));

    // Both predictions of the same steps against the run they were fitted to.
    const int n = run.predicted_steps > 0 ? static_cast<int>(run.predicted_steps) : steps;
    const auto profileModel = planner::CostModel::fromPlan(plan);
    const auto profile = app::compareRun(plan,
        run.predicted_steps > 0 ? history.predictedTimeline(run.id) : app::predictSteps(plan, n, profileModel), n,
        measured, steps);
    const auto calibratedModel = planner::calibratedCostModel(costs, plan);
    const auto calibrated
        = app::compareRun(plan, app::predictSteps(plan, n, calibratedModel), n, measured, steps, &calibratedModel);
    if (o.json) {
        auto j = planner::toJson(costs);
        j["output"] = o.output;
        j["measured_iteration_s"] = profile.measured_iteration_s;
        j["profile_iteration_s"] = profile.predicted_iteration_s;
        j["profile_iteration_error"] = profile.iteration_error;
        j["calibrated_iteration_s"] = calibrated.predicted_iteration_s;
        j["calibrated_iteration_error"] = calibrated.iteration_error;
        out << j.dump(2) << "\n";
        return;
    }
    out << "calibrated from run " << run.id << " (" << run.label << "): " << steps << " steps, "
        << measured.spans.size() << " measured spans -> " << o.output << "\n";
    out << "  per microbatch (" << planner::toString(costs.statistic)
        << " of the spans)\n                      forward: profile  measured    backward: profile  measured    "
           "optimizer step\n";
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& st = costs.stages[static_cast<std::size_t>(s)];
        for (std::size_t r = 0; r < st.devices.size(); ++r) {
            const std::string label = "stage " + std::to_string(s) + " device " + std::to_string(st.devices[r]);
            out << "    " << std::left << std::setw(18) << label << std::right << std::setw(17)
                << ms(profileModel.forward(s, static_cast<int>(r))) << std::setw(10) << ms(st.forward_s[r])
                << std::setw(19) << ms(profileModel.backward(s, static_cast<int>(r))) << std::setw(10)
                << ms(st.backward_s[r]) << std::setw(18) << ms(st.optimizer_step_s[r]) << "\n";
        }
    }
    for (std::size_t i = 0; i < costs.node_links.size(); ++i)
        out << "  link within " << plan.cluster->nodes[i].name << ": " << describeLink(costs.node_links[i]) << "\n";
    if (plan.cluster->nodes.size() > 1)
        out << "  link between nodes: " << describeLink(costs.inter_node) << "\n";
    out << "  iteration time of this run: measured " << ms(profile.measured_iteration_s)
        << "; predicted from the profile " << ms(profile.predicted_iteration_s) << " (measured "
        << signedPercent(profile.iteration_error) << "), calibrated " << ms(calibrated.predicted_iteration_s)
        << " (measured " << signedPercent(calibrated.iteration_error) << ")\n";
    out << "  use: pipewright-cli simulate PLAN --costs " << o.output << "; pipewright-cli history show RUN --costs "
        << o.output << "\n";
}

} // namespace pw::cli
