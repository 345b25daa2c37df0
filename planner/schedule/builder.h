// SPDX-License-Identifier: MIT
// ScheduleBuilder: turns each device's compute order into actions, inserting transfers, all-reduces and steps.
// Internal to planner/: its algorithms and the white-box tests use it; other layers go through partitioner.h,
// generator.h and the registries.
#pragma once

#include <algorithm>
#include <functional>
#include <string_view>
#include <vector>

#include "generator.h"

namespace pw::planner {

// Semantics shared by every generator (docs/formats.md is written from this block).
//
// Stages and devices
// - plan.stages are virtual stages in model order, S = stages.size(), v = schedule.chunks, p = S / v.
//   Virtual stage s runs on the devices of stage s mod p; chunk c of physical stage r is s = c*p + r (zbv: in a V,
//   see below).
// - Microbatches carry a global 0-based id k over all batches (batch b holds ids b*m .. b*m+m-1).
//   Microbatch k of stage s runs on replica k mod r_s, device plan.stages[s].devices[k % r_s] (1F1B-RR).
// - Schedule::num_devices = cluster.deviceCount(); devices in no stage get empty lists.
//
// Transfers (stage = the stage whose compute produced the data, on both the send and the receive)
// - F(s,k), s > 0, is preceded by RecvActivation{stage s-1, k, peer = device of F(s-1,k)}; F(s,k), s < S-1,
//   is followed by SendActivation{stage s, k, peer = device of F(s+1,k)}.
// - B(s,k), s < S-1, is preceded by RecvGradient{stage s+1, k, peer = device of B(s+1,k)}; B(s,k), s > 0, is
//   followed by SendGradient{stage s, k, peer = device of B(s-1,k)}.
// - Transfers between two virtual stages on the same device are left out.
// - bytes = cutBytes(layer_order)[stages[s].last_layer] for the cut after stage s (both directions), times
//   microbatchScale(plan) (schedule.microbatch_size / profile microbatch_size when set).
//
// Updates
// - step(): for a stage with r_s > 1 an AllReduce{group, bytes = stage weight bytes}, for a stage holding weights
//   tied to another stage's (Plan::tiedWeightGroups: GPT-2's embedding and head) an AllReduce{the TiedWeights group
//   holding the device, bytes = ModelProfile::tiedWeightBytes() as gradients}, and then an OptimizerStep{weight_version
//   = the version it produces}. One CollectiveGroup per replicated virtual stage, then the tied weights' groups.
// - F/B weight_version: flush kinds use the batch index; "pipedream" the device's latest version when F runs
//   (B reuses it: weight stashing); "2bw" max(k/m - 1, 0).
//
// 1F1B order of one replica (oneFOneB): n_s = ceil(W_s / r_s) microbatches in flight, W_s = devices of
// physical stages s..p-1 (straight pipeline: n_s = p - s; NOAM = n_0), or schedule.in_flight[s] when given. warm =
// min(n_s - 1, count) forwards, then pairs F(warm+i), B(i), then the remaining backwards (Megatron's order).
//
// Kinds (iterations batches of m = schedule.microbatches; each replica runs its ids k mod r_s of a batch)
// - gpipe: per batch all F then all B, ids ascending (with chunks: F chunk 0..v-1, B chunk v-1..0); steps.
// - 1f1b: oneFOneB per batch, then the step (version batch+1). Rejects chunks > 1. This is BaPipe's 1F1B-SNO:
//   stage i of N (1-based) runs N-i warm-up forwards and keeps N-i+1 microbatches in flight.
// - 1f1b-so: as 1f1b with twice the in-flight count, 2 ceil(W_s / r_s) (BaPipe's 1F1B-SO: warm-up 2(N-i)+1,
//   2(N-i+1) in flight); schedule.in_flight, when given, is used as is.
// - 1f1b-as: the 1f1b order on streaming accelerators (every device type sets streaming_execution); the
//   simulator starts each transfer with the op producing it (ScheduleTraits::streams_transfers).
// - interleaved: chunks > 1: Megatron's interleaved order (interleaved.cpp) per data-parallel copy of the
//   pipeline (every stage on d replicas, (m / d) % p == 0);
//   chunks == 1: the 1f1b schedule. One step per virtual stage per batch.
// - pipedream: m * iterations inputs in one oneFOneB stream, a step after every B; inputs % r_s == 0.
// - 2bw: as pipedream, but a step only after a device's last B of each batch; m >= p and m >= r_s.
// - wsp: HetPipe (wsp.cpp). The plan's pipelines (virtual workers) each run microbatches x iterations
//   minibatches with local ids 0.. (a stage's neighbours are the stages of its own pipeline); FIFO order per
//   device from a simulation with predicted costs; a step after every B; WavePush / WavePull across
//   pipelines with schedule.staleness. One replica per stage.
// - zb-h1, zb-h2 (zb_h1.cpp, zb_h2.cpp): zeroBubbleOrder per replica and batch, then the step: every backward split
//   into BackwardInput (I, with B's transfers) and a later BackwardWeight (W); one chunk.
// - zbv (zbv.cpp): two chunks per device in a V (ChunkRule::V): virtual stage s >= p runs on the devices of stage
//   2p - 1 - s instead of s mod p (Plan::validate accepts either placement with two chunks; the builder requires
//   the one its kind runs). torch.distributed.pipelining's ZBV order per device and copy of the V, then both
//   chunks' steps; every stage on the same number of replicas, which divides the microbatches.
// - dualpipev (dualpipev.cpp): the V of zbv, in torch.distributed.pipelining's ScheduleDualPipeV order per device
//   and copy of the V (at least 2p microbatches per copy): its steady state pairs a forward of one chunk with a full
//   backward of the other (F&B, Action::overlaps_next on the forward), the warm-up and the tail split some
//   backwards into I and W.
//
// Validation (validator.cpp): every (s,k) has one F and one B on device of (s,k), F first, same version;
// every F/B input arrives through a receive placed before it (or an earlier compute on the same device);
// sends and receives pair up one to one; F versions exist when used; all-reduce counts agree per group;
// an abstract run (sends never block, receives wait for their send, all-reduces for every member) finishes.
// max_outstanding_sends is the peak of a device's unreceived sends in that run, which lets each device run
// as far as it can before the next one moves (an eager, worst-case-leaning order).

// Tensor parallelism (plan.tensor_parallel = t > 1; tensor_parallel.cpp)
// - generateSchedule() runs the generator on the logical plan tensorParallelRankPlan(plan, 0): every stage
//   keeps the first device of each run of t (its group's rank 0); then expandTensorParallel() gives rank j
//   of every group a copy of its group's list, with peers mapped to rank j of the peer group, transfer
//   bytes / t (Megatron's scatter/gather: each rank sends its slice, the receiver all-gathers over its
//   group's links, which is left out of the cost) and all-reduce group g * t + j among the rank-j replicas
//   with bytes / t (each rank holds 1/t of the weights). The tensor-parallel all-reduces inside F and B
//   are costs of those actions (costs.h), not actions.
// - validate() checks each rank's view (tensorParallelRankPlan(plan, j) with the other ranks' lists
//   emptied) and that the ranks of a group run the same F/B sequence (they meet in every all-reduce).

/// Expands a schedule generated for tensorParallelRankPlan(plan, 0) to all ranks (see above).
Schedule expandTensorParallel(const Schedule& logical, const Plan& plan);
/// expandTensorParallel with the programs of every group's first device alone (the other members' lists empty, every
/// group of collectives whole): what the simulator runs (simulateGroupLeaders), without t c copies of every program.
Schedule groupLeaderSchedule(const Schedule& logical, const Plan& plan);

/// @brief Per-plan facts the generators share, and the per-device action lists being built.
class ScheduleBuilder
{
public:
    /// Checks the plan (stages, interleaving, devices) and sizes the schedule; throws InputError.
    ScheduleBuilder(const Plan& plan, std::string_view kind);

    int stageCount() const { return m_stages; }
    int depth() const { return m_depth; }
    int chunks() const { return m_chunks; }
    int microbatchesPerBatch() const { return m_perBatch; }
    int batches() const { return m_batches; }
    int totalMicrobatches() const { return m_perBatch * m_batches; }
    int replicas(int stage) const { return static_cast<int>(m_devices[stage].size()); }
    int device(int stage, int replica) const { return m_devices[stage][replica]; }
    int deviceOf(int stage, int microbatch) const
    {
        const auto& d = m_devices[stage];
        return d[static_cast<std::size_t>(microbatch) % d.size()];
    }
    bool replicated() const;
    /// Microbatches in flight on a replica of `stage` in steady 1F1B: ceil(W_s / r_s).
    int inFlight(int stage) const;

    /// Appends F(stage, microbatch) to its device with the receive before and the send after it.
    void forward(int stage, int microbatch, int version);
    /// Appends an F&B pair (DualPipeV, torch's OVERLAP_F_B): F(fstage, fmb) marked Action::overlaps_next, then the
    /// backward of (bstage, bmb), fused or its I (`input`), as one unit: both receives before F, both sends after the
    /// backward (the pair starts once both inputs are there, as torch's runtime posts them).
    void forwardBackward(int fstage, int fmb, int bstage, int bmb, int version, bool input = false);
    /// Appends B(stage, microbatch) to its device with the receive before and the send after it.
    void backward(int stage, int microbatch, int version);
    /// Appends I(stage, microbatch), the input-gradient half of a split backward, with the gradient's receive
    /// before and its send after it (the transfers of B).
    void backwardInput(int stage, int microbatch, int version);
    /// Appends W(stage, microbatch), the weight-gradient half: no transfers.
    void backwardWeight(int stage, int microbatch, int version);
    /// Appends the AllReduces (replicated stages, tied weights) and the OptimizerStep producing `version` on
    /// `device`.
    void step(int device, int stage, int version);
    /// Appends the tied weights' AllReduce of `stage` on `device` when it holds some (step() does; "wsp" appends
    /// its own steps).
    void tiedAllReduce(int device, int stage);

    /// Takes the built lists (the builder is spent).
    Schedule finish();
    /// Appends an action as it is (wsp's wave push and pull).
    void append(int device, const Action& action) { push(device, action); }
    /// Bytes crossing the cut after `stage` per microbatch (0 after the last stage of a pipeline).
    double cutBytes(int stage) const { return m_cutBytes[stage]; }
    double weightBytes(int stage) const { return m_weightBytes[stage]; }

private:
    void push(int device, const Action& action) { m_schedule.devices[device].push_back(action); }

    Schedule m_schedule;
    int m_stages = 0;
    int m_depth = 0;
    int m_chunks = 1;
    int m_perBatch = 0;
    int m_batches = 0;
    std::vector<std::vector<int>> m_devices; ///< per virtual stage
    std::vector<double> m_cutBytes; ///< per virtual stage: bytes crossing the cut after it
    std::vector<double> m_weightBytes; ///< per virtual stage
    double m_gradientScale = 1; ///< gradient bytes per weight byte
    std::vector<int> m_group; ///< per virtual stage: index into groups, -1 when not replicated
    std::vector<std::vector<int>> m_tied; ///< per virtual stage: indices into groups of its tied weights' all-reduces
    double m_tiedBytes = 0; ///< the tied weights' gradient bytes
    std::vector<int> m_inFlight; ///< per virtual stage
    std::vector<bool> m_first, m_last; ///< per stage: first / last of its pipeline (several only with "wsp")
};

/// @brief The copies of a V (ChunkRule::V: zbv, dualpipev) a plan runs: replicated stages are `copies` equal copies of
/// the V, copy j running the microbatches k with k mod copies == j (the builder's deviceOf), `local` of them per batch.
struct VCopies
{
    int copies = 1;
    int local = 0;
};
/// Checks that `b`'s plan runs two chunks per device with the same replica count on every stage, which divides the
/// microbatches; throws InputError naming the field and `kind`.
VCopies vCopies(const ScheduleBuilder& b, std::string_view kind);

/// @brief One compute action of a device's program in a V (ChunkRule::V): chunk 0 is virtual stage `rank`, chunk 1
/// virtual stage 2p - 1 - rank; `microbatch` counts within the copy of the V. A Forward with `paired` >= 0 is an
/// F&B pair (DualPipeV): the forward with the other chunk's fused backward of microbatch `paired`.
struct VAction
{
    int chunk = 0;
    ActionKind kind = ActionKind::Forward;
    int microbatch = 0;
    int paired = -1;

    bool operator==(const VAction&) const = default;
};
/// One program per rank of the V, in order.
using VPrograms = std::vector<std::vector<VAction>>;

/// Builds a V kind's schedule (zbv, dualpipev, v-half, v-min): `programs(p, count)` orders every rank's actions
/// over `count` microbatches per copy of the V; they run for every copy (vCopies) and batch, each batch followed by
/// both chunks' steps.
Schedule buildV(const Plan& plan, std::string_view kind, const std::function<VPrograms(int p, int count)>& programs);

/// Idle time per device and batch when `ranks` run with every chunk's passes at half `times` (two chunks per
/// device), nothing transferred: the makespan less a device's work. Every pass waits for its input (the previous
/// virtual stage's forward or input gradient of its microbatch) and its rank's previous pass.
double vProgramBubble(const VPrograms& ranks, const UniformStageTimes& times);
/// Activation bytes `program` holds at its peak: `stash` from each forward to its W (or fused backward), `kept`
/// from each input gradient to its W (the simulator's accounting).
double vProgramPeakActivationBytes(const std::vector<VAction>& program, double stash, double kept);

/// Global ids k in [begin, end) with k mod replicas == replica, in increasing order.
std::vector<int> replicaMicrobatches(int begin, int end, int replica, int replicas);

/// The 1F1B order over `count` microbatches: warm forwards, pairs F(warm+i) B(i), then the remaining
/// backwards. fwd(i) and bwd(i) receive local indices 0..count-1.
template <class Fwd, class Bwd> void oneFOneB(int count, int warm, Fwd&& fwd, Bwd&& bwd)
{
    if (warm > count)
        warm = count;
    for (int i = 0; i < warm; ++i)
        fwd(i);
    for (int i = 0; i < count - warm; ++i) {
        fwd(warm + i);
        bwd(i);
    }
    for (int i = count - warm; i < count; ++i)
        bwd(i);
}

/// The zero-bubble order (Qi et al. 2024) over `count` microbatches: `warm` forwards, then pairs F(warm+i) I(i),
/// each followed by W(w) of the oldest microbatch whose W is pending once more than `defer` are; then the
/// remaining I, each followed by the oldest pending W; then the last W. fwd, in and wt receive local indices.
template <class Fwd, class In, class Wt>
void zeroBubbleOrder(int count, int warm, int defer, Fwd&& fwd, In&& in, Wt&& wt)
{
    warm = std::min(warm, count);
    int w = 0; // next W
    for (int i = 0; i < warm; ++i)
        fwd(i);
    for (int i = 0; i < count - warm; ++i) {
        fwd(warm + i);
        in(i);
        if (i - w >= defer)
            wt(w++);
    }
    for (int i = count - warm; i < count; ++i) {
        in(i);
        wt(w++);
    }
    while (w < count)
        wt(w++);
}

/// ZB-H1 (h2 false) and ZB-H2 (h2 true) with a flush after every batch (zb_h1.cpp).
Schedule generateZeroBubble(const Plan& plan, std::string_view kind, bool h2);

/// 1F1B with a flush after every batch: "1f1b", and "interleaved" with one chunk.
Schedule generateFlushedOneFOneB(const Plan& plan, std::string_view kind);

// The built-in generators, listed by registry.cpp.
const ScheduleGenerator& gpipeGenerator();
const ScheduleGenerator& oneFOneBGenerator();
const ScheduleGenerator& pipedreamGenerator();
const ScheduleGenerator& twoBwGenerator();
const ScheduleGenerator& interleavedGenerator();
const ScheduleGenerator& oneFOneBSoGenerator();
const ScheduleGenerator& oneFOneBAsGenerator();
const ScheduleGenerator& wspGenerator(); ///< HetPipe's FIFO pipelines under wave synchronous parallel
const ScheduleGenerator& zbH1Generator(); ///< zero bubble at 1F1B's memory (Qi et al. 2024)
const ScheduleGenerator& zbH2Generator(); ///< zero bubble at about twice 1F1B's activations
const ScheduleGenerator& zbvGenerator(); ///< two chunks per device in a V: zero bubble at 1F1B's memory
const ScheduleGenerator& dualPipeVGenerator(); ///< DualPipeV: a V whose steady state pairs F of one chunk with B
const ScheduleGenerator& vHalfGenerator(); ///< V-Half: a V at half of 1F1B's activations
const ScheduleGenerator& vMinGenerator(); ///< V-Min: a V at a third of 1F1B's activations

} // namespace pw::planner
