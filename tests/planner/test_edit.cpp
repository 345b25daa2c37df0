// SPDX-License-Identifier: MIT
// Plan edits by hand (the desktop app's boundary handles and stage menus): snapping, moves, splits, merges,
// device assignment, what cannot be edited, and that an edit and its inverse restore the plan exactly.
#include <catch2/catch.hpp>

#include <cmath>

#include "planner/edit.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

Plan demoPlan(const std::string& algorithm = "uniform", int devices = 4)
{
    static const auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    static const auto cluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    PartitionOptions o;
    o.devices = devices;
    o.schedule.microbatches = 8;
    auto r = findPartitioner(algorithm)->partition({model, cluster, o}, {}, {});
    REQUIRE(r.ok());
    return *r.plan;
}

bool sameStages(const Plan& a, const Plan& b)
{
    if (a.stageCount() != b.stageCount())
        return false;
    for (int s = 0; s < a.stageCount(); ++s)
        if (a.stages[s].first_layer != b.stages[s].first_layer || a.stages[s].last_layer != b.stages[s].last_layer
            || a.stages[s].devices != b.stages[s].devices)
            return false;
    return true;
}

} // namespace

TEST_CASE("boundaries snap to layer edges and keep every stage non-empty", "[edit]")
{
    const auto plan = demoPlan(); // 26 layers on 4 stages
    const auto b = edit::boundaries(plan);
    REQUIRE(b.size() == 3);
    CHECK(b[0] == plan.stages[0].last_layer);
    // Layer i spans [i, i + 1): the edge nearest 5.4 is 5, after layer 4.
    CHECK(edit::snapBoundary(plan, 0, 5.4) == 4);
    CHECK(edit::snapBoundary(plan, 0, 5.6) == 5);
    // Dragged past a neighbour's last layer or before the stage's first: clamped so both keep a layer.
    CHECK(edit::snapBoundary(plan, 0, -10) == plan.stages[0].first_layer);
    CHECK(edit::snapBoundary(plan, 0, 1e9) == plan.stages[1].last_layer - 1);
    CHECK(edit::snapBoundary(plan, 1, std::nan("")) == plan.stages[1].first_layer);
    CHECK_THROWS_AS(edit::snapBoundary(plan, 3, 4.0), InputError);
}

TEST_CASE("moving a boundary moves layers, makes the plan manual, and moves back exactly", "[edit]")
{
    const auto plan = demoPlan();
    const int before = plan.stages[0].last_layer;
    const auto moved = edit::moveBoundary(plan, 0, before + 2);
    CHECK(moved.stages[0].last_layer == before + 2);
    CHECK(moved.stages[1].first_layer == before + 3);
    CHECK(moved.stages[1].last_layer == plan.stages[1].last_layer);
    CHECK(moved.algorithm == "manual");
    CHECK(moved.algorithm_options["edited_from"] == "uniform");
    CHECK_FALSE(moved.predicted.has_value());
    // The prediction changes with the partition and comes back with it.
    const auto a = simulate(plan, {false, false});
    const auto m = simulate(moved, {false, false});
    CHECK(m.iteration_time_s != a.iteration_time_s);
    const auto back = edit::moveBoundary(moved, 0, before);
    CHECK(sameStages(back, plan));
    CHECK(simulate(back, {false, false}).iteration_time_s == a.iteration_time_s);
    // A move that would empty a stage names the stage and the range it allows.
    try {
        edit::moveBoundary(plan, 0, plan.stages[1].last_layer);
        FAIL("expected an InputError");
    } catch (const InputError& e) {
        CHECK(e.field() == "/stages/0/last_layer");
        CHECK(std::string(e.what()).find("may end at layers") != std::string::npos);
    }
}

TEST_CASE("split, merge and device assignment", "[edit]")
{
    const auto plan = demoPlan("uniform", 4); // devices 0-3 of 8 used
    CHECK(edit::freeDevices(plan) == std::vector<int> {4, 5, 6, 7});
    const auto& s1 = plan.stages[1];
    const auto split = edit::splitStage(plan, 1, s1.first_layer + 1, {4});
    REQUIRE(split.stageCount() == 5);
    CHECK(split.stages[1].last_layer == s1.first_layer + 1);
    CHECK(split.stages[2].first_layer == s1.first_layer + 2);
    CHECK(split.stages[2].devices == std::vector<int> {4});
    CHECK(edit::freeDevices(split) == std::vector<int> {5, 6, 7});
    CHECK(simulate(split, {false, false}).throughput_samples_per_s > 0);
    const auto merged = edit::mergeWithNext(split, 1);
    CHECK(sameStages(merged, plan));
    // Replicate a stage on free devices; a device of another stage is refused by name.
    const auto wider = edit::assignDevices(plan, 3, {3, 4});
    CHECK(wider.stages[3].replicas() == 2);
    CHECK_THROWS_WITH(edit::assignDevices(plan, 3, {0}), Catch::Contains("already runs stage 0"));
    CHECK_THROWS_WITH(edit::assignDevices(plan, 3, {}), Catch::Contains("at least one device"));
    CHECK_THROWS_WITH(edit::assignDevices(plan, 3, {99}), Catch::Contains("not in the cluster"));
    CHECK_THROWS_WITH(edit::splitStage(plan, 1, s1.last_layer, {4}), Catch::Contains("can be split after"));
    CHECK_THROWS_AS(edit::mergeWithNext(plan, 3), InputError);
}

TEST_CASE("interleaved, multi-pipeline and tensor-parallel plans are not edited stage by stage", "[edit]")
{
    auto plan = demoPlan();
    CHECK(edit::whyNotEditable(plan).empty());
    auto interleaved = plan;
    interleaved.schedule.chunks = 2;
    CHECK_THROWS_WITH(edit::moveBoundary(interleaved, 0, 3), Catch::Contains("interleaved"));
    auto tp = plan;
    tp.tensor_parallel = 2;
    CHECK_FALSE(edit::whyNotEditable(tp).empty());
    auto multi = plan;
    multi.stages[2].pipeline = multi.stages[3].pipeline = 1;
    CHECK(edit::whyNotEditable(multi).find("pipelines") != std::string::npos);
}

TEST_CASE("swapping devices between stages on a fully used cluster", "[edit]")
{
    const auto plan = demoPlan("uniform", 8); // every device of the DGX runs a stage
    REQUIRE(edit::freeDevices(plan).empty());
    const auto swapped = edit::swapDevices(plan, plan.stages[0].devices[0], plan.stages[5].devices[0]);
    CHECK(swapped.stages[0].devices == plan.stages[5].devices);
    CHECK(swapped.stages[5].devices == plan.stages[0].devices);
    for (int s : {1, 2, 3, 4, 6, 7})
        CHECK(swapped.stages[s].devices == plan.stages[s].devices);
    CHECK(edit::freeDevices(swapped).empty());
    CHECK(sameStages(edit::swapDevices(swapped, plan.stages[0].devices[0], plan.stages[5].devices[0]), plan));
    CHECK_THROWS_WITH(edit::swapDevices(plan, 0, 0), Catch::Contains("nothing to swap"));
    const auto four = demoPlan("uniform", 4);
    CHECK_THROWS_WITH(edit::swapDevices(four, 0, 6), Catch::Contains("used by no stage"));
}
