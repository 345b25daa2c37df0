// SPDX-License-Identifier: MIT
// compareAlgorithms: a row per algorithm in the registry's order, and the start of each reported as it happens
// (the desktop app names the algorithm that runs).
#include <catch2/catch.hpp>

#include "fixtures.h"
#include "planner/analysis/compare.h"

using namespace pw::planner;

TEST_CASE("compare reports each algorithm as it starts, in the order of its rows", "[compare]")
{
    const auto model = pw::test::uniformChain(8);
    const auto cluster = pw::test::uniformCluster(1, 4);
    ComparisonOptions options;
    options.base.schedule.microbatches = 8;
    std::vector<std::string> started;
    std::vector<std::size_t> places;
    std::size_t total = 0;
    options.on_start = [&](const std::string& name, std::size_t i, std::size_t n) {
        started.push_back(name);
        places.push_back(i);
        total = n;
    };
    const auto rows = compareAlgorithms(model, cluster, options);
    REQUIRE(rows.size() == started.size());
    CHECK(total == rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        CHECK(rows[i].algorithm == started[i]);
        CHECK(places[i] == i);
    }
    CHECK(std::find(started.begin(), started.end(), "manual") == started.end());

    options.algorithms = {"uniform", "pipedream"};
    started.clear();
    compareAlgorithms(model, cluster, options);
    CHECK(started == std::vector<std::string> {"uniform", "pipedream"});
}
