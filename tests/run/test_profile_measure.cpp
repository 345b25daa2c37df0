// SPDX-License-Identifier: MIT
// `pipewright-cli profile measure` as a user runs it: the CLI starts pipewright-agent --profile beside it, the
// profile it writes loads, a plan made from it with `plan` trains with `run --local`; bad shapes, a plan without a
// model shape, a missing agent and a device it cannot use (--device, --precision) give errors that say what is wrong.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "planner/device_presets.h"
#include "planner/gemm_table.h"
#include "planner/io/json_file.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/process_helpers.h"
#include "tests/skip.h"

extern char** environ;

using namespace pw;
using Catch::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct ProfileMeasureResult
{
    int code = -1;
    std::string out;
    std::string err;
};

std::string profileMeasureSlurp(const fs::path& p)
{
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Runs pipewright-cli with `args` and the environment plus `env` ("NAME=value" entries).
ProfileMeasureResult profileMeasureCli(
    const test::TempDir& dir, const std::vector<std::string>& args, const std::vector<std::string>& env = {})
{
    std::vector<std::string> all = {PW_CLI_EXE};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envCopy = env;
    std::vector<char*> envp;
    for (auto& e : envCopy)
        envp.push_back(e.data());
    for (char** e = environ; *e; ++e)
        envp.push_back(*e);
    envp.push_back(nullptr);
    const auto out = dir.path / "out.txt", err = dir.path / "err.txt";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, PW_CLI_EXE, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, profileMeasureSlurp(out), profileMeasureSlurp(err)};
}

const std::vector<std::string> kShape
    = {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq", "16", "--vocab", "64", "--microbatch", "2"};

std::vector<std::string> measureArgs(const fs::path& output, std::vector<std::string> extra = {})
{
    std::vector<std::string> a = {"profile", "measure"};
    a.insert(a.end(), kShape.begin(), kShape.end());
    a.insert(a.end(), {"--repeats", "3", "-o", output.string()});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

fs::path writeCpuCluster(const test::TempDir& dir, int devices)
{
    planner::Cluster cluster;
    cluster.name = "local";
    const auto cpu = *planner::devicePreset("cpu");
    cluster.device_types = {cpu};
    cluster.nodes.push_back({"local", "", 22, "", cpu.name, devices, 1e10, 1e-6});
    const auto path = dir.path / "cluster.json";
    std::ofstream(path) << planner::toJson(cluster).dump(2);
    return path;
}

} // namespace

TEST_CASE("cli: profile measure writes a measured profile, a plan made from it trains with run --local",
    "[run][cli][profile]")
{
    test::TempDir dir;
    const auto profilePath = dir.path / "measured.json";
    const auto r = profileMeasureCli(dir, measureArgs(profilePath, {"--json"}));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto summary = json::parse(r.out);
    CHECK(summary.at("layers") == 4);
    CHECK(summary.at("device") == "cpu");
    CHECK(summary.at("backward_input_ms").get<double>() > 0);
    CHECK(summary.at("backward_weight_ms").get<double>() > 0);

    const auto model = planner::loadModel(profilePath.string());
    REQUIRE(model.layerCount() == 4); // embedding, 2 blocks, head
    REQUIRE(model.architecture.has_value());
    CHECK(model.architecture->hidden == 32);
    CHECK(model.profiled_device == "cpu");
    const auto config = engine::ModelConfig::fromTransformer(*model.architecture);
    for (int l = 0; l < model.layerCount(); ++l) {
        INFO("layer " << l);
        CHECK(model.layers[l].forward_ms > 0);
        CHECK(model.layers[l].backward_ms > 0);
        // The backward's two parts, timed apart (what zero-bubble schedules are planned and simulated from).
        REQUIRE(model.layers[l].backward_input_ms.has_value());
        REQUIRE(model.layers[l].backward_weight_ms.has_value());
        CHECK(*model.layers[l].backward_weight_ms > 0);
        CHECK(model.layers[l].weight_bytes
            == 4.0 * static_cast<double>(engine::StageModel(config, {2, 16}, l, l).parameterCount()));
    }

    const auto cluster = writeCpuCluster(dir, 2);
    const auto planPath = dir.path / "plan.json";
    const auto planned = profileMeasureCli(dir,
        {"plan", "--model", profilePath.string(), "--cluster", cluster.string(), "--algorithm", "manual",
            "--boundaries", "1", "--schedule", "1f1b", "--microbatches", "4", "-o", planPath.string()});
    INFO(planned.err);
    REQUIRE(planned.code == 0);
    const auto run = profileMeasureCli(dir,
        {"run", planPath.string(), "--local", "--steps", "3", "--threads", "1", "--history",
            (dir.path / "history.sqlite").string(), "--json"});
    INFO(run.err);
    REQUIRE(run.code == 0);
    const auto report = json::parse(run.out);
    CHECK(report.at("status") == "succeeded");
    CHECK(report.at("losses").size() == 3);

    // A zero-bubble plan from the same measured profile trains too, to the 1F1B plan's losses.
    const auto zbPath = dir.path / "zb.json";
    const auto zbPlanned = profileMeasureCli(dir,
        {"plan", "--model", profilePath.string(), "--cluster", cluster.string(), "--algorithm", "manual",
            "--boundaries", "1", "--schedule", "zb-h1", "--microbatches", "4", "-o", zbPath.string()});
    INFO(zbPlanned.err);
    REQUIRE(zbPlanned.code == 0);
    const auto zbRun = profileMeasureCli(dir,
        {"run", zbPath.string(), "--local", "--steps", "3", "--threads", "1", "--history",
            (dir.path / "history.sqlite").string(), "--json"});
    INFO(zbRun.err);
    REQUIRE(zbRun.code == 0);
    const auto zbReport = json::parse(zbRun.out);
    CHECK(zbReport.at("status") == "succeeded");
    REQUIRE(zbReport.at("losses").size() == 3);
    for (std::size_t i = 0; i < 3; ++i)
        CHECK(zbReport.at("losses")[i].get<double>() == Approx(report.at("losses")[i].get<double>()).epsilon(1e-6));

    // --plan takes the plan's shape and microbatch size.
    const auto again = dir.path / "again.json";
    const auto fromPlan = profileMeasureCli(
        dir, {"profile", "measure", "--plan", planPath.string(), "--repeats", "2", "-o", again.string()});
    INFO(fromPlan.err);
    REQUIRE(fromPlan.code == 0);
    CHECK_THAT(fromPlan.out, Contains("measured 4 layers"));
    CHECK(planner::loadModel(again.string()).architecture == model.architecture);
}

TEST_CASE("cli: profile measure names what is wrong", "[run][cli][profile]")
{
    test::TempDir dir;
    const auto out = dir.path / "p.json";
    auto bad = measureArgs(out);
    bad[5] = "3"; // --heads 3 does not divide --hidden 32
    const auto heads = profileMeasureCli(dir, bad);
    CHECK(heads.code == 1);
    CHECK_THAT(heads.err, Contains("--heads") && Contains("must divide --hidden"));
    CHECK(!fs::exists(out));

    const auto missing = profileMeasureCli(dir, {"profile", "measure", "--layers", "2", "-o", out.string()});
    CHECK(missing.code == 1);
    CHECK_THAT(missing.err, Contains("--hidden: missing"));

    auto noShape = test::gpt2Plan(test::tinyGpt2(2), {{0, 3, {0}}}, "gpipe");
    auto model = *noShape.model;
    model.architecture.reset();
    noShape.model = model;
    const auto planPath = dir.path / "plan.json";
    std::ofstream(planPath) << planner::toJson(noShape).dump(2);
    const auto plan = profileMeasureCli(dir, {"profile", "measure", "--plan", planPath.string(), "-o", out.string()});
    CHECK(plan.code == 1);
    CHECK_THAT(plan.err, Contains("plan.json") && Contains("/model/architecture"));

    const auto agent
        = profileMeasureCli(dir, measureArgs(out), {"PIPEWRIGHT_AGENT=" + (dir.path / "no-such-agent").string()});
    CHECK(agent.code == 1);
    CHECK_THAT(agent.err, Contains("cannot start the agent") && Contains("no-such-agent"));
}

TEST_CASE(
    "cli: profile measure --device and --precision are checked before anything is measured", "[run][cli][profile]")
{
    test::TempDir dir;
    const auto out = dir.path / "p.json";
    // Spelling: refused by the CLI itself.
    const auto gpu = profileMeasureCli(dir, measureArgs(out, {"--device", "gpu0"}));
    CHECK(gpu.code != 0);
    CHECK_THAT(gpu.err, Contains("--device") && Contains("'gpu0' is not cpu, cuda or cuda:N"));
    const auto fp16 = profileMeasureCli(dir, measureArgs(out, {"--device", "cuda", "--precision", "fp16"}));
    CHECK(fp16.code != 0);
    CHECK_THAT(fp16.err, Contains("--precision") && Contains("fp16"));
    // bf16 needs a GPU: refused before the agent starts.
    const auto bf16 = profileMeasureCli(dir, measureArgs(out, {"--device", "cpu", "--precision", "bf16"}),
        {"PIPEWRIGHT_AGENT=" + (dir.path / "no-such-agent").string()});
    CHECK(bf16.code == 1);
    CHECK_THAT(bf16.err, Contains("--precision: the CPU trains in fp32 only"));
    // A CUDA device this agent cannot use: the agent says why (its build, or the devices it sees) before it
    // measures anything, and the CLI passes that on.
    const auto missing = profileMeasureCli(dir, measureArgs(out, {"--device", "cuda:7"}));
    CHECK(missing.code == 1);
    CHECK(!fs::exists(out));
    if (!engine::cudaCompiledIn())
        CHECK_THAT(missing.err, Contains("--device: cuda:7: this agent was built without CUDA kernels"));
    else
        CHECK_THAT(missing.err,
            Contains("--device: cuda:7: " + std::to_string(engine::cudaDeviceCount()) + " CUDA device")
                && Contains("visible here (CUDA_VISIBLE_DEVICES"));
    // Hidden devices are not there: CUDA_VISIBLE_DEVICES is what the agent sees.
    const auto hidden = profileMeasureCli(dir, measureArgs(out, {"--device", "cuda"}), {"CUDA_VISIBLE_DEVICES="});
    CHECK(hidden.code == 1);
    CHECK_THAT(hidden.err,
        Contains("--device: cuda:0: ")
            && (Contains("built without CUDA kernels") || Contains("0 CUDA devices are visible here")));
    // The CPU, named explicitly, measures as before.
    const auto cpu = profileMeasureCli(dir, measureArgs(out, {"--device", "cpu", "--precision", "fp32", "--json"}));
    REQUIRE(cpu.code == 0);
    CHECK(json::parse(cpu.out)["device"] == "cpu");
}

TEST_CASE("cli: profile measure --device cuda times the layers on the GPU", "[run][cli][profile][cuda]")
{
    if (engine::cudaDeviceCount() == 0)
        PW_SKIP("no CUDA device here (or this build has no CUDA kernels)");
    test::TempDir dir;
    const auto out = dir.path / "p.json";
    for (const std::string precision : {"fp32", "bf16"}) {
        const auto r
            = profileMeasureCli(dir, measureArgs(out, {"--device", "cuda:0", "--precision", precision, "--json"}));
        INFO(r.err);
        REQUIRE(r.code == 0);
        const auto model = planner::loadModel(out);
        CHECK_THAT(model.profiled_device, Contains("cuda:0"));
        CHECK(model.architecture->bytes_per_element == (precision == "bf16" ? 2 : 4));
        for (const auto& l : model.layers)
            CHECK(l.forward_ms > 0);
    }
}

TEST_CASE("pipewright-agent --profile-gemm checks its options and writes a GEMM table the planner reads", "[run]")
{
    const test::TempDir dir;
    const auto agent = [&](const std::string& args) {
        const std::string command
            = std::string(PW_AGENT_EXE) + " --profile-gemm " + args + " 2>" + (dir.path / "err").string();
        std::FILE* pipe = ::popen(command.c_str(), "r");
        REQUIRE(pipe);
        std::string out;
        char buffer[4096];
        for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
            out.append(buffer, n);
        const int status = ::pclose(pipe);
        return ProfileMeasureResult {
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, profileMeasureSlurp(dir.path / "err")};
    };
    auto r = agent("--dims 128,x");
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("pipewright-agent --profile-gemm: --dims: 'x' is not a whole number"));
    r = agent("--device cpu");
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Contains("--device: GEMM throughput is measured on a GPU"));
    r = agent("--repeats 0");
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Contains("--repeats: must be at least 1"));
    r = agent("--dims 128,256 --repeats 2 -o " + (dir.path / "gemm.json").string());
    if (engine::cudaDeviceCount() < 1) {
        CHECK(r.code == 1);
        CHECK_THAT(r.err,
            Contains("pipewright-agent --profile-gemm: ")
                && (Contains("CUDA device(s) visible") || Contains("this build has no CUDA")));
        CHECK_FALSE(fs::exists(dir.path / "gemm.json"));
        PW_SKIP("no CUDA device visible: the options and the refusal were checked, not a measurement");
    }
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto table = planner::gemmTableFromJson(planner::readJsonFile((dir.path / "gemm.json").string()));
    CHECK(table.samples.size() == 8);
    CHECK_THAT(r.err, Contains("8 of 8 shapes"));
}

TEST_CASE(
    "cli: profile measure --hf-config times a Llama's layers, and a plan made from them trains", "[run][cli][profile]")
{
    test::TempDir dir;
    // A small Llama's config.json as transformers writes it (grouped-query attention, untied head).
    const auto config = dir.path / "config.json";
    std::ofstream(config) << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
        "vocab_size": 300, "max_position_embeddings": 64, "hidden_act": "silu", "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "tie_word_embeddings": false})";
    const auto out = dir.path / "llama.json";
    const auto measured = profileMeasureCli(dir,
        {"profile", "measure", "--hf-config", config.string(), "--seq", "16", "--microbatch", "2", "--repeats", "2",
            "-o", out.string()});
    INFO(measured.err);
    REQUIRE(measured.code == 0);
    const auto profile = planner::loadModel(out.string());
    REQUIRE(profile.architecture.has_value());
    CHECK(profile.architecture->family == "llama");
    CHECK(profile.architecture->kvHeads() == 2);
    CHECK(profile.architecture->rotary.theta == 500000.0);
    CHECK(profile.layerCount() == 4);
    CHECK(profile.layers[1].activation_parts.has_value());
    // The shape options and --hf-config exclude each other; --seq is needed.
    const auto both = profileMeasureCli(dir,
        {"profile", "measure", "--hf-config", config.string(), "--layers", "2", "--seq", "16", "--microbatch", "2",
            "-o", out.string()});
    CHECK(both.code == 1);
    CHECK_THAT(both.err, Contains("--layers: the shape comes from --hf-config"));
    const auto noSeq = profileMeasureCli(
        dir, {"profile", "measure", "--hf-config", config.string(), "--microbatch", "2", "-o", out.string()});
    CHECK(noSeq.code == 1);
    CHECK_THAT(noSeq.err, Contains("--seq: missing"));
    // A plan from the measured profile trains (the engine builds what the profile describes).
    const auto planPath = dir.path / "plan.json";
    const auto planned = profileMeasureCli(dir,
        {"plan", "--model", out.string(), "--cluster", writeCpuCluster(dir, 2).string(), "--algorithm", "manual",
            "--boundaries", "1", "--schedule", "1f1b", "--microbatches", "4", "-o", planPath.string()});
    INFO(planned.err);
    REQUIRE(planned.code == 0);
    const auto trained = profileMeasureCli(dir,
        {"run", planPath.string(), "--local", "--steps", "2", "--threads", "1", "--history",
            (dir.path / "h.sqlite").string()});
    INFO(trained.err);
    CHECK(trained.code == 0);
}
