// SPDX-License-Identifier: MIT
// The hand-written manual pages (packaging/man/*.1) against the programs themselves: every subcommand and option
// that --help lists has its entry, under its subcommand, and the pages list no option the programs dropped; and the
// desktop metadata the package installs is valid.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "shell.h"

using pw::test::quote;
using pw::test::shell;

namespace {

const std::string kManDir = PW_SOURCE_DIR "/packaging/man";

std::string readFile(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/// The long options (--name) of CLI11's help text: the lines of its "Options:" section.
std::set<std::string> helpOptions(const std::string& help)
{
    std::set<std::string> out;
    std::istringstream in(help);
    std::string line;
    bool options = false;
    static const std::regex option(R"(^\s{2}(?:-\w,)?(--[a-z0-9][a-z0-9-]*))");
    while (std::getline(in, line)) {
        if (!line.empty() && line[0] != ' ') {
            options = line == "Options:";
            continue;
        }
        std::smatch m;
        if (options && std::regex_search(line, m, option) && m[1] != "--help")
            out.insert(m[1]);
    }
    return out;
}

/// The subcommands CLI11's help lists under "Subcommands:".
std::vector<std::string> helpSubcommands(const std::string& help)
{
    std::vector<std::string> out;
    std::istringstream in(help);
    std::string line;
    bool subcommands = false;
    static const std::regex name(R"(^\s{2}([a-z0-9][a-z0-9-]*)\s)");
    while (std::getline(in, line)) {
        if (!line.empty() && line[0] != ' ') {
            subcommands = line == "Subcommands:";
            continue;
        }
        std::smatch m;
        if (subcommands && std::regex_search(line, m, name))
            out.push_back(m[1]);
    }
    return out;
}

/// Every --option (written \-\- in troff) of `text`.
std::set<std::string> troffOptions(const std::string& text)
{
    std::set<std::string> out;
    static const std::regex option(R"(\\-\\-([a-z0-9]+(?:\\-[a-z0-9]+)*))");
    for (std::sregex_iterator it(text.begin(), text.end(), option), end; it != end; ++it)
        out.insert("--" + std::regex_replace((*it)[1].str(), std::regex(R"(\\-)"), "-"));
    return out;
}

/// The option entries of each `.SS "NAME"` section of a page: the options on the line after each `.TP`.
std::map<std::string, std::set<std::string>> manSections(const std::string& page)
{
    std::map<std::string, std::set<std::string>> out;
    std::istringstream in(page);
    std::string line, section;
    bool tagLine = false;
    while (std::getline(in, line)) {
        if (line.rfind(".SS \"", 0) == 0) {
            section = line.substr(5, line.rfind('"') - 5);
            out[section];
        } else if (line.rfind(".SH", 0) == 0) {
            section.clear();
        } else if (tagLine && !section.empty()) {
            // the tag of an entry: "\fB\-o\fR, \fB\-\-output\fR \fITEXT\fR"; a positional's tag holds none
            for (const auto& o : troffOptions(line))
                out[section].insert(o);
        }
        tagLine = line == ".TP";
    }
    return out;
}

std::string join(const std::set<std::string>& s)
{
    std::string out;
    for (const auto& x : s)
        out += (out.empty() ? "" : " ") + x;
    return out;
}

} // namespace

TEST_CASE("pipewright-cli's manual page has every subcommand and option of its help and no other", "[man]")
{
    const auto sections = manSections(readFile(kManDir + "/pipewright-cli.1"));
    REQUIRE_FALSE(sections.empty());
    // Walk the subcommand tree from the top-level help, as a reader of `--help` would.
    std::vector<std::string> pending;
    const auto top = shell(quote(PW_CLI_EXE) + " --help");
    REQUIRE(top.status == 0);
    for (const auto& s : helpSubcommands(top.output))
        pending.push_back(s);
    std::set<std::string> seen;
    while (!pending.empty()) {
        const std::string path = pending.back();
        pending.pop_back();
        seen.insert(path);
        const auto help = shell(quote(PW_CLI_EXE) + " " + path + " --help");
        INFO("pipewright-cli " << path << " --help:\n" << help.output);
        REQUIRE(help.status == 0);
        for (const auto& s : helpSubcommands(help.output))
            pending.push_back(path + " " + s);
        const auto it = sections.find(path);
        INFO("packaging/man/pipewright-cli.1 needs a section .SS \"" << path << "\"");
        REQUIRE(it != sections.end());
        CHECK(join(it->second) == join(helpOptions(help.output)));
    }
    for (const auto& [name, options] : sections) {
        INFO("packaging/man/pipewright-cli.1 has a section for '" << name << "', which is no subcommand");
        CHECK(seen.count(name) == 1);
    }
}

TEST_CASE("pipewright-agent's manual page has every option of its usage texts", "[man]")
{
    const auto page = troffOptions(readFile(kManDir + "/pipewright-agent.1"));
    // The agent prints its usage for an argument it does not know; each mode that takes OPTIONS there (--profile,
    // --profile-gemm) has a help of its own.
    const auto usage = shell(quote(PW_AGENT_EXE) + " --help");
    REQUIRE(usage.status == 2);
    std::vector<std::string> texts {usage.output};
    static const std::regex mode(R"((--[a-z0-9][a-z0-9-]*) OPTIONS)");
    for (std::sregex_iterator it(usage.output.begin(), usage.output.end(), mode), end; it != end; ++it) {
        const auto help = shell(quote(PW_AGENT_EXE) + " " + (*it)[1].str() + " --help");
        INFO((*it)[1].str() << " --help:\n" << help.output);
        REQUIRE(help.status == 0);
        texts.push_back(help.output);
    }
    REQUIRE(texts.size() >= 2); // --profile's at least
    std::set<std::string> listed;
    static const std::regex option(R"((--[a-z0-9][a-z0-9-]*))");
    for (const auto& text : texts)
        for (std::sregex_iterator it(text.begin(), text.end(), option), end; it != end; ++it)
            listed.insert((*it)[1]);
    listed.erase("--help"); // the usage quotes the argument it refused
    REQUIRE(listed.count("--layers") == 1);
    for (const auto& o : listed) {
        INFO("packaging/man/pipewright-agent.1 does not document " << o);
        CHECK(page.count(o) == 1);
    }
}

#ifdef PW_APP_EXE
TEST_CASE("pipewright's manual page has every option of its help and no other", "[man]")
{
    const std::string page = readFile(kManDir + "/pipewright.1");
    const auto options = page.substr(page.find(".SH OPTIONS"), page.find(".SH ENVIRONMENT") - page.find(".SH OPTIONS"));
    const auto help = shell("QT_QPA_PLATFORM=offscreen " + quote(PW_APP_EXE) + " --help");
    REQUIRE(help.status == 0);
    std::set<std::string> listed;
    static const std::regex option(R"(^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*))");
    std::istringstream in(help.output);
    std::string line;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, option))
            listed.insert(m[1]);
    }
    REQUIRE(listed.count("--screenshot") == 1);
    CHECK(join(troffOptions(options)) == join(listed));
}
#endif

TEST_CASE("the AppStream metadata validates and names this version", "[man]")
{
    REQUIRE(pw::test::haveTool("appstreamcli")); // packaging/setup-deps.sh installs appstream
    const std::string file = PW_SOURCE_DIR "/packaging/linux/io.github.pipewright.Pipewright.metainfo.xml";
    const auto r = shell("appstreamcli validate --no-net " + quote(file));
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(readFile(file).find("<release version=\"" PW_VERSION "\"") != std::string::npos);
}
