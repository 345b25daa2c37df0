// SPDX-License-Identifier: MIT
// pipewright-cli history import-trace (run_commands.h).
#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "app/run/controller.h"
#include "app/run/diagnosis.h"
#include "app/run/trace_import.h"
#include "planner/io/json_file.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "run_commands.h"

namespace pw::cli {

void historyImportTrace(const HistoryOptions& o, std::ostream& out)
{
    const planner::Plan plan = planner::loadPlan(o.plan);
    std::vector<std::filesystem::path> traces(o.traces.begin(), o.traces.end());
    // Everything read and matched before the history is opened: a refused trace records nothing.
    const auto imported = app::importPipeliningTraces(plan, traces);
    // Predicted and recorded as torch ran it: the plan's tie of embedding and head across stages is not kept there.
    planner::Plan predictedPlan = imported.plan;
    const int predictedSteps = std::min(imported.steps, app::kPredictedSteps);
    predictedPlan.schedule.iterations = predictedSteps;
    auto prediction = planner::simulate(predictedPlan);

    auto history = openHistory(o.history);
    app::NewRun nr;
    // The plan as it ran, with its own predicted metrics where it differs from the plan given (as `plan` simulates).
    planner::Plan recorded = imported.plan;
    if (imported.untied && recorded.predicted) {
        planner::Plan simulated = recorded;
        simulated.schedule.iterations = planner::simulatedIterations(recorded);
        recorded.predicted = planner::predictedMetrics(planner::simulate(simulated));
    }
    nr.plan_json = planner::toJson(recorded).dump();
    nr.cluster_json = planner::toJson(*plan.cluster).dump();
    nlohmann::json hosts = nlohmann::json::array();
    for (std::size_t r = 0; r < o.traces.size(); ++r)
        hosts.push_back({{"device", plan.stages[r].devices.front()}, {"host", o.traces[r]}});
    nr.hosts_json = hosts.dump();
    std::string label = o.label;
    if (label.empty()) {
        label = "torch.distributed.pipelining:";
        for (const auto& t : traces)
            label += " " + t.filename().string();
    }
    nr.label = label;
    nr.steps_planned = imported.steps;
    nr.launcher = "import";
    const std::string id = history.createRun(nr);
    prediction.timeline.run_id = id;
    history.savePredicted(id, prediction.timeline, predictedSteps);
    std::vector<app::MeasuredSpan> spans;
    std::map<int, std::int64_t> seq;
    for (const auto& s : imported.measured.spans)
        spans.push_back({s, s.device, ++seq[s.device]});
    history.appendSpans(id, spans);
    history.finishRun(id, app::RunStatus::Succeeded,
        "imported: " + std::to_string(imported.matched) + " actions of " + std::to_string(imported.steps)
            + " steps matched from " + std::to_string(traces.size()) + " PyTorch profiler traces (" + imported.source
            + ")" + (imported.untied ? "; its tied embedding and head ran untied" : ""),
        // Its duration is the traces' (the imported timeline starts at its first action), not the import's.
        history.run(id)->started_unix_s + imported.measured.endTime());
    if (o.json) {
        out << nlohmann::json(
            {{"run_id", id}, {"steps", imported.steps}, {"matched_actions", imported.matched}, {"spans", spans.size()},
                {"clock_offsets_s", imported.clock_offsets_s}, {"files", imported.files}, {"times", imported.source},
                {"untied_embeddings", imported.untied}})
                   .dump(2)
            << "\n";
        return;
    }
    out << "recorded run " << id << ": " << imported.steps << " steps, " << imported.matched
        << " actions matched, times from " << imported.source << "\n";
    for (std::size_t r = 0; r < imported.clock_offsets_s.size(); ++r)
        out << "  rank " << r << " (" << imported.files[r] << "): clock moved by " << imported.clock_offsets_s[r] * 1e3
            << " ms\n";
    if (imported.untied)
        out << "  the plan's tied embedding and head ran untied (torch.distributed.pipelining's stages share no "
               "weights): recorded against the plan without their all-reduce\n";
    out << "  pipewright-cli history show " << id << "\n";
}

} // namespace pw::cli
