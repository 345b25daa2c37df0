// SPDX-License-Identifier: MIT
// #10 items 4, 6 and 15 at the command line: inputs that used to give silent nonsense get clear errors or finite,
// unit-bearing results; the documented exit statuses; one memory unit; one rule for graph.txt files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_harness.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pw::cli::test;

namespace {

/// A scratch folder for one test, removed at its end.
struct Scratch
{
    fs::path dir = fs::temp_directory_path() / ("pw-cli-inputs-" + std::to_string(::getpid()));
    Scratch() { fs::create_directories(dir); }
    ~Scratch() { fs::remove_all(dir); }
    std::string write(const std::string& name, const std::string& text) const
    {
        std::ofstream((dir / name).string(), std::ios::binary) << text;
        return (dir / name).string();
    }
    std::string writeJson(const std::string& name, const json& j) const { return write(name, j.dump(2)); }
};

json readJson(const std::string& path)
{
    return json::parse(std::ifstream(path));
}

const std::string kGolden = kData + "/golden/";

/// Whether the text holds a run of `digits` or more digits (a number printed without a sensible unit).
bool hasLongNumber(const std::string& text, int digits = 12)
{
    return std::regex_search(text, std::regex("[0-9]{" + std::to_string(digits) + ",}"));
}

} // namespace

TEST_CASE("a bandwidth far below 1 byte/s is an error naming the field, not `inf s` and `-nan %`", "[cli][inputs]")
{
    Scratch s;
    auto cluster = readJson(kGolden + "four-gpus.json");
    cluster["nodes"][0]["intra_bandwidth_bytes_per_s"] = 1e-320;
    const auto path = s.writeJson("tiny-bw.json", cluster);
    auto r = cli({"plan", "--model", kGolden + "tiny-model.json", "--cluster", path, "--algorithm", "uniform"});
    CHECK(r.code == 1);
    CHECK(r.err.find(path + ":") != std::string::npos);
    CHECK(r.err.find("/nodes/0/intra_bandwidth_bytes_per_s") != std::string::npos);
    CHECK(r.err.find("at least 1 byte/s") != std::string::npos);
    CHECK(r.out.find("inf") == std::string::npos);
    CHECK(r.out.find("nan") == std::string::npos);
}

TEST_CASE("huge layer times print with a unit, and overflowing ones are an error", "[cli][inputs]")
{
    Scratch s;
    auto model = readJson(kGolden + "tiny-model.json");
    model["layers"][1]["forward_ms"] = 1e308;
    auto r = cli({"plan", "--model", s.writeJson("huge.json", model), "--cluster", kGolden + "four-gpus.json",
        "--algorithm", "uniform"});
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("e+305 s") != std::string::npos); // 1e308 ms per stage, 8 microbatches
    CHECK_FALSE(hasLongNumber(r.out));

    // Near the largest double: still finite, still with a unit.
    model["layers"][1]["backward_ms"] = 1.7e308;
    model["layers"][1]["forward_ms"] = 1.7e308;
    auto big = cli({"plan", "--model", s.writeJson("big.json", model), "--cluster", kGolden + "four-gpus.json",
        "--algorithm", "uniform"});
    INFO(big.out << big.err);
    CHECK(big.code == 0);
    CHECK(big.out.find("e+306 s") != std::string::npos);
    CHECK_FALSE(hasLongNumber(big.out));

    // Every layer that slow on one stage, 4000 microbatches: the iteration overflows a double.
    for (auto& layer : model["layers"]) {
        layer["forward_ms"] = 1.7e308;
        layer["backward_ms"] = 1.7e308;
    }
    auto inf = cli({"plan", "--model", s.writeJson("inf.json", model), "--cluster", kGolden + "four-gpus.json",
        "--algorithm", "uniform", "--stages", "1", "--microbatches", "4000"});
    INFO(inf.out << inf.err);
    CHECK(inf.code == 1);
    CHECK(inf.err.find("the predicted iteration time is not finite") != std::string::npos);
    CHECK(inf.out.find("nan") == std::string::npos);
    CHECK(inf.out.find("inf s") == std::string::npos);
}

TEST_CASE("a stage count of 0 or below (--stages) is a usage error", "[cli][inputs]")
{
    for (std::string stages : {"0", "-3"}) {
        auto r = cli({"plan", "--model", kGolden + "tiny-model.json", "--cluster", kGolden + "four-gpus.json",
            "--algorithm", "uniform", "--stages", stages});
        INFO("--stages " << stages << ": " << r.err);
        CHECK(r.code == 2);
        CHECK(r.err.find("--stages") != std::string::npos);
    }
    auto ok = cli({"plan", "--model", kGolden + "tiny-model.json", "--cluster", kGolden + "four-gpus.json",
        "--algorithm", "uniform", "--stages", "2"});
    CHECK(ok.code == 0);
}

TEST_CASE("an unknown --schedule is a usage error naming the option and the known kinds", "[cli][inputs]")
{
    for (const char* command : {"plan", "compare"}) {
        std::vector<std::string> args = {command, "--model", kGolden + "tiny-model.json", "--cluster",
            kGolden + "four-gpus.json", "--schedule", "zigzag"};
        if (std::string(command) == "plan")
            args.insert(args.end(), {"--algorithm", "uniform"});
        auto r = cli(args);
        INFO(command << ": " << r.err);
        CHECK(r.code == 2);
        CHECK(r.err.find("--schedule: unknown schedule kind 'zigzag' (known: gpipe, 1f1b, pipedream, 2bw, "
                         "interleaved, 1f1b-so, 1f1b-as, wsp, zb-h1, zb-h2, zbv, dualpipev, v-half, v-min)")
            != std::string::npos);
    }
}

TEST_CASE("options the algorithm does not read (--straight, --flat, --stages) are usage errors", "[cli][inputs]")
{
    const std::vector<std::string> base {
        "plan", "--model", kGolden + "tiny-model.json", "--cluster", kGolden + "four-gpus.json"};
    auto with = [&](std::vector<std::string> extra) {
        auto args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        return cli(args);
    };
    auto flat = with({"--algorithm", "uniform", "--flat"});
    CHECK(flat.code == 2);
    CHECK(flat.err.find("--flat: means nothing to algorithm 'uniform'") != std::string::npos);
    auto straight = with({"--algorithm", "hetpipe", "--straight"});
    CHECK(straight.code == 2);
    CHECK(straight.err.find("--straight: means nothing to algorithm 'hetpipe'") != std::string::npos);
    auto stages = with({"--algorithm", "pipedream", "--stages", "2"});
    CHECK(stages.code == 2);
    CHECK(stages.err.find("--stages") != std::string::npos);
    // Where they mean something they are taken.
    CHECK(with({"--algorithm", "uniform", "--straight"}).code == 0);
    CHECK(with({"--algorithm", "pipedream", "--flat"}).code == 0);
    CHECK(with({"--algorithm", "pipedream", "--straight"}).code == 0);
}

TEST_CASE("a directory given as an input file says so", "[cli][inputs]")
{
    Scratch s;
    const auto dir = (s.dir / "model.json").string();
    fs::create_directories(dir);
    auto model = cli({"plan", "--model", dir, "--cluster", kGolden + "four-gpus.json", "--algorithm", "uniform"});
    CHECK(model.code == 1);
    CHECK(model.err.find(dir + ": is a directory, not a file") != std::string::npos);
    auto cluster = cli({"plan", "--model", kGolden + "tiny-model.json", "--cluster", dir, "--algorithm", "uniform"});
    CHECK(cluster.code == 1);
    CHECK(cluster.err.find("is a directory") != std::string::npos);
    auto graph = cli({"profile", "import-pipedream", s.dir.string(), "-o", (s.dir / "x.json").string()});
    CHECK(graph.code == 1);
    CHECK(graph.err.find("is a directory") != std::string::npos);
    auto plan = cli({"simulate", dir});
    CHECK(plan.code == 1);
    CHECK(plan.err.find("is a directory") != std::string::npos);
}

TEST_CASE("a key given twice in an input file names the file, line and key", "[cli][inputs]")
{
    Scratch s;
    const auto path = s.write("dup.json",
        "{\n  \"name\": \"dup\",\n  \"device_types\": [{\"name\": \"gpu\", \"memory_bytes\": 1e10,\n"
        "                    \"memory_bytes\": 2e10}],\n  \"nodes\": [{\"name\": \"n\", \"device_type\": \"gpu\", "
        "\"count\": 1}]\n}\n");
    auto r = cli({"plan", "--model", kGolden + "tiny-model.json", "--cluster", path, "--algorithm", "uniform"});
    CHECK(r.code == 1);
    CHECK(r.err.find(path + ":4: /device_types/0/memory_bytes: duplicate key 'memory_bytes'") != std::string::npos);
}

TEST_CASE("exit status 3: the plan is written and printed but does not fit memory", "[cli][inputs]")
{
    Scratch s;
    const auto planPath = (s.dir / "plan.json").string();
    auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kData + "/bad/tiny-gpu-cluster.json",
        "--algorithm", "uniform", "-o", planPath});
    CHECK(r.code == 3);
    CHECK(fs::exists(planPath));
    CHECK(r.out.find("OVER") != std::string::npos);
    CHECK(r.err.find("does not fit device memory") != std::string::npos);
    CHECK(r.err.find(" GiB") != std::string::npos);
    CHECK(r.err.find("error:") == std::string::npos); // the plan was written: not an error
    auto sim = cli({"simulate", planPath});
    CHECK(sim.code == 3);
    // When the partitioner refuses (--memory-limit) there is no plan: exit 1, nothing written.
    const auto refusedPath = (s.dir / "refused.json").string();
    auto limited = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kData + "/bad/tiny-gpu-cluster.json",
        "--algorithm", "pipedream", "--memory-limit", "-o", refusedPath});
    CHECK(limited.code == 1);
    CHECK_FALSE(fs::exists(refusedPath));
}

TEST_CASE("the help documents the exit statuses and the units", "[cli][inputs]")
{
    auto r = cli({"--help"});
    CHECK(r.code == 0);
    CHECK(r.out.find("Exit status: 0 done; 1 error") != std::string::npos);
    CHECK(r.out.find("2 usage error") != std::string::npos);
    CHECK(r.out.find("3 the plan was written") != std::string::npos);
    CHECK(r.out.find("GiB (2^30 bytes)") != std::string::npos);
}

TEST_CASE("memory is in GiB in the CLI and in the partitioners' diagnostics alike", "[cli][inputs]")
{
    std::string all;
    for (std::vector<std::string> extra : std::vector<std::vector<std::string>> {{"pipedream"},
             {"pipedream-2bw", "--memory-limit"}, {"megatron", "--memory-limit"}, {"madpipe", "--memory-limit"}}) {
        std::vector<std::string> args {"plan", "--model", kDemo + "/gpt-demo.json", "--cluster",
            kData + "/bad/tiny-gpu-cluster.json", "--algorithm"};
        args.insert(args.end(), extra.begin(), extra.end());
        auto r = cli(args);
        INFO(extra.front() << ": " << r.out << r.err);
        CHECK(r.code != 0);
        CHECK(std::regex_search(r.out + r.err, std::regex("[0-9] GiB")));
        all += r.out + r.err;
    }
    // pipedream's warning: one stage of all layers over the 4 slow devices (speed estimated from peak TFLOP/s)
    // 17.17 GiB since bf16 Adam counts 16 bytes per parameter (issue 10 item 2; 14.13 GiB at 8 bytes).
    CHECK(all.find("needs 17.17 GiB per device, tiny has 1.00 GiB") != std::string::npos); // pipedream's warning
    CHECK_FALSE(std::regex_search(all, std::regex("[0-9] GB\\b")));
}

TEST_CASE("a graph.txt is recognised by the rule the app uses, whatever its name", "[cli][inputs]")
{
    Scratch s;
    std::ifstream in(kProfiles + "/pipedream/alexnet/graph.txt", std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE_FALSE(text.empty());
    const auto path = s.write("alexnet.profile", text);
    auto r = cli({"plan", "--model", path, "--cluster", kGolden + "four-gpus.json", "--algorithm", "uniform"});
    INFO(r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("plan     uniform") != std::string::npos);
}

TEST_CASE(
    "input files: missing parts, project files, huge numbers, unknown kinds, binary and endless files", "[cli][inputs]")
{
    // issue 30 item 14: each names the file, and the line and field where there is one.
    Scratch s;
    const json plan = readJson(kDemo + "/gpt2-tiny-local.plan.json");
    {
        json noModel = plan;
        noModel.erase("model");
        const auto path = s.writeJson("no-model.json", noModel);
        const auto r = cli({"simulate", path});
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Catch::Contains(path + ":1: /model: missing required field"));
        json noCluster = plan;
        noCluster.erase("cluster");
        const auto r2 = cli({"simulate", s.writeJson("no-cluster.json", noCluster)});
        CHECK_THAT(r2.err, Catch::Contains(": /cluster: missing required field"));
    }
    {
        const auto r
            = cli({"run", kDemo + "/gpt2-tiny-local.pwproj", "--local", "--history", (s.dir / "h.sqlite").string()});
        CHECK(r.code == 1);
        CHECK_THAT(r.err,
            Catch::Contains("gpt2-tiny-local.pwproj:") && Catch::Contains("/kind")
                && Catch::Contains("a Pipewright project file, not a plan"));
        CHECK_FALSE(fs::exists(s.dir / "h.sqlite"));
    }
    {
        // A number beyond a double, on line 5 as the value of /schedule/microbatches.
        std::string text = plan.dump(2);
        const auto at = text.find("\"microbatches\": ");
        REQUIRE(at != std::string::npos);
        const auto end = text.find_first_of(",\n}", at + 16);
        text.replace(at + 16, end - at - 16, "1e999");
        const auto path = s.write("huge.json", text);
        const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
        const auto r = cli({"simulate", path});
        CHECK(r.code == 1);
        CHECK_THAT(r.err,
            Catch::Contains(path + ":" + std::to_string(line) + ": /schedule/microbatches: ")
                && Catch::Contains("1e999") && Catch::Contains("out of range"));
    }
    {
        json kind = plan;
        kind["schedule"]["kind"] = "zb-h3";
        const auto path = s.writeJson("kind.json", kind);
        const std::string text = kind.dump(2);
        const int line = 1
            + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(text.find("zb-h3")), '\n'));
        const auto r = cli({"simulate", path});
        CHECK(r.code == 1);
        CHECK_THAT(r.err,
            Catch::Contains(path + ":" + std::to_string(line) + ": /schedule/kind: unknown schedule kind 'zb-h3'"));
    }
    {
        // Binary bytes never reach the terminal: not those of the file, not those a parser quotes back.
        const auto binary = s.write("binary.json",
            std::string("\x7f"
                        "ELF\x02\x01\x01\0\0\0garbage\xff\xfe",
                19));
        const auto r = cli({"simulate", binary});
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Catch::Contains("is not a JSON text file"));
        const auto latin = s.write("latin1.json", "{\"name\": \xe9t\xe9}");
        const auto r2 = cli({"simulate", latin});
        CHECK(r2.code == 1);
        for (const std::string& err : {r.err, r2.err}) {
            INFO(err);
            // Printable ASCII only: these messages quote no valid UTF-8 either.
            CHECK(std::all_of(err.begin(), err.end(), [](char c) { return c == '\n' || (c >= 0x20 && c < 0x7f); }));
        }
    }
    {
        // /dev/zero is refused at its first byte, and an endless text (a FIFO fed spaces) at the size limit, instead
        // of being read until memory runs out.
        const auto zero = cli({"simulate", "/dev/zero"});
        CHECK(zero.code == 1);
        CHECK_THAT(zero.err, Catch::Contains("/dev/zero:1: is not a JSON text file: byte 1"));
        const auto fifo = (s.dir / "endless.json").string();
        REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
        std::FILE* feeder = ::popen(("exec yes ' ' > " + fifo + " 2>/dev/null").c_str(), "r");
        REQUIRE(feeder);
        const auto endless = cli({"simulate", fifo});
        ::pclose(feeder); // yes ends on the closed pipe (SIGPIPE)
        CHECK(endless.code == 1);
        CHECK_THAT(endless.err, Catch::Contains(fifo + ": is larger than 256 MiB"));
    }
}

TEST_CASE("numbers as written: --devices 0, a negative memory, an unknown algorithm's exit status", "[cli][inputs]")
{
    // issue 30 item 16.
    Scratch s;
    const auto zero = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json",
        "--algorithm", "uniform", "--devices", "0"});
    CHECK(zero.code == 2); // it used every device, silently
    CHECK_THAT(zero.err, Catch::Contains("--devices"));
    auto cluster = readJson(kDemo + "/dgx-h100.json");
    cluster["device_types"][0]["memory_bytes"] = -80000000000.0;
    const auto path = s.writeJson("negative.json", cluster);
    const auto negative
        = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", path, "--algorithm", "uniform"});
    CHECK(negative.code == 1);
    CHECK_THAT(negative.err, Catch::Contains("/device_types/0/memory_bytes: must be > 0 bytes, got -80000000000.0"));
    CHECK_THAT(negative.err, !Catch::Contains(".000000")); // std::to_string's six decimals
    // An unknown value of an option is a usage error (2), for --algorithm as for --schedule.
    const auto algorithm = cli(
        {"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm", "nosuch"});
    const auto schedule = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json",
        "--algorithm", "uniform", "--schedule", "zb-h3"});
    CHECK(algorithm.code == 2);
    CHECK(schedule.code == 2);
}
