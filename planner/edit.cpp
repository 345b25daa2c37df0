// SPDX-License-Identifier: MIT
#include "edit.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "errors.h"

namespace pw::planner::edit {
namespace {

void requireEditable(const Plan& plan)
{
    if (auto why = whyNotEditable(plan); !why.empty())
        throw InputError({}, 0, "/stages", why);
}

void requireStage(const Plan& plan, int stage, int count)
{
    if (stage < 0 || stage + count > plan.stageCount())
        throw InputError({}, 0, "/stages",
            "no stage " + std::to_string(stage + count - 1) + " (the plan has " + std::to_string(plan.stageCount())
                + ")");
}

/// A hand-edited plan: the edit's result, validated, without the partitioner's predictions and per-stage
/// settings that no longer match.
Plan finish(Plan plan, const Plan& before)
{
    if (plan.algorithm != "manual") {
        plan.algorithm_options = {{"edited_from", before.algorithm}};
        plan.algorithm = "manual";
    }
    plan.objective_s = 0;
    plan.predicted.reset();
    plan.schedule.in_flight.clear(); // per-stage counts of the old partition (1F1B* groups) no longer hold
    plan.validate();
    return plan;
}

void requireFree(const Plan& plan, const std::vector<int>& devices, int except)
{
    if (devices.empty())
        throw InputError({}, 0, "/stages", "a stage needs at least one device");
    std::set<int> seen;
    for (int d : devices) {
        if (d < 0 || d >= plan.cluster->deviceCount())
            throw InputError({}, 0, "/stages", "device " + std::to_string(d) + " is not in the cluster");
        if (!seen.insert(d).second)
            throw InputError({}, 0, "/stages", "device " + std::to_string(d) + " is listed twice");
        for (int s = 0; s < plan.stageCount(); ++s)
            if (s != except)
                for (int used : plan.stages[s].devices)
                    if (used == d)
                        throw InputError({}, 0, "/stages",
                            "device " + plan.cluster->deviceName(d) + " already runs stage " + std::to_string(s));
    }
}

} // namespace

std::string whyNotEditable(const Plan& plan)
{
    if (plan.pipelineCount() > 1)
        return "a plan with several pipelines (virtual workers) is re-planned, not edited stage by stage";
    if (std::max(1, plan.schedule.chunks) > 1)
        return "an interleaved plan (chunks > 1) is re-planned, not edited stage by stage";
    if (plan.tensor_parallel > 1)
        return "a tensor-parallel plan is re-planned, not edited stage by stage";
    if (plan.context_parallel > 1)
        return "a context-parallel plan is re-planned, not edited stage by stage";
    return {};
}

std::vector<int> boundaries(const Plan& plan)
{
    std::vector<int> out;
    for (int s = 0; s + 1 < plan.stageCount(); ++s)
        out.push_back(plan.stages[s].last_layer);
    return out;
}

int snapBoundary(const Plan& plan, int boundary, double position)
{
    requireEditable(plan);
    requireStage(plan, boundary, 2);
    const int lo = plan.stages[boundary].first_layer; // the stage keeps layer lo at least
    const int hi = plan.stages[boundary + 1].last_layer - 1; // the next keeps its last layer at least
    // The edge at coordinate e lies after layer e - 1.
    const long edge = std::lround(std::isfinite(position) ? position : 0.0);
    return static_cast<int>(std::clamp<long>(edge - 1, lo, hi));
}

Plan moveBoundary(const Plan& plan, int boundary, int last)
{
    requireEditable(plan);
    requireStage(plan, boundary, 2);
    Plan out = plan;
    auto& a = out.stages[boundary];
    auto& b = out.stages[boundary + 1];
    if (last < a.first_layer || last >= b.last_layer)
        throw InputError({}, 0, "/stages/" + std::to_string(boundary) + "/last_layer",
            "stage " + std::to_string(boundary) + " may end at layers " + std::to_string(a.first_layer) + ".."
                + std::to_string(b.last_layer - 1) + ", not " + std::to_string(last));
    a.last_layer = last;
    b.first_layer = last + 1;
    return finish(std::move(out), plan);
}

Plan splitStage(const Plan& plan, int stage, int last, const std::vector<int>& devices)
{
    requireEditable(plan);
    requireStage(plan, stage, 1);
    const auto& st = plan.stages[stage];
    if (last < st.first_layer || last >= st.last_layer)
        throw InputError({}, 0, "/stages/" + std::to_string(stage),
            "stage " + std::to_string(stage) + " (layers " + std::to_string(st.first_layer) + ".."
                + std::to_string(st.last_layer) + ") can be split after layers " + std::to_string(st.first_layer) + ".."
                + std::to_string(st.last_layer - 1) + ", not " + std::to_string(last));
    requireFree(plan, devices, -1);
    Plan out = plan;
    PlanStage second {last + 1, st.last_layer, devices};
    out.stages[stage].last_layer = last;
    out.stages.insert(out.stages.begin() + stage + 1, std::move(second));
    return finish(std::move(out), plan);
}

Plan mergeWithNext(const Plan& plan, int stage)
{
    requireEditable(plan);
    requireStage(plan, stage, 2);
    Plan out = plan;
    out.stages[stage].last_layer = out.stages[stage + 1].last_layer;
    out.stages.erase(out.stages.begin() + stage + 1);
    return finish(std::move(out), plan);
}

Plan assignDevices(const Plan& plan, int stage, const std::vector<int>& devices)
{
    requireEditable(plan);
    requireStage(plan, stage, 1);
    requireFree(plan, devices, stage);
    Plan out = plan;
    out.stages[stage].devices = devices;
    return finish(std::move(out), plan);
}

Plan swapDevices(const Plan& plan, int a, int b)
{
    requireEditable(plan);
    auto stageOf = [&](int d) {
        for (int s = 0; s < plan.stageCount(); ++s)
            if (std::find(plan.stages[s].devices.begin(), plan.stages[s].devices.end(), d)
                != plan.stages[s].devices.end())
                return s;
        throw InputError({}, 0, "devices",
            (d >= 0 && d < plan.cluster->deviceCount() ? plan.cluster->deviceName(d) : "device " + std::to_string(d))
                + " is used by no stage: assign it instead of swapping");
    };
    const int sa = stageOf(a), sb = stageOf(b);
    if (sa == sb)
        throw InputError({}, 0, "devices",
            plan.cluster->deviceName(a) + " and " + plan.cluster->deviceName(b) + " both run stage "
                + std::to_string(sa) + ": nothing to swap");
    Plan out = plan;
    std::replace(out.stages[sa].devices.begin(), out.stages[sa].devices.end(), a, b);
    std::replace(out.stages[sb].devices.begin(), out.stages[sb].devices.end(), b, a);
    return finish(std::move(out), plan);
}

std::vector<int> freeDevices(const Plan& plan)
{
    std::vector<bool> used(plan.cluster->deviceCount(), false);
    for (const auto& st : plan.stages)
        for (int d : st.devices)
            if (d >= 0 && d < static_cast<int>(used.size()))
                used[d] = true;
    std::vector<int> out;
    for (int d = 0; d < static_cast<int>(used.size()); ++d)
        if (!used[d])
            out.push_back(d);
    return out;
}

} // namespace pw::planner::edit
