// SPDX-License-Identifier: MIT
// A cost model calibrated from a measured run: per stage and replica the forward, backward and optimizer-step
// seconds (medians, or means, of the measured compute spans), per link the bandwidth and latency fitted to the measured
// transfers (least squares on t = latency + bytes / bandwidth), kept as a versioned costs file for the stage
// layout it was measured on, and turned back into the simulator's CostModel for that layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "../plan.h"
#include "../timeline.h"
#include "simulator.h"

namespace pw::planner {

inline constexpr int kCostsFormatVersion = 1;

/// @brief A link's costs: fitted to measured transfers, or the cluster's when they could not be.
struct LinkFit
{
    LinkCost link; ///< what the calibrated model uses
    bool fitted = false; ///< false: the cluster's link, kept (fewer than two payload sizes, or no usable transfer)
    int transfers = 0; ///< measured transfers usable for the fit (the receiver was waiting when the send began)
    int sizes = 0; ///< distinct payload sizes among them
    double median_transfer_s = 0; ///< of those transfers (0 without any)
    double rms_residual_s = 0; ///< of the fit (0 when not fitted)

    bool operator==(const LinkFit&) const = default;
};

/// @brief One (virtual) stage of the layout the costs were measured on, seconds per microbatch per replica.
struct StageCosts
{
    int first_layer = 0;
    int last_layer = 0;
    std::vector<int> devices; ///< replicas, in the plan's order
    std::vector<double> forward_s; ///< per replica: the statistic (median) of its forward spans
    /// Per replica: the whole backward. A run whose schedule split it (zero-bubble kinds: I then W) has it as the
    /// statistic of its I spans plus that of its W spans.
    std::vector<double> backward_s;
    /// Per replica: the weight-gradient pass (W) of a split backward, part of backward_s; empty when the run fused
    /// its backwards (B spans), so that the profile's share of W is kept.
    std::vector<double> backward_weight_s;
    std::vector<double> optimizer_step_s; ///< per replica: of its optimizer steps (0: none measured)
    std::vector<int> forward_samples; ///< per replica: spans the medians were taken over
    std::vector<int> backward_samples;

    bool operator==(const StageCosts&) const = default;
};

/// @brief How a stage's many measured spans of one kind become its one time per microbatch.
enum class SpanStatistic : std::uint8_t {
    Median, ///< robust to the odd slow span (first-step allocations, a preemption): the time of a typical span
    Mean, ///< what the spans add up to: better when many spans are slowed (processes sharing cores)
};
std::string_view toString(SpanStatistic statistic);
/// "median" | "mean"; throws InputError naming `field` otherwise.
SpanStatistic spanStatisticFromString(std::string_view name, const std::string& field = "statistic");

/// @brief The calibrated costs of one plan's stage layout on its cluster.
struct CalibratedCosts
{
    std::string run_id; ///< the run they were fitted to ("" when unknown)
    std::string plan_digest; ///< planDigest() of the run's plan (provenance; the layout below is what is checked)
    std::string model_name;
    int devices = 0; ///< devices of the cluster
    int samples_per_microbatch = 1; ///< the microbatch size the times are for
    SpanStatistic statistic = SpanStatistic::Median; ///< of the stage times
    std::vector<StageCosts> stages;
    std::vector<LinkFit> node_links; ///< per node of the cluster
    LinkFit inter_node;

    bool operator==(const CalibratedCosts&) const = default;
};

/// Digest of the plan without its predicted metrics (what a run stores and a plan file holds agree on it).
std::string planDigest(const Plan& plan);

/// Fits the costs of `plan` to a run's measured timeline (spans in seconds, any t = 0), each stage time the
/// `statistic` of its spans; a split backward (I and W spans, zero-bubble schedules) is fitted as its two parts, W's
/// share then replacing the profile's. Throws InputError when a stage replica has no measured forward or backward
/// (B, or I and W) (the run did not get through a step).
CalibratedCosts calibrate(const Plan& plan, const Timeline& measured, SpanStatistic statistic = SpanStatistic::Median);

/// The simulator's cost model for `plan` with the calibrated costs in place of the profile's (compute, optimizer
/// steps, fitted links; memory and bytes stay the plan's). Throws InputError naming the field of the costs file
/// ("/stages/1/devices", "/samples_per_microbatch", ...) when they were measured on another layout.
CostModel calibratedCostModel(const CalibratedCosts& costs, const Plan& plan);

nlohmann::json toJson(const CalibratedCosts& costs);
/// Parses and checks sizes; errors name the JSON path of the field.
CalibratedCosts costsFromJson(const nlohmann::json& j);
/// Loads a costs file and builds the cost model for `plan`; every error names the file, the line and the field.
CostModel loadCostModel(const std::string& path, const Plan& plan, CalibratedCosts* costs = nullptr);

} // namespace pw::planner
