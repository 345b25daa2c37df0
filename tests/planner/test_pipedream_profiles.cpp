// SPDX-License-Identifier: MIT
// Every PipeDream profile in resources/profiles imports, partitions for 4, 8 and 16 workers (one level) and 4 x 4
// (two levels), and its plan's schedule validates and simulates.
#include <catch2/catch.hpp>

#include <filesystem>

#include "planner/device_presets.h"
#include "planner/io/graph_txt.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;
namespace fs = std::filesystem;

namespace {

Cluster v100Cluster(int nodes, int perNode)
{
    Cluster c;
    c.name = std::to_string(nodes) + "x" + std::to_string(perNode);
    auto v100 = *devicePreset("V100");
    v100.memory_bytes = 1e15; // these profiles are per-minibatch at large batches; memory is not the point here
    c.device_types = {v100};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"node" + std::to_string(n), "", 22, "", v100.name, perNode, 1.5e10, 0});
    c.inter_node_bandwidth_bytes_per_s = 1.25e9; // Cluster-A: 10 Gbps Ethernet
    return c;
}

} // namespace

TEST_CASE("every PipeDream profile partitions and simulates", "[pipedream_profiles]")
{
    const fs::path root = fs::path(PW_PROFILES_DIR) / "pipedream";
    REQUIRE(fs::exists(root));
    int profiles = 0;
    for (const auto& entry : fs::directory_iterator(root)) {
        auto graph = entry.path() / "graph.txt";
        if (!fs::exists(graph))
            continue;
        ++profiles;
        auto model = loadGraphTxt(graph.string());
        REQUIRE(model.layerCount() > 0);
        for (auto [nodes, perNode] : std::vector<std::pair<int, int>> {{1, 4}, {1, 8}, {1, 16}, {4, 4}}) {
            auto cluster = v100Cluster(nodes, perNode);
            PartitionOptions options;
            options.schedule.kind = "1f1b";
            options.schedule.microbatches = 16;
            PartitionRequest request {model, cluster, options};
            auto result = findPartitioner("pipedream")->partition(request, {}, {});
            INFO(entry.path().filename().string() << " on " << cluster.name << ": " << result.errorText());
            REQUIRE(result.ok());
            const auto& plan = *result.plan;
            CHECK(plan.objective_s > 0);
            int devices = 0;
            for (const auto& s : plan.stages)
                devices += s.replicas();
            CHECK(devices == nodes * perNode);
            auto schedule = generateSchedule(plan);
            auto report = validate(schedule, plan);
            CHECK(report.ok);
            auto sim = simulate(plan, schedule, {false, false});
            CHECK(sim.throughput_samples_per_s > 0);
            // The slowest stage bounds the steady state: a batch takes at least m x objective / replicas.
            CHECK(sim.iteration_time_s > 0);
        }
    }
    CHECK(profiles == 15);
}
