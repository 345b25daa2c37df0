// SPDX-License-Identifier: MIT
// runLocally: one thread per device of the plan, a LocalFabric or a DeviceFabric between them.
#include "local_run.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

#include "device_fabric.h"

namespace pw::engine {

LocalRunResult runLocally(const planner::Plan& plan, const TrainingSetup& setup, const DataOrder& data, int steps,
    const BackendFactory& backends, LocalLinks links)
{
    const RunSchedule program = runProgram(plan, steps);
    const planner::Schedule& schedule = program.period;
    std::vector<std::shared_ptr<Backend>> devices(static_cast<std::size_t>(schedule.num_devices));
    for (int d = 0; d < schedule.num_devices; ++d)
        devices[static_cast<std::size_t>(d)] = backends ? backends(d) : makeCpuBackend();
    if (links == LocalLinks::Auto)
        links = std::all_of(devices.begin(), devices.end(),
                    [&](const auto& b) { return !b->hostAddressable() && b->sharesMemoryWith(*devices.front()); })
            ? LocalLinks::Device
            : LocalLinks::Host;
    // Declared before the executors, which use their endpoints until they are destroyed.
    std::unique_ptr<LocalFabric> hostLinks;
    std::unique_ptr<DeviceFabric> deviceLinks;
    if (links == LocalLinks::Device)
        deviceLinks = std::make_unique<DeviceFabric>(devices);
    else
        hostLinks = std::make_unique<LocalFabric>(schedule.num_devices);
    const auto endpoint
        = [&](int d) -> Transport& { return deviceLinks ? deviceLinks->endpoint(d) : hostLinks->endpoint(d); };
    const auto abort = [&](const std::string& why) {
        if (deviceLinks)
            deviceLinks->abort(why);
        else
            hostLinks->abort(why);
    };
    std::mutex mutex;
    LocalRunResult result;
    const auto stepCount = static_cast<std::size_t>(steps);
    std::vector<double> sums(stepCount, 0.0);
    std::vector<int> heard(stepCount, 0);
    result.step_ends.assign(stepCount, 0.0);
    double t0 = 0; // set before any thread runs; the sinks only read it
    std::vector<std::unique_ptr<DeviceExecutor>> executors(static_cast<std::size_t>(schedule.num_devices));
    for (int d = 0; d < schedule.num_devices; ++d) {
        ExecutorSink sink;
        sink.span = [&](const planner::Span& s) {
            std::lock_guard lock(mutex);
            result.spans.push_back(s);
        };
        sink.loss = [&](int microbatch, float loss) {
            const double now = monotonicSeconds();
            std::lock_guard lock(mutex);
            const auto step = static_cast<std::size_t>(microbatch / setup.microbatches);
            sums.at(step) += loss;
            if (++heard.at(step) == setup.microbatches)
                result.step_ends[step] = now - t0;
        };
        executors[static_cast<std::size_t>(d)] = std::make_unique<DeviceExecutor>(plan, schedule, d, setup, data,
            endpoint(d), std::move(sink), program.repeats, devices[static_cast<std::size_t>(d)]);
    }
    std::atomic<bool> stop {false};
    std::exception_ptr failure;
    t0 = monotonicSeconds();
    std::vector<std::thread> threads;
    for (int d = 0; d < schedule.num_devices; ++d)
        threads.emplace_back([&, d] {
            try {
                executors[static_cast<std::size_t>(d)]->run(stop);
            } catch (const std::exception& e) {
                std::lock_guard lock(mutex);
                if (!failure)
                    failure = std::current_exception();
                stop = true;
                abort(e.what());
            }
        });
    for (auto& t : threads)
        t.join();
    if (failure)
        std::rethrow_exception(failure);
    result.seconds = monotonicSeconds() - t0;
    for (auto& s : result.spans) {
        s.t0 -= t0;
        s.t1 -= t0;
    }
    for (double s : sums)
        result.losses.push_back(s / setup.microbatches);
    result.final_parameters.assign(parameterCount(setup.model), 0.0f);
    for (const auto& e : executors) {
        for (const auto& [stage, model] : e->stages())
            model->storeTo(result.final_parameters);
        result.memory.push_back(e->backend().memory());
        result.backends.push_back(e->backend().name());
    }
    return result;
}

} // namespace pw::engine
