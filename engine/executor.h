// SPDX-License-Identifier: MIT
// The stage executor: runs one device's action list of a planner Schedule with the real model. Forwards stash
// activations until their backward (zero-bubble schedules: until the W that follows their I); backwards use the
// weight version the schedule names (PipeDream's weight
// stashing, 2BW's double buffering and the flushed schedules' single version all follow from the actions'
// weight_version fields); all-reduces sum a stage's gradients over its replicas; optimizer steps apply AdamW.
// HetPipe's wave synchronous parallel (schedule "wsp"): every pipeline (virtual worker) trains on its own data
// with local updates; a WavePush sends the sum of the stage's updates of one wave to the devices of the other
// pipelines that hold the same layers (a parameter server spread over the devices: each keeps its own copy of
// the global weights), and a WavePull blocks until every other pipeline's update of that wave (and of any earlier
// wave not pulled yet) has arrived, then adds them to the local weights: w_local = w_0 + the pulled waves of every
// pipeline + this pipeline's own updates not yet covered (digest §1.2.5).
// Each of these features owns its state and its steps (stage_features.h: WeightVersions, Stashes, GradientBuckets,
// TiedCopies, Waves); the executor composes them per stage and runs the actions in order.
#pragma once

#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "adamw.h"
#include "backend.h"
#include "data.h"
#include "model.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "planner/timeline.h"
#include "transport.h"

namespace pw::engine {

/// @brief What a run trains, shared by every device of the run.
struct TrainingSetup
{
    ModelConfig model;
    BatchShape shape;
    /// Microbatches per step over the whole plan: the schedule's m times the pipelines (HetPipe's virtual
    /// workers each take their own m); the data order cuts every step into this many.
    int microbatches = 1;
    AdamWOptions adam;
    std::uint64_t seed = 1234; ///< initialisation when there is no checkpoint
    std::shared_ptr<const std::vector<float>> checkpoint; ///< llm.c's flat parameters, or null
    /// fp32, or bf16 mixed (bf16 weights, gradients and activations, fp32 master weights and moments: the plan's
    /// bf16 weights with bf16 gradients, 16 B per parameter); every device's backend trains in it.
    Precision precision = Precision::Fp32;
    /// The replicas' all-reduce is posted in buckets of about this many bytes of gradients during the backward of
    /// the stage's last microbatch before it, as each bucket's layers finish (the planner's cost model overlaps the
    /// all-reduce with that backward); the AllReduce action then waits for them.
    std::size_t bucket_bytes = std::size_t {25} << 20;
    /// What the blocks recompute before their backward instead of keeping it (the plan's schedule.recompute).
    planner::Recompute recompute = planner::Recompute::None;

    bool operator==(const TrainingSetup&) const = default;
};

/// Where a run's devices train: the CPU backend (fp32 only), or CUDA GPUs (fp32 or bf16 mixed).
enum class TrainsOn : std::uint8_t { Cpu, Cuda };

/// The one place that says which of a plan's settings the engine honours (the controller, pre-flight and the agent
/// all ask it through trainingSetup): fp32 weights and gradients, or on CUDA bf16 weights with bf16 gradients (mixed
/// precision, fp32 master weights), AdamW ("adam"), the full optimizer state on every replica, any recomputation
/// (none, selective, full), GPT-2's or Llama's block, the profile's layer order, tensor parallelism whose t divides
/// heads, key/value heads, MLP and vocabulary. Anything else throws InputError naming the plan's field (e.g.
/// "/schedule/precision"), its value and the fix, instead of being trained otherwise than the prediction assumed.
/// Returns the precision the run trains in.
Precision checkEngineHonours(const planner::Plan& plan, TrainsOn where = TrainsOn::Cpu);
/// The run's model shape from a plan made with `profile transformer`; throws InputError with the reason when the
/// plan carries none, its layers do not match, or it uses what the engine does not run (checkEngineHonours).
TrainingSetup trainingSetup(const planner::Plan& plan, TrainsOn where = TrainsOn::Cpu);
/// The run's input files checked against `setup` (trainingSetup) before anything starts, without reading a
/// checkpoint's parameters: the checkpoint's header (magic, version, size) and shape (layers, channels, heads,
/// vocab, maxT), the token or text file's header, its ids inside the vocabulary and at least one microbatch of
/// tokens. Throws InputError naming the file and the field. `init` empty: no checkpoint.
void checkRunInputs(const TrainingSetup& setup, const DataSpec& data, const std::filesystem::path& init);
/// The plan with schedule.iterations = steps, and its schedule (what every device of the run executes).
planner::Schedule runSchedule(const planner::Plan& plan, int steps);

/// @brief A run's schedule without writing out every step: `period` executed `repeats` times, repeat r shifting
/// microbatches by r x period.microbatches and the versions of compute actions by r (repeatedAction). For a schedule
/// that flushes every step the period is one step, so a run of a million steps holds one step's actions; other
/// schedules (PipeDream, 2BW: a steady state that never drains) are the whole run once.
struct RunSchedule
{
    planner::Schedule period;
    int repeats = 1;

    std::size_t actionCount() const { return period.actionCount() * static_cast<std::size_t>(repeats); }
    bool operator==(const RunSchedule&) const = default;
};
/// Action `a` of the period as repeat `r` executes it.
planner::Action repeatedAction(const planner::Action& a, int repeat, int periodMicrobatches);
/// The run's schedule: one step repeated when the generator's two steps are exactly its one step twice (checked,
/// not assumed), else runSchedule(plan, steps) once.
RunSchedule runProgram(const planner::Plan& plan, int steps);

/// Seconds on this host's monotonic clock (CLOCK_MONOTONIC: shared by every process of the host), the clock of
/// the spans an executor reports; whoever collects them subtracts the run's start.
double monotonicSeconds();

/// The collective groups of a plan, in one order every device agrees on: the devices of each replicated stage that
/// hold the same tensor share (its all-reduce), then per pipeline the groups that sum the tied embedding's gradient
/// (Plan::tiedWeightGroups; with tensor parallelism each rank's), then each stage's tensor-parallel groups. Every
/// device passes this list to Transport::makeGroups before its first step.
std::vector<std::vector<int>> collectiveGroups(const planner::Plan& plan);

/// @brief Where an executor reports what it did. Called on the executor's thread.
struct ExecutorSink
{
    /// Before each action: what it is about to do (device, lane, kind, stage, microbatch, run's action index, peer,
    /// weight version, bytes it moves), t0 when it begins (monotonicSeconds()), t1 = 0. For a device's progress and
    /// for naming what a stalled device waits for.
    std::function<void(const planner::Span& planned)> begin;
    /// After each action, with the device's times (on the backend's timer; its spans may come a little later).
    std::function<void(const planner::Span&)> span;
    /// The mean loss of microbatch `microbatch` (global id over the plan's pipelines: step = id /
    /// TrainingSetup::microbatches), on devices holding the head.
    std::function<void(int microbatch, float loss)> loss;
    /// After each optimizer step of virtual stage `stage`: the version it produced.
    std::function<void(int stage, int version)> step;
};

/// @brief One device of a run, on one backend: its stages' weights, gradients, optimizer moments, stashed
/// activations and weight versions live on the backend's device; the executor calls only the backend and a
/// Transport, whichever they are. Spans are the device's times (the backend's ActionTimer); losses stay on
/// the device until one read-back per optimizer step, started at the step and taken at the next (and at the end),
/// when the sink hears them in order: a step late, so that the host never waits for the device to learn them.
class DeviceExecutor
{
public:
    /// Executes `schedule` `repeats` times (RunSchedule); span action indices count over the whole run. `backend`
    /// null: a CPU backend of its own. Transfers go over `transport`, through host memory (throughHost) unless it
    /// reaches the backend's memory itself. Its groups are made (makeGroups) when run() begins.
    DeviceExecutor(const planner::Plan& plan, const planner::Schedule& schedule, int device, const TrainingSetup& setup,
        const DataOrder& data, Transport& transport, ExecutorSink sink, int repeats = 1,
        std::shared_ptr<Backend> backend = nullptr);
    ~DeviceExecutor();

    /// Runs every action in order; returns early (false) when `stop` becomes true between actions.
    /// Throws TransportError, InputError or std::runtime_error on failure.
    bool run(const std::atomic<bool>& stop);

    /// The parameters of each virtual stage this device holds (stage -> model), for checkpoints and tests.
    const std::map<int, std::unique_ptr<StageModel>>& stages() const { return m_models; }
    Backend& backend() const { return *m_backend; }

private:
    struct StageState;
    void execute(const planner::Action& a, std::int64_t runIndex, std::int64_t key);
    /// Posts the run of consecutive transfers from action `i` of the period (repeat `r`) as one grouped exchange.
    void postExchange(std::size_t i, int r);
    planner::Span planned(const planner::Action& a, std::int64_t runIndex, double bytes) const;
    /// What transfer action `a` moves (before its exchange is posted).
    double transferBytes(const planner::Action& a) const;
    static bool isTransfer(planner::ActionKind kind);
    void forward(const planner::Action& a, std::int64_t key);
    /// B, or I (its input half: zero-bubble schedules), then W (weightGradient) from what the I kept.
    void backward(const planner::Action& a, std::int64_t key);
    void weightGradient(const planner::Action& a);
    /// Sums the two copies of wte when this device holds both (ZBV's V), once per step.
    void tiedLocal(StageState& st);
    void optimizerStep(const planner::Action& a);
    /// The distributed optimizer: the stage's replicas all-gather the shards each stepped.
    void gatherShards(StageState& st);
    double wavePush(const planner::Action& a);
    double wavePull(const planner::Action& a);
    /// Whether `a` is the all-reduce of a TiedWeights group.
    bool tiedAllReduce(const planner::Action& a) const;
    const void* weightsFor(StageState& st, std::int64_t key, const char* what, int microbatch);
    /// Hands the losses read back so far to the sink (one download, which waits for the device), and the finished
    /// actions' spans.
    void flushLosses();
    /// Hands the previous step's losses to the sink (landed by now) and starts reading back this step's.
    void readLossesLater();
    void deliverLosses();
    void flushSpans(bool wait);
    StageState& state(int stage);
    /// The data's microbatch id of this device's pipeline's microbatch `local` (= local with one pipeline).
    int globalMicrobatch(int local) const;
    /// Elements of an activation or gradient between stages (a tensor rank's 1/t of B T C).
    std::size_t boundaryCount() const;

    const planner::Plan& m_plan;
    const planner::Schedule& m_schedule;
    int m_device;
    int m_repeats = 1;
    TrainingSetup m_setup;
    const DataOrder& m_data;
    std::shared_ptr<Backend> m_backend;
    std::unique_ptr<Transport> m_staged; ///< throughHost(transport), when the transport does not reach the backend
    Transport* m_transport = nullptr; ///< what the executor speaks: the transport, or m_staged
    std::vector<std::vector<int>> m_groups; ///< collectiveGroups(plan)
    /// The posted exchange's handles and bytes, one per transfer action from the one being executed on.
    std::deque<std::pair<Handle, double>> m_exchange;
    std::deque<Handle> m_sends; ///< posted sends not waited for (a bounded number in flight)
    std::unique_ptr<ActionTimer> m_timer;
    ExecutorSink m_sink;
    std::map<std::uint64_t, planner::Span> m_openSpans; ///< by timer ticket, until the device's times are known
    Buffer m_losses; ///< the head's microbatch losses since the last read-back (fp32, on the device)
    std::vector<int> m_lossIds; ///< their global microbatch ids
    /// The last step's losses on their way to the host, and their ids (the sink hears them a step late).
    std::pair<std::unique_ptr<HostCopy>, std::vector<int>> m_pendingLosses;
    std::vector<std::int32_t> m_tokens, m_targets; ///< host staging of one microbatch's data
    /// Whether this device's head reports the losses: tensor rank 0 of its group (the others compute the same).
    bool m_reportsLosses = true;
    Buffer m_otherLoss; ///< where another tensor rank's head writes its copy of the loss
    float m_lossScale = 1.0f;
    int m_index = 0; ///< the action running
    int m_pipeline = 0; ///< this device's pipeline (virtual worker)
    int m_pipelines = 1;
    int m_concurrent = 1; ///< N_m: microbatches per wave (wsp)
    /// Per action of the period (forward, backward): which weights it uses. The schedule's version, and with
    /// wave pulls the pulls before it (a pull changes the weights without a new version): pulls << 32 | version.
    std::vector<std::int64_t> m_keys;
    std::vector<int> m_lastPull; ///< per device of the schedule: the last wave it pulls (-1: none)
    std::map<int, std::unique_ptr<StageModel>> m_models;
    std::map<int, std::unique_ptr<StageState>> m_states;
    /// Activations and input gradients by (producing stage, microbatch): sent, or consumed on this device.
    std::map<std::pair<int, int>, Buffer> m_activations;
    std::map<std::pair<int, int>, Buffer> m_gradients;
    std::vector<int> m_tiedGroup; ///< this device's group of Plan::tiedWeightGroups, empty when it is in none
    /// Per action of the period: a backward (or W) after which its stage's AllReduce comes with no other backward of
    /// the stage between (its gradients are then final as each layer finishes: they are all-reduced in buckets).
    std::vector<char> m_bucketed;
};

} // namespace pw::engine
