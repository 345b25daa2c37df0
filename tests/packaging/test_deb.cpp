// SPDX-License-Identifier: MIT
// The Debian package that packaging/deb.sh makes from this build tree (the ctest fixture "packaging: build the
// .deb" runs it first): what it holds, lintian's verdict, and a real `apt-get install` of it that opens the demo
// headless and trains the tiny demo with the installed files only, then a purge that must leave nothing behind.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "shell.h"
#include "tests/skip.h"

namespace fs = std::filesystem;
using pw::test::quote;
using pw::test::shell;

namespace {

/// The one pipewright_*.deb the fixture left in PW_DEB_DIR ("" when there is none).
std::string packageFile()
{
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(PW_DEB_DIR, ec))
        if (entry.path().filename().string().rfind("pipewright_", 0) == 0 && entry.path().extension() == ".deb")
            return entry.path().string();
    return {};
}

std::vector<std::string> lines(const std::string& text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty())
            out.push_back(line);
    return out;
}

bool installed()
{
    return shell("dpkg-query -W -f='${Status}' pipewright 2>/dev/null | grep -q 'ok installed'").status == 0;
}

const std::string kApt = "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -y -q ";

/// Purges the package when the test starts (it may be installed already) and whatever way the test ends: a check
/// that fails half-way must not leave it installed.
struct PurgeGuard
{
    PurgeGuard() { purge(); }
    ~PurgeGuard() { purge(); }
    PurgeGuard(const PurgeGuard&) = delete;
    PurgeGuard& operator=(const PurgeGuard&) = delete;
    static void purge()
    {
        if (installed())
            shell(kApt + "remove --purge pipewright");
    }
};

/// Live processes whose executable is one of the installed programs (/usr/bin/pipewright*).
std::vector<std::string> installedProcesses()
{
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const std::string pid = entry.path().filename().string();
        if (pid.empty() || !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
            continue;
        std::error_code linkError;
        const std::string exe = fs::read_symlink(entry.path() / "exe", linkError).string();
        if (!linkError && exe.rfind("/usr/bin/pipewright", 0) == 0)
            out.push_back(pid + " " + exe);
    }
    return out;
}

/// A prefix that runs a command in a private mount namespace with the source tree (and the build tree in it) hidden
/// under an empty tmpfs, so that the installed programs can only read the installed files; "" where this process
/// may not make mount namespaces (a container without CAP_SYS_ADMIN): the programs look beside themselves first
/// (app/project/demo_project.cpp, app::defaultAgentExecutable), so the run is still theirs, only less proven.
std::string hideSourceTree()
{
    const std::string mount = "mount -t tmpfs pw-hidden " + quote(PW_SOURCE_DIR);
    if (shell("unshare --mount --propagation private sh -c " + quote(mount)).status != 0)
        return {};
    return "unshare --mount --propagation private sh -c " + quote(mount + " && exec \"$@\"") + " sh ";
}

} // namespace

TEST_CASE("the package holds the three programs and the demo and desktop files and manual pages", "[deb]")
{
    const std::string deb = packageFile();
    INFO("no pipewright_*.deb in " PW_DEB_DIR ": the fixture test 'packaging:build the .deb' makes it");
    REQUIRE_FALSE(deb.empty());
    CHECK(fs::path(deb).filename().string().rfind("pipewright_" PW_VERSION "_", 0) == 0);

    const auto listing = shell("dpkg-deb --fsys-tarfile " + quote(deb) + " | tar -t");
    REQUIRE(listing.status == 0);
    std::set<std::string> paths;
    for (const auto& line : lines(listing.output))
        paths.insert(line.substr(line.rfind("./", 0) == 0 ? 1 : 0));
    for (const char* path : {"/usr/bin/pipewright", "/usr/bin/pipewright-cli", "/usr/bin/pipewright-agent",
             "/usr/share/applications/io.github.pipewright.Pipewright.desktop",
             "/usr/share/icons/hicolor/scalable/apps/pipewright.svg", "/usr/share/mime/packages/pipewright.xml",
             "/usr/share/metainfo/io.github.pipewright.Pipewright.metainfo.xml",
             "/usr/share/pipewright/demo/gpt-demo.json", "/usr/share/pipewright/demo/gpt2-tiny-local.plan.json",
             "/usr/share/pipewright/demo/gpt2-tiny-local.pwproj", "/usr/share/man/man1/pipewright.1.gz",
             "/usr/share/man/man1/pipewright-cli.1.gz", "/usr/share/man/man1/pipewright-agent.1.gz",
             "/usr/share/doc/pipewright/copyright", "/usr/share/doc/pipewright/changelog.gz"}) {
        INFO(path);
        CHECK(paths.count(path) == 1);
    }
    for (const auto& path : paths) {
        INFO(path << ": everything goes under /usr");
        CHECK(path.rfind("/usr/", 0) == 0);
    }

    const auto fields = shell("dpkg-deb -f " + quote(deb) + " Package Version Architecture Depends");
    REQUIRE(fields.status == 0);
    INFO(fields.output);
    CHECK(fields.output.find("Package: pipewright\n") != std::string::npos);
    CHECK(fields.output.find("Version: " PW_VERSION "\n") != std::string::npos);
    // dpkg-shlibdeps computed the dependencies: the C library, Qt's widgets, SQLite, libssh, OpenBLAS, Gloo; no
    // CUDA library, which no Debian package provides.
    for (const char* dependency : {"libc6", "libqt6widgets6", "libsqlite3-0", "libssh-4", "libopenblas0", "libgloo0"})
        CHECK(fields.output.find(dependency) != std::string::npos);
    CHECK(fields.output.find("cuda") == std::string::npos);
    CHECK(fields.output.find("cublas") == std::string::npos);
}

TEST_CASE("lintian reports no error on the package", "[deb]")
{
    const std::string deb = packageFile();
    REQUIRE_FALSE(deb.empty());
    REQUIRE(pw::test::haveTool("lintian")); // packaging/setup-deps.sh installs it
    const auto r = shell("lintian --tag-display-limit 0 " + quote(deb));
    INFO(r.output);
    std::vector<std::string> errors;
    for (const auto& line : lines(r.output))
        if (line.rfind("E: ", 0) == 0)
            errors.push_back(line);
    CHECK(errors.empty());
    // lintian exits 0 unless it found an error (or failed itself).
    CHECK(r.status == 0);
}

TEST_CASE("the package installs with apt then opens and trains the demo from its own files and purges cleanly", "[deb]")
{
    if (::geteuid() != 0)
        PW_SKIP("installing a package needs root (CI runs as root)");
    if (!pw::test::haveTool("apt-get") || !pw::test::haveTool("dpkg"))
        PW_SKIP("no apt-get or dpkg: not a Debian system");
    const std::string deb = packageFile();
    REQUIRE_FALSE(deb.empty());
    PurgeGuard guard; // removes an installed copy first, and this one whatever happens below
    REQUIRE_FALSE(installed());

    {
        const auto install = shell(kApt + "install --no-install-recommends " + quote(deb));
        INFO(install.output);
        REQUIRE(install.status == 0);
        REQUIRE(installed());
    }

    // What dpkg installed, and which of it are directories (other packages may share those).
    const auto listed = shell("dpkg -L pipewright");
    REQUIRE(listed.status == 0);
    std::vector<std::string> files, directories;
    for (const auto& path : lines(listed.output))
        (fs::is_directory(fs::symlink_status(path)) ? directories : files).push_back(path);
    REQUIRE(std::find(files.begin(), files.end(), "/usr/bin/pipewright-cli") != files.end());

    pw::test::ScratchDir tmp;
    const std::string dir = tmp.path.string();
    // A clean environment: no variable points at the source tree, and the programs' settings, history and caches
    // go to the scratch directory, not to the account running the tests.
    const std::string env = "cd " + quote(dir) + " && env -u PIPEWRIGHT_DEMO_DIR -u PIPEWRIGHT_AGENT HOME=" + quote(dir)
        + " XDG_CONFIG_HOME=" + quote(dir + "/config") + " XDG_DATA_HOME=" + quote(dir + "/data")
        + " XDG_CACHE_HOME=" + quote(dir + "/cache") + " XDG_RUNTIME_DIR=" + quote(dir) + " QT_QPA_PLATFORM=offscreen ";
    const std::string hidden = hideSourceTree();
    if (hidden.empty())
        WARN("cannot make a mount namespace here: the source tree stays visible to the installed programs");
    else
        CHECK(shell(hidden + "ls -A " + quote(PW_SOURCE_DIR)).output.empty());

    { // the desktop app renders the demo's Gantt chart headless
        const auto r = shell(env + hidden + "/usr/bin/pipewright --demo --view gantt --screenshot gantt.png");
        INFO(r.output);
        REQUIRE(r.status == 0);
        std::ifstream png(dir + "/gantt.png", std::ios::binary);
        std::string magic(8, '\0');
        png.read(magic.data(), 8);
        CHECK(magic == "\x89PNG\r\n\x1a\n");
        CHECK(fs::file_size(dir + "/gantt.png") > 10'000);
    }
    { // the CLI prints the demo and trains the tiny demo plan with the installed agent
        const auto demo = shell(env + hidden + "/usr/bin/pipewright-cli demo");
        INFO(demo.output);
        REQUIRE(demo.status == 0);

        const std::string history = dir + "/h.sqlite";
        const auto run = shell(env + hidden
            + "/usr/bin/pipewright-cli run /usr/share/pipewright/demo/gpt2-tiny-local.plan.json --local --steps 3 "
              "--history "
            + quote(history) + " --json");
        INFO(run.output);
        REQUIRE(run.status == 0);
        const auto runs = shell(env + "/usr/bin/pipewright-cli history --history " + quote(history) + " list --json");
        INFO(runs.output);
        REQUIRE(runs.status == 0);
        const auto list = nlohmann::json::parse(runs.output);
        REQUIRE(list.size() == 1);
        CHECK(list[0].at("status") == "succeeded");
        CHECK(list[0].at("steps") == 3);
    }
    { // man finds the manual pages, and the MIME database knows .pwproj
        const auto man = shell("man -w pipewright-cli");
        INFO(man.output);
        CHECK(man.status == 0);
        CHECK(man.output.find("/usr/share/man/man1/pipewright-cli.1.gz") != std::string::npos);
        // shared-mime-info's dpkg trigger compiled the package's type into the database.
        CHECK(fs::exists("/usr/share/mime/application/x-pipewright-project.xml"));
    }
    CHECK(installedProcesses().empty());

    {
        const auto remove = shell(kApt + "remove --purge pipewright");
        INFO(remove.output);
        REQUIRE(remove.status == 0);
        CHECK_FALSE(installed());
    }
    for (const auto& file : files) {
        INFO(file << " is left after the purge");
        CHECK_FALSE(fs::exists(fs::symlink_status(file)));
    }
    // A directory may stay when another package owns it or something else lives in it; an empty one nobody owns
    // is the package's leftover.
    for (const auto& directory : directories) {
        std::error_code ec;
        if (!fs::exists(directory) || !fs::is_empty(directory, ec))
            continue;
        INFO(directory << " is left empty and no package owns it");
        CHECK(shell("dpkg-query -S " + quote(directory) + " >/dev/null").status == 0);
    }
    CHECK_FALSE(fs::exists("/usr/share/mime/application/x-pipewright-project.xml"));
    CHECK(installedProcesses().empty());
}
