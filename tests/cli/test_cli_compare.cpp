// SPDX-License-Identifier: MIT
// pipewright-cli compare, algorithms and --set: every algorithm on one input, options by name.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "planner/partition/partitioner.h"

using namespace pw::cli::test;
using nlohmann::json;

TEST_CASE("compare runs every registered algorithm but manual on the demo", "[cli][compare]")
{
    auto r = cli({"compare", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--json"});
    REQUIRE(r.code == 0);
    const auto j = json::parse(r.out);
    CHECK(j["devices"] == 8);
    std::vector<std::string> names;
    for (const auto& row : j["rows"]) {
        names.push_back(row["algorithm"]);
        INFO(row.dump());
        CHECK(row["planning_time_s"].get<double>() >= 0);
        if (!row["ok"].get<bool>()) {
            CHECK(!row["error"].get<std::string>().empty());
            continue;
        }
        CHECK(row["throughput_samples_per_s"].get<double>() > 0);
        CHECK(row["bubble_fraction"].get<double>() >= 0);
        CHECK(row["bubble_fraction"].get<double>() < 1);
        CHECK(row["memory_capacity_bytes"].get<double>() > 0);
        CHECK(row["fits_memory"] == (row["memory_ratio"].get<double>() <= 1));
        CHECK(row["devices_used"].get<int>() >= 1);
        CHECK(row["devices_used"].get<int>() <= 8);
    }
    std::vector<std::string> expected;
    for (const auto* p : pw::planner::partitioners())
        if (p->name() != "manual")
            expected.emplace_back(p->name());
    CHECK(names == expected);

    auto table = cli({"compare", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json",
        "--algorithms", "uniform,pipedream"});
    REQUIRE(table.code == 0);
    CHECK(table.out.find("samples/s") != std::string::npos);
    CHECK(table.out.find("uniform") < table.out.find("pipedream ")); // the order asked for
    CHECK(table.out.find("parameters") == std::string::npos);
}

TEST_CASE("compare rejects unknown algorithms and bad input clearly", "[cli][compare]")
{
    auto r = cli({"compare", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithms",
        "uniform,nosuch"});
    CHECK(r.code == 2); // a usage error, as an unknown --schedule is
    CHECK(r.err.find("unknown algorithm 'nosuch'") != std::string::npos);
    auto bad = cli({"compare", "--model", kData + "/bad/truncated-model.json", "--cluster", kDemo + "/dgx-h100.json"});
    CHECK(bad.code == 1);
    CHECK(bad.err.find("truncated-model.json") != std::string::npos);
}

TEST_CASE("algorithms lists every partitioner with its options", "[cli][compare]")
{
    auto r = cli({"algorithms", "--json"});
    REQUIRE(r.code == 0);
    const auto j = json::parse(r.out);
    REQUIRE(j.size() == pw::planner::partitioners().size());
    for (const auto& a : j) {
        CHECK(!a["description"].get<std::string>().empty());
        for (const auto& o : a["options"]) {
            CHECK(!o["name"].get<std::string>().empty());
            CHECK(!o["type"].get<std::string>().empty());
            CHECK(!o["description"].get<std::string>().empty());
        }
    }
    auto text = cli({"algorithms"});
    CHECK(text.code == 0);
    CHECK(text.out.find("pipedream:") != std::string::npos);
}

TEST_CASE("set options name an option of the chosen algorithm", "[cli][compare]")
{
    auto r = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json", "--algorithm",
        "uniform", "--set", "bogus=1"});
    CHECK(r.code == 1);
    CHECK(r.err.find("--set") != std::string::npos);
    CHECK(r.err.find("no option 'bogus'") != std::string::npos);
    auto malformed = cli({"plan", "--model", kDemo + "/gpt-demo.json", "--cluster", kDemo + "/dgx-h100.json",
        "--algorithm", "uniform", "--set", "novalue"});
    CHECK(malformed.code == 1);
    CHECK(malformed.err.find("NAME=VALUE") != std::string::npos);
}

TEST_CASE("advise ranks the demo offers and explains bad offers files", "[cli][advise]")
{
    auto r = cli({"advise", "--model", kDemo + "/gpt-demo.json", "--offers", kDemo + "/offers.json", "--samples", "2e8",
        "--deadline-hours", "72", "--no-mixes", "--algorithms", "pipedream", "--json"});
    REQUIRE(r.code == 0);
    const auto j = json::parse(r.out);
    CHECK(j["objective"] == "cost within the deadline");
    REQUIRE(!j["allocations"].empty());
    CHECK(j["allocations"][0]["meets_constraints"] == true);
    CHECK(j["allocations"][0]["time_s"].get<double>() <= 72 * 3600.0);
    CHECK(j["allocations"].size() <= 10);

    auto text = cli({"advise", "--model", kDemo + "/gpt-demo.json", "--offers", kDemo + "/offers.json", "--samples",
        "2e8", "--no-mixes", "--top", "3"});
    REQUIRE(text.code == 0);
    CHECK(text.out.find("ranked by cost per sample") != std::string::npos);
    CHECK(text.out.find("time to train") != std::string::npos);

    auto missing = cli({"advise", "--model", kDemo + "/gpt-demo.json", "--offers", kDemo + "/dgx-h100.json"});
    CHECK(missing.code == 1);
    CHECK(missing.err.find("dgx-h100.json") != std::string::npos);
    CHECK(missing.err.find("offers") != std::string::npos);
}
