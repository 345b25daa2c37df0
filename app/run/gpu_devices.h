// SPDX-License-Identifier: MIT
// Internal to app/run/: which CUDA device each device of a cluster trains on (its node's `gpus`, docs/formats.md)
// and in what precision (the plan's weights). One rule for the controller's run specs and pre-flight's GPU checks,
// decided by the cluster's explicit field, never by a device type's name.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agents/protocol/messages.h"
#include "planner/plan.h"

namespace pw::app {

/// The CUDA device (an index among those its node's agents see) that global device `device` trains on; nullopt
/// for a CPU device (its node lists no `gpus`).
std::optional<int> cudaDeviceOf(const planner::Cluster& cluster, int device);

/// Whether every device the plan's stages use trains on a CUDA GPU (then a bf16 plan trains in mixed precision;
/// a CPU device anywhere keeps the run to what the CPU engine honours, fp32).
bool trainsOnGpus(const planner::Plan& plan);

/// What the plan's CUDA devices train in: bf16 mixed precision for bf16 weights, else fp32. Throws InputError
/// (/schedule/precision) for fp16, which the engine has no kernels for.
agents::Precision gpuPrecision(const planner::Plan& plan);

/// How the run's agents talk: NCCL when every device of the plan trains on a CUDA GPU and no two of them share a
/// physical GPU (NCCL refuses two ranks on one GPU); else Gloo, through host memory for GPU devices (between the
/// agents of GPUs that several devices share, and in any plan with a CPU device). Devices sharing a GPU are one
/// agent's (agentDevices) and talk among themselves over its device fabric, in GPU memory.
agents::Transport runTransport(const planner::Plan& plan);

/// The devices of each of a run's agents, in device order: every device that shares a physical GPU with others in
/// one agent with them (one process drives them, each on its own stream, over a device fabric: engine/
/// device_fabric.h), every other device (a GPU of its own, or the CPU) alone.
std::vector<std::vector<int>> agentDevices(const planner::Plan& plan);

/// Fills a run spec's `cuda_devices` and `precision` for its `devices`: left empty (every device on the CPU, fp32)
/// when none of them is on a GPU, as before GPUs were known.
void assignDevices(agents::RunSpec& spec, const planner::Plan& plan);

} // namespace pw::app
