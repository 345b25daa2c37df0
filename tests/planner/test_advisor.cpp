// SPDX-License-Identifier: MIT
// The GPU allocation advisor: offers files, the time-share LP, and the ranking of planned allocations.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "planner/analysis/advisor.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

Allocation allocation(double samplesPerS, double dollarsPerHour)
{
    Allocation a;
    a.mix = {{"x", 1}};
    a.throughput_samples_per_s = samplesPerS;
    a.price_per_hour = dollarsPerHour;
    return a;
}

json offer(json type, int count)
{
    return {{"device_type", type}, {"count", count}, {"devices_per_node", 4}, {"intra_bandwidth_bytes_per_s", 1e11},
        {"inter_node_bandwidth_bytes_per_s", 1e10}};
}

} // namespace

TEST_CASE("a deadline is met at least cost by time-sharing two allocations", "[advisor]")
{
    // The single-job LP of the Gavel digest §6.6: minimise sum c_j tau_j s.t. sum T_j tau_j >= N, sum tau_j <= SLO;
    // its optimum mixes at most two types (the text's "60% K80 then 40% V100").
    const std::vector<Allocation> offers = {allocation(1, 1), allocation(4, 8)};
    const double n = 36000; // ten hours on the slow one
    // Deadline five hours: the slow one alone is too slow; the fast one alone costs 2.5 h x $8 = $20.
    auto share = bestTimeShare(offers, n, std::nullopt, 5 * 3600.0);
    REQUIRE(share);
    REQUIRE(share->parts.size() == 2);
    // t_A + t_B = 18000, t_A + 4 t_B = 36000  =>  t_B = 6000 s, t_A = 12000 s, cost $16.67.
    CHECK(share->parts[0].second == Approx(12000));
    CHECK(share->parts[1].second == Approx(6000));
    CHECK(share->time_s == Approx(18000));
    CHECK(share->cost == Approx(12000 / 3600.0 + 6000 / 3600.0 * 8));

    // A generous deadline: the cheapest per sample alone (one part).
    auto relaxed = bestTimeShare(offers, n, std::nullopt, 20 * 3600.0);
    REQUIRE(relaxed);
    REQUIRE(relaxed->parts.size() == 1);
    CHECK(relaxed->parts[0].first == 0);
    CHECK(relaxed->cost == Approx(10));
    // Too tight for anything.
    CHECK(!bestTimeShare(offers, n, std::nullopt, 3600.0));

    // The dual: with the $16.67 the mix costs, the fastest way is the same mix, five hours.
    auto budget = bestTimeShare(offers, n, share->cost, std::nullopt);
    REQUIRE(budget);
    CHECK(budget->time_s == Approx(18000));
    CHECK(budget->cost == Approx(share->cost));
    // Neither constraint: nothing to share.
    CHECK(!bestTimeShare(offers, n, std::nullopt, std::nullopt));
}

TEST_CASE("offers files name the bad field", "[advisor]")
{
    const json good = {
        {"format_version", 1}, {"offers", {offer("H100", 8), offer({{"preset", "A100"}, {"price_per_hour", 1.5}}, 4)}}};
    const auto market = marketFromJson(good);
    REQUIRE(market.offers.size() == 2);
    CHECK(market.offers[0].type.name == "H100");
    CHECK(market.offers[0].type.memory_bytes == Approx(80.0 * (1ull << 30)));
    CHECK(market.offers[1].type.price_per_hour == 1.5);
    CHECK(marketFromJson(toJson(market)).offers.size() == 2); // round trip

    const auto fieldOf = [](const json& j) {
        try {
            marketFromJson(j);
        } catch (const InputError& e) {
            return e.field();
        }
        return std::string("no error");
    };
    auto bad = good;
    bad["offers"][0]["count"] = 0;
    CHECK(fieldOf(bad) == "/offers/0/count");
    bad = good;
    bad["offers"][1]["device_type"] = "H1000";
    CHECK(fieldOf(bad) == "/offers/1/device_type");
    bad = good;
    bad["offers"][0].erase("inter_node_bandwidth_bytes_per_s");
    CHECK(fieldOf(bad) == "/offers/0/inter_node_bandwidth_bytes_per_s");
    bad = good;
    bad["offers"][1]["device_type"] = "H100";
    CHECK(fieldOf(bad) == "/offers/1/device_type"); // offered twice
    bad = good;
    bad["offers"][0]["relative_speed"] = -1;
    CHECK(fieldOf(bad) == "/offers/0/relative_speed");
    bad = good;
    bad["offers"] = json::array();
    CHECK(fieldOf(bad) == "/offers");
}

TEST_CASE("the advisor plans every allocation and ranks by the objective", "[advisor]")
{
    const auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    const auto market = loadMarket(std::string(PW_DEMO_DIR) + "/offers.json");
    AdvisorRequest request {model, market};
    request.samples = 1e8;
    request.mixes = false;
    request.algorithms = {"pipedream"};
    request.max_devices = 16;
    request.base.memory_limit = true;
    double last = -1;
    auto result = advise(request, [&](double f) {
        CHECK(f >= last);
        CHECK(f <= 1.0);
        last = f;
    });
    CHECK(last == Approx(1.0));
    REQUIRE(!result.allocations.empty());
    CHECK(result.objective == "cost per sample");
    // A100 and V100 are not in the H100 profile: their speed is estimated and said so.
    int estimated = 0;
    for (const auto& d : result.diagnostics)
        estimated += d.code == "estimated-speed";
    CHECK(estimated == 2);
    for (std::size_t i = 0; i < result.allocations.size(); ++i) {
        const auto& a = result.allocations[i];
        INFO(a.label());
        REQUIRE(a.plan);
        CHECK(a.memory_ratio <= 1);
        CHECK(a.cost_per_sample == Approx(a.price_per_hour / 3600 / a.throughput_samples_per_s));
        CHECK(a.time_s == Approx(1e8 / a.throughput_samples_per_s));
        CHECK(a.cost == Approx(a.time_s / 3600 * a.price_per_hour));
        // The throughput is the simulator's for the plan it keeps.
        CHECK(simulate(*a.plan, {false, false}).throughput_samples_per_s == Approx(a.throughput_samples_per_s));
        if (i > 0)
            CHECK(result.allocations[i - 1].cost_per_sample <= a.cost_per_sample);
    }

    // A deadline that only fast allocations meet: those come first, ordered by cost.
    request.deadline_s = 1e8 / 700.0;
    auto timed = advise(request);
    REQUIRE(!timed.allocations.empty());
    CHECK(timed.objective == "cost within the deadline");
    bool seenMiss = false;
    for (std::size_t i = 0; i < timed.allocations.size(); ++i) {
        const auto& a = timed.allocations[i];
        CHECK(a.meets_constraints == (a.time_s <= *request.deadline_s));
        if (!a.meets_constraints)
            seenMiss = true;
        else
            CHECK(!seenMiss); // every allocation meeting it ranks above every one missing it
    }
    CHECK(timed.allocations.front().meets_constraints);
}

TEST_CASE("advisor options are checked", "[advisor]")
{
    const auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    const auto market = loadMarket(std::string(PW_DEMO_DIR) + "/offers.json");
    const auto errorOf = [&](auto tweak) {
        AdvisorRequest r {model, market};
        tweak(r);
        auto result = advise(r);
        CHECK(result.allocations.empty());
        REQUIRE(!result.diagnostics.empty());
        return result.diagnostics.back().message;
    };
    CHECK(errorOf([](AdvisorRequest& r) { r.samples = -1; }).find("samples") != std::string::npos);
    CHECK(errorOf([](AdvisorRequest& r) { r.budget = 0.0; }).find("budget") != std::string::npos);
    CHECK(errorOf([](AdvisorRequest& r) { r.deadline_s = 3600.0; }).find("number of samples") != std::string::npos);
    CHECK(errorOf([](AdvisorRequest& r) { r.max_devices = 0; }).find("at least one") != std::string::npos);
    CHECK(errorOf([](AdvisorRequest& r) { r.algorithms = {"nosuch"}; }).find("nosuch") != std::string::npos);
}
