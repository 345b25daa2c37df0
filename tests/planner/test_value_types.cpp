// SPDX-License-Identifier: MIT
// The shared value types compare by value, member by member (= default), not through their JSON or a digest:
// a copy is equal, a change anywhere inside (a nested layer, node or option) is not.
#include <catch2/catch.hpp>

#include "planner/partition/partitioner.h"
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

    b.model.edit().layers[2].backward_ms += 1e-9; // deep inside the model
    CHECK(a.model != b.model);
    CHECK(a != b);

    b = a;
    b.cluster.edit().nodes[0].intra_bandwidth_bytes_per_s = 2e11;
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

TEST_CASE("a plan shares its model and cluster with its copies, edit() copies on write", "[value]")
{
    const Plan a = smallPlan();
    Plan b = a; // an undo step, a scenario, a result row
    CHECK(b.model.sameInstance(a.model));
    CHECK(b.cluster.sameInstance(a.cluster));
    const ModelProfile* shared = &*a.model;

    b.model.edit().layers[0].forward_ms = 7; // b gets its own copy; a is untouched
    CHECK_FALSE(b.model.sameInstance(a.model));
    CHECK(a.model->layers[0].forward_ms == 1);
    CHECK(&*a.model == shared);
    CHECK(b.model->layers[0].forward_ms == 7);
    const ModelProfile* own = &*b.model;
    b.model.edit().layers[1].forward_ms = 8; // sole owner now: changed in place
    CHECK(&*b.model == own);

    // Equal values compare equal whether shared or not.
    Plan c = a;
    c.model = ModelProfile(*a.model);
    CHECK_FALSE(c.model.sameInstance(a.model));
    CHECK(c == a);
    // A default handle holds an empty value, and editing it never touches the shared empty instance.
    Shared<Cluster> none, other;
    CHECK(none->nodes.empty());
    none.edit().name = "x";
    CHECK(other->name.empty());
}

TEST_CASE("a partitioner's plans share the request's model and cluster", "[value]")
{
    const Plan base = smallPlan();
    PartitionRequest request {base.model, base.cluster, {}};
    const auto result = findPartitioner("uniform")->partition(request, {}, {});
    REQUIRE(result.plan);
    CHECK(result.plan->model.sameInstance(base.model));
    CHECK(result.plan->cluster.sameInstance(base.cluster));
}
