// SPDX-License-Identifier: MIT
// The GPU allocation advisor: plan and simulate every allocation on offer, rank by cost, time or both.
#include "advisor.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "../costs.h"
#include "../device_presets.h"
#include "../errors.h"
#include "../json_fields.h"
#include "../sim/simulator.h"

namespace pw::planner {

using nlohmann::json;
namespace f = fields;

namespace {

std::string lower(std::string s)
{
    for (auto& c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

DeviceType deviceTypeFrom(const json& v, const std::string& path)
{
    if (v.is_string()) {
        auto preset = devicePreset(v.get<std::string>());
        if (!preset)
            throw InputError({}, 0, path, "unknown device preset '" + v.get<std::string>() + "'");
        return *preset;
    }
    const auto& o = f::object(v, path);
    DeviceType t;
    if (o.contains("preset")) {
        auto preset = devicePreset(f::string(o, "preset", path));
        if (!preset)
            throw InputError({}, 0, path + "/preset", "unknown device preset '" + o["preset"].dump() + "'");
        t = *preset;
    }
    t.name = f::stringOr(o, "name", path, t.name);
    if (t.name.empty())
        throw InputError({}, 0, path + "/name", "a device type needs a name (or a preset)");
    t.memory_bytes = f::nonNegativeOr(o, "memory_bytes", path, t.memory_bytes);
    if (!(t.memory_bytes > 0))
        throw InputError({}, 0, path + "/memory_bytes", "must be > 0");
    t.peak_tflops = f::nonNegativeOr(o, "peak_tflops", path, t.peak_tflops);
    t.peak_fp8_tflops = f::nonNegativeOr(o, "peak_fp8_tflops", path, t.peak_fp8_tflops);
    t.memory_bandwidth_bytes_per_s
        = f::nonNegativeOr(o, "memory_bandwidth_bytes_per_s", path, t.memory_bandwidth_bytes_per_s);
    if (auto speed = f::optionalNumber(o, "relative_speed", path)) {
        if (!(*speed > 0))
            throw InputError({}, 0, path + "/relative_speed", "must be > 0");
        t.relative_speed = speed;
    }
    t.price_per_hour = f::nonNegativeOr(o, "price_per_hour", path, t.price_per_hour);
    return t;
}

/// Counts worth trying for one offer: 1, 2, 4, ... within a node, then whole nodes 1, 2, 4, ...
std::vector<int> shapes(const Offer& offer, int maxDevices)
{
    std::vector<int> out;
    const int limit = std::min(offer.max_count, maxDevices);
    for (int c = 1; c < offer.devices_per_node && c <= limit; c *= 2)
        out.push_back(c);
    for (long long nodes = 1; nodes * offer.devices_per_node <= limit; nodes *= 2)
        out.push_back(static_cast<int>(nodes * offer.devices_per_node));
    return out;
}

void addNodes(Cluster& c, const Offer& offer, int count)
{
    const int perNode = std::min(count, offer.devices_per_node);
    const std::string prefix = lower(offer.type.name);
    for (int n = 0; n * perNode < count; ++n) {
        Node node;
        node.name = prefix + "-" + std::to_string(c.nodes.size());
        node.host = node.name;
        node.device_type = offer.type.name;
        node.count = perNode;
        node.intra_bandwidth_bytes_per_s = offer.intra_bandwidth_bytes_per_s;
        node.intra_latency_s = offer.intra_latency_s;
        c.nodes.push_back(std::move(node));
    }
}

struct Task
{
    std::vector<int> offers; ///< indices into the market
    std::vector<int> counts;
};

Cluster clusterFor(const Market& market, const Task& task)
{
    Cluster c;
    c.name.clear();
    double inter = 0;
    double latency = 0;
    for (std::size_t i = 0; i < task.offers.size(); ++i) {
        const auto& offer = market.offers[task.offers[i]];
        c.device_types.push_back(offer.type);
        addNodes(c, offer, task.counts[i]);
        inter = inter == 0 ? offer.inter_node_bandwidth_bytes_per_s
                           : std::min(inter, offer.inter_node_bandwidth_bytes_per_s);
        latency = std::max(latency, offer.inter_node_latency_s);
        c.name += (c.name.empty() ? "" : " + ") + std::to_string(task.counts[i]) + " x " + offer.type.name;
    }
    c.inter_node_bandwidth_bytes_per_s = inter;
    c.inter_node_latency_s = latency;
    return c;
}

/// Makes every offer's speed on this model known (deviceSpeed): its own relative_speed or profile times, else
/// the ratio of peak throughput to the profiled device's (a roofline guess, flagged), else the offer is dropped.
std::vector<Offer> resolvedOffers(const ModelProfile& model, const Market& market, std::vector<Diagnostic>& diags)
{
    std::vector<DeviceType> types;
    for (const auto& o : market.offers)
        types.push_back(o.type);
    std::vector<Offer> out;
    for (auto offer : market.offers) {
        const auto speed = deviceSpeed(offer.type, model, types);
        if (speed.estimated()) {
            offer.type.relative_speed = speed.factor;
            diags.push_back({Diagnostic::Severity::Warning, "estimated-speed", speedNote(offer.type, model, speed)});
        } else if (speed.source == DeviceSpeed::Source::Unknown) {
            diags.push_back({Diagnostic::Severity::Warning, "unknown-speed",
                offer.type.name + ": left out, the model's speed on it is unknown (give relative_speed in "
                    + "the offer or profile the model on it)"});
            continue;
        }
        out.push_back(std::move(offer));
    }
    return out;
}

std::vector<std::string> defaultAlgorithms(std::initializer_list<const char*> names)
{
    std::vector<std::string> out;
    for (const char* n : names)
        if (findPartitioner(n))
            out.emplace_back(n);
    return out;
}

/// The best fitting plan over `algorithms` for one allocation; nullopt when none fits.
std::optional<Allocation> planAllocation(const AdvisorRequest& request, const std::vector<Offer>& offers,
    const Task& task, const std::vector<std::string>& algorithms, std::stop_token stop)
{
    Market shaped;
    shaped.offers = offers;
    Cluster cluster = clusterFor(shaped, task);
    try {
        cluster.validate();
    } catch (const InputError&) {
        return std::nullopt;
    }
    std::optional<Allocation> best;
    for (const auto& name : algorithms) {
        if (stop.stop_requested())
            break;
        const auto* p = findPartitioner(name);
        if (!p)
            continue;
        PartitionRequest pr {request.model, cluster, request.base};
        pr.options.params = json::object();
        auto result = p->partition(pr, {}, stop);
        if (!result.ok())
            continue;
        SimulationResult sim;
        try {
            sim = simulate(*result.plan, SimulationOptions {.record_spans = false, .record_memory = false});
        } catch (const std::exception&) {
            continue;
        }
        double ratio = 0;
        for (const auto& d : sim.devices)
            if (d.memory_capacity_bytes > 0)
                ratio = std::max(ratio, d.peak_memory_bytes / d.memory_capacity_bytes);
        if (ratio > 1 || !(sim.throughput_samples_per_s > 0))
            continue;
        if (best && best->throughput_samples_per_s >= sim.throughput_samples_per_s)
            continue;
        Allocation a;
        for (std::size_t i = 0; i < task.offers.size(); ++i)
            a.mix.emplace_back(offers[task.offers[i]].type.name, task.counts[i]);
        a.devices = cluster.deviceCount();
        a.algorithm = name;
        a.config = result.plan->configString();
        a.schedule = result.plan->schedule.kind;
        a.throughput_samples_per_s = sim.throughput_samples_per_s;
        for (std::size_t i = 0; i < task.offers.size(); ++i)
            a.price_per_hour += offers[task.offers[i]].type.price_per_hour * task.counts[i];
        a.memory_ratio = ratio;
        a.plan = std::move(result.plan);
        best = std::move(a);
    }
    return best;
}

} // namespace

std::string Allocation::label() const
{
    std::string s;
    for (const auto& [type, count] : mix)
        s += (s.empty() ? "" : " + ") + std::to_string(count) + " x " + type;
    return s;
}

Market marketFromJson(const json& j)
{
    f::object(j, "");
    f::checkVersion(j, "offers", kOffersFormatVersion);
    Market m;
    m.name = f::stringOr(j, "name", "", "offers");
    const auto& offers = f::array(j, "offers", "");
    if (offers.empty())
        throw InputError({}, 0, "/offers", "lists no devices to rent");
    std::set<std::string> names;
    for (std::size_t i = 0; i < offers.size(); ++i) {
        const auto path = f::child("/offers", i);
        const auto& o = f::object(offers[i], path);
        Offer offer;
        offer.type = deviceTypeFrom(f::required(o, "device_type", path), path + "/device_type");
        if (o.contains("price_per_hour"))
            offer.type.price_per_hour = f::nonNegative(o, "price_per_hour", path);
        if (auto speed = f::optionalNumber(o, "relative_speed", path)) {
            if (!(*speed > 0))
                throw InputError({}, 0, path + "/relative_speed", "must be > 0");
            offer.type.relative_speed = speed;
        }
        if (!names.insert(offer.type.name).second)
            throw InputError({}, 0, path + "/device_type", "'" + offer.type.name + "' is offered twice");
        offer.max_count = f::integer(o, "count", path);
        if (offer.max_count < 1 || offer.max_count > kMaxDevices)
            throw InputError({}, 0, path + "/count", "must be in [1, " + std::to_string(kMaxDevices) + "]");
        offer.devices_per_node = f::integerOr(o, "devices_per_node", path, 8);
        if (offer.devices_per_node < 1)
            throw InputError({}, 0, path + "/devices_per_node", "must be >= 1");
        offer.intra_bandwidth_bytes_per_s = f::nonNegativeOr(o, "intra_bandwidth_bytes_per_s", path, 0);
        if (offer.devices_per_node > 1 && !(offer.intra_bandwidth_bytes_per_s > 0))
            throw InputError({}, 0, path + "/intra_bandwidth_bytes_per_s", "must be > 0 for nodes of several devices");
        offer.intra_latency_s = f::nonNegativeOr(o, "intra_latency_s", path, 0);
        offer.inter_node_bandwidth_bytes_per_s = f::nonNegativeOr(o, "inter_node_bandwidth_bytes_per_s", path, 0);
        if (!(offer.inter_node_bandwidth_bytes_per_s > 0))
            throw InputError({}, 0, path + "/inter_node_bandwidth_bytes_per_s", "must be > 0");
        offer.inter_node_latency_s = f::nonNegativeOr(o, "inter_node_latency_s", path, 0);
        m.offers.push_back(std::move(offer));
    }
    return m;
}

json toJson(const Market& market)
{
    json offers = json::array();
    for (const auto& o : market.offers) {
        offers.push_back(
            {{"device_type", toJson(o.type)}, {"count", o.max_count}, {"devices_per_node", o.devices_per_node},
                {"intra_bandwidth_bytes_per_s", o.intra_bandwidth_bytes_per_s}, {"intra_latency_s", o.intra_latency_s},
                {"inter_node_bandwidth_bytes_per_s", o.inter_node_bandwidth_bytes_per_s},
                {"inter_node_latency_s", o.inter_node_latency_s}});
    }
    return {{"format_version", kOffersFormatVersion}, {"name", market.name}, {"offers", offers}};
}

std::optional<TimeShare> bestTimeShare(const std::vector<Allocation>& allocations, double samples,
    std::optional<double> budget, std::optional<double> deadline_s)
{
    if (!(samples > 0) || (!budget && !deadline_s))
        return std::nullopt;
    // Variables: seconds t_j on allocation j (rate x_j samples/s, price c_j $/s). Deadline: minimise sum c t
    // subject to sum x t = N and sum t <= D. Budget: minimise sum t subject to sum x t = N and sum c t <= B.
    // Two constraints, so an optimal vertex uses one allocation (coverage tight) or two (both tight).
    const bool byDeadline = deadline_s.has_value();
    const double limit = byDeadline ? *deadline_s : *budget;
    const auto price = [&](int j) { return allocations[j].price_per_hour / 3600.0; };
    const auto rate = [&](int j) { return allocations[j].throughput_samples_per_s; };
    // The constrained resource per second of allocation j, and the objective per second.
    const auto used = [&](int j) { return byDeadline ? 1.0 : price(j); };
    const auto objective = [&](int j) { return byDeadline ? price(j) : 1.0; };
    std::optional<TimeShare> best;
    double bestValue = 0;
    const auto consider = [&](TimeShare share) {
        double value = 0;
        for (const auto& [j, t] : share.parts) {
            value += objective(j) * t;
            share.time_s += t;
            share.cost += price(j) * t;
        }
        if (!best || value < bestValue * (1 - 1e-12)) {
            best = std::move(share);
            bestValue = value;
        }
    };
    const int n = static_cast<int>(allocations.size());
    for (int j = 0; j < n; ++j) {
        if (!(rate(j) > 0))
            continue;
        const double t = samples / rate(j);
        if (used(j) * t <= limit * (1 + 1e-12))
            consider({{{j, t}}, 0, 0});
    }
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) {
            // x_i t_i + x_j t_j = N ; u_i t_i + u_j t_j = L
            const double det = rate(i) * used(j) - rate(j) * used(i);
            if (std::abs(det) < 1e-300)
                continue;
            const double ti = (samples * used(j) - rate(j) * limit) / det;
            const double tj = (rate(i) * limit - used(i) * samples) / det;
            if (ti > 0 && tj > 0)
                consider({{{i, ti}, {j, tj}}, 0, 0});
        }
    return best;
}

AdvisorResult advise(const AdvisorRequest& request, const ProgressFn& progress, std::stop_token stop)
{
    AdvisorResult result;
    auto error = [&](std::string code, std::string message) {
        result.diagnostics.push_back({Diagnostic::Severity::Error, std::move(code), std::move(message)});
        return result;
    };
    if (request.market.offers.empty())
        return error("no-offers", "no devices are on offer");
    if (!(request.samples >= 0) || !std::isfinite(request.samples))
        return error("bad-option", "the number of samples to train must be >= 0");
    if (request.budget && !(*request.budget > 0))
        return error("bad-option", "the budget must be > 0 dollars");
    if (request.deadline_s && !(*request.deadline_s > 0))
        return error("bad-option", "the deadline must be > 0");
    if ((request.budget || request.deadline_s) && !(request.samples > 0))
        return error("bad-option", "a budget or deadline needs the number of samples to train");
    if (request.max_devices < 1)
        return error("bad-option", "the largest allocation must have at least one device");
    if (request.model.layers.empty())
        return error("empty-model", "the model has no layers");
    result.objective = request.deadline_s ? "cost within the deadline"
        : request.budget                  ? "time within the budget"
                                          : "cost per sample";

    const auto single = request.algorithms.empty() ? defaultAlgorithms({"pipedream", "pipedream-2bw", "megatron"})
                                                   : request.algorithms;
    const auto mixed
        = request.mixed_algorithms.empty() ? defaultAlgorithms({"bapipe", "hetpipe"}) : request.mixed_algorithms;
    for (const auto* list : {&single, &mixed})
        for (const auto& name : *list)
            if (!findPartitioner(name))
                return error("bad-option", "unknown algorithm '" + name + "'");
    const auto offers = resolvedOffers(request.model, request.market, result.diagnostics);
    if (offers.empty())
        return error("no-offers", "no offered device has a known speed for this model");

    std::vector<Task> tasks;
    for (int i = 0; i < static_cast<int>(offers.size()); ++i)
        for (int c : shapes(offers[i], request.max_devices))
            tasks.push_back({{i}, {c}});
    const std::size_t singles = tasks.size();
    if (request.mixes && !mixed.empty())
        for (int i = 0; i < static_cast<int>(offers.size()); ++i)
            for (int j = i + 1; j < static_cast<int>(offers.size()); ++j)
                for (int a : shapes(offers[i], request.max_devices))
                    for (int b : shapes(offers[j], request.max_devices))
                        if (a + b <= request.max_devices)
                            tasks.push_back({{i, j}, {a, b}});

    std::vector<std::optional<Allocation>> planned(tasks.size());
    std::atomic<std::size_t> next {0};
    std::atomic<std::size_t> done {0};
    std::mutex progressMutex;
    const unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8));
    {
        std::vector<std::jthread> pool;
        for (unsigned w = 0; w < workers; ++w)
            pool.emplace_back([&] {
                for (std::size_t t; (t = next++) < tasks.size();) {
                    if (stop.stop_requested())
                        return;
                    planned[t] = planAllocation(request, offers, tasks[t], t < singles ? single : mixed, stop);
                    if (progress) {
                        // Count and report under one lock, so that the reported share never goes back.
                        std::lock_guard lock(progressMutex);
                        progress(static_cast<double>(++done) / static_cast<double>(tasks.size()));
                    }
                }
            });
    }
    if (stop.stop_requested()) {
        result.diagnostics.push_back({Diagnostic::Severity::Error, "cancelled", "the advisor was cancelled"});
        return result;
    }
    result.evaluated = static_cast<int>(tasks.size());
    for (auto& a : planned) {
        if (!a) {
            ++result.rejected;
            continue;
        }
        a->cost_per_sample = a->price_per_hour / 3600.0 / a->throughput_samples_per_s;
        a->time_s = request.samples / a->throughput_samples_per_s;
        a->cost = a->time_s / 3600.0 * a->price_per_hour;
        a->meets_constraints = (!request.budget || a->cost <= *request.budget)
            && (!request.deadline_s || a->time_s <= *request.deadline_s);
        result.allocations.push_back(std::move(*a));
    }
    if (result.allocations.empty())
        return error("infeasible", "no allocation on offer has a plan that fits device memory");
    const auto key = [&](const Allocation& a) {
        if (request.deadline_s)
            return a.cost;
        if (request.budget)
            return a.time_s;
        return a.cost_per_sample;
    };
    std::stable_sort(result.allocations.begin(), result.allocations.end(), [&](const auto& a, const auto& b) {
        if (a.meets_constraints != b.meets_constraints)
            return a.meets_constraints;
        if (key(a) != key(b))
            return key(a) < key(b);
        return a.throughput_samples_per_s > b.throughput_samples_per_s;
    });
    if (auto share = bestTimeShare(result.allocations, request.samples, request.budget, request.deadline_s);
        share && share->parts.size() == 2)
        result.time_share = std::move(share);
    if ((request.budget || request.deadline_s) && !result.allocations.front().meets_constraints && !result.time_share)
        result.diagnostics.push_back({Diagnostic::Severity::Warning, "unmet",
            std::string("no allocation, alone or time-shared, meets the ")
                + (request.deadline_s ? "deadline" : "budget")});
    return result;
}

} // namespace pw::planner
