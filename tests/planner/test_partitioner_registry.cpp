// SPDX-License-Identifier: MIT
// One walk over the partitioner registry checking the invariants every algorithm shares: contiguous stages,
// every layer placed once (per pipeline), devices from the cluster, memory respected where the algorithm promises it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "planner/device_presets.h"
#include "planner/io/graph_txt.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/schedule/traits.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

Cluster partitionerRegistryCluster(int nodes, int perNode, double memory)
{
    Cluster c;
    auto h100 = *devicePreset("H100");
    h100.memory_bytes = memory;
    c.device_types = {h100};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", h100.name, perNode, 4.5e11, 5e-6});
    c.inter_node_bandwidth_bytes_per_s = 5e10;
    return c;
}

PartitionOptions optionsFor(std::string_view algorithm, const ModelProfile& model, int devices)
{
    PartitionOptions o;
    o.schedule.kind = "1f1b";
    o.schedule.microbatches = 8;
    if (algorithm == "manual") {
        for (int s = 1; s < devices && s < model.layerCount(); ++s)
            o.boundaries.push_back(s * model.layerCount() / devices - 1);
    }
    return o;
}

void checkInvariants(const Plan& plan, const ModelProfile& model, const Cluster& c)
{
    plan.validate();
    int next = 0;
    std::set<int> devices;
    for (int i = 0; i < plan.stageCount(); ++i) {
        const auto& s = plan.stages[i];
        if (i > 0 && plan.firstInPipeline(i)) { // several pipelines (HetPipe): each places every layer
            CHECK(next == model.layerCount());
            next = 0;
        }
        CHECK(s.first_layer == next);
        CHECK(s.last_layer >= s.first_layer);
        next = s.last_layer + 1;
        for (std::size_t r = 0; r < s.devices.size(); ++r) {
            const int d = s.devices[r];
            CHECK(d >= 0);
            CHECK(d < c.deviceCount());
            // A device serves one physical stage; interleaved virtual stage s reuses stage s mod p's devices, in
            // a V (zbv) stage 2p - 1 - s's.
            const int p = plan.pipelineDepth();
            const auto* traits = findScheduleTraits(plan.schedule.kind);
            const bool v = traits && traits->chunks == ChunkRule::V;
            if (i < p)
                CHECK(devices.insert(d).second);
            else
                CHECK(d == plan.stages[v ? 2 * p - 1 - i : i % p].devices.at(r));
        }
    }
    CHECK(next == model.layerCount());
    auto schedule = generateSchedule(plan);
    CHECK(validate(schedule, plan).ok);
}

} // namespace

TEST_CASE("every partitioner keeps the shared invariants", "[registry]")
{
    REQUIRE(partitioners().size() >= 4);
    auto gpt = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto vgg = loadGraphTxt(std::string(PW_PROFILES_DIR) + "/pipedream/vgg16/graph.txt");
    for (const auto* p : partitioners()) {
        CHECK(findPartitioner(p->name()) == p);
        CHECK(!p->description().empty());
        for (const ModelProfile* model : {&gpt, &vgg})
            for (auto [nodes, perNode] : std::vector<std::pair<int, int>> {{1, 1}, {1, 4}, {1, 8}, {2, 4}}) {
                auto c = partitionerRegistryCluster(nodes, perNode, 1e15);
                PartitionRequest request {*model, c, optionsFor(p->name(), *model, nodes * perNode)};
                double last = -1;
                auto result = p->partition(request,
                    [&](double f) {
                        CHECK(f >= last);
                        CHECK(f <= 1.0);
                        last = f;
                    },
                    {});
                INFO(p->name() << " " << model->name << " " << nodes << "x" << perNode << ": " << result.errorText());
                REQUIRE(result.ok());
                CHECK_FALSE(result.hasError());
                checkInvariants(*result.plan, *model, c);
                CHECK(result.plan->algorithm == p->name());
            }
    }
    CHECK(findPartitioner("no-such-algorithm") == nullptr);
}

TEST_CASE("partitioners report bad requests as diagnostics", "[registry]")
{
    auto gpt = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto c = partitionerRegistryCluster(1, 4, 1e15);
    for (const auto* p : partitioners()) {
        PartitionOptions o;
        o.devices = 64; // more than the cluster has
        auto result = p->partition({gpt, c, o}, {}, {});
        INFO(p->name());
        CHECK_FALSE(result.ok());
        CHECK(result.hasError());
        CHECK(result.errorText().find("64") != std::string::npos);
    }
    PartitionOptions manual;
    manual.boundaries = {10, 5};
    auto bad = findPartitioner("manual")->partition({gpt, c, manual}, {}, {});
    CHECK_FALSE(bad.ok());
    CHECK(bad.errorText().find("increasing") != std::string::npos);
}

TEST_CASE("PipeDream's memory limit gives plans that fit in simulation", "[registry]")
{
    auto gpt = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    for (const char* kind : {"1f1b", "pipedream", "gpipe"}) {
        // Tight: the whole model's state does not fit one device.
        auto c = partitionerRegistryCluster(1, 8, 10e9);
        PartitionOptions o;
        o.schedule.kind = kind;
        // A multiple of every replica count PipeDream's async schedule may meet; GPipe stashes them all.
        o.schedule.microbatches = std::string(kind) == "gpipe" ? 4 : 24;
        auto blind = findPartitioner("pipedream")->partition({gpt, c, o}, {}, {});
        o.memory_limit = true;
        auto aware = findPartitioner("pipedream")->partition({gpt, c, o}, {}, {});
        INFO(kind << ": " << aware.errorText());
        REQUIRE(aware.ok());
        auto sim = simulate(*aware.plan);
        CHECK(sim.fitsMemory());
        for (const auto& d : aware.diagnostics)
            CHECK(d.code != "over-memory");
        REQUIRE(blind.ok());
        auto blindSim = simulate(*blind.plan);
        // The memory-blind optimum does not fit here, and says so.
        CHECK_FALSE(blindSim.fitsMemory());
        bool flagged = false;
        for (const auto& d : blind.diagnostics)
            flagged = flagged || d.code == "over-memory";
        CHECK(flagged);
    }
}

TEST_CASE("a partitioner can be cancelled", "[registry]")
{
    auto gpt = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    auto c = partitionerRegistryCluster(2, 8, 1e15);
    std::stop_source stop;
    stop.request_stop();
    auto result = findPartitioner("pipedream")->partition({gpt, c, {}}, {}, stop.get_token());
    CHECK_FALSE(result.ok());
    CHECK(result.diagnostics.at(0).code == "cancelled");
}

TEST_CASE("PipeDream with a chunked kind plans equal copies of the pipeline, straight when the DP replicated unevenly",
    "[registry]")
{
    // The demo GPT on 8 H100s: the DP's answer is 6-2, which no chunked schedule can run (interleaving's rounds and a
    // V run every stage on as many replicas); the plan is a straight pipeline, re-cut into chunks, and says why.
    const auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    const auto partitionerRegistryCluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    for (const std::string kind : {"interleaved", "zbv", "dualpipev", "v-half", "v-min"}) {
        INFO(kind);
        PartitionOptions o;
        o.schedule.kind = kind;
        o.schedule.chunks = 2;
        o.schedule.microbatches = 16;
        const auto r = findPartitioner("pipedream")->partition({model, partitionerRegistryCluster, o}, {}, {});
        INFO(r.errorText());
        REQUIRE(r.ok());
        CHECK(r.plan->stageCount() == 16);
        for (const auto& s : r.plan->stages)
            CHECK(s.replicas() == 1);
        CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
        CHECK(std::any_of(r.diagnostics.begin(), r.diagnostics.end(), [&](const Diagnostic& d) {
            return d.code == "straight" && d.message.find("(6-2) has unequal ones") != std::string::npos;
        }));
    }
    // One chunk: the DP's own answer stands.
    PartitionOptions one;
    one.schedule.microbatches = 16;
    const auto r = findPartitioner("pipedream")->partition({model, partitionerRegistryCluster, one}, {}, {});
    REQUIRE(r.ok());
    CHECK(r.plan->stageCount() == 2);
}
