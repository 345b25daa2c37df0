// SPDX-License-Identifier: MIT
// Discrete-event execution of a Schedule under a cost model: the predicted Timeline and its metrics.
#pragma once

#include <optional>
#include <stop_token>
#include <vector>

#include "../plan.h"
#include "../schedule.h"
#include "../timeline.h"

namespace pw::planner {

/// @brief One link: a transfer of b bytes takes latency + b / bandwidth (bandwidth 0: unknown, never arrives).
struct LinkCost
{
    double bandwidth_bytes_per_s = 0;
    double latency_s = 0;

    /// Seconds on the wire alone (bytes / bandwidth; infinite for a bandwidth of 0 with bytes to move).
    double wireSeconds(double bytes) const;
    double seconds(double bytes) const { return latency_s + wireSeconds(bytes); }
    bool operator==(const LinkCost&) const = default;
};

/// @brief A share of a stage's gradients that is all-reduced as one piece (a bucket), and when it is final: the
/// share of the stage's backward pass done by then. The backward frees the last layer's gradients first.
struct GradientBucket
{
    double bytes_fraction = 1; ///< of the stage's all-reduced bytes
    double ready_fraction = 1; ///< of the backward pass (1: at its end)
    bool operator==(const GradientBucket&) const = default;
};

/// @brief Costs of one plan on its cluster, in seconds and bytes per microbatch: the compute, memory, link and
/// collective costs the simulator asks for. fromPlan derives them from the plan's profile and cluster; a model
/// calibrated from measured runs fills the same fields (simulate(plan, schedule, cost)).
/// @brief What the simulator charges one microbatch of a stage on a replica's compute lane, in parts: the sum is
/// the time of its forward span plus its backward span (which holds the recomputed forward).
struct StageCharge
{
    double forward_s = 0; ///< forward compute
    double backward_s = 0; ///< backward compute
    /// What recomputation computes again before the backward: the whole forward (full) or the attention cores
    /// (selective); 0 without.
    double recompute_s = 0;
    double tensor_parallel_s = 0; ///< the tensor-parallel group's all-reduces of these passes (recomputed ones too)
    /// ZeRO-3 / FSDP: what the weights' all-gathers and the gradients' reduce-scatter of these passes add where the
    /// compute does not cover them.
    double weight_gather_s = 0;
    /// Context parallelism: what the ring attention's K and V exchanges of these passes (recomputed ones too) add where
    /// the attention compute does not cover them.
    double context_parallel_s = 0;

    double total_s() const
    {
        return forward_s + backward_s + recompute_s + tensor_parallel_s + weight_gather_s + context_parallel_s;
    }
    bool operator==(const StageCharge&) const = default;
};

struct CostModel
{
    /// [stage][replica index] flattened by stageReplicaIndex; the tensor-parallel all-reduces included.
    std::vector<double> forward_s;
    std::vector<double> backward_s;
    /// The tensor-parallel all-reduce share of forward_s and backward_s (same indexing; empty: none, e.g. a
    /// calibrated model, whose measured times are what they are).
    std::vector<double> tp_forward_s;
    std::vector<double> tp_backward_s;
    /// The weight gradient's share of the backward compute (backward_s less its tensor-parallel all-reduces), same
    /// indexing: what a split backward's W costs, the rest going to its I (the tensor-parallel all-reduces carry
    /// input gradients). Empty: 1/2 everywhere. Calibration keeps the estimated shares of fromPlan.
    std::vector<double> backward_weight_share;
    std::vector<int> stage_offset; ///< first index of each stage in the flattened vectors
    std::vector<double> stage_weight_bytes;
    std::vector<double> stage_activation_bytes; ///< stashed per microbatch without recomputation
    std::vector<double> stage_input_bytes; ///< received per microbatch
    /// Recomputation (the plan's schedule.recompute; StageTotals): per stage, what a microbatch keeps from its
    /// forward to its backward, and what its backward holds on top while it recomputes; per replica (indexed like
    /// forward_s), the compute recomputed before the backward and its tensor-parallel all-reduces. Empty:
    /// stage_activation_bytes kept, nothing recomputed.
    std::vector<double> stage_kept_bytes;
    std::vector<double> stage_recompute_working_bytes;
    std::vector<double> recompute_s;
    std::vector<double> recompute_tp_s;
    /// Context parallelism, indexed like forward_s (empty: none): the exposed ring exchanges included in forward_s and
    /// backward_s, and those full recomputation runs again.
    std::vector<double> cp_forward_s;
    std::vector<double> cp_backward_s;
    std::vector<double> recompute_cp_s;
    /// Per stage, what a microbatch's I keeps for its W (StageTotals::weight_gradient_bytes), held from the end of
    /// the I to the end of the W; a fused B frees it at once, so only split backwards count it. Empty: none.
    std::vector<double> stage_weight_gradient_bytes;
    /// Per stage, what a fused B holds while it runs (StageTotals::backward_working_bytes). Empty: none.
    std::vector<double> stage_backward_working_bytes;
    std::vector<double> stage_optimizer_bytes;
    std::vector<double> boundary_bytes; ///< bytes sent from stage s to s+1 per microbatch
    std::vector<double> device_memory_capacity;
    int samples_per_microbatch = 1;

    // Links and collectives.
    std::vector<int> device_node; ///< node of every device
    /// The inter-node link (a node's NIC, Node::inter_node_links) every device sends on, numbered over the cluster;
    /// empty: one per node, the device's node.
    std::vector<int> device_uplink;
    int uplinkOf(int device) const { return device_uplink.empty() ? device_node[device] : device_uplink[device]; }
    int uplinkCount() const
    {
        int n = static_cast<int>(node_links.size());
        for (int u : device_uplink)
            n = std::max(n, u + 1);
        return n;
    }
    std::vector<LinkCost> node_links; ///< per node: the link between two of its devices
    LinkCost inter_node; ///< between devices of different nodes: each node's uplink
    std::vector<double> device_memory_bandwidth; ///< per device, bytes/s of the optimizer step (0: free)
    /// Per stage, in the order its backward frees them: the buckets of its data-parallel all-reduce.
    std::vector<std::vector<GradientBucket>> stage_buckets;
    /// Data-parallel all-reduces overlap the backward pass before them (PyTorch DDP, Megatron's
    /// overlap_grad_reduce): each bucket starts once its gradients are final on every replica, the buckets follow
    /// each other on the group's link, and only what is left after the backward shows. false: the all-reduce
    /// starts when the last replica reaches it.
    bool overlap_gradient_allreduce = true;
    /// The distributed optimizer's parameter all-gather runs under the next forward (ScheduleOptions::
    /// overlap_param_gather): a stage's gradient sum is charged as its reduce-scatter, half of the ring.
    bool overlap_param_gather = false;
    /// ZeRO per stage (StageTotals): the weights and the weight-sized gradient a device keeps; empty: the stage's
    /// weight bytes each. With shard_weights the gradient sum happened microbatch by microbatch
    /// (weight_gather_*), so the step's collective moves nothing (zero_sum_after_microbatches).
    std::vector<double> stage_resident_weight_bytes;
    std::vector<double> stage_gradient_bytes;
    bool zero_sum_after_microbatches = false;
    /// Hybrid sharding (ScheduleOptions::shard_group, HSDP): a stage's gradient sum runs inside groups of this many
    /// consecutive members (the distributed optimizer's reduce-scatter and all-gather; nothing with
    /// zero_sum_after_microbatches) and then across the groups on each member's 1/s shard; 0: one group.
    int shard_group = 0;
    /// Per (stage, replica): FSDP's exposed all-gathers and reduce-scatter in F and B (included in forward_s and
    /// backward_s, like tp_forward_s).
    std::vector<double> weight_gather_forward_s;
    std::vector<double> weight_gather_backward_s;
    /// Devices of one node share the node's uplink: concurrent inter-node sends from one node take turns on it
    /// (k equal transfers end after k times one transfer). false: every device has the uplink to itself.
    bool shared_node_uplink = true;

    /// @brief A stage's data-parallel all-reduce as the real group would run it, where the scheduled group stands
    /// for a larger one (simulateDataParallel simulates a few of a plan's identical pipelines): how many members the
    /// ring has and its slowest link (groupLink of the real group).
    struct Ring
    {
        int members = 0; ///< 0: the scheduled group is the real one
        LinkCost link;
        LinkCost shard_link; ///< with shard_group: the slowest link inside the real group's first shard group
        bool operator==(const Ring&) const = default;
    };
    /// Per stage (empty: no stand-ins): the ring every data-parallel all-reduce of the stage is charged as.
    std::vector<Ring> stage_rings;

    static CostModel fromPlan(const Plan& plan);
    /// fromPlan's per-stage tables, and its per-replica ones for the first device of every model-parallel group alone
    /// (replica index r / (t c) of fromPlan's r; every member of a group costs alike on a homogeneous cluster), without
    /// the per-device tables, links and buckets: what a group costs, for closed-form estimates at a t c-th of the work.
    /// Not a model simulate() accepts.
    static CostModel groupLeaderCosts(const Plan& plan);
    /// Throws InputError when this model does not describe `plan` on `devices` devices (an injected model built for
    /// another plan): the sizes of its per-stage, per-replica and per-device tables, and its devices' nodes.
    void check(const Plan& plan, int devices) const;
    double forward(int stage, int replica) const { return forward_s[stage_offset[stage] + replica]; }
    double backward(int stage, int replica) const { return backward_s[stage_offset[stage] + replica]; }
    /// A split backward's weight gradient (W) and input gradient (I); the two add up to backward().
    double backwardWeight(int stage, int replica) const;
    double backwardInput(int stage, int replica) const
    {
        return backward(stage, replica) - backwardWeight(stage, replica);
    }
    /// What one microbatch of `stage` costs `replica`'s compute lane, forward and backward (with what it recomputes),
    /// split into its parts.
    StageCharge charge(int stage, int replica) const;
    /// What a device keeps of a stage's weights and weight-sized gradient (ZeRO's shares; the weight bytes each when
    /// the model does not say).
    double residentWeightBytes(int stage) const
    {
        return static_cast<std::size_t>(stage) < stage_resident_weight_bytes.size() ? stage_resident_weight_bytes[stage]
                                                                                    : stage_weight_bytes[stage];
    }
    double gradientBytes(int stage) const
    {
        return static_cast<std::size_t>(stage) < stage_gradient_bytes.size() ? stage_gradient_bytes[stage]
                                                                             : stage_weight_bytes[stage];
    }
    /// The time the backward of `stage` on `replica` recomputes before it (compute and its all-reduces); 0 without.
    double recompute(int stage, int replica) const;
    double keptBytes(int stage) const
    {
        return stage_kept_bytes.empty() ? stage_activation_bytes[stage] : stage_kept_bytes[stage];
    }
    double recomputeWorkingBytes(int stage) const
    {
        return stage_recompute_working_bytes.empty() ? 0.0 : stage_recompute_working_bytes[stage];
    }
    /// The link from device a to device b (a node's own link, or the inter-node one).
    const LinkCost& link(int a, int b) const;
    bool sameNode(int a, int b) const { return device_node[a] == device_node[b]; }
    double transferSeconds(int a, int b, double bytes) const { return link(a, b).seconds(bytes); }
    /// The slowest link a group's ring crosses: a node's own link where two members share it, the inter-node link
    /// where the group spans nodes (Cluster::groupBandwidth / groupLatency).
    LinkCost groupLink(const std::vector<int>& group) const;
    /// Ring all-reduce of `bytes` among the group: 2 (n-1)/n bytes / bandwidth + 2 (n-1) latency (0 for n < 2).
    double allReduceSeconds(const std::vector<int>& group, double bytes) const;
    /// The same on a ring of n members whose slowest link is `link`.
    static double ringAllReduceSeconds(int n, const LinkCost& link, double bytes);
    /// HetPipe's push (or pull) of `bytes` between `device` and the parameter servers (parameterServerSeconds in
    /// costs.h, on this model's links).
    double parameterServerSeconds(int device, double bytes, bool local) const;
    /// The optimizer step of `stage` on `device`: (3 W + 2 O) / memory bandwidth (0 when unknown).
    double optimizerStepSeconds(int device, int stage) const;

private:
    static CostModel build(const Plan& plan, bool leadersOnly);
};

struct DeviceMetrics
{
    double busy_s = 0; ///< compute lane busy time
    /// Idle share of the compute lane over the measured window, waiting for the pipeline (fill, drain, a slower
    /// neighbour): what is left idle after data_parallel_wait_fraction.
    double bubble_fraction = 0;
    /// Share of the window the compute lane waits for all-reduces to end (the data-parallel gradient sum's exposed
    /// part, tied weights' sums): idle, but not the pipeline's bubble.
    double data_parallel_wait_fraction = 0;
    double collective_wait_s = 0; ///< that wait in seconds
    double peak_memory_bytes = 0;
    double memory_capacity_bytes = 0;
    int peak_stashed_microbatches = 0;
    int peak_weight_versions = 0;
};

struct StageMetrics
{
    /// Per microbatch on the stage's first replica: what the simulation charged (StageCharge::total_s) and its parts.
    StageCharge charge;
    double peak_memory_bytes = 0; ///< the most any of its devices uses
    double memory_capacity_bytes = 0; ///< the least any of its devices has
    int peak_stashed_microbatches = 0;
    int peak_weight_versions = 0;
};

struct SimulationResult
{
    Timeline timeline;
    double makespan_s = 0;
    double iteration_time_s = 0; ///< per batch of microbatches_per_batch (steady state for async schedules)
    double throughput_samples_per_s = 0;
    double bubble_fraction = 0; ///< mean over devices of the pipeline's idle share of the compute lane
    double bubble_overhead = 0; ///< that idle time / busy over the same window: the papers' (p-1)/m
    double data_parallel_wait_fraction = 0; ///< mean over devices of the share spent waiting for all-reduces
    std::vector<DeviceMetrics> devices;
    std::vector<StageMetrics> stages;
    std::size_t simulated_actions = 0;
    /// With more than one batch simulated (2BW, PipeDream, iterations > 1), in order: for the schedules that flush
    /// every batch, when its last optimizer step ended (after its last W and all-reduces); for the others, when
    /// its last microbatch finished its backward on the last stage. What the Gantt marks as batch boundaries.
    std::vector<double> batch_ends_s;

    bool fitsMemory() const;
};

struct SimulationOptions
{
    bool record_spans = true; ///< false: metrics only (faster; used by planners)
    bool record_memory = true;
    /// Checked every few thousand actions; a stop request ends the simulation with planner::Cancelled.
    std::stop_token stop = {};
};

/// @brief The device closest to (or furthest over) its memory capacity: what "peak memory" means in a summary.
struct MemoryPeak
{
    double peak_bytes = 0;
    double capacity_bytes = 0;
    double ratio = 0; ///< peak / capacity; > 1: does not fit
    bool over() const { return ratio > 1; }
};

/// The first device with the highest peak / capacity ratio; devices without a capacity or without memory in use
/// are passed over (all zero when none is left).
MemoryPeak worstMemory(const SimulationResult& result);

/// The metrics a plan records of its simulation (Plan::predicted).
PredictedMetrics predictedMetrics(const SimulationResult& result);

/// Throws InputError when the schedule deadlocks or does not match the plan.
SimulationResult simulate(const Plan& plan, const Schedule& schedule, const SimulationOptions& options = {});
/// The same under a given cost model (CostModel::fromPlan is the default); throws InputError when its sizes do not
/// match the plan.
SimulationResult simulate(
    const Plan& plan, const Schedule& schedule, const CostModel& cost, const SimulationOptions& options = {});
/// Generates the plan's schedule and simulates it (with tensor or context parallelism, through simulateGroupLeaders).
SimulationResult simulate(const Plan& plan, const SimulationOptions& options = {});
/// simulate(plan, schedule, cost, options) where `leaders` holds only the programs of the first device of each
/// model-parallel group (groupLeaderSchedule; the plan's t c consecutive devices of every stage): every member runs
/// its group's program, once for all. A group's transfer is booked slice by slice on its members' links and arrives
/// when the last slice does; every member gets its first device's spans, memory and metrics. simulate(plan, schedule,
/// cost) runs a full schedule the same way where every member's program and costs are its leader's (as
/// expandTensorParallel makes them), rank by rank otherwise.
SimulationResult simulateGroupLeaders(
    const Plan& plan, const Schedule& leaders, const CostModel& cost, const SimulationOptions& options = {});

/// Why simulateDataParallel must simulate `plan` whole (empty: it may simulate q of its d pipelines): its d
/// data-parallel pipelines (every stage's devices, t tensor-parallel ranks after another) are alike only when the
/// cluster is homogeneous, the q t devices of q pipelines of a stage are consecutive whole nodes (q = lcm(t, node
/// size) / t < d), the stages are in device order, the schedule is one of the kinds whose generators give every
/// replica the same program (1f1b, interleaved, zb-h1, zb-h2, zbv), the microbatches split evenly, the schedule runs
/// one batch (after an all-reduce the turns on a shared uplink may differ between pipelines: zb-h2 and zbv measure
/// two), and only metrics are recorded (no spans, no memory counters).
std::string dataParallelAsymmetry(const Plan& plan, const SimulationOptions& options = {});
/// simulate(plan, options) with the same metrics (iteration time, throughput, bubble, every device's and stage's
/// metrics) at q/d of the cost: where dataParallelAsymmetry is empty, it simulates q pipelines on as many nodes,
/// charging each data-parallel all-reduce as the whole group (CostModel::stage_rings), and gives every device the
/// metrics of its counterpart there. simulated_actions counts the actions actually simulated.
/// Otherwise simulate(plan, options).
SimulationResult simulateDataParallel(const Plan& plan, const SimulationOptions& options = {});
/// The costs of `plan` through q of its d data-parallel pipelines, where they cost alike (dataParallelAsymmetry's
/// conditions on the cluster and the layout, not those on the schedule): the cost model of the reduced plan (written
/// to `reduced`: q pipelines on as many nodes, simulateDataParallel's), with the optimizer state, ZeRO's shards and
/// FSDP's gathers of the whole group, for each model-parallel group's first device (CostModel::groupLeaderCosts). Every
/// group of a stage there costs what every group of the whole plan does, at q/(d t c) of fromPlan's work. nullopt
/// where they may not cost alike.
std::optional<CostModel> reducedCostModel(const Plan& plan, Plan& reduced);

} // namespace pw::planner
