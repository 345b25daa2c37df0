// SPDX-License-Identifier: MIT
// What is checked of a run before anything starts (no run row in the history, no agent started): its settings (one
// validation for the CLI's options and the app's form, naming the option), whether the engine trains the plan as
// it was predicted (engine::checkEngineHonours), the --init and --data files' contents against the plan, and what
// a local run asks of this machine (agents and threads against its cores, predicted memory against its RAM).
#pragma once

#include <cstdint>
#include <string>

#include "planner/plan.h"

namespace pw::planner {
struct SimulationResult;
}

namespace pw::app {

struct RunRequest;

/// @brief The machine a local run starts its agents on.
struct MachineResources
{
    int cores = 1; ///< hardware threads (std::thread::hardware_concurrency)
    double memory_bytes = 0; ///< physical memory

    static MachineResources thisMachine();
    bool operator==(const MachineResources&) const = default;
};

/// @brief What a local run of a plan asks of the machine.
struct LocalRunLoad
{
    int agents = 0; ///< one process per device
    int threads_per_agent = 1;
    bool threads_given = false; ///< threads_per_agent is the request's, not cores / agents
    /// the simulator's per-device peaks, summed over the agents of CPU devices (a GPU's are checkLocalGpus'); 0: no
    /// prediction
    double peak_memory_bytes = 0;

    bool operator==(const LocalRunLoad&) const = default;
};

/// The run's settings (steps, learning rate, weight decay, warm-up, threads): throws InputError naming the option
/// as the CLI spells it and the form labels it, e.g. "--lr (learning rate): must be a finite number >= 0, got -1".
void validateRunSettings(const RunRequest& request);
/// A seed as written on the command line: a whole number from 0 to 2^64 - 1; throws InputError naming --seed
/// otherwise (a negative or larger number would silently become another seed).
std::uint64_t parseSeed(const std::string& text);
/// Whether the engine trains `plan` as it was planned and predicted (engine::trainingSetup, which asks
/// engine::checkEngineHonours); throws InputError naming the plan's field.
void checkTrainable(const planner::Plan& plan);
/// The request's --save destination (engine::checkCheckpointDestination), its --init checkpoint and --data file
/// read with the engine's own readers and checked against the
/// plan (engine::checkRunInputs); throws InputError naming the file and the field.
void checkRunFiles(const RunRequest& request);
/// What a local run of `request` asks of `machine`; `predicted` (the plan's simulation) gives the memory.
LocalRunLoad localRunLoad(
    const RunRequest& request, const planner::SimulationResult* predicted, const MachineResources& machine);
/// A local run's GPUs (its nodes' "gpus"): pre-flight's device checks (preflight.h's deviceChecks) against this
/// machine's CUDA: compiled in, every index among the visible devices, kernels built for each GPU, and each GPU's
/// free memory at least the predicted peaks of the plan's devices on it. Throws InputError naming the plan's
/// /cluster/nodes/N/gpus field with the first failing check and its fix. Nothing for a plan on CPU devices.
void checkLocalGpus(const planner::Plan& plan, const planner::SimulationResult* predicted);
/// Empty when the machine can take the load; else one line with the numbers: more agents than cores, more threads
/// per agent than cores, or predicted memory above the machine's RAM.
std::string localRunExcess(const LocalRunLoad& load, const MachineResources& machine);

} // namespace pw::app
