// SPDX-License-Identifier: MIT
#include "snapshot.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "planner/errors.h"

namespace pw::app {

RunSnapshot loadRunSnapshot(HistoryStore& history, const std::string& id)
{
    RunSnapshot s;
    auto record = history.run(id);
    if (!record)
        throw HistoryError("no run '" + id + "' in " + history.path().string());
    s.record = std::move(*record);
    try {
        s.plan = planner::planFromJson(nlohmann::json::parse(s.record.plan_json));
    } catch (const std::exception& e) {
        s.plan_error = e.what();
    }
    s.measured = std::make_shared<const planner::Timeline>(history.measuredTimeline(id));
    s.predicted = std::make_shared<const planner::Timeline>(history.predictedTimeline(id));
    s.losses = history.metrics(id, "loss");
    s.tokens_per_s = history.metrics(id, "tokens_per_s");
    s.logs = history.logs(id);
    s.stalls = history.stalls(id);
    s.flight_recorder = history.flightRecorder(id);
    if (s.plan) {
        if (!s.measured->spans.empty()) {
            try {
                s.diagnosis = diagnoseRun(
                    *s.plan, std::max<int>(1, static_cast<int>(s.record.steps_planned)), *s.measured, *s.predicted);
            } catch (const planner::InputError&) {
                s.diagnosis = {}; // a stored plan the generators no longer take: shown without its time by cause
            }
        }
        // Steps: those with a loss, or the complete steps measured (a run imported from traces has no loss).
        const int steps = !s.losses.empty() ? static_cast<int>(s.losses.size()) : s.diagnosis.causes.stepCount();
        s.comparison
            = compareRun(*s.plan, *s.predicted, static_cast<int>(s.record.predicted_steps), *s.measured, steps);
        s.comparison.memory = compareMemory(*s.plan, measuredPeakMemory(*s.measured));
    }
    return s;
}

} // namespace pw::app
