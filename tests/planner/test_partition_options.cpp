// SPDX-License-Identifier: MIT
// Algorithm-specific options: parsing command-line text and checking JSON params against specs.
#include <catch2/catch.hpp>

#include "planner/errors.h"
#include "planner/partition/partitioner.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

std::vector<OptionSpec> specs()
{
    using T = OptionSpec::Type;
    return {
        {"staleness", T::Integer, 0, "clock distance D", 0.0, 1000.0, {}},
        {"efficiency", T::Number, 0.8, "link efficiency", 0.0, 1.0, {}},
        {"recompute", T::Boolean, false, "allow recomputation", {}, {}, {}},
        {"policy", T::Choice, "ed", "allocation policy", {}, {}, {"np", "ed", "hd", "custom"}},
        {"sizes", T::IntegerList, json(), "microbatch sizes", 1.0, {}, {}},
    };
}

} // namespace

TEST_CASE("option text parses by type and range", "[options]")
{
    const auto s = specs();
    CHECK(parseOptionValue(s[0], "4") == json(4));
    CHECK(parseOptionValue(s[1], "0.25") == json(0.25));
    CHECK(parseOptionValue(s[2], "true") == json(true));
    CHECK(parseOptionValue(s[2], "off") == json(false));
    CHECK(parseOptionValue(s[3], "hd") == json("hd"));
    CHECK(parseOptionValue(s[4], "1,2,8") == json({1, 2, 8}));
    CHECK_THROWS_AS(parseOptionValue(s[0], "-1"), InputError); // D < 0
    CHECK_THROWS_AS(parseOptionValue(s[0], "4x"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[0], "99999999999999"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[1], "1.5"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[1], "nan"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[2], "maybe"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[3], "xx"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[4], "1,,2"), InputError);
    CHECK_THROWS_AS(parseOptionValue(s[4], "0,2"), InputError);
    try {
        parseOptionValue(s[3], "xx");
    } catch (const InputError& e) {
        CHECK(std::string(e.what()).find("one of np|ed|hd|custom") != std::string::npos);
    }
}

TEST_CASE("option values check JSON params and fall back to defaults", "[options]")
{
    std::vector<Diagnostic> diags;
    detail::OptionValues v(specs(), json {{"staleness", 3}, {"sizes", {1, 4}}}, diags);
    REQUIRE(v.ok());
    CHECK(diags.empty());
    CHECK(v.integer("staleness") == 3);
    CHECK(v.given("staleness"));
    CHECK(!v.given("policy"));
    CHECK(v.choice("policy") == "ed");
    CHECK(v.number("efficiency") == 0.8);
    CHECK(v.integers("sizes") == std::vector<int> {1, 4});
    CHECK(v.effective()
        == json {{"staleness", 3}, {"efficiency", 0.8}, {"recompute", false}, {"policy", "ed"}, {"sizes", {1, 4}}});

    detail::OptionValues defaults(specs(), json::object(), diags);
    CHECK(!defaults.has("sizes")); // no default: the algorithm chooses
    CHECK_THROWS_AS(defaults.integers("sizes"), std::logic_error);
}

TEST_CASE("bad params become bad-option errors naming the option", "[options]")
{
    for (const auto& [params, needle] : std::vector<std::pair<json, std::string>> {
             {{{"staleness", -1}}, "staleness"},
             {{{"staleness", 1.5}}, "staleness"},
             {{{"policy", 3}}, "policy"},
             {{{"sizes", json::array()}}, "sizes"},
             {{{"bogus", 1}}, "unknown option 'bogus'"},
             {json::array(), "object"},
         }) {
        std::vector<Diagnostic> diags;
        detail::OptionValues v(specs(), params, diags);
        CHECK(!v.ok());
        REQUIRE(diags.size() == 1);
        CHECK(diags[0].severity == Diagnostic::Severity::Error);
        CHECK(diags[0].code == "bad-option");
        CHECK(diags[0].message.find(needle) != std::string::npos);
    }
}
