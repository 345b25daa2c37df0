// SPDX-License-Identifier: MIT
// ScheduleTraits: what a schedule kind promises (updates, weight versions, stashes, steady state, the plans it
// accepts). The simulator, the memory model, the partitioners and the app ask these instead of comparing names.
#pragma once

#include <cstdint>
#include <string_view>

namespace pw::planner {

/// Weight versions a device keeps per stage at its peak.
enum class WeightVersions : std::uint8_t {
    One, ///< the update overwrites the only version (flushed schedules, HetPipe's local updates)
    Two, ///< the current version and the one in-flight microbatches still use (PipeDream-2BW)
    InFlight, ///< one per microbatch in flight: weight stashing (PipeDream)
};

/// Microbatches whose activations a replica of a stage stashes at once.
enum class StashDepth : std::uint8_t {
    Batch, ///< every microbatch of a batch (GPipe: all forwards before the backwards)
    InFlightInBatch, ///< the 1F1B in-flight count, at most the batch's microbatches (a flush bounds it)
    InFlight, ///< the 1F1B in-flight count: inputs stream across batches (no flush)
};

/// How many microbatches a replica of a stage admits before its first backward (the in-flight limit).
enum class InFlightLimit : std::uint8_t {
    Warmup, ///< the 1F1B warm-up: in_flight_factor x ceil(W_s / r_s) on stage s (or schedule.in_flight)
    ConcurrentMinibatches, ///< N_m on every stage (HetPipe: Plan::effectiveConcurrentMinibatches)
    /// The first stage's count on every stage: in_flight_factor x n_0 - (in_flight_factor - 1), n_0 the first
    /// stage's Warmup count (zero-bubble schedules: later stages defer their W until they hold as many; ZB-H1 p,
    /// ZB-H2 2p - 1 on a straight pipeline).
    FirstStage,
};

/// The window of a simulated run its iteration time is measured over.
enum class SteadyState : std::uint8_t {
    Makespan, ///< makespan / batches: every batch runs alike (fill and drain included)
    LastStagePace, ///< the last stage's pace after the fill, times a batch's microbatches (PipeDream)
    BatchToBatch, ///< the last stage from the end of the first batch to the end of the last, per batch (2BW)
};

/// Which plans with chunks > 1 (virtual stages) a kind runs.
enum class ChunkRule : std::uint8_t {
    None, ///< one chunk per device
    Any, ///< any chunk count (GPipe's all-forward-all-backward over chunks)
    WholeRounds, ///< Megatron's interleaving: equal replicas per stage, microbatches per copy a multiple of p
    /// Two chunks per device in a V (ZBV): virtual stage s on the devices of stage s for s < p and of stage
    /// 2p - 1 - s after; equal replicas per stage, any microbatch count they divide.
    V,
};

/// @brief The facts about a schedule kind that code outside its generator may rely on.
/// Generated schedules keep these promises: tests/planner/test_schedule_traits.cpp checks every generator of the
/// registry against its traits on the schedules it produces.
struct ScheduleTraits
{
    /// Batch b runs every microbatch with the weights of all updates before it (version b: no staleness); false
    /// for PipeDream, 2BW (one batch behind) and HetPipe.
    bool synchronous = true;
    /// A device finishes every backward of a batch before the next batch's first forward.
    bool flush_per_batch = true;
    /// An optimizer step follows every backward (PipeDream, HetPipe's local updates); else one per batch.
    bool update_per_backward = false;
    WeightVersions weight_versions = WeightVersions::One;
    /// The in-flight limit: which microbatches a replica stashes at once (see StashDepth).
    StashDepth stash = StashDepth::InFlightInBatch;
    InFlightLimit in_flight_limit = InFlightLimit::Warmup;
    /// Warmup: the default in-flight count of the 1F1B order is factor x ceil(W_s / r_s) (BaPipe's 1F1B-SO: 2).
    int in_flight_factor = 1;
    SteadyState steady_state = SteadyState::Makespan;
    /// Batches a plan simulates at least so that its steady state shows (Plan's steadyIterations).
    int min_iterations = 1;
    /// Every stage's replica count divides the inputs (microbatches x iterations).
    bool replicas_divide_inputs = false;
    /// Microbatches per batch >= the pipeline depth and >= every stage's replica count.
    bool batch_covers_pipeline = false;
    /// Microbatches per copy of the pipeline (per batch, over the replicas) >= its virtual stages (DualPipeV: 2p, as
    /// torch's ScheduleDualPipeV requires).
    bool batch_covers_virtual_stages = false;
    ChunkRule chunks = ChunkRule::None;
    /// Stages may have several data-parallel replicas (false: one device per stage, HetPipe's virtual workers).
    bool replicated_stages = true;
    /// Transfers stream out while the op producing them runs; every device type must set streaming_execution
    /// (BaPipe's asynchronous mode, 1F1B-AS).
    bool streams_transfers = false;
    /// Runs plans of several pipelines that synchronise per wave through parameter servers (HetPipe's WSP:
    /// WavePush / WavePull actions, staleness bound); every other kind runs one pipeline.
    bool wave_synchronous = false;
    /// Splits every backward into BackwardInput (I) and a later BackwardWeight (W) (the zero-bubble schedules of
    /// Qi et al. 2024); false: one fused Backward (B) per stage and microbatch.
    bool splits_backward = false;
    /// With every stage on the same number d of replicas, each replica of a stage runs the same program on its own
    /// microbatches (k, k + d, ...): the simulator may simulate a few of the d pipelines for all
    /// (simulateDataParallel; tests/planner/test_data_parallel_simulation.cpp compares it with the whole simulation).
    bool replicas_alike = false;

    bool operator==(const ScheduleTraits&) const = default;
};

/// The traits of a registered kind, or nullptr for an unknown one.
const ScheduleTraits* findScheduleTraits(std::string_view kind);
/// The traits of a registered kind; throws InputError naming the known kinds for an unknown one.
const ScheduleTraits& scheduleTraits(std::string_view kind);

} // namespace pw::planner
