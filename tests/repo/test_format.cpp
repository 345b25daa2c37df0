// SPDX-License-Identifier: MIT
// Every C++ file of the project is formatted by .clang-format (clang-format --dry-run -Werror finds nothing).
// Fix with: clang-format -i $(git ls-files '*.cpp' '*.h')
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = PW_SOURCE_DIR;

/// Runs a shell command; returns its exit status and what it printed (stdout and stderr).
int run(const std::string& command, std::string& output)
{
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buffer {};
    while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe))
        output.append(buffer.data(), n);
    return pclose(pipe);
}

std::vector<fs::path> cppFiles()
{
    std::vector<fs::path> out;
    for (const char* folder : {"planner", "app", "ui", "engine", "agents", "tests"}) {
        if (!fs::exists(kSource / folder))
            continue;
        for (const auto& e : fs::recursive_directory_iterator(kSource / folder)) {
            const auto ext = e.path().extension();
            if (e.is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".cu" || ext == ".cuh"))
                out.push_back(e.path());
        }
    }
    return out;
}

} // namespace

TEST_CASE("clang-format finds a badly formatted file", "[format]")
{
    const fs::path bad = fs::temp_directory_path() / "pw_format_probe.cpp";
    fs::copy_file(
        kSource / ".clang-format", fs::temp_directory_path() / ".clang-format", fs::copy_options::overwrite_existing);
    std::ofstream(bad) << "int  main( ){return 0;}\n";
    std::string out;
    CHECK(run(std::string(PW_CLANG_FORMAT) + " --dry-run -Werror " + bad.string(), out) != 0);
    fs::remove(bad);
}

TEST_CASE("every C++ file follows .clang-format", "[format]")
{
    const auto files = cppFiles();
    REQUIRE(files.size() > 100);
    // A hundred files per clang-format: one process per file spent a minute starting processes (67 s against 5 s for
    // the same check); the output names each file that is not formatted.
    constexpr std::size_t kBatch = 100;
    for (std::size_t first = 0; first < files.size(); first += kBatch) {
        std::string command = std::string(PW_CLANG_FORMAT) + " --dry-run -Werror";
        for (std::size_t i = first; i < std::min(files.size(), first + kBatch); ++i)
            command += " '" + files[i].string() + "'";
        std::string out;
        const int status = run(command, out);
        INFO(out);
        CHECK(status == 0);
    }
}

TEST_CASE("no source file of the engine is over 800 lines", "[repo]")
{
    // Issue 32: a model family, a schedule feature or a device's kernels each in a file one can read whole.
    std::vector<std::string> over;
    std::size_t files = 0;
    for (const auto& entry : fs::recursive_directory_iterator(kSource / "engine")) {
        const auto ext = entry.path().extension().string();
        if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh"))
            continue;
        ++files;
        std::ifstream in(entry.path());
        std::size_t lines = 0;
        for (std::string line; std::getline(in, line);)
            ++lines;
        if (lines > 800)
            over.push_back(fs::relative(entry.path(), kSource).string() + ": " + std::to_string(lines) + " lines");
    }
    CHECK(files > 40);
    INFO([&] {
        std::string s;
        for (const auto& o : over)
            s += "\n  " + o;
        return s;
    }());
    CHECK(over.empty());
}
