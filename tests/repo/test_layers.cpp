// SPDX-License-Identifier: MIT
// The layer rules of docs/build.md, checked on the source tree: planner/ is pure C++ (no Qt, CUDA, NCCL,
// cuBLAS, SQLite or libssh header, nothing of the layers above it), engine/ and agents/ (the `agent` preset) use
// no Qt, SQLite or libssh, and headers marked "Internal to <folder>/" are included only from their own folder and
// from white-box tests and benchmarks. The build enforces most of this already (each target's include root holds
// only its folder's public headers); this test also catches relative paths ("../app/...") that include roots
// cannot stop.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kLayersSource = PW_SOURCE_DIR;

struct Include
{
    std::string target; ///< what is between the quotes or angle brackets
    bool angled = false;
    int line = 0;
};

std::vector<Include> includesOf(const std::string& text)
{
    static const std::regex re(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
    std::vector<Include> out;
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (std::regex_search(line, m, re))
            out.push_back({m[2].str(), m[1].str() == "<", n});
    }
    return out;
}

std::string readFile(const fs::path& p)
{
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Headers a pure C++ layer may not include (Qt, CUDA and its libraries, SQLite, libssh).
bool forbiddenInPlanner(const Include& inc)
{
    if (!inc.angled)
        return false;
    static const std::regex re(
        R"(^(Q[A-Za-z]+|Qt[A-Za-z]+/.*|cuda.*|cublas.*|nccl.*|curand.*|sqlite3\.h|libssh/.*|gloo/.*)$)");
    return std::regex_match(inc.target, re);
}

/// Headers the agent's layers (engine/, agents/) may not include: the `agent` preset builds them for GPU servers
/// without Qt, SQLite or libssh (docs/build.md). CUDA, Gloo and OpenSSL's libcrypto are theirs to use.
bool forbiddenInAgent(const Include& inc)
{
    if (!inc.angled)
        return false;
    static const std::regex re(R"(^(Q[A-Za-z]+|Qt[A-Za-z]+/.*|sqlite3\.h|libssh/.*)$)");
    return std::regex_match(inc.target, re);
}

/// The project path a quoted include of `from` resolves to (relative to its file first, then to the source root,
/// which is where every include root points), or empty when it names no file of the project.
fs::path resolve(const fs::path& from, const Include& inc)
{
    if (inc.angled)
        return {};
    for (const fs::path& base : {from.parent_path(), kLayersSource}) {
        const fs::path p = (base / inc.target).lexically_normal();
        if (fs::exists(p))
            return fs::relative(p, kLayersSource);
    }
    return {};
}

std::string topFolder(const fs::path& rel)
{
    return rel.empty() ? std::string() : rel.begin()->string();
}

/// The layer a project file belongs to: its top folder, except the desktop app's main() (app/gui/), which sits
/// above ui/.
std::string layerOf(const fs::path& rel)
{
    const auto top = topFolder(rel);
    if (top == "app" && std::distance(rel.begin(), rel.end()) > 2 && std::next(rel.begin())->string() == "gui")
        return "app/gui";
    return top;
}

bool isInternal(const fs::path& file)
{
    std::ifstream in(kLayersSource / file);
    std::string line;
    for (int n = 0; n < 5 && std::getline(in, line); ++n)
        if (line.find("Internal to " + topFolder(file) + "/") != std::string::npos)
            return true;
    return false;
}

std::vector<fs::path> sources(const std::string& folder)
{
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(kLayersSource / folder)) {
        const auto ext = e.path().extension();
        const auto rel = fs::relative(e.path(), kLayersSource);
        if (e.is_regular_file() && (ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh")
            && layerOf(rel) == folder)
            out.push_back(rel);
    }
    return out;
}

/// Which top-level folders a folder may include from (its own, and the layers below it).
const std::map<std::string, std::vector<std::string>> kMayInclude = {
    {"planner", {"planner"}},
    {"engine", {"engine", "planner"}},
    {"agents", {"agents", "engine", "planner"}},
    {"app", {"app", "agents", "engine", "planner"}},
    {"ui", {"ui", "app", "agents", "engine", "planner"}},
    {"app/gui", {"app/gui", "ui", "app", "agents", "engine", "planner"}},
};

} // namespace

TEST_CASE("the include scanner finds forbidden and cross-layer includes", "[layers]")
{
    const auto incs = includesOf("#include <QWidget>\n  # include \"../app/project/project.h\"\n#include <vector>\n"
                                 "#include <cuda_runtime.h>\n#include <sqlite3.h>\n#include <libssh/libssh.h>\n");
    REQUIRE(incs.size() == 6);
    CHECK(forbiddenInPlanner(incs[0]));
    CHECK_FALSE(forbiddenInPlanner(incs[1]));
    CHECK_FALSE(forbiddenInPlanner(incs[2]));
    CHECK(forbiddenInPlanner(incs[3]));
    CHECK(forbiddenInPlanner(incs[4]));
    CHECK(forbiddenInPlanner(incs[5]));
    CHECK(forbiddenInAgent(incs[0]));
    CHECK_FALSE(forbiddenInAgent(incs[2]));
    CHECK_FALSE(forbiddenInAgent(incs[3]));
    CHECK(forbiddenInAgent(incs[4]));
    CHECK(forbiddenInAgent(incs[5]));
    CHECK_FALSE(forbiddenInAgent({"gloo/context.h", true, 1}));
    CHECK(incs[1].line == 2);
    CHECK(topFolder(resolve(kLayersSource / "planner/plan.h", {"../app/project/project.h", false, 1})) == "app");
    CHECK(layerOf("app/gui/main.cpp") == "app/gui");
    CHECK(layerOf("app/cli/commands.cpp") == "app");
    CHECK(layerOf("app/launch/ssh.h") == "app");
    CHECK(isInternal("planner/schedule/builder.h"));
    CHECK_FALSE(isInternal("planner/plan.h"));
}

TEST_CASE("planner/ includes no Qt, CUDA, SQLite or libssh header", "[layers]")
{
    const auto files = sources("planner");
    REQUIRE(files.size() > 50);
    for (const auto& file : files)
        for (const auto& inc : includesOf(readFile(kLayersSource / file))) {
            INFO(file.string() << ":" << inc.line << ": #include <" << inc.target << ">");
            CHECK_FALSE(forbiddenInPlanner(inc));
        }
}

TEST_CASE("engine/ and agents/ include no Qt, SQLite or libssh header", "[layers]")
{
    // The SSH launcher is the controller's (app/launch/): the agent needs no libssh, so it builds alone.
    CHECK_FALSE(fs::exists(kLayersSource / "agents/launch"));
    CHECK(fs::exists(kLayersSource / "app/launch/ssh.h"));
    for (const std::string folder : {"engine", "agents"}) {
        const auto files = sources(folder);
        REQUIRE(files.size() > 5);
        for (const auto& file : files)
            for (const auto& inc : includesOf(readFile(kLayersSource / file))) {
                INFO(file.string() << ":" << inc.line << ": #include <" << inc.target << ">");
                CHECK_FALSE(forbiddenInAgent(inc));
            }
    }
}

TEST_CASE("each layer includes only itself and the layers below it", "[layers]")
{
    for (const auto& [folder, allowed] : kMayInclude)
        for (const auto& file : sources(folder))
            for (const auto& inc : includesOf(readFile(kLayersSource / file))) {
                const auto target = resolve(kLayersSource / file, inc);
                if (target.empty())
                    continue;
                INFO(file.string() << ":" << inc.line << " includes " << target.string());
                CHECK(std::find(allowed.begin(), allowed.end(), layerOf(target)) != allowed.end());
            }
}

TEST_CASE("internal headers are included only from their own folder", "[layers]")
{
    int internal = 0;
    for (const auto& [folder, allowed] : kMayInclude)
        for (const auto& file : sources(folder))
            for (const auto& inc : includesOf(readFile(kLayersSource / file))) {
                const auto target = resolve(kLayersSource / file, inc);
                if (target.empty() || !isInternal(target))
                    continue;
                ++internal;
                INFO(file.string() << ":" << inc.line << " includes the internal header " << target.string());
                CHECK(topFolder(target) == folder);
            }
    CHECK(internal > 10); // the planner's algorithms include their own internal headers
}
