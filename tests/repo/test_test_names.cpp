// SPDX-License-Identifier: MIT
// Every Catch2 test name works as the filter ctest runs it with (catch_discover_tests passes the name as a test
// spec): a name that starts with '~' excludes itself and runs every other case of its program instead, one that
// starts with '[' is read as a tag, and ';' splits ctest's list of names.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace fs = std::filesystem;

TEST_CASE("every test name is a filter that selects itself", "[names]")
{
    const std::regex testCase(R"re(TEST_CASE\(\s*"([^"]*))re");
    int names = 0;
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(PW_SOURCE_DIR) / "tests")) {
        if (entry.path().extension() != ".cpp")
            continue;
        std::ifstream in(entry.path());
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        for (std::sregex_iterator it(text.begin(), text.end(), testCase), end; it != end; ++it) {
            const std::string name = (*it)[1];
            if (name.empty())
                continue; // a name built from pieces ("a " "b"): its first piece is checked where it starts
            ++names;
            INFO(entry.path().string() << ": \"" << name << "\"");
            CHECK(name.front() != '~');
            CHECK(name.front() != '[');
            CHECK(name.find(';') == std::string::npos);
            // Catch2 v2's console reporter indents a failing test's wrapped name up to its first ": " and aborts
            // (TextFlow's assertion m_width > m_indent) when that is past its 79 columns: the failure is then never
            // printed (issue 30: a network-fault test's failure read "Subprocess aborted").
            const auto colon = name.find(": ");
            CHECK((colon == std::string::npos || colon + 2 < 76));
        }
    }
    CHECK(names > 400);
}
