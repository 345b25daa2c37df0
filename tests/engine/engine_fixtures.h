// SPDX-License-Identifier: MIT
// Small GPT-2 plans for the engine's tests: a transformer profile on the "cpu" preset, cut into given stages.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "planner/device_presets.h"
#include "planner/io/transformer.h"
#include "planner/plan.h"
#include "tests/planner/fixtures.h"

namespace pw::test {

/// A GPT-2 small enough to train in milliseconds: 2 blocks, 16 channels, 2 heads, 8 positions, vocabulary 32.
inline planner::TransformerConfig tinyGpt2(int blocks = 2, int microbatch = 2)
{
    planner::TransformerConfig c;
    c.layers = blocks;
    c.hidden = 16;
    c.heads = 2;
    c.sequence = 8;
    c.vocab = 32;
    c.microbatch = microbatch;
    c.bytes_per_element = 4;
    return c;
}

/// `shape` with Llama's block: `kv_heads` key/value heads, a SwiGLU MLP of `ffn`, RMSNorm, rotary positions, no
/// biases, an untied head, no dropout.
inline planner::TransformerConfig asLlama(planner::TransformerConfig shape, int kv_heads, int ffn)
{
    shape.family = "llama";
    shape.kv_heads = kv_heads;
    shape.ffn_hidden = ffn;
    shape.mlp = planner::MlpKind::SwiGlu;
    shape.norm = planner::NormKind::RmsNorm;
    shape.positions = planner::PositionKind::Rotary;
    shape.bias = planner::BiasKind::None;
    shape.tied_embeddings = false;
    shape.dropout = false;
    return shape;
}

/// @brief One stage: its layers (embedding 0, blocks 1..L, head L+1) and the devices replicating it.
struct StageCut
{
    int first = 0;
    int last = 0;
    std::vector<int> devices;
    int pipeline = 0; ///< HetPipe's virtual worker (schedule "wsp"); 0 for one pipeline
};

/// One-layer stages of layers 0..7: `v` in a V on 4 devices (stage s on device s, then 7 - s), `straight` one per
/// device on 8: a V plan and the 1F1B plan it must train like.
struct VCuts
{
    std::vector<StageCut> v, straight;
};
inline VCuts vOnFourDevices()
{
    VCuts c;
    for (int s = 0; s < 8; ++s) {
        c.v.push_back({s, s, {s < 4 ? s : 7 - s}});
        c.straight.push_back({s, s, {s}});
    }
    return c;
}

/// The model cut into `stages` on one node of enough "cpu" devices, under `kind` with `microbatches` per step.
inline planner::Plan gpt2Plan(const planner::TransformerConfig& shape, const std::vector<StageCut>& stages,
    const std::string& kind = "1f1b", int microbatches = 4, int chunks = 1)
{
    planner::Plan plan;
    const auto device = *planner::devicePreset("cpu");
    plan.model = planner::transformerProfile(shape, device);
    int devices = 0;
    for (const auto& s : stages)
        for (int d : s.devices)
            devices = std::max(devices, d + 1);
    planner::Cluster cluster;
    cluster.device_types = {device};
    cluster.nodes.push_back({"local", "", 22, "", device.name, devices, 1e10, 1e-6});
    plan.cluster = cluster;
    for (const auto& s : stages)
        plan.stages.push_back({s.first, s.last, s.devices, s.pipeline});
    plan.schedule.kind = kind;
    plan.schedule.microbatches = microbatches;
    plan.schedule.chunks = chunks;
    plan.validate();
    return plan;
}

/// The model cut at `cuts` (first, last layer), each stage d data-parallel replicas of t tensor-parallel ranks on
/// devices counted up in the plan's order (replica, then rank), with or without sequence parallelism and the
/// distributed optimizer.
inline planner::Plan tensorPlan(const planner::TransformerConfig& shape, const std::vector<std::pair<int, int>>& cuts,
    int d, int t, bool sequence, const std::string& kind, bool distributed = false, int microbatches = 4)
{
    std::vector<StageCut> stages;
    int next = 0;
    for (const auto& [first, last] : cuts) {
        StageCut cut {first, last, {}};
        for (int i = 0; i < d * t; ++i)
            cut.devices.push_back(next++);
        stages.push_back(cut);
    }
    auto plan = gpt2Plan(shape, stages, kind, microbatches);
    plan.tensor_parallel = t;
    plan.schedule.sequence_parallel = sequence;
    plan.schedule.distributed_optimizer = distributed;
    plan.validate();
    return plan;
}

} // namespace pw::test
