// SPDX-License-Identifier: MIT
// One clock for a run over several hosts: the minimum-delay estimate of an agent's clock offset, its uncertainty,
// and the agent clocks a history stores with the clock its measured spans are on.
#include <catch2/catch.hpp>

#include <random>

#include "app/history/history.h"
#include "app/run/clock_offset.h"
#include "planner/timeline.h"
#include "tests/run/process_helpers.h"

using namespace pw;

TEST_CASE("a clock offset is the fastest round trip's middle, within half its round trip", "[clock]")
{
    app::ClockOffset c(8);
    CHECK_FALSE(c.known());
    CHECK(c.offset() == 0);
    // The agent's clock is 1000 s ahead. Paths are asymmetric and queueing adds delay; the fastest round trip
    // (2 ms, 0.5 ms out and 1.5 ms back) bounds the offset best.
    const double truth = 1000.0;
    std::mt19937 rng(1);
    std::uniform_real_distribution<double> delay(0.002, 0.050);
    for (int i = 0; i < 7; ++i) {
        const double sent = 10.0 + i, out = delay(rng), back = delay(rng);
        c.add(sent, sent + out + truth, sent + out + back);
    }
    c.add(20.0, 20.0 + 0.0005 + truth, 20.0 + 0.002);
    REQUIRE(c.known());
    CHECK(c.samples() == 8);
    CHECK(c.uncertainty() == Approx(0.001));
    CHECK(c.offset() == Approx(truth - 0.0005).margin(1e-9)); // the asymmetry: within the uncertainty
    CHECK(std::abs(c.offset() - truth) <= c.uncertainty());
    CHECK(c.toController(1020.5) == Approx(20.5 + 0.0005).margin(1e-9));
    // A sample whose reply came "before" it was sent (a broken clock read) is ignored.
    c.add(30.0, 1030.0, 29.0);
    CHECK(c.samples() == 8);
    // The window forgets: after 8 slower samples the fast one is gone, the offset follows the newer ones.
    for (int i = 0; i < 8; ++i)
        c.add(40.0 + i, 40.0 + i + 0.004 + truth + 0.01, 40.0 + i + 0.008); // the agent's clock drifted 10 ms
    CHECK(c.uncertainty() == Approx(0.004));
    CHECK(c.offset() == Approx(truth + 0.01).margin(1e-9));
}

TEST_CASE("a history keeps each agent's clock and the clock its measured spans are on", "[clock][history]")
{
    test::TempDir dir;
    auto h = app::HistoryStore::open(dir.path / "h.sqlite");
    app::NewRun nr;
    nr.plan_json = "{}";
    nr.cluster_json = "{}";
    const std::string id = h.createRun(nr);
    CHECK(h.measuredTimeline(id).clock == planner::ClockDomain::Host);
    const std::vector<app::AgentClock> clocks = {{0, "a", -0.25, 1e-4, 12}, {1, "b", 1000.125, 3e-4, 9}};
    h.setAgentClocks(id, clocks, planner::ClockDomain::Aligned);
    CHECK(h.agentClocks(id) == clocks);
    CHECK(h.measuredTimeline(id).clock == planner::ClockDomain::Aligned);
    h.deleteRun(id);
    CHECK(h.agentClocks(id).empty());
}
