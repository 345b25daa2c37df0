// SPDX-License-Identifier: MIT
// pipewright-cli with --algorithm megatron: the demo model on the demo cluster, a tensor-parallel plan file
// that simulates and exports, and option errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli_harness.h"
#include "planner/io/json_file.h"
#include "planner/schedule/generator.h"
#include "planner/sim/calibration.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pw::cli::test;

TEST_CASE("megatron plans the demo and its tensor-parallel plans simulate and export", "[cli][megatron]")
{
    auto r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("megatron") != std::string::npos);

    const auto dir = fs::temp_directory_path() / ("pw-cli-megatron-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto planPath = (dir / "plan.json").string();
    r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "tensor-sizes=2", "--set", "pipeline-sizes=2", "-o", planPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto plan = json::parse(std::ifstream(planPath));
    CHECK(plan.at("tensor_parallel") == 2);
    CHECK(plan.at("stages").at(0).at("devices").size() % 2 == 0);
    auto sim = cli({"simulate", planPath, "--json"});
    INFO(sim.err);
    REQUIRE(sim.code == 0);
    CHECK(json::parse(sim.out).at("throughput_samples_per_s").get<double>() > 0);
    auto e = cli({"export", planPath, "--format", "schedule-json", "-o", (dir / "schedule.json").string()});
    CHECK(e.code == 0);
    fs::remove_all(dir);

    auto bad = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "global-batch=-4"});
    CHECK(bad.code != 0);
    CHECK(bad.err.find("global-batch") != std::string::npos);
}

TEST_CASE("plan --json and compare --json report tensor parallelism, chunks, microbatch size, recomputation and MFU",
    "[cli][megatron]")
{
    // issue 10 item 8: these fields were missing; MFU appears wherever the profile gives FLOPs.
    auto r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "tensor-sizes=2", "--set", "pipeline-sizes=2", "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto plan = json::parse(r.out);
    CHECK(plan.at("tensor_parallel") == 2);
    CHECK(plan.at("chunks").get<int>() >= 1);
    CHECK(plan.at("microbatch_size").get<int>() >= 1);
    CHECK(plan.at("recompute").is_string()); // none | selective | full
    const double perGpu = plan.at("model_flops_per_s_per_gpu").get<double>();
    CHECK(plan.at("mfu").get<double>() == Approx(perGpu / 989e12));
    CHECK(plan.at("mfu").get<double>() > 0);
    CHECK(plan.at("mfu").get<double>() < 1);

    auto text = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json"});
    CHECK(text.out.find("MFU") != std::string::npos);

    auto c = cli({"compare", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--json"});
    INFO(c.err);
    REQUIRE(c.code == 0);
    const json report = json::parse(c.out); // named: a range-for over .at() of a temporary reads freed memory
    for (const auto& row : report.at("rows")) {
        INFO(row.at("algorithm"));
        if (!row.at("ok").get<bool>())
            continue;
        for (const char* key :
            {"tensor_parallel", "chunks", "microbatch_size", "recompute", "model_flops_per_s_per_gpu", "mfu"})
            CHECK(row.contains(key));
        if (row.at("algorithm") == "megatron") {
            // The demo's megatron plan is a zero-bubble one (issue 23); zbv's V has two chunks per device.
            const auto kind = row.at("schedule").get<std::string>();
            CHECK(kind.rfind("zb", 0) == 0);
            CHECK(row.at("chunks").get<int>() == (kind == "zbv" ? 2 : 1));
        }
    }
}

TEST_CASE(
    "precision, gradient precision and distributed optimizer flags reach the plan and its memory", "[cli][precision]")
{
    // issue 10 item 2: the demo GPT is bf16; fp32 gradients add 2 bytes per parameter, sharding takes 12 / d off.
    const auto peak = [](const std::vector<std::string>& extra) {
        std::vector<std::string> args {"plan", "--algorithm", "uniform", "--stages", "1", "--devices", "2", "--model",
            kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--json"};
        args.insert(args.end(), extra.begin(), extra.end());
        auto r = cli(args);
        INFO(r.err);
        REQUIRE(r.code == 0);
        return json::parse(r.out).at("stages").at(0).at("peak_memory_bytes").get<double>();
    };
    const double base = peak({});
    const double fp32Gradients = peak({"--gradient-precision", "fp32"});
    const double sharded = peak({"--gradient-precision", "fp32", "--distributed-optimizer"});
    CHECK(fp32Gradients > base);
    CHECK(sharded < fp32Gradients);
    // 2 bytes more per parameter; 6 fewer with 12 bytes sharded over 2 replicas: the same parameter count.
    CHECK((fp32Gradients - sharded) == Approx(3 * (fp32Gradients - base)));

    auto bad = cli({"plan", "--algorithm", "uniform", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--precision", "fp32"});
    CHECK(bad.code != 0);
    CHECK(bad.err.find("/schedule/precision") != std::string::npos);
    auto unknown = cli({"plan", "--algorithm", "uniform", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--precision", "fp8"});
    CHECK(unknown.code != 0);
    CHECK(unknown.err.find("fp8") != std::string::npos);
}

TEST_CASE("the stage table shows what the simulation charges, under the calibrated costs with --costs, MFU and HFU",
    "[cli][megatron][charge]")
{
    // issue 19 items 9 and 10.
    const auto dir = fs::temp_directory_path() / ("pw-cli-charge-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto planPath = (dir / "plan.json").string();
    auto r = cli(
        {"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json",
            "--set", "tensor-sizes=2", "--set", "pipeline-sizes=2", "--set", "recompute=on", "-o", planPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const json planned = json::parse(r.out);
    REQUIRE(planned.at("recompute") == "full");
    REQUIRE(planned.at("tensor_parallel") == 2);
    const json& stages = planned.at("stages");
    for (const auto& st : stages) {
        const double total = st.at("microbatch_time_s").get<double>();
        CHECK(total
            == Approx(st.at("forward_s").get<double>() + st.at("backward_s").get<double>()
                + st.at("recompute_s").get<double>() + st.at("tensor_parallel_allreduce_s").get<double>()));
        CHECK(st.at("recompute_s").get<double>() == Approx(st.at("forward_s").get<double>()));
        CHECK(st.at("tensor_parallel_allreduce_s").get<double>() > 0);
    }
    // MFU leaves the recomputed forward out, HFU counts it: 72 vs 96 s l h^2 (...) per sample.
    CHECK(planned.at("hfu").get<double>() > planned.at("mfu").get<double>());
    CHECK(planned.at("hardware_flops_per_s_per_gpu").get<double>() / 989e12 == Approx(planned.at("hfu").get<double>()));

    // Calibrated costs twice the profile's: `simulate --costs` prints those per stage, not the profile's.
    auto plan = pw::planner::loadPlan(planPath);
    auto truth = pw::planner::CostModel::fromPlan(plan);
    for (auto* v : {&truth.forward_s, &truth.backward_s, &truth.recompute_s, &truth.recompute_tp_s})
        for (double& t : *v)
            t *= 2;
    const auto measured = pw::planner::simulate(plan, pw::planner::generateSchedule(plan), truth).timeline;
    const auto costsPath = (dir / "costs.json").string();
    const auto costs = pw::planner::calibrate(plan, measured);
    pw::planner::writeJsonFile(costsPath, pw::planner::toJson(costs));
    const auto model = pw::planner::calibratedCostModel(costs, plan);
    r = cli({"simulate", planPath, "--costs", costsPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const json calibrated = json::parse(r.out);
    for (std::size_t s = 0; s < stages.size(); ++s) {
        INFO("stage " << s);
        const auto& st = calibrated.at("stages").at(s);
        const double expected = model.charge(static_cast<int>(s), 0).total_s();
        CHECK(st.at("microbatch_time_s").get<double>() == Approx(expected).epsilon(1e-9));
        // Twice the profile's charge: the measured backward spans held the recomputed forward once, not twice.
        CHECK(st.at("microbatch_time_s").get<double>()
            == Approx(2 * stages.at(s).at("microbatch_time_s").get<double>()).epsilon(1e-6));
        // Not the profile's: the calibrated forward is twice its (all-reduces included, none split out).
        CHECK(st.at("forward_s").get<double>() > 1.9 * stages.at(s).at("forward_s").get<double>());
        CHECK(st.at("tensor_parallel_allreduce_s").get<double>() == 0);
    }
    r = cli({"simulate", planPath, "--costs", costsPath});
    CHECK(r.out.find(pw::planner::formatSeconds(calibrated.at("stages").at(0).at("microbatch_time_s").get<double>()))
        != std::string::npos);
    CHECK(r.out.find("HFU") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("profile transformer writes its parameter count in a unit that fits", "[cli][units]")
{
    // issue 19 item 14: "0.000357792 B parameters" before.
    const auto dir = fs::temp_directory_path() / ("pw-cli-params-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto r = cli({"profile", "transformer", "--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "1024",
        "--vocab", "50257", "--microbatch", "1", "--device", "H100", "-o", (dir / "gpt2.json").string()});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("(124.4 M parameters)") != std::string::npos);
    r = cli({"profile", "transformer", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "64", "--vocab",
        "1000", "--microbatch", "1", "--device", "H100", "-o", (dir / "tiny.json").string()});
    REQUIRE(r.code == 0);
    CHECK(r.out.find("(168.2 K parameters)") != std::string::npos); // with its final layer norm (2h)
    fs::remove_all(dir);
}

TEST_CASE("profile transformer's default precision is what the engine trains in on the device", "[cli]")
{
    // issue 30 item 17: `--device cpu` wrote bf16 (2 bytes per element), which the CPU engine then refused.
    const auto dir = fs::temp_directory_path() / ("pw-cli-precision-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto profile = [&](const std::string& device, std::vector<std::string> extra = {}) {
        std::vector<std::string> args
            = {"profile", "transformer", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "64", "--vocab",
                "128", "--microbatch", "2", "--device", device, "-o", (dir / (device + ".json")).string()};
        args.insert(args.end(), extra.begin(), extra.end());
        const auto r = cli(args);
        INFO(r.err);
        REQUIRE(r.code == 0);
        return nlohmann::json::parse(std::ifstream(dir / (device + ".json"))).at("architecture");
    };
    CHECK(profile("cpu").at("bytes_per_element") == 4);
    CHECK(profile("H100").at("bytes_per_element") == 2);
    CHECK(profile("cpu", {"--bytes-per-element", "2"}).at("bytes_per_element") == 2); // asked for: kept
    const auto three = cli(
        {"profile", "transformer", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "64", "--vocab", "128",
            "--microbatch", "2", "--device", "cpu", "--bytes-per-element", "3", "-o", (dir / "x.json").string()});
    CHECK(three.code != 0);
    CHECK_THAT(three.err, Catch::Contains("--bytes-per-element"));
    fs::remove_all(dir);
}

TEST_CASE("profile transformer reads a Hugging Face config.json and counts its parameters exactly", "[cli][families]")
{
    // issue 31 item 1: Llama 3 8B's 8.03 B parameters; GPT-2's 124,439,808 with its final layer norm.
    const auto dir = fs::temp_directory_path() / ("pw-cli-hf-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string hf = std::string(PW_TEST_DATA_DIR) + "/hf/";
    auto r = cli({"profile", "transformer", "--hf-config", hf + "llama-3-8b.config.json", "--seq", "8192",
        "--microbatch", "1", "--device", "H100", "-o", (dir / "llama.json").string(), "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto j = json::parse(r.out);
    CHECK(j.at("parameters") == 8'030'261'248.0);
    CHECK(j.at("family") == "llama");
    CHECK(j.at("layers") == 34);
    const auto arch = json::parse(std::ifstream(dir / "llama.json")).at("architecture");
    CHECK(arch.at("kv_heads") == 8);
    CHECK(arch.at("mlp") == "swiglu");

    // The same model by flags.
    r = cli({"profile", "transformer", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8",
        "--ffn-hidden", "14336", "--mlp", "swiglu", "--norm", "rmsnorm", "--positions", "rotary", "--no-bias",
        "--untied-embeddings", "--no-dropout", "--vocab", "128256", "--seq", "8192", "--microbatch", "1", "--device",
        "H100", "-o", (dir / "flags.json").string(), "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(json::parse(r.out).at("parameters") == 8'030'261'248.0);

    r = cli({"profile", "transformer", "--hf-config", hf + "gpt2.config.json", "--seq", "1024", "--microbatch", "1",
        "--device", "H100", "-o", (dir / "gpt2.json").string(), "--json"});
    REQUIRE(r.code == 0);
    CHECK(json::parse(r.out).at("parameters") == 124'439'808.0);

    // How the attention and the loss run (issue 31: Megatron's 2021 runs): written to the profile, slower than the
    // defaults; a third value is a usage error naming the option.
    r = cli({"profile", "transformer", "--hf-config", hf + "gpt2.config.json", "--seq", "1024", "--microbatch", "4",
        "--device", "A100", "--attention", "materialized", "--cross-entropy", "native", "-o",
        (dir / "unfused.json").string(), "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(json::parse(r.out).at("time_model") == "shapes (default curve)"); // the A100 has a curve
    const auto unfused = json::parse(std::ifstream(dir / "unfused.json"));
    CHECK(unfused.at("architecture").at("flash_attention") == false);
    CHECK(unfused.at("architecture").at("fp32_cross_entropy") == false);
    REQUIRE(cli({"profile", "transformer", "--hf-config", hf + "gpt2.config.json", "--seq", "1024", "--microbatch", "4",
                    "--device", "A100", "-o", (dir / "fused.json").string()})
                .code
        == 0);
    const auto fused = json::parse(std::ifstream(dir / "fused.json"));
    CHECK(unfused.at("layers").at(1).at("forward_ms").get<double>()
        > fused.at("layers").at(1).at("forward_ms").get<double>());
    CHECK(unfused.at("layers").back().at("forward_ms").get<double>()
        < fused.at("layers").back().at("forward_ms").get<double>()); // the fused loss: one pass over the logits
    r = cli({"profile", "transformer", "--hf-config", hf + "gpt2.config.json", "--seq", "1024", "--microbatch", "4",
        "--device", "A100", "--attention", "sparse", "-o", (dir / "x.json").string()});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--attention"));

    // The shape comes from the file or from flags, never both; without the file the sizes are required.
    r = cli({"profile", "transformer", "--hf-config", hf + "gpt2.config.json", "--layers", "4", "--seq", "1024",
        "--microbatch", "1", "--device", "H100", "-o", (dir / "x.json").string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("--layers"));
    r = cli({"profile", "transformer", "--hidden", "64", "--heads", "4", "--vocab", "100", "--seq", "64",
        "--microbatch", "1", "--device", "H100", "-o", (dir / "x.json").string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("--layers: is required"));
    r = cli({"profile", "transformer", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "3", "--vocab",
        "100", "--seq", "64", "--microbatch", "1", "--device", "H100", "-o", (dir / "x.json").string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("kv_heads: must divide heads"));
    r = cli({"profile", "transformer", "--hf-config", hf + "README.md", "--seq", "64", "--microbatch", "1", "--device",
        "H100", "-o", (dir / "x.json").string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("README.md"));
    fs::remove_all(dir);
}

TEST_CASE("profile transformer --precision fp8 writes an FP8 profile that plans in fp8, and refuses an A100",
    "[cli][families][fp8]")
{
    // issue 31 item 3: FP8 products on H100; the plan's precision follows the profile.
    const auto dir = fs::temp_directory_path() / ("pw-cli-fp8-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string hf = std::string(PW_TEST_DATA_DIR) + "/hf/llama-3-8b.config.json";
    const auto profile = (dir / "fp8.json").string();
    auto r = cli({"profile", "transformer", "--hf-config", hf, "--seq", "8192", "--microbatch", "1", "--device", "H100",
        "--precision", "fp8", "-o", profile, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(json::parse(r.out).at("precision") == "fp8");
    CHECK(json::parse(r.out).at("parameters") == 8'030'261'248.0);
    const auto model = json::parse(std::ifstream(profile));
    CHECK(model.at("architecture").at("fp8") == true);
    CHECK(model.at("architecture").at("bytes_per_element") == 2);
    CHECK(model.at("layers").at(1).at("fp8_weight_bytes").get<double>() > 4e8);

    const auto planPath = (dir / "plan.json").string();
    r = cli({"plan", "--model", profile, "--cluster", kDemo + "/dgx-h100.json", "--algorithm", "megatron",
        "--microbatches", "8", "--set", "pipeline-sizes=1,2", "--set", "tensor-sizes=1,2,4", "-o", planPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    r = cli({"export", planPath, "--format", "megatron", "-o", (dir / "megatron").string()});
    INFO(r.err);
    REQUIRE(r.code == 0);
    r = cli({"plan", "--model", profile, "--cluster", kDemo + "/dgx-h100.json", "--algorithm", "uniform", "--devices",
        "8", "--stages", "2", "--precision", "bf16"});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("/schedule/precision: bf16: the profile's block products are FP8"));

    r = cli({"profile", "transformer", "--hf-config", hf, "--seq", "8192", "--microbatch", "1", "--device", "A100",
        "--precision", "fp8", "-o", (dir / "x.json").string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("precision: fp8: 'A100' has no FP8 tensor cores"));
    r = cli({"profile", "transformer", "--hf-config", hf, "--seq", "8192", "--microbatch", "1", "--device", "H100",
        "--precision", "fp8", "--bytes-per-element", "2", "-o", (dir / "x.json").string()});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--precision") && Catch::Contains("--bytes-per-element"));
    CHECK_FALSE(fs::exists(dir / "x.json"));
    fs::remove_all(dir);
}

TEST_CASE("plan --zero-stage shards gradients and weights, a stage above 3 is a usage error", "[cli][families]")
{
    // issue 31 item 3: ZeRO 2 and 3 (FSDP) as plan settings, in the plan file.
    const auto dir = fs::temp_directory_path() / ("pw-cli-zero-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto planPath = (dir / "plan.json").string();
    auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
        "uniform", "--devices", "8", "--stages", "2", "--zero-stage", "3", "-o", planPath, "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto schedule = json::parse(std::ifstream(planPath)).at("schedule");
    CHECK(schedule.at("distributed_optimizer") == true);
    CHECK(schedule.at("shard_gradients") == true);
    CHECK(schedule.at("shard_weights") == true);
    r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
        "uniform", "--zero-stage", "4", "-o", planPath});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--zero-stage"));
    fs::remove_all(dir);
}

TEST_CASE("plan --recompute takes none, selective or full, and --sequence-parallel", "[cli][families]")
{
    // issue 31 item 2: the plan file keeps the mode; a wrong one is a usage error naming the option.
    const auto dir = fs::temp_directory_path() / ("pw-cli-recompute-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto planPath = (dir / "plan.json").string();
    for (const std::string mode : {"none", "selective", "full"}) {
        auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
            "uniform", "--devices", "4", "--recompute=" + mode, "-o", planPath, "--json"});
        INFO(r.err);
        REQUIRE(r.code == 0);
        CHECK(json::parse(r.out).at("recompute") == mode);
        CHECK(json::parse(std::ifstream(planPath)).at("schedule").at("recompute") == mode);
    }
    auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
        "uniform", "--recompute", "-o", planPath, "--json"});
    REQUIRE(r.code == 0);
    CHECK(json::parse(r.out).at("recompute") == "full"); // alone: full, as the flag was
    r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
        "uniform", "--recompute=partial"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--recompute: 'partial' is not one of none | selective | full"));
    r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "tensor-sizes=2", "--set", "pipeline-sizes=2", "-o", planPath});
    REQUIRE(r.code == 0);
    const auto plan = json::parse(std::ifstream(planPath));
    CHECK(plan.at("schedule").at("sequence_parallel") == true);
    CHECK(plan.at("schedule").at("distributed_optimizer") == true);
    fs::remove_all(dir);
}

TEST_CASE("plan --tp-comm-overlap reaches the plan and Megatron's arguments", "[cli][overlap]")
{
    const auto dir = fs::temp_directory_path() / ("pw-cli-overlap-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto planPath = (dir / "plan.json").string();
    auto r = cli({"plan", "--algorithm", "megatron", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--set", "tensor-sizes=2", "--set", "pipeline-sizes=2", "--set", "zero-bubble=false",
        "--tp-comm-overlap", "-o", planPath});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto plan = json::parse(std::ifstream(planPath));
    CHECK(plan.at("schedule").at("tp_comm_overlap") == true);
    r = cli({"export", planPath, "--format", "megatron", "-o", (dir / "mg").string()});
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::ifstream args(dir / "mg" / "megatron_args.sh");
    const std::string text((std::istreambuf_iterator<char>(args)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Catch::Contains("--tp-comm-overlap") && Catch::Contains("--sequence-parallel"));
    // Without tensor parallelism there is nothing to overlap: the plan is refused naming the field.
    r = cli({"plan", "--algorithm", "uniform", "--model", kDemo + "/gpt-demo.json", "--cluster",
        kDemo + "/dgx-h100.json", "--tp-comm-overlap"});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("/schedule/tp_comm_overlap"));
    fs::remove_all(dir);
}
