// SPDX-License-Identifier: MIT
// The GPU allocation advisor: which GPUs to rent, how many, and with which plan, for a model and a budget
// or deadline. Heterogeneity-aware in the sense of Gavel (Narayanan, Ch. 5-6): every allocation is planned and
// simulated on the model itself, and a deadline or budget is met at least cost by time-sharing at most two
// allocations (the optimum of the single-job LP of Ch. 6).
#pragma once

#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "../partition/partitioner.h"

namespace pw::planner {

inline constexpr int kOffersFormatVersion = 1;

/// @brief One kind of GPU on offer: how many can be had, in which node shape, at what hourly price.
struct Offer
{
    DeviceType type; ///< price_per_hour is the price of one device
    int max_count = 0;
    int devices_per_node = 8;
    double intra_bandwidth_bytes_per_s = 0;
    double intra_latency_s = 0;
    double inter_node_bandwidth_bytes_per_s = 0;
    double inter_node_latency_s = 0;
};

/// @brief What the user can rent. Loaded from an offers file (docs/formats.md).
struct Market
{
    std::string name;
    std::vector<Offer> offers;
};

/// Parses and validates an offers file; device types may be preset names ("H100") or full objects, and
/// a preset's fields can be overridden. Throws InputError naming the field.
Market marketFromJson(const nlohmann::json& j);
nlohmann::json toJson(const Market& market);

struct AdvisorRequest
{
    const ModelProfile& model;
    const Market& market;
    double samples = 0; ///< samples to train (time and cost to train them are reported)
    std::optional<double> budget; ///< dollars: rank by time to train within it
    std::optional<double> deadline_s; ///< seconds: rank by cost among allocations that finish in time
    /// Partitioners tried on single-type allocations and on two-type mixes; the best fitting plan wins.
    /// Empty = the registered ones among pipedream, pipedream-2bw, megatron (single) and bapipe, hetpipe (mixes).
    std::vector<std::string> algorithms;
    std::vector<std::string> mixed_algorithms;
    bool mixes = true; ///< also try two device types together
    int max_devices = 64; ///< largest allocation considered
    PartitionOptions base; ///< schedule and memory options every plan starts from
};

/// @brief One allocation (device mix and count), its best plan and what it costs.
struct Allocation
{
    std::vector<std::pair<std::string, int>> mix; ///< device type name, count
    int devices = 0;
    std::string algorithm; ///< the partitioner whose plan was best
    std::string config; ///< its replicas per stage
    std::string schedule;
    double throughput_samples_per_s = 0;
    double price_per_hour = 0;
    double cost_per_sample = 0; ///< dollars
    double time_s = 0; ///< to train `samples`
    double cost = 0; ///< dollars, to train `samples`
    double memory_ratio = 0; ///< peak / capacity on the tightest device
    bool meets_constraints = true; ///< within budget and deadline
    std::optional<Plan> plan;

    std::string label() const; ///< "8 x H100", "4 x V100 + 4 x A100"
};

/// @brief Hours on (at most) two allocations run one after the other: the cheapest way to meet a deadline or
/// the fastest way to stay within a budget when no single allocation is best.
struct TimeShare
{
    std::vector<std::pair<int, double>> parts; ///< index into AdvisorResult::allocations, seconds on it
    double time_s = 0;
    double cost = 0;
};

struct AdvisorResult
{
    std::string objective; ///< "cost per sample", "cost within the deadline", "time within the budget"
    std::vector<Allocation> allocations; ///< fitting plans, best first; those breaking a constraint last
    std::optional<TimeShare> time_share; ///< when it beats every single allocation
    int evaluated = 0; ///< allocations planned
    int rejected = 0; ///< allocations without a plan that fits memory
    std::vector<Diagnostic> diagnostics;
};

/// Plans and simulates every allocation (in parallel), then ranks them. Never throws for bad input:
/// problems come back as Error diagnostics.
AdvisorResult advise(const AdvisorRequest& request, const ProgressFn& progress = {}, std::stop_token stop = {});

/// The cheapest (deadline) or fastest (budget) way to train `samples` with time shares of the given
/// allocations: the optimum of the two-constraint LP, which uses at most two of them. nullopt when infeasible.
/// throughput in samples/s, price in $/h.
std::optional<TimeShare> bestTimeShare(const std::vector<Allocation>& allocations, double samples,
    std::optional<double> budget, std::optional<double> deadline_s);

} // namespace pw::planner
