// SPDX-License-Identifier: MIT
// #10 items 4, 6 and 15 at the command line: inputs that used to give silent nonsense get clear errors or finite,
// unit-bearing results; the documented exit statuses; one memory unit; one rule for graph.txt files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
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
