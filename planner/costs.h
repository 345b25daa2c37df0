// SPDX-License-Identifier: MIT
// Per-layer and per-stage costs of a model on a device type: the numbers partitioners and the simulator share.
#pragma once

#include "cluster.h"
#include "model_profile.h"
#include "plan.h"

namespace pw::planner {

/// Times of `layer` on `type`: the layer's own times for that type when profiled, else the profile's
/// times divided by the type's relative_speed (when given). Data-source layers cost nothing.
LayerTimes layerTimesOn(const Layer& layer, const DeviceType& type);

/// Factor from the profile's microbatch to the plan's (times and bytes scale linearly).
double microbatchScale(const Plan& plan);

/// @brief Per-microbatch totals of a contiguous range of layers in a plan's order.
struct StageTotals
{
    double forward_s = 0;
    double backward_s = 0;
    double weight_bytes = 0;
    double activation_bytes = 0; ///< activation memory the stage keeps per microbatch for its backward pass
    double input_bytes = 0; ///< bytes received from the previous stage
    double optimizer_bytes = 0; ///< optimizer state (layer values where given, else factor x weights)
};

StageTotals stageTotals(const Plan& plan, int stage, const DeviceType& type);

/// @brief The memory a device of a stage needs at its peak under a schedule kind.
struct StageMemoryInput
{
    double weight_bytes = 0;
    double activation_bytes = 0;
    double input_bytes = 0;
    double optimizer_bytes = 0;
    int in_flight = 1; ///< microbatches whose activations are stashed at once (1F1B warm-up depth)
    int microbatches = 1; ///< microbatches of one batch on this device (GPipe stashes them all)
    bool recompute = false;
};

/// Weights x versions kept + gradients + optimizer state + stashed activations. Versions: PipeDream
/// in_flight, 2BW 2, others 1. Stashes: GPipe all microbatches, others in_flight. With recomputation a
/// stash is the stage input and one full set of activations is live during a backward pass.
double stageMemoryBytes(const std::string& schedule_kind, const StageMemoryInput& in);

// HetPipe (schedule "wsp"): parameter-server traffic.
/// Seconds for `device` to push (or pull) `bytes` of its partition to (from) the parameter servers. One PS
/// runs on every node and layers are spread round-robin over them (HetPipe's default placement, digest
/// §1.2.6), so 1/H of the bytes go to the node's own PS over its intra-node link and (H-1)/H to the other
/// H-1 nodes over the inter-node link; both legs run at once: latency + max(bytes / intra, (H-1)/H bytes /
/// inter). The latency is the inter-node one when H > 1. A leg whose bandwidth is 0 is not modelled (free).
double parameterServerSeconds(const Cluster& cluster, int device, double bytes);

} // namespace pw::planner
