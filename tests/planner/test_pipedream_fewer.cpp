// SPDX-License-Identifier: MIT
// PipeDream on large clusters (issue 10 item 5): replicas that add nothing are reported ("idle-replicas") or
// left out (use_fewer_machines, the reference optimizer's --use_fewer_machines); the asynchronous "pipedream"
// schedule gets a microbatch count every stage's replicas divide, or an error naming one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

Cluster dgx(int nodes)
{
    Cluster c;
    c.name = "dgx";
    c.device_types = {*devicePreset("H100")};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", "H100", 8, 4.5e11, 5e-6});
    c.inter_node_bandwidth_bytes_per_s = 5e10;
    c.inter_node_latency_s = 1e-5;
    return c;
}

ModelProfile pipedreamFewerGpt()
{
    return loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
}

const Diagnostic* find(const PartitionResult& r, const std::string& code)
{
    for (const auto& d : r.diagnostics)
        if (d.code == code)
            return &d;
    return nullptr;
}

int devicesUsed(const Plan& plan)
{
    std::set<int> used;
    for (const auto& st : plan.stages)
        used.insert(st.devices.begin(), st.devices.end());
    return static_cast<int>(used.size());
}

} // namespace

TEST_CASE("PipeDream warns about replicas that add nothing and leaves them out on request", "[pipedream][fewer]")
{
    const auto model = pipedreamFewerGpt();
    const auto cluster = dgx(16); // 128 GPUs for a 26-layer model
    for (const std::string variant : {"paper", "reference"}) {
        INFO(variant);
        PartitionOptions o;
        o.pipedream_variant = variant;
        auto all = findPartitioner("pipedream")->partition({model, cluster, o}, {}, {});
        INFO(all.errorText());
        REQUIRE(all.ok());
        const auto* idle = find(all, "idle-replicas");
        REQUIRE(idle != nullptr); // before: nothing said
        CHECK(idle->severity == Diagnostic::Severity::Warning);
        CHECK(idle->message.find("--use-fewer-machines") != std::string::npos);

        o.use_fewer_machines = true;
        auto fewer = findPartitioner("pipedream")->partition({model, cluster, o}, {}, {});
        INFO(fewer.errorText());
        REQUIRE(fewer.ok());
        CHECK(find(fewer, "idle-replicas") == nullptr);
        REQUIRE(find(fewer, "fewer-machines") != nullptr);
        CHECK(devicesUsed(*fewer.plan) < devicesUsed(*all.plan));
        // Same layers per stage; each stage keeps a prefix of its devices.
        REQUIRE(fewer.plan->stageCount() == all.plan->stageCount());
        for (int s = 0; s < all.plan->stageCount(); ++s) {
            const auto& a = all.plan->stages[s];
            const auto& f = fewer.plan->stages[s];
            CHECK(f.first_layer == a.first_layer);
            CHECK(f.last_layer == a.last_layer);
            REQUIRE(f.replicas() <= a.replicas());
            CHECK(std::equal(f.devices.begin(), f.devices.end(), a.devices.begin()));
        }
        CHECK(validate(generateSchedule(*fewer.plan), *fewer.plan).ok);
        CHECK(simulate(*fewer.plan).fitsMemory());
    }
}

TEST_CASE("PipeDream on a small cluster keeps every replica and says nothing", "[pipedream][fewer]")
{
    PartitionOptions o;
    o.use_fewer_machines = true;
    auto r = findPartitioner("pipedream")->partition({pipedreamFewerGpt(), dgx(1), o}, {}, {});
    REQUIRE(r.ok());
    CHECK(r.plan->configString() == "6-2"); // the README's demo plan
    CHECK(find(r, "fewer-machines") == nullptr);
    CHECK(find(r, "idle-replicas") == nullptr);
}

TEST_CASE("schedule pipedream: the planner picks a microbatch count the replicas divide, the generator names one",
    "[pipedream][fewer]")
{
    PartitionOptions o;
    o.schedule.kind = "pipedream";
    o.schedule.microbatches = 8;
    auto r = findPartitioner("pipedream")->partition({pipedreamFewerGpt(), dgx(1), o}, {}, {});
    INFO(r.errorText());
    REQUIRE(r.ok()); // 6-2: 8 inputs cannot be dealt over 6 replicas
    CHECK(r.plan->schedule.microbatches == 12);
    const auto* note = find(r, "microbatches");
    REQUIRE(note != nullptr);
    CHECK(note->message.find("from 8 to 12") != std::string::npos);
    CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
    CHECK(pipeDreamMicrobatches(*r.plan) == 12);

    // A plan written by hand (or edited) with 3-2 replicas and 5 x 2 inputs: the error names 6.
    Plan plan = *r.plan;
    plan.stages[0].devices = {0, 1, 2};
    plan.stages[1].devices = {3, 4};
    plan.schedule.microbatches = 5;
    plan.schedule.iterations = 2;
    CHECK(pipeDreamMicrobatches(plan) == 6); // m x 2 a multiple of lcm(3, 2): m a multiple of 3, the first >= 5
    plan.schedule.microbatches = 4;
    CHECK(pipeDreamMicrobatches(plan) == 6);
    CHECK_THROWS_WITH(generateSchedule(plan), Catch::Contains("use 6 microbatches"));
}
