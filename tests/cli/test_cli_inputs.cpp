// SPDX-License-Identifier: MIT
// #10 items 4, 6 and 15 at the command line: inputs that used to give silent nonsense get clear errors or finite,
// unit-bearing results; the documented exit statuses; one memory unit; one rule for graph.txt files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <unistd.h>

#include "cli_harness.h"

namespace fs = std::filesystem;
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
};

const std::string kGolden = kData + "/golden/";

} // namespace

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
    CHECK(all.find("needs 13.56 GiB per device, tiny has 1.00 GiB") != std::string::npos); // pipedream's warning
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
