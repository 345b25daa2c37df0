// SPDX-License-Identifier: MIT
// What the desktop app does on every step of a boundary drag: move the boundary (planner/edit.h) and
// re-simulate the plan, with the spans and memory the Gantt draws and metrics only (issue 4: a 200-layer model
// with 64 microbatches, under 10 ms a step). The baseline, measured in the same run, is generating the
// schedule alone, the least any re-simulation has to do.
#include <cstdio>

#include "bench_common.h"
#include "planner/device_presets.h"
#include "planner/edit.h"
#include "planner/io/transformer.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

int main()
{
    TransformerConfig gpt {198, 2048, 16, 2048, 51200, 1, 2}; // + embedding + head = 200 layers
    const auto h100 = *devicePreset("H100");
    const auto model = transformerProfile(gpt, h100);
    Cluster cluster;
    cluster.device_types = {h100};
    cluster.nodes.push_back({"n0", "", 22, "", "H100", 8, 4.5e11, 5e-6});
    PartitionOptions o;
    o.schedule.microbatches = 64;
    auto r = findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    if (!r.ok()) {
        std::printf("no plan: %s\n", r.errorText().c_str());
        return 1;
    }
    const Plan start = *r.plan;
    constexpr int kSteps = 200;
    // A drag: boundary 3 moves one layer at a time, 20 layers right and back, over and over.
    const auto step = [&](int i) {
        const int offset = (i / 20) % 2 == 0 ? i % 20 : 20 - i % 20;
        return edit::moveBoundary(start, 3, start.stages[3].last_layer + offset - 10);
    };
    double sink = 0;
    const double generate = pw::bench::bestOf(3, [&] {
        for (int i = 0; i < kSteps; ++i)
            sink += static_cast<double>(generateSchedule(step(i)).actionCount());
    });
    const double metrics = pw::bench::bestOf(3, [&] {
        for (int i = 0; i < kSteps; ++i)
            sink += simulate(step(i), {false, false}).iteration_time_s;
    });
    const double full = pw::bench::bestOf(3, [&] {
        for (int i = 0; i < kSteps; ++i)
            sink += simulate(step(i)).iteration_time_s;
    });
    const auto actions = generateSchedule(start).actionCount();
    std::printf("boundary drag: %d layers, %d stages, 64 microbatches, %zu actions per step\n", model.layerCount(),
        start.stageCount(), actions);
    std::printf("  move + generate (baseline)            %8.3f ms/step\n", generate / kSteps * 1e3);
    std::printf("  move + simulate, metrics only         %8.3f ms/step  (%.2fx the baseline)\n", metrics / kSteps * 1e3,
        metrics / generate);
    std::printf("  move + simulate, spans and memory     %8.3f ms/step  (%.2fx the baseline)\n", full / kSteps * 1e3,
        full / generate);
    return sink > 0 ? 0 : 1;
}
