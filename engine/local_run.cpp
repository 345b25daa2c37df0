// SPDX-License-Identifier: MIT
#include "local_run.h"

#include <exception>
#include <mutex>
#include <thread>

namespace pw::engine {

LocalRunResult runLocally(const planner::Plan& plan, const TrainingSetup& setup, const DataOrder& data, int steps)
{
    const RunSchedule program = runProgram(plan, steps);
    const planner::Schedule& schedule = program.period;
    LocalFabric fabric(schedule.num_devices);
    std::mutex mutex;
    LocalRunResult result;
    std::vector<double> sums(static_cast<std::size_t>(steps), 0.0);
    std::vector<std::unique_ptr<DeviceExecutor>> executors(static_cast<std::size_t>(schedule.num_devices));
    for (int d = 0; d < schedule.num_devices; ++d) {
        ExecutorSink sink;
        sink.span = [&](const planner::Span& s) {
            std::lock_guard lock(mutex);
            result.spans.push_back(s);
        };
        sink.loss = [&](int microbatch, float loss) {
            std::lock_guard lock(mutex);
            sums.at(static_cast<std::size_t>(microbatch / setup.microbatches)) += loss;
        };
        executors[static_cast<std::size_t>(d)] = std::make_unique<DeviceExecutor>(
            plan, schedule, d, setup, data, fabric.endpoint(d), std::move(sink), program.repeats);
    }
    std::atomic<bool> stop {false};
    std::exception_ptr failure;
    const double t0 = monotonicSeconds();
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
                fabric.abort(e.what());
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
    for (const auto& e : executors)
        for (const auto& [stage, model] : e->stages())
            model->storeTo(result.final_parameters);
    return result;
}

} // namespace pw::engine
