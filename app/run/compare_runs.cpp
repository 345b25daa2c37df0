// SPDX-License-Identifier: MIT
#include "compare_runs.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pw::app {

namespace {

using nlohmann::json;

/// Leaves of `j` by JSON pointer; arrays of numbers and strings count as one value (a stage's devices).
void flatten(const json& j, const std::string& path, std::map<std::string, std::string>& out)
{
    if (j.is_object()) {
        for (const auto& [key, value] : j.items())
            flatten(value, path + "/" + key, out);
        return;
    }
    if (j.is_array() && !j.empty() && (j.front().is_object() || j.front().is_array())) {
        for (std::size_t i = 0; i < j.size(); ++i)
            flatten(j[i], path + "/" + std::to_string(i), out);
        return;
    }
    out[path] = j.dump();
}

/// What describes a run's configuration: its plan (without the planner's own prediction) and the run's settings.
json configuration(const RunSnapshot& s)
{
    json c = json::object();
    try {
        c = json::parse(s.record.plan_json);
    } catch (const std::exception&) {
        c["plan"] = "(unreadable)";
    }
    if (c.is_object()) {
        c.erase("predicted");
        c.erase("config"); // derived from the stages
        // The architecture field by field, defaults included: a GPT-2 block's short form against another's full one
        // differs in the fields that do.
        if (s.plan && s.plan->model->architecture && c.contains("model") && c["model"].is_object())
            c["model"]["architecture"] = planner::architectureJson(*s.plan->model->architecture, true);
    }
    c["run"] = {{"steps_planned", s.record.steps_planned}};
    try {
        c["run"]["hosts"] = json::parse(s.record.hosts_json);
    } catch (const std::exception&) {
    }
    return c;
}

} // namespace

RunsComparison compareRuns(const std::vector<RunSnapshot>& runs)
{
    if (runs.size() < 2)
        throw std::invalid_argument("compareRuns: give two runs or more");
    RunsComparison out;
    for (const auto& s : runs) {
        RunFigures f;
        f.run_id = s.record.id;
        f.label = s.record.label;
        f.status = std::string(toString(s.record.status));
        f.steps = static_cast<int>(s.record.steps_done);
        f.first_loss = s.losses.empty() ? NAN : s.losses.front().value;
        f.final_loss = s.losses.empty() ? NAN : s.losses.back().value;
        f.iteration_s = s.comparison.measured_iteration_s;
        f.tokens_per_s = s.tokens_per_s.empty() ? 0 : s.tokens_per_s.back().value;
        if (s.plan && s.plan->model->architecture && f.iteration_s > 0 && f.steps > 0) {
            const auto& arch = *s.plan->model->architecture;
            const int b = s.plan->schedule.microbatch_size > 0 ? s.plan->schedule.microbatch_size : arch.microbatch;
            f.tokens_per_s = static_cast<double>(s.plan->microbatchesPerStep()) * b * arch.sequence / f.iteration_s;
        }
        f.predicted_iteration_s = s.comparison.predicted_iteration_s;
        f.prediction_error = s.comparison.iteration_error;
        for (const auto& st : s.comparison.stages)
            f.stages.push_back(st.measured);
        const auto& t = s.diagnosis.causes;
        if (const int n = t.stepCount() * t.deviceCount(); n > 0) {
            for (int d = 0; d < t.deviceCount(); ++d)
                f.causes += t.device(d);
            for (const auto& field : planner::causeFields())
                f.causes.*field.seconds /= n;
        }
        out.runs.push_back(std::move(f));
    }
    // The configuration fields that differ.
    std::vector<std::map<std::string, std::string>> flat(runs.size());
    std::set<std::string> fields;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        flatten(configuration(runs[i]), "", flat[i]);
        for (const auto& [field, value] : flat[i])
            fields.insert(field);
    }
    for (const auto& field : fields) {
        ConfigDifference d {field, {}};
        for (const auto& f : flat) {
            auto it = f.find(field);
            d.values.push_back(it == f.end() ? "(none)" : it->second);
        }
        bool differs = false;
        for (const auto& v : d.values)
            differs = differs || v != d.values.front();
        if (differs)
            out.differences.push_back(std::move(d));
    }
    // Per stage: each run against the first.
    std::size_t stages = 0;
    for (const auto& f : out.runs)
        stages = std::max(stages, f.stages.size());
    const auto& reference = out.runs.front().stages;
    for (std::size_t s = 0; s < stages; ++s) {
        std::vector<double> compute, idle;
        for (const auto& f : out.runs) {
            const bool both = s < f.stages.size() && s < reference.size();
            compute.push_back(both ? f.stages[s].compute_s - reference[s].compute_s : NAN);
            idle.push_back(both ? f.stages[s].idle_s - reference[s].idle_s : NAN);
        }
        out.compute_delta_s.push_back(std::move(compute));
        out.idle_delta_s.push_back(std::move(idle));
    }
    // Which cause grew most against the first run.
    for (const auto& f : out.runs) {
        std::string text;
        double most = 0;
        for (const auto& field : planner::causeFields()) {
            const double delta = f.causes.*field.seconds - out.runs.front().causes.*field.seconds;
            if (delta > most && &f != &out.runs.front()) {
                most = delta;
                char buf[96];
                std::snprintf(buf, sizeof buf, "%s +%.2f ms per step", std::string(field.name).c_str(), delta * 1e3);
                text = buf;
            }
        }
        out.grew.push_back(text);
    }
    return out;
}

std::vector<OverlaySeries> overlay(
    const std::vector<RunSnapshot>& runs, const std::string& metric, OverlayAxis axis, double smoothing)
{
    if (metric != "loss" && metric != "tokens_per_s")
        throw std::invalid_argument("overlay: metric must be loss or tokens_per_s, got '" + metric + "'");
    if (!(smoothing >= 0.0 && smoothing < 1.0))
        throw std::invalid_argument("overlay: smoothing must be in [0, 1)");
    std::vector<OverlaySeries> out;
    for (const auto& s : runs) {
        const auto& samples = metric == "loss" ? s.losses : s.tokens_per_s;
        OverlaySeries series {s.record.id, {}, {}};
        double last = 0;
        for (std::size_t i = 0; i < samples.size(); ++i) {
            const auto& m = samples[i];
            switch (axis) {
            case OverlayAxis::Step:
                series.x.push_back(m.step + 1);
                break;
            case OverlayAxis::WallClock:
                series.x.push_back(m.t_s);
                break;
            case OverlayAxis::Relative:
                series.x.push_back(static_cast<double>(i + 1) / static_cast<double>(samples.size()));
                break;
            }
            last = last * smoothing + (1.0 - smoothing) * m.value;
            series.y.push_back(last / (1.0 - std::pow(smoothing, static_cast<double>(i + 1))));
        }
        out.push_back(std::move(series));
    }
    return out;
}

} // namespace pw::app
