// SPDX-License-Identifier: MIT
// A whole run in one process: every device of the plan on its own thread. The engine's own reference (tests compare
// plans against it) and the baseline of the agent benchmark. Each device trains on the backend a factory gives it
// (the CPU by default): CUDA tests and benchmarks put several of a plan's devices on one GPU, each with a backend of
// its own (its own stream). The devices are linked by a LocalFabric (host memory, GPUs staged through it) or
// by a DeviceFabric (device memory, ordered by events: every backend sharing one memory), as LocalLinks says.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor.h"

namespace pw::engine {

struct LocalRunResult
{
    std::vector<double> losses; ///< per step: the mean of its microbatches' losses
    std::vector<planner::Span> spans; ///< every action of every device, t0/t1 from the run's start
    double seconds = 0; ///< wall time of the run (after setup)
    /// Per step: seconds from the run's start until the host had every loss of the step (read back after the
    /// head's optimizer step, so on a GPU the step's work on the head's device is done by then). What a throughput
    /// after warm-up steps is measured from.
    std::vector<double> step_ends;
    /// Per device of the plan: its backend's memory when the run ended (peak: the run's highest).
    std::vector<MemoryStats> memory;
    /// Per device: its backend's name ("cpu (...)", "cuda:0 NVIDIA H100 ...").
    std::vector<std::string> backends;
    /// The whole model after the run in llm.c's order, assembled from the stages (replicas hold equal copies).
    std::vector<float> final_parameters;
};

/// Makes the backend of one of the plan's devices. Each call must return a backend of its own: a device's
/// executor uses it from its thread only.
using BackendFactory = std::function<std::shared_ptr<Backend>(int device)>;

/// How runLocally links its devices.
enum class LocalLinks : std::uint8_t {
    Auto, ///< the device fabric when the devices' backends are GPUs sharing one memory, else host memory
    Host, ///< a LocalFabric: host memory (GPU memory staged through it)
    Device, ///< a DeviceFabric (on CPU backends: the fake multi-device fabric of the tests)
};

/// Runs `steps` steps of the plan with `data`; throws the first device's error (and stops the others).
/// `backends` empty: every device on a CPU backend of its own.
LocalRunResult runLocally(const planner::Plan& plan, const TrainingSetup& setup, const DataOrder& data, int steps,
    const BackendFactory& backends = {}, LocalLinks links = LocalLinks::Auto);

} // namespace pw::engine
