// SPDX-License-Identifier: MIT
// Shared test fixtures: the uniform chain model, one-type clusters and the one-stage-per-device chain plan that
// many tests and benchmarks build. Each names every number it sets, so a test reads what it relies on.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "planner/device_presets.h"
#include "planner/io/transformer.h"
#include "planner/plan.h"

namespace pw::test {

/// The whole of a file, as bytes (empty when it cannot be read).
inline std::string readFile(const std::filesystem::path& path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

/// @brief What every layer of a uniform chain has.
struct ChainLayer
{
    double forward_ms = 1;
    double backward_ms = 2;
    double activation_bytes = 0;
    double weight_bytes = 1000;
    std::optional<double> stashed_bytes = {};
};

/// `layers` identical layers named "l0", "l1", ... in a chain (the digest's §1.4 test vector by default:
/// F = 1 ms, B = 2 ms, nothing to transfer).
inline planner::ModelProfile uniformChain(int layers, const ChainLayer& layer = {})
{
    planner::ModelProfile m;
    m.name = "uniform";
    for (int i = 0; i < layers; ++i) {
        planner::Layer l;
        l.name = "l" + std::to_string(i);
        l.kind = "layer";
        l.forward_ms = layer.forward_ms;
        l.backward_ms = layer.backward_ms;
        l.activation_bytes = layer.activation_bytes;
        l.weight_bytes = layer.weight_bytes;
        l.stashed_bytes = layer.stashed_bytes;
        m.layers.push_back(std::move(l));
    }
    return m;
}

/// @brief One device type on nodes of equal size.
struct NodeSpec
{
    double memory_bytes = 80e9;
    double peak_tflops = 100;
    double intra_bandwidth_bytes_per_s = 1e11;
    double intra_latency_s = 0;
    double inter_bandwidth_bytes_per_s = 0;
    double inter_latency_s = 0;
};

/// `nodes` nodes "n0", "n1", ... of `perNode` devices of one type "gpu".
inline planner::Cluster uniformCluster(int nodes, int perNode, const NodeSpec& spec = {})
{
    planner::Cluster c;
    c.device_types = {planner::DeviceType {"gpu", spec.memory_bytes, spec.peak_tflops, 0, {}, 0}};
    for (int n = 0; n < nodes; ++n)
        c.nodes.push_back({"n" + std::to_string(n), "", 22, "", "gpu", perNode, spec.intra_bandwidth_bytes_per_s,
            spec.intra_latency_s});
    c.inter_node_bandwidth_bytes_per_s = spec.inter_bandwidth_bytes_per_s;
    c.inter_node_latency_s = spec.inter_latency_s;
    return c;
}

/// A uniform chain of `stages` layers on one node of `stages` devices, one layer per stage and device, under
/// `kind` with `microbatches`: the Gantt tests' and benchmarks' plan (64 x 2900 gives about a million actions).
inline planner::Plan chainPlan(int stages, int microbatches, std::string kind = "1f1b",
    const ChainLayer& layer = {1, 2, 1e6, 1e6, {}}, const NodeSpec& node = {80e9, 100, 1e11, 1e-6, 0, 0})
{
    planner::Plan plan;
    plan.model = uniformChain(stages, layer);
    plan.model.edit().name = "chain";
    plan.cluster = uniformCluster(1, stages, node);
    for (int s = 0; s < stages; ++s)
        plan.stages.push_back({s, s, {s}});
    plan.schedule.kind = std::move(kind);
    plan.schedule.microbatches = microbatches;
    return plan;
}

/// A GPT-2-shaped transformer (4 blocks of 64 channels, vocabulary 1000, fp32: its token embedding tied to its head)
/// on `devices` H100s of one node, with the given stages, schedule kind, microbatches and chunks.
inline planner::Plan tiedPlan(
    int devices, std::vector<planner::PlanStage> stages, std::string kind, int microbatches, int chunks = 1)
{
    const planner::TransformerConfig config {4, 64, 4, 32, 1000, 1, 4};
    planner::Plan plan;
    plan.model = planner::transformerProfile(config, *planner::devicePreset("H100"));
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("H100")};
    cluster.nodes.push_back({"n0", "", 22, "", "H100", devices, 4.5e11, 2e-6});
    plan.cluster = std::move(cluster);
    plan.stages = std::move(stages);
    plan.schedule.kind = std::move(kind);
    plan.schedule.microbatches = microbatches;
    plan.schedule.chunks = chunks;
    return plan;
}

} // namespace pw::test
