// SPDX-License-Identifier: MIT
// The `agent` preset (docs/build.md) is how a GPU server builds pipewright-agent: no Qt, QCustomPlot, SQLite, libssh
// or CLI11 there. It configures with those packages disabled (CMake refuses a REQUIRED package that is disabled, so a
// find_package of one of them on the agent's path fails this test), it still has the agent and its engine and agent
// tests, it has none of the controller's programs, and its agent links none of them. The build that runs this test
// compiles the same sources of the same targets (the presets differ in optimisation and in which targets exist, not
// in the code: no source tests a PW_BUILD_* option), and its own pipewright-agent must load none of them either.
// This replaces building the whole preset a second time in CI (packaging/dev.sh test), which took 417 s of a fresh
// clone's 32 min on 2 cores to compile the same planner and engine again at -O3.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/packaging/shell.h"

namespace fs = std::filesystem;
using pw::test::quote;
using pw::test::shell;

namespace {

const fs::path kAgentSource = PW_SOURCE_DIR;

/// What a GPU server does not have: the packages the agent must not need.
const std::vector<std::string> kControllerPackages {"Qt6", "QCustomPlotQt6", "SQLite3", "libssh", "CLI11"};

/// Whether a build.ninja target list or link command names one of the controller's libraries.
const std::regex kControllerLibrary(
    R"((libQt6|Qt6::|-lQt6|libssh|-lssh\b|libsqlite3|-lsqlite3|libqcustomplot))", std::regex::icase);

} // namespace

TEST_CASE("the agent preset configures without Qt, QCustomPlot, SQLite, libssh or CLI11 and links none of them",
    "[agent-preset]")
{
    // The check below sees Qt, SQLite and libssh in a link line or a library list.
    REQUIRE(std::regex_search(std::string("/usr/lib/x86_64-linux-gnu/libQt6Widgets.so.6.4.2"), kControllerLibrary));
    REQUIRE(std::regex_search(std::string("libssh.so.4 => /lib/x86_64-linux-gnu/libssh.so.4"), kControllerLibrary));
    REQUIRE(std::regex_search(std::string("-lsqlite3 /usr/lib/x86_64-linux-gnu/libsqlite3.so"), kControllerLibrary));

    pw::test::ScratchDir dir;
    const fs::path build = dir.path / "agent";
    std::string command = "cd " + quote(kAgentSource.string()) + " && " + quote(PW_CMAKE_COMMAND)
        + " --preset agent -B " + quote(build.string());
    for (const auto& package : kControllerPackages)
        command += " -DCMAKE_DISABLE_FIND_PACKAGE_" + package + "=ON";
    const auto configured = shell(command);
    INFO(configured.output);
    REQUIRE(configured.status == 0);

    const auto targets = shell("ninja -C " + quote(build.string()) + " -t targets all");
    REQUIRE(targets.status == 0);
    auto has = [&](const std::string& target) {
        return targets.output.find("\n" + target + ":") != std::string::npos
            || targets.output.rfind(target + ":", 0) == 0;
    };
    // What a GPU server needs: the agent, and the engine's and the agent's tests.
    CHECK(has("agents/pipewright-agent"));
    CHECK(has("tests/pw_engine_tests"));
    CHECK(has("tests/pw_agents_tests"));
    // None of the controller's programs.
    CHECK_FALSE(has("app/pipewright-cli"));
    CHECK_FALSE(has("app/gui/pipewright"));
    CHECK_FALSE(has("tests/pw_app_tests"));
    CHECK_FALSE(has("tests/pw_ui_tests"));

    // Every step to the agent and its tests is known (a dry run plans them all), and the agent's link names no
    // controller library.
    const auto plan
        = shell("ninja -C " + quote(build.string()) + " -n pipewright-agent pw_engine_tests pw_agents_tests");
    INFO(plan.output.substr(0, 4000));
    REQUIRE(plan.status == 0);
    const auto link = shell("ninja -C " + quote(build.string()) + " -t commands agents/pipewright-agent | tail -n 1");
    REQUIRE(link.status == 0);
    INFO(link.output);
    CHECK(link.output.find("pw_engine") != std::string::npos);
    CHECK_FALSE(std::regex_search(link.output, kControllerLibrary));
}

#ifdef PW_AGENT_EXE
TEST_CASE("this build's pipewright-agent loads no Qt, SQLite or libssh", "[agent-preset]")
{
    const auto needed = shell("readelf -d " + quote(PW_AGENT_EXE) + " | grep NEEDED");
    INFO(needed.output);
    REQUIRE(needed.status == 0);
    CHECK(needed.output.find("libc.so") != std::string::npos); // the check reads the agent's dependencies
    CHECK_FALSE(std::regex_search(needed.output, kControllerLibrary));
    const auto loaded = shell("ldd " + quote(PW_AGENT_EXE));
    INFO(loaded.output);
    REQUIRE(loaded.status == 0);
    CHECK_FALSE(std::regex_search(loaded.output, kControllerLibrary));
}
#endif

TEST_CASE(
    "no source of the agent's layers tests a PW_BUILD_* option, so every preset compiles them alike", "[agent-preset]")
{
    int files = 0;
    for (const char* folder : {"planner", "engine", "agents"})
        for (const auto& e : fs::recursive_directory_iterator(kAgentSource / folder)) {
            const auto ext = e.path().extension();
            if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh"))
                continue;
            ++files;
            std::ifstream in(e.path());
            std::stringstream text;
            text << in.rdbuf();
            INFO(e.path().string());
            CHECK(text.str().find("PW_BUILD_") == std::string::npos);
        }
    CHECK(files > 100);
}
