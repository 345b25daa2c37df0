// SPDX-License-Identifier: MIT
#include "run_checks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "app/run/controller.h"
#include "gpu_devices.h"
#include "planner/errors.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"
#include "preflight.h"
#ifdef PW_WITH_ENGINE
#include "engine/checkpoint.h"
#include "engine/data.h"
#include "engine/devices.h"
#include "engine/executor.h"
#include "engine/llmc.h"
#endif

namespace pw::app {

using planner::InputError;

namespace {

/// An option as the CLI spells it and the app's form labels it.
[[noreturn]] void refuse(const std::string& option, const std::string& label, const std::string& message)
{
    throw InputError({}, 0, option + " (" + label + ")", message);
}

std::string number(double v)
{
    std::ostringstream s;
    s << v;
    return s.str();
}

} // namespace

MachineResources MachineResources::thisMachine()
{
    MachineResources m;
    m.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long size = ::sysconf(_SC_PAGESIZE);
    m.memory_bytes = pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 0;
    return m;
}

void validateRunSettings(const RunRequest& request)
{
    const auto& r = request.training;
    if (r.steps <= 0)
        refuse("--steps", "steps", "must be at least 1, got " + std::to_string(r.steps));
    if (!std::isfinite(r.lr) || r.lr < 0)
        refuse("--lr", "learning rate", "must be a finite number >= 0, got " + number(r.lr));
    if (!std::isfinite(r.weight_decay) || r.weight_decay < 0)
        refuse("--weight-decay", "weight decay", "must be a finite number >= 0, got " + number(r.weight_decay));
    if (r.warmup_steps < 0)
        refuse("--warmup", "warm-up steps", "must be 0 or more, got " + std::to_string(r.warmup_steps));
    if (request.threads && *request.threads <= 0)
        refuse("--threads", "threads per agent", "must be at least 1, got " + std::to_string(*request.threads));
}

std::uint64_t parseSeed(const std::string& text)
{
    std::uint64_t v = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || ptr != end)
        refuse("--seed", "seed", "must be a whole number from 0 to 18446744073709551615, got '" + text + "'");
    return v;
}

void checkTrainable(const planner::Plan& plan)
{
#ifdef PW_WITH_ENGINE
    engine::trainingSetup(plan, trainsOnGpus(plan) ? engine::TrainsOn::Cuda : engine::TrainsOn::Cpu);
#else
    (void)plan;
    throw InputError("this build has no training engine (configured with PW_BUILD_ENGINE=OFF): it cannot train");
#endif
}

void checkRunFiles(const RunRequest& request)
{
#ifdef PW_WITH_ENGINE
    const auto& training = request.training;
    const auto where = trainsOnGpus(request.plan) ? engine::TrainsOn::Cuda : engine::TrainsOn::Cpu;
    if (!training.save_checkpoint.empty()) // before it trains: a run whose model cannot be saved is lost work
        engine::checkSaveDestination(training.save_checkpoint, engine::trainingSetup(request.plan, where).model);
    if (training.init_checkpoint.empty() && training.data.kind == agents::DataKind::Synthetic)
        return;
    engine::DataSpec data;
    data.kind = engine::dataKindFromString(std::string(agents::toString(training.data.kind)));
    data.path = training.data.path;
    data.seed = training.data.seed;
    engine::checkRunInputs(engine::trainingSetup(request.plan, where), data, training.init_checkpoint);
#else
    (void)request;
#endif
}

LocalRunLoad localRunLoad(
    const RunRequest& request, const planner::SimulationResult* predicted, const MachineResources& machine)
{
    LocalRunLoad load;
    std::set<int> devices;
    for (const auto& s : request.plan.stages)
        devices.insert(s.devices.begin(), s.devices.end());
    load.agents = static_cast<int>(agentDevices(request.plan).size());
    load.threads_given = request.threads.has_value();
    load.threads_per_agent = request.threads ? *request.threads : std::max(1, machine.cores / std::max(1, load.agents));
    if (predicted)
        for (int d : devices) // a GPU device's memory is the GPU's (checkLocalGpus), not this machine's
            if (d >= 0 && d < static_cast<int>(predicted->devices.size()) && !cudaDeviceOf(*request.plan.cluster, d))
                load.peak_memory_bytes += predicted->devices[static_cast<std::size_t>(d)].peak_memory_bytes;
    return load;
}

void checkLocalGpus(const planner::Plan& plan, const planner::SimulationResult* predicted)
{
    // Pre-flight's device checks (the GPUs present, kernels built for them, the predicted peaks free), with this
    // machine's CUDA as the capabilities its local agents will report.
    std::set<int> nodes;
    int highest = -1;
    for (const auto& stage : plan.stages)
        for (int d : stage.devices)
            if (const auto gpu = cudaDeviceOf(*plan.cluster, d)) {
                nodes.insert(plan.cluster->device(d).node);
                highest = std::max(highest, *gpu);
            }
    if (nodes.empty())
        return;
#ifdef PW_WITH_ENGINE
    agents::Hello here;
    const engine::CudaInfo cuda = engine::probeCuda();
    here.cuda = {cuda.compiled_in, cuda.runtime, cuda.driver, cuda.cublas, cuda.nccl, cuda.architectures, cuda.error};
    for (const engine::GpuInfo& g : cuda.gpus)
        here.gpus.push_back({g.index, g.name, g.memory_bytes, g.free_bytes, g.cc_major, g.cc_minor});
    PredictedMemory memory;
    if (predicted)
        for (const auto& d : predicted->devices)
            memory.peak_bytes.push_back(d.peak_memory_bytes);
    else
        memory.why = "no prediction";
    for (int node : nodes)
        for (const auto& c : deviceChecks(*plan.cluster, &plan, node, memory, here, "this machine"))
            if (!c.ok)
                throw InputError({}, 0, "/cluster/nodes/" + std::to_string(node) + "/gpus",
                    "the plan trains on GPUs up to cuda:" + std::to_string(highest) + "; this machine, " + c.check
                        + ": " + c.detail + (c.fix.empty() ? "" : ": " + c.fix));
#else
    throw InputError({}, 0, "/cluster/nodes/" + std::to_string(*nodes.begin()) + "/gpus",
        "this build has no training engine: it cannot train on GPUs");
#endif
}

std::string localRunExcess(const LocalRunLoad& load, const MachineResources& machine)
{
    std::string out;
    const auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
    if (load.agents > machine.cores)
        add("the plan starts " + std::to_string(load.agents) + " agents (one per device) on this machine's "
            + std::to_string(machine.cores) + " cores");
    if (load.threads_given && load.threads_per_agent > machine.cores)
        add("--threads " + std::to_string(load.threads_per_agent) + " per agent is above this machine's "
            + std::to_string(machine.cores) + " cores");
    if (machine.memory_bytes > 0 && load.peak_memory_bytes > machine.memory_bytes)
        add("the predicted peak memory of its " + std::to_string(load.agents) + " devices, "
            + planner::formatBytes(load.peak_memory_bytes) + " together, is above this machine's "
            + planner::formatBytes(machine.memory_bytes) + " of memory");
    return out;
}

} // namespace pw::app
