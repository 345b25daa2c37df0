// SPDX-License-Identifier: MIT
// The shared value types compare by value, member by member (= default), not through their JSON or a digest:
// a copy is equal, a change anywhere inside (a nested layer, node or option) is not.
#include <catch2/catch.hpp>

#include "planner/plan.h"
#include "planner/schedule.h"
#include "tests/planner/fixtures.h"

using namespace pw::planner;

namespace {

Plan smallPlan()
{
    Plan plan = pw::test::chainPlan(4, 8);
    plan.algorithm_options = {{"straight", true}};
    return plan;
}

} // namespace

TEST_CASE("shared value types compare member by member", "[value]")
{
    const Plan a = smallPlan();
    Plan b = a;
    CHECK(a == b);
    CHECK(a.model == b.model);
    CHECK(a.cluster == b.cluster);

    b.model.layers[2].backward_ms += 1e-9; // deep inside the model
    CHECK(a.model != b.model);
    CHECK(a != b);

    b = a;
    b.cluster.nodes[0].intra_bandwidth_bytes_per_s = 2e11;
    CHECK(a.cluster != b.cluster);
    CHECK(a != b);

    b = a;
    b.stages[3].devices = {3, 2};
    CHECK(a != b);

    b = a;
    b.schedule.microbatches = 9;
    CHECK(a.schedule != b.schedule);
    CHECK(a != b);

    b = a;
    b.algorithm_options["straight"] = false;
    CHECK(a != b);

    Schedule s, t;
    s.microbatches = 4;
    t = s;
    CHECK(s == t);
    t.microbatches = 5;
    CHECK(s != t);
}
