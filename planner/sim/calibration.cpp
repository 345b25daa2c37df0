// SPDX-License-Identifier: MIT
// Calibrated costs: fitted to a measured timeline, checked against a plan, read and written as JSON.
#include "calibration.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "../costs.h"
#include "../errors.h"
#include "../io/json_file.h"
#include "../json_fields.h"

namespace pw::planner {

using nlohmann::json;
namespace f = fields;

namespace {

double medianOf(std::vector<double> v)
{
    if (v.empty())
        return 0;
    const std::size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
    if (v.size() % 2 == 1)
        return v[mid];
    return (*std::max_element(v.begin(), v.begin() + static_cast<long>(mid)) + v[mid]) / 2;
}

double statisticOf(SpanStatistic statistic, const std::vector<double>& v)
{
    if (statistic == SpanStatistic::Median || v.empty())
        return medianOf(v);
    double sum = 0;
    for (double x : v)
        sum += x;
    return sum / static_cast<double>(v.size());
}

/// @brief One measured transfer: payload and seconds from the send's start to the data's arrival.
struct MeasuredTransfer
{
    double bytes = 0;
    double seconds = 0;
};

/// Least squares of t = latency + bytes / bandwidth over transfers of at least two sizes; `fallback` (the
/// cluster's link) otherwise, or when the fit has no positive slope.
LinkFit fitLink(const std::vector<MeasuredTransfer>& transfers, const LinkCost& fallback)
{
    LinkFit fit;
    fit.link = fallback;
    fit.transfers = static_cast<int>(transfers.size());
    std::set<double> sizes;
    std::vector<double> seconds;
    for (const auto& t : transfers) {
        sizes.insert(t.bytes);
        seconds.push_back(t.seconds);
    }
    fit.sizes = static_cast<int>(sizes.size());
    fit.median_transfer_s = medianOf(seconds);
    if (sizes.size() < 2)
        return fit;
    const double n = static_cast<double>(transfers.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& t : transfers) {
        sx += t.bytes;
        sy += t.seconds;
        sxx += t.bytes * t.bytes;
        sxy += t.bytes * t.seconds;
    }
    double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    double intercept = (sy - slope * sx) / n;
    if (intercept < 0) { // no negative latency: the best line through the origin
        intercept = 0;
        slope = sxy / sxx;
    }
    if (!(slope > 0) || !std::isfinite(slope))
        return fit;
    fit.fitted = true;
    fit.link = {1.0 / slope, intercept};
    double squares = 0;
    for (const auto& t : transfers) {
        const double r = t.seconds - fit.link.seconds(t.bytes);
        squares += r * r;
    }
    fit.rms_residual_s = std::sqrt(squares / n);
    return fit;
}

int replicaOf(const PlanStage& stage, int device)
{
    const auto it = std::find(stage.devices.begin(), stage.devices.end(), device);
    return it == stage.devices.end() ? -1 : static_cast<int>(it - stage.devices.begin());
}

std::string layout(const std::vector<std::pair<int, int>>& ranges)
{
    std::string s;
    for (const auto& [first, last] : ranges)
        s += (s.empty() ? "" : ", ") + std::to_string(first) + "-" + std::to_string(last);
    return s;
}

std::string deviceList(const std::vector<int>& devices)
{
    std::string s = "[";
    for (std::size_t i = 0; i < devices.size(); ++i)
        s += (i ? ", " : "") + std::to_string(devices[i]);
    return s + "]";
}

json linkJson(const LinkFit& l)
{
    return {{"bandwidth_bytes_per_s", l.link.bandwidth_bytes_per_s}, {"latency_s", l.link.latency_s},
        {"fitted", l.fitted}, {"transfers", l.transfers}, {"sizes", l.sizes},
        {"median_transfer_s", l.median_transfer_s}, {"rms_residual_s", l.rms_residual_s}};
}

LinkFit linkFromJson(const json& j, const std::string& path)
{
    f::object(j, path);
    LinkFit l;
    l.link.bandwidth_bytes_per_s = f::nonNegative(j, "bandwidth_bytes_per_s", path);
    l.link.latency_s = f::nonNegative(j, "latency_s", path);
    l.fitted = f::booleanOr(j, "fitted", path, false);
    l.transfers = f::integerOr(j, "transfers", path, 0);
    l.sizes = f::integerOr(j, "sizes", path, 0);
    l.median_transfer_s = f::nonNegativeOr(j, "median_transfer_s", path, 0);
    l.rms_residual_s = f::nonNegativeOr(j, "rms_residual_s", path, 0);
    return l;
}

std::vector<double> secondsList(const json& obj, const std::string& key, const std::string& path, std::size_t n)
{
    const auto& a = f::array(obj, key, path);
    const std::string p = f::child(path, key);
    if (a.size() != n)
        f::fail(
            p, "needs one value per device of the stage (" + std::to_string(n) + "), got " + std::to_string(a.size()));
    std::vector<double> out;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!a[i].is_number() || !std::isfinite(a[i].get<double>()) || a[i].get<double>() < 0)
            f::fail(f::child(p, i), "must be a finite number of seconds >= 0");
        out.push_back(a[i].get<double>());
    }
    return out;
}

std::vector<int> countList(const json& obj, const std::string& key, const std::string& path, std::size_t n)
{
    if (!obj.contains(key))
        return std::vector<int>(n, 0);
    const auto& a = f::array(obj, key, path);
    if (a.size() != n)
        f::fail(f::child(path, key), "needs one count per device of the stage (" + std::to_string(n) + ")");
    std::vector<int> out;
    for (std::size_t i = 0; i < a.size(); ++i)
        out.push_back(f::index(a[i], f::child(f::child(path, key), i)));
    return out;
}

} // namespace

std::string_view toString(SpanStatistic statistic)
{
    return statistic == SpanStatistic::Mean ? "mean" : "median";
}

SpanStatistic spanStatisticFromString(std::string_view name, const std::string& field)
{
    if (name == "median")
        return SpanStatistic::Median;
    if (name == "mean")
        return SpanStatistic::Mean;
    throw InputError({}, 0, field, "'" + std::string(name) + "' is neither median nor mean");
}

std::string planDigest(const Plan& plan)
{
    json j = toJson(plan);
    j.erase("predicted");
    return digestOf(j);
}

CalibratedCosts calibrate(const Plan& plan, const Timeline& measured, SpanStatistic statistic)
{
    CalibratedCosts c;
    c.statistic = statistic;
    c.plan_digest = planDigest(plan);
    c.model_name = plan.model->name;
    c.devices = plan.cluster->deviceCount();
    c.samples_per_microbatch
        = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : std::max(1, plan.model->microbatch_size);
    const int S = plan.stageCount();
    // (stage, replica) -> measured seconds of each kind
    std::map<std::pair<int, int>, std::vector<double>> forward, backward, input, weight, step;
    // (sender, receiver, gradient, stage, microbatch) -> span
    using TransferKey = std::tuple<int, int, bool, int, int>;
    std::map<TransferKey, const Span*> sends, receives;
    for (const auto& s : measured.spans) {
        if (s.lane == Lane::Compute) {
            if (s.stage < 0 || s.stage >= S)
                continue;
            const int r = replicaOf(plan.stages[static_cast<std::size_t>(s.stage)], s.device);
            if (r < 0)
                continue;
            auto* into = s.kind == ActionKind::Forward ? &forward
                : s.kind == ActionKind::Backward       ? &backward
                : s.kind == ActionKind::BackwardInput  ? &input
                : s.kind == ActionKind::BackwardWeight ? &weight
                : s.kind == ActionKind::OptimizerStep  ? &step
                                                       : nullptr;
            if (into)
                (*into)[{s.stage, r}].push_back(s.t1 - s.t0);
        } else if (s.lane == Lane::Send && isSend(s.kind) && s.peer >= 0) {
            sends[{s.device, s.peer, s.kind == ActionKind::SendGradient, s.stage, s.microbatch}] = &s;
        } else if (s.lane == Lane::Recv && isRecv(s.kind) && s.peer >= 0) {
            receives[{s.peer, s.device, s.kind == ActionKind::RecvGradient, s.stage, s.microbatch}] = &s;
        }
    }
    for (int s = 0; s < S; ++s) {
        const auto& ps = plan.stages[static_cast<std::size_t>(s)];
        StageCosts st;
        st.first_layer = ps.first_layer;
        st.last_layer = ps.last_layer;
        st.devices = ps.devices;
        // A zero-bubble run splits every backward of a stage into I and W (the schedule's kind decides for all).
        const bool split = backward[{s, 0}].empty() && !input[{s, 0}].empty();
        for (int r = 0; r < ps.replicas(); ++r) {
            const auto& fw = forward[{s, r}];
            const auto& bw = backward[{s, r}];
            const auto& in = input[{s, r}];
            const auto& wt = weight[{s, r}];
            const auto missing = [&](const std::string& what) {
                throw InputError("the run has no measured " + what + " of stage " + std::to_string(s) + " on device "
                    + std::to_string(ps.devices[static_cast<std::size_t>(r)]) + ": it did not get through a step");
            };
            if (fw.empty())
                missing("forward");
            if (split && (in.empty() || wt.empty()))
                missing(in.empty() ? "input gradient (I)" : "weight gradient (W)");
            if (!split && bw.empty())
                missing("backward");
            st.forward_s.push_back(statisticOf(statistic, fw));
            if (split) {
                st.backward_weight_s.push_back(statisticOf(statistic, wt));
                st.backward_s.push_back(statisticOf(statistic, in) + st.backward_weight_s.back());
            } else
                st.backward_s.push_back(statisticOf(statistic, bw));
            st.optimizer_step_s.push_back(statisticOf(statistic, step[{s, r}]));
            st.forward_samples.push_back(static_cast<int>(fw.size()));
            st.backward_samples.push_back(static_cast<int>(split ? std::min(in.size(), wt.size()) : bw.size()));
        }
        c.stages.push_back(std::move(st));
    }

    // A transfer's own time is known when its receiver was already waiting as the send began: from the send's
    // start to the receive's end. Otherwise the data may have waited for the receiver, and the pair says nothing.
    const auto refs = plan.cluster->devices();
    std::vector<std::vector<MeasuredTransfer>> perNode(plan.cluster->nodes.size());
    std::vector<MeasuredTransfer> interNode;
    for (const auto& [key, recv] : receives) {
        const auto it = sends.find(key);
        const int a = std::get<0>(key), b = std::get<1>(key);
        if (it == sends.end() || a >= static_cast<int>(refs.size()) || b >= static_cast<int>(refs.size()))
            continue;
        const Span& send = *it->second;
        const double bytes = recv->bytes > 0 ? recv->bytes : send.bytes;
        if (recv->t0 > send.t0 || bytes <= 0)
            continue;
        const MeasuredTransfer t {bytes, recv->t1 - send.t0};
        if (refs[static_cast<std::size_t>(a)].node == refs[static_cast<std::size_t>(b)].node)
            perNode[static_cast<std::size_t>(refs[static_cast<std::size_t>(a)].node)].push_back(t);
        else
            interNode.push_back(t);
    }
    for (std::size_t n = 0; n < plan.cluster->nodes.size(); ++n) {
        const auto& node = plan.cluster->nodes[n];
        c.node_links.push_back(fitLink(perNode[n], {node.intra_bandwidth_bytes_per_s, node.intra_latency_s}));
    }
    c.inter_node
        = fitLink(interNode, {plan.cluster->inter_node_bandwidth_bytes_per_s, plan.cluster->inter_node_latency_s});
    return c;
}

CostModel calibratedCostModel(const CalibratedCosts& costs, const Plan& plan)
{
    const int S = plan.stageCount();
    if (costs.devices != plan.cluster->deviceCount())
        f::fail("/devices",
            "the costs were measured on a cluster of " + std::to_string(costs.devices) + " devices; the plan's has "
                + std::to_string(plan.cluster->deviceCount()));
    if (static_cast<int>(costs.stages.size()) != S) {
        std::vector<std::pair<int, int>> have, want;
        for (const auto& s : costs.stages)
            have.emplace_back(s.first_layer, s.last_layer);
        for (const auto& s : plan.stages)
            want.emplace_back(s.first_layer, s.last_layer);
        f::fail("/stages",
            "the costs are for " + std::to_string(costs.stages.size()) + " stages (layers " + layout(have)
                + "); the plan has " + std::to_string(S) + " (layers " + layout(want)
                + "): calibrate from a run of this layout");
    }
    for (int s = 0; s < S; ++s) {
        const auto& have = costs.stages[static_cast<std::size_t>(s)];
        const auto& want = plan.stages[static_cast<std::size_t>(s)];
        const std::string path = "/stages/" + std::to_string(s);
        if (have.first_layer != want.first_layer || have.last_layer != want.last_layer)
            f::fail(path + (have.first_layer != want.first_layer ? "/first_layer" : "/last_layer"),
                "stage " + std::to_string(s) + " holds layers " + std::to_string(have.first_layer) + "-"
                    + std::to_string(have.last_layer) + " in the costs, " + std::to_string(want.first_layer) + "-"
                    + std::to_string(want.last_layer) + " in the plan");
        if (have.devices != want.devices)
            f::fail(path + "/devices",
                "stage " + std::to_string(s) + " was measured on devices " + deviceList(have.devices)
                    + "; the plan puts it on " + deviceList(want.devices));
    }
    const int samples
        = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : std::max(1, plan.model->microbatch_size);
    if (costs.samples_per_microbatch != samples)
        f::fail("/samples_per_microbatch",
            "the costs are per microbatch of " + std::to_string(costs.samples_per_microbatch)
                + " samples; the plan's microbatch has " + std::to_string(samples));
    if (costs.node_links.size() != plan.cluster->nodes.size())
        f::fail("/links/nodes",
            "the costs have " + std::to_string(costs.node_links.size()) + " node links; the plan's cluster has "
                + std::to_string(plan.cluster->nodes.size()) + " nodes");

    CostModel c = CostModel::fromPlan(plan);
    // Measured spans hold whatever all-reduces ran inside them: no tensor-parallel share is split out.
    c.tp_forward_s.clear();
    c.tp_backward_s.clear();
    c.cp_forward_s.clear();
    c.cp_backward_s.clear();
    std::vector<double> stepBytes(static_cast<std::size_t>(costs.devices), 0.0);
    std::vector<double> stepSeconds(stepBytes.size(), 0.0);
    for (int s = 0; s < S; ++s) {
        const auto& st = costs.stages[static_cast<std::size_t>(s)];
        for (std::size_t r = 0; r < st.devices.size(); ++r) {
            const std::size_t i = static_cast<std::size_t>(c.stage_offset[static_cast<std::size_t>(s)]) + r;
            c.forward_s[i] = st.forward_s[r];
            // With recomputation a backward span holds what it computed again, which the simulator charges on its
            // own (StageCharge::recompute_s): the backward alone is the rest. Full recomputation runs the measured
            // forward again; selective, the attention cores the profile predicts.
            const double again = plan.schedule.recompute == Recompute::Full ? st.forward_s[r]
                : i < c.recompute_s.size()                                  ? c.recompute_s[i]
                                                                            : 0.0;
            c.backward_s[i] = std::max(0.0, st.backward_s[r] - again);
            if (i < c.recompute_s.size()) {
                c.recompute_s[i] = again;
                c.recompute_tp_s[i] = 0; // inside the measured span
                if (i < c.recompute_cp_s.size())
                    c.recompute_cp_s[i] = 0;
            }
            // A split backward's measured parts: W's share of it (the profile's estimate otherwise).
            if (r < st.backward_weight_s.size() && c.backward_s[i] > 0) {
                if (c.backward_weight_share.size() != c.backward_s.size())
                    c.backward_weight_share.assign(c.backward_s.size(), 0.5);
                c.backward_weight_share[i] = std::min(1.0, st.backward_weight_s[r] / c.backward_s[i]);
            }
            const auto d = static_cast<std::size_t>(st.devices[r]);
            stepBytes[d] += 3 * c.stage_weight_bytes[static_cast<std::size_t>(s)]
                + 2 * c.stage_optimizer_bytes[static_cast<std::size_t>(s)];
            stepSeconds[d] += st.optimizer_step_s[r];
        }
    }
    // The simulator prices a step as (3 W + 2 O) / memory bandwidth: the bandwidth that gives each device its
    // measured step time (the sum over its stages when it holds several), infinite (free) when none was measured.
    for (std::size_t d = 0; d < stepBytes.size(); ++d)
        if (stepBytes[d] > 0)
            c.device_memory_bandwidth[d] = stepSeconds[d] > 0 ? stepBytes[d] / stepSeconds[d] : 0.0;
    for (std::size_t n = 0; n < costs.node_links.size(); ++n)
        if (costs.node_links[n].fitted)
            c.node_links[n] = costs.node_links[n].link;
    if (costs.inter_node.fitted)
        c.inter_node = costs.inter_node.link;
    c.check(plan, plan.cluster->deviceCount());
    return c;
}

json toJson(const CalibratedCosts& costs)
{
    json stages = json::array();
    for (const auto& s : costs.stages)
        stages.push_back({{"first_layer", s.first_layer}, {"last_layer", s.last_layer}, {"devices", s.devices},
            {"forward_s", s.forward_s}, {"backward_s", s.backward_s}, {"optimizer_step_s", s.optimizer_step_s},
            {"forward_samples", s.forward_samples}, {"backward_samples", s.backward_samples}});
    for (std::size_t i = 0; i < costs.stages.size(); ++i)
        if (!costs.stages[i].backward_weight_s.empty())
            stages[i]["backward_weight_s"] = costs.stages[i].backward_weight_s;
    json nodes = json::array();
    for (const auto& l : costs.node_links)
        nodes.push_back(linkJson(l));
    return {{"format_version", kCostsFormatVersion}, {"kind", "pipewright-costs"}, {"run_id", costs.run_id},
        {"plan_digest", costs.plan_digest}, {"model", costs.model_name}, {"devices", costs.devices},
        {"samples_per_microbatch", costs.samples_per_microbatch}, {"statistic", toString(costs.statistic)},
        {"stages", stages}, {"links", {{"nodes", nodes}, {"inter_node", linkJson(costs.inter_node)}}}};
}

CalibratedCosts costsFromJson(const json& j)
{
    f::object(j, "");
    f::checkVersion(j, "costs", kCostsFormatVersion);
    if (f::stringOr(j, "kind", "", "pipewright-costs") != "pipewright-costs")
        f::fail("/kind", "expected \"pipewright-costs\" (a file written by `pipewright-cli calibrate`)");
    CalibratedCosts c;
    c.run_id = f::stringOr(j, "run_id", "", "");
    c.plan_digest = f::stringOr(j, "plan_digest", "", "");
    c.model_name = f::stringOr(j, "model", "", "");
    c.devices = f::integer(j, "devices", "");
    c.samples_per_microbatch = f::integer(j, "samples_per_microbatch", "");
    c.statistic = spanStatisticFromString(f::stringOr(j, "statistic", "", "median"), "/statistic");
    if (c.devices <= 0)
        f::fail("/devices", "must be positive");
    if (c.samples_per_microbatch <= 0)
        f::fail("/samples_per_microbatch", "must be positive");
    const auto& stages = f::array(j, "stages", "");
    if (stages.empty())
        f::fail("/stages", "needs at least one stage");
    for (std::size_t i = 0; i < stages.size(); ++i) {
        const std::string path = f::child("/stages", i);
        const auto& js = f::object(stages[i], path);
        StageCosts s;
        s.first_layer = f::integer(js, "first_layer", path);
        s.last_layer = f::integer(js, "last_layer", path);
        const auto& devices = f::array(js, "devices", path);
        if (devices.empty())
            f::fail(f::child(path, "devices"), "needs at least one device");
        for (std::size_t d = 0; d < devices.size(); ++d) {
            s.devices.push_back(f::index(devices[d], f::child(f::child(path, "devices"), d)));
            if (s.devices.back() >= c.devices)
                f::fail(f::child(f::child(path, "devices"), d),
                    "device " + std::to_string(s.devices.back()) + " is not among the " + std::to_string(c.devices));
        }
        const std::size_t n = s.devices.size();
        s.forward_s = secondsList(js, "forward_s", path, n);
        s.backward_s = secondsList(js, "backward_s", path, n);
        s.optimizer_step_s = secondsList(js, "optimizer_step_s", path, n);
        if (js.contains("backward_weight_s")) {
            s.backward_weight_s = secondsList(js, "backward_weight_s", path, n);
            for (std::size_t r = 0; r < n; ++r)
                if (s.backward_weight_s[r] > s.backward_s[r])
                    f::fail(f::child(f::child(path, "backward_weight_s"), r),
                        "the weight gradient (W) is part of the backward: at most backward_s's "
                            + std::to_string(s.backward_s[r]) + " s");
        }
        s.forward_samples = countList(js, "forward_samples", path, n);
        s.backward_samples = countList(js, "backward_samples", path, n);
        c.stages.push_back(std::move(s));
    }
    const auto& links = f::object(f::required(j, "links", ""), "/links");
    const auto& nodes = f::array(links, "nodes", "/links");
    for (std::size_t n = 0; n < nodes.size(); ++n)
        c.node_links.push_back(linkFromJson(nodes[n], f::child("/links/nodes", n)));
    c.inter_node = linkFromJson(f::required(links, "inter_node", "/links"), "/links/inter_node");
    return c;
}

CostModel loadCostModel(const std::string& path, const Plan& plan, CalibratedCosts* costsOut)
{
    CostModel model;
    convertJsonFile(path, [&](const json& j) {
        auto costs = costsFromJson(j);
        model = calibratedCostModel(costs, plan);
        if (costsOut)
            *costsOut = std::move(costs);
    });
    return model;
}

} // namespace pw::planner
