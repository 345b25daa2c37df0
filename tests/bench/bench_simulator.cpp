// SPDX-License-Identifier: MIT
// Simulator throughput in simulated actions per second. The baseline, measured in the same run, is one
// pass that only reads every action (the floor any simulator pays), so the ratio shows the simulator's
// cost per action over touching it.
#include <cstdio>

#include "bench_common.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// `stages` stages (x chunks) of `layersPerStage` layers, each on `replicas` devices; the devices are spread over
/// `nodes` equal nodes (inter-node sends then share each node's uplink, all-reduces overlap the backward).
Plan uniformPlan(int stages, int layersPerStage, int microbatches, const std::string& kind, int chunks = 1,
    int nodes = 1, int replicas = 1)
{
    Plan plan;
    plan.model.name = "bench";
    for (int l = 0; l < stages * layersPerStage * chunks; ++l)
        plan.model.layers.push_back({"l" + std::to_string(l), "layer", 1.0, 2.0, 1e6, 1e6, {}, {}, {}, {}});
    DeviceType t {"gpu", 80e9, 100, 0, {}, 0};
    plan.cluster.device_types = {t};
    const int devices = stages * replicas;
    for (int n = 0; n < nodes; ++n)
        plan.cluster.nodes.push_back({"n" + std::to_string(n), "", 22, "", "gpu", devices / nodes, 1e11, 1e-6});
    plan.cluster.inter_node_bandwidth_bytes_per_s = 1e10;
    plan.cluster.inter_node_latency_s = 1e-5;
    for (int s = 0; s < stages * chunks; ++s) {
        PlanStage st {s * layersPerStage, (s + 1) * layersPerStage - 1, {}};
        for (int r = 0; r < replicas; ++r)
            st.devices.push_back((s % stages) * replicas + r);
        plan.stages.push_back(st);
    }
    plan.schedule.kind = kind;
    plan.schedule.microbatches = microbatches;
    plan.schedule.chunks = chunks;
    return plan;
}

void run(const char* what, const Plan& plan)
{
    Schedule schedule;
    double tGen = pw::bench::bestOf(3, [&] { schedule = generateSchedule(plan); });
    const double n = static_cast<double>(schedule.actionCount());
    volatile double sink = 0;
    double tTouch = pw::bench::bestOf(5, [&] {
        double s = 0;
        for (const auto& list : schedule.devices)
            for (const auto& a : list)
                s += a.bytes + a.microbatch;
        sink = s;
    });
    SimulationOptions metricsOnly {false, false};
    SimulationResult r;
    double tSim = pw::bench::bestOf(3, [&] { r = simulate(plan, schedule, metricsOnly); });
    double tSpans = pw::bench::bestOf(3, [&] { r = simulate(plan, schedule); });
    double tValidate = pw::bench::bestOf(3, [&] { validate(schedule, plan); });
    std::printf("%-34s %10.0f %9.2f M/s %9.2f M/s %9.2f M/s %9.2f M/s %8.1fx\n", what, n, n / tGen / 1e6,
        n / tValidate / 1e6, n / tSim / 1e6, n / tSpans / 1e6, tSim / tTouch);
}

} // namespace

int main()
{
    std::printf("Schedule generation, validation and simulation, best of 3 (target: simulate > 5 M actions/s)\n");
    std::printf("%-34s %10s %13s %13s %13s %13s %9s\n", "schedule", "actions", "generate", "validate", "simulate",
        "sim+spans", "sim/touch");
    run("1f1b, 8 stages x 4096 mb", uniformPlan(8, 4, 4096, "1f1b"));
    run("1f1b, 64 stages x 1024 mb", uniformPlan(64, 1, 1024, "1f1b"));
    run("gpipe, 16 stages x 2048 mb", uniformPlan(16, 2, 2048, "gpipe"));
    run("interleaved v=4, 16 x 1024 mb", uniformPlan(16, 1, 1024, "interleaved", 4));
    run("pipedream async, 16 x 4096", uniformPlan(16, 1, 4096, "pipedream"));
    run("2bw, 16 stages x 4096 mb", uniformPlan(16, 1, 4096, "2bw"));
    // Several nodes: inter-node sends book the nodes' uplinks; replicated stages all-reduce in buckets.
    run("1f1b, 64 stages on 8 nodes", uniformPlan(64, 1, 1024, "1f1b", 1, 8));
    run("pipedream, 8 stages x 4 on 4 nodes", uniformPlan(8, 8, 4096, "pipedream", 1, 4, 4));
    return 0;
}
