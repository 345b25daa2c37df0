// SPDX-License-Identifier: MIT
// DeviceExecutor (executor.h): one device's actions of a run; the run's setup is in run_setup.cpp.
#include "executor.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/schedule/traits.h"
#include "stage_features.h"

namespace pw::engine {

using planner::Action;
using planner::ActionKind;
using planner::InputError;

// ---------------------------------------------------------------------------------------------------------------

/// @brief One virtual stage on this device: its model and optimizer, and the schedule's features it runs.
struct DeviceExecutor::StageState
{
    StageModel* model = nullptr;
    std::unique_ptr<AdamW> adam;
    int steps = 0; ///< optimizer steps taken (AdamW's t - 1)
    WeightVersions versions;
    Stashes stashes;
    GradientBuckets buckets;
    TiedCopies tied;
    std::unique_ptr<Waves> waves; ///< HetPipe's (schedule "wsp"), or null
    std::unique_ptr<TensorGroup> tensors; ///< the stage's tensor-parallel group's collectives, or null
    std::unique_ptr<TensorGroup> holders; ///< its ranks holding the same key/value heads, when they are several

    StageState(StageModel& m, std::vector<int> replicas, OptimizerShard shard)
        : model(&m)
        , adam(std::make_unique<AdamW>(m, shard))
        , buckets(std::move(replicas))
        , sharded(shard.count > 1)
    {
    }

    bool sharded = false; ///< the distributed optimizer: this replica steps its shard, the replicas all-gather
};

namespace {

int tensorRanks(const planner::Plan& plan)
{
    return std::max(1, plan.tensor_parallel);
}

/// Where `device` is among a stage's devices (the plan's order: replica, then tensor rank), or -1.
int placeIn(const planner::PlanStage& ps, int device)
{
    const auto at = std::find(ps.devices.begin(), ps.devices.end(), device);
    return at == ps.devices.end() ? -1 : static_cast<int>(at - ps.devices.begin());
}

/// The stage's devices of tensor rank `rank` (every replica's): they hold the same share and sum its gradients.
std::vector<int> sameShare(const planner::PlanStage& ps, int rank, int t)
{
    std::vector<int> out;
    for (std::size_t i = static_cast<std::size_t>(rank); i < ps.devices.size(); i += static_cast<std::size_t>(t))
        out.push_back(ps.devices[i]);
    return out;
}

/// The tensor-parallel group of the stage's device at `place`: the t consecutive entries holding it.
std::vector<int> tensorGroupOf(const planner::PlanStage& ps, int place, int t)
{
    const auto first = ps.devices.begin() + (place / t) * t;
    return {first, first + t};
}

} // namespace

std::vector<std::vector<int>> collectiveGroups(const planner::Plan& plan)
{
    std::vector<std::vector<int>> groups;
    const auto add = [&](std::vector<int> g) {
        std::sort(g.begin(), g.end());
        if (g.size() >= 2 && std::find(groups.begin(), groups.end(), g) == groups.end())
            groups.push_back(std::move(g));
    };
    const int t = tensorRanks(plan);
    for (const auto& ps : plan.stages)
        for (int rank = 0; rank < t; ++rank)
            add(sameShare(ps, rank, t));
    if (t == 1) {
        for (int p = 0; p < plan.pipelineCount(); ++p)
            for (auto& g : plan.tiedWeightGroups(p))
                add(std::move(g));
    } else { // each tensor rank's share of the tied embedding: the logical plan's groups, rank by rank
        for (int rank = 0; rank < t; ++rank) {
            const planner::Plan logical = planner::tensorParallelRankPlan(plan, rank);
            for (int p = 0; p < logical.pipelineCount(); ++p)
                for (auto& g : logical.tiedWeightGroups(p))
                    add(std::move(g));
        }
        // The groups, then within each the ranks sharing key/value heads (fewer heads than ranks).
        int holders = 1; // the ranks holding one key/value head (TensorShare's rule, as the families split k, v)
        if (const auto& arch = plan.model->architecture)
            holders = TensorShare {TensorSplit::Rows, 1, ModelConfig::fromTransformer(*arch).kvHeads()}.holders(t);
        for (const auto& ps : plan.stages)
            for (std::size_t g = 0; g + static_cast<std::size_t>(t) <= ps.devices.size();
                 g += static_cast<std::size_t>(t))
                add(tensorGroupOf(ps, static_cast<int>(g), t));
        for (const auto& ps : plan.stages)
            for (std::size_t g = 0; holders > 1 && g + static_cast<std::size_t>(holders) <= ps.devices.size();
                 g += static_cast<std::size_t>(holders))
                add({ps.devices.begin() + static_cast<long>(g), ps.devices.begin() + static_cast<long>(g + holders)});
    }
    return groups;
}

DeviceExecutor::DeviceExecutor(const planner::Plan& plan, const planner::Schedule& schedule, int device,
    const TrainingSetup& setup, const DataOrder& data, Transport& transport, ExecutorSink sink, int repeats,
    std::shared_ptr<Backend> backend)
    : m_plan(plan)
    , m_schedule(schedule)
    , m_device(device)
    , m_repeats(repeats)
    , m_setup(setup)
    , m_data(data)
    , m_backend(backend ? std::move(backend) : std::shared_ptr<Backend>(makeCpuBackend()))
    , m_staged(transport.reaches(*m_backend) ? nullptr : throughHost(transport, *m_backend))
    , m_transport(m_staged ? m_staged.get() : &transport)
    , m_groups(collectiveGroups(plan))
    , m_timer(m_backend->makeTimer())
    , m_sink(std::move(sink))
{
    const auto& traits = planner::scheduleTraits(plan.schedule.kind);
    // The step's loss is the mean of its microbatches' means; a kind that updates after every backward trains
    // each microbatch on its own loss.
    m_lossScale = traits.update_per_backward ? 1.0f : 1.0f / static_cast<float>(plan.schedule.microbatches);
    m_pipelines = plan.pipelineCount();
    m_concurrent = plan.effectiveConcurrentMinibatches();
    const auto& actions = schedule.devices.at(static_cast<std::size_t>(device));
    m_lastPull.assign(static_cast<std::size_t>(schedule.num_devices), -1);
    bool waves = false;
    for (int d = 0; d < schedule.num_devices; ++d)
        for (const auto& a : schedule.devices[static_cast<std::size_t>(d)])
            if (a.kind == ActionKind::WavePull || a.kind == ActionKind::WavePush) {
                waves = true;
                if (a.kind == ActionKind::WavePull)
                    m_lastPull[static_cast<std::size_t>(d)] = std::max(m_lastPull[static_cast<std::size_t>(d)], a.wave);
            }
    if (waves && repeats != 1)
        throw std::logic_error("a schedule with wave pushes and pulls runs once, not as a repeated period");
    // Keys: forwards use the live weights (version, pulls so far); backwards the weights of their forward.
    m_keys = WeightVersions::actionKeys(actions);
    // The backward before each AllReduce of its stage (none of the stage's between): its buckets go out early. With
    // the backward split, a layer's gradients are final after its W: the last W before the AllReduce posts them.
    m_bucketed.assign(actions.size(), 0);
    {
        std::map<int, std::size_t> lastBackward; // stage -> the period index of its latest backward
        for (std::size_t i = 0; i < actions.size(); ++i) {
            const auto& a = actions[i];
            if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight)
                lastBackward[a.stage] = i;
            else if (a.kind == ActionKind::AllReduce && !tiedAllReduce(a)) {
                const int stage = schedule.groups.at(static_cast<std::size_t>(a.group)).stage;
                if (auto it = lastBackward.find(stage); it != lastBackward.end()) {
                    m_bucketed[it->second] = 1;
                    lastBackward.erase(it);
                }
            }
        }
    }
    int myPipeline = -1;
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& ps = plan.stages[static_cast<std::size_t>(s)];
        if (std::find(ps.devices.begin(), ps.devices.end(), device) != ps.devices.end())
            myPipeline = ps.pipeline;
    }
    m_pipeline = std::max(0, myPipeline);
    // The tied embedding's group of this device, when it holds one copy and other devices the other: the schedule
    // must sum it (an AllReduce of a TiedWeights group before the step), else the copies would drift apart. With
    // tensor parallelism, the groups of this device's tensor rank (each rank's share of the embedding).
    const int t = tensorRanks(plan);
    int rank = 0;
    for (const auto& ps : plan.stages)
        if (const int place = placeIn(ps, device); place >= 0)
            rank = place % t;
    const planner::Plan rankPlan = t > 1 ? planner::tensorParallelRankPlan(plan, rank) : planner::Plan {};
    for (const auto& g : (t > 1 ? rankPlan : plan).tiedWeightGroups(m_pipeline))
        if (std::find(g.begin(), g.end(), device) != g.end())
            m_tiedGroup = g;
    if (!m_tiedGroup.empty()) {
        const bool summed
            = std::any_of(actions.begin(), actions.end(), [&](const Action& a) { return tiedAllReduce(a); });
        if (!summed)
            throw InputError({}, 0, "/schedule",
                "device " + std::to_string(device)
                    + " holds one copy of the tied embedding, but its schedule has no all-reduce of a tied_weights "
                      "group: the schedule was made by an older planner; plan it again");
    }
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& ps = plan.stages[static_cast<std::size_t>(s)];
        if (ps.pipeline != m_pipeline || std::find(ps.devices.begin(), ps.devices.end(), device) == ps.devices.end())
            continue;
        const int place = placeIn(ps, device);
        const TensorParallel tp {place % t, t, t > 1 && plan.schedule.sequence_parallel};
        auto model
            = std::make_unique<StageModel>(setup.model, setup.shape, ps.first_layer, ps.last_layer, *m_backend, tp);
        model->setRecompute(setup.recompute);
        if (setup.checkpoint)
            model->loadFrom(*setup.checkpoint);
        else
            model->initialise(setup.seed);
        // Megatron's distributed optimizer: each replica of the same share steps its shard of the parameters.
        const std::vector<int> replicas = sameShare(ps, tp.rank, t);
        OptimizerShard shard;
        if (plan.schedule.distributed_optimizer)
            shard = {static_cast<int>(std::find(replicas.begin(), replicas.end(), device) - replicas.begin()),
                static_cast<int>(replicas.size())};
        auto st = std::make_unique<StageState>(*model, replicas, shard);
        if (tp.on()) {
            const std::vector<int> group = tensorGroupOf(ps, place, t);
            st->tensors = transportGroup(*m_transport, *m_backend, group, tp.rank);
            // The ranks holding the same key/value heads (fewer than t): h in a row of the group.
            if (const int h = model->sharedHolders(); h > 1) {
                const auto first = group.begin() + tp.rank / h * h;
                st->holders = transportGroup(*m_transport, *m_backend, {first, first + h}, tp.rank % h);
            }
            model->setTensorGroups(st->tensors.get(), st->holders.get());
        }
        m_reportsLosses = m_reportsLosses && (!model->hasHead() || tp.rank == 0);
        // The actions that read the weights (a W reads activations and gradients only).
        for (std::size_t i = 0; i < actions.size(); ++i)
            if (actions[i].stage == s
                && (actions[i].kind == ActionKind::Forward || actions[i].kind == ActionKind::Backward
                    || actions[i].kind == ActionKind::BackwardInput))
                st->versions.readBy(m_keys[i], static_cast<int>(i));
        if (waves) {
            st->waves = std::make_unique<Waves>(m_concurrent, m_lastPull);
            st->waves->link(plan, setup.model, s, *model);
        }
        m_models[s] = std::move(model);
        m_states[s] = std::move(st);
    }
    // ZBV's V (and any placement giving one device both the embedding's and the head's stage): the two copies of
    // wte are on this device, summed here before the stages' all-reduces (tiedLocal) instead of over a group.
    for (auto& [s, st] : m_states) {
        if (!st->model->tiedSlot())
            continue;
        for (auto& [t, other] : m_states)
            if (t != s && other->model->tiedSlot())
                st->tied.partner = t;
        if (st->tied.partner >= 0) {
            if (!m_tiedGroup.empty())
                throw InputError({}, 0, "/stages",
                    "device " + std::to_string(device)
                        + " holds both the embedding's and the head's stage while other devices hold only one of "
                          "them: the engine sums the tied embedding's gradients either on one device or over a group, "
                          "not both");
            // Summed before the all-reduce: its buckets must not leave during the W or backward before it.
            for (std::size_t i = 0; i < actions.size(); ++i)
                if (actions[i].stage == s)
                    m_bucketed[i] = 0;
        }
    }
}

DeviceExecutor::~DeviceExecutor() = default;

DeviceExecutor::StageState& DeviceExecutor::state(int stage)
{
    auto it = m_states.find(stage);
    if (it == m_states.end())
        throw std::runtime_error("device " + std::to_string(m_device) + " has an action for stage "
            + std::to_string(stage) + ", which it does not hold");
    return *it->second;
}

bool DeviceExecutor::run(const std::atomic<bool>& stop)
{
    const auto& actions = m_schedule.devices.at(static_cast<std::size_t>(m_device));
    const auto finish = [&] {
        flushLosses();
        flushSpans(true);
    };
    // Every communicator of the run before the first step (NCCL's creation is collective; Gloo's rendezvous too).
    m_transport->makeGroups(m_groups);
    for (int r = 0; r < m_repeats; ++r)
        for (std::size_t i = 0; i < actions.size(); ++i) {
            if (stop.load(std::memory_order_relaxed)) {
                finish();
                return false;
            }
            m_index = static_cast<int>(i); // the period's index: what lastUse counts in
            const auto runIndex = static_cast<std::int64_t>(r) * static_cast<std::int64_t>(actions.size())
                + static_cast<std::int64_t>(i);
            // A repeated period's versions are shifted by r (no pulls: wave schedules run once).
            const std::int64_t key = m_keys[i] + r;
            if (r == 0)
                execute(actions[i], runIndex, key);
            else
                execute(repeatedAction(actions[i], r, m_schedule.microbatches), runIndex, key);
        }
    for (auto& h : m_sends)
        h.wait();
    m_sends.clear();
    m_transport->flush();
    finish();
    return true;
}

bool DeviceExecutor::isTransfer(ActionKind kind)
{
    return kind == ActionKind::SendActivation || kind == ActionKind::SendGradient || kind == ActionKind::RecvActivation
        || kind == ActionKind::RecvGradient;
}

void DeviceExecutor::postExchange(std::size_t first, int r)
{
    // A schedule's sends and the receives that follow them between two computations (1F1B's send-forward-receive-
    // backward, and the like) are posted together: with a transport whose sends wait for their receiver (NCCL), two
    // stages that each send before they receive would otherwise wait on each other. A send after a receive starts
    // a group of its own: posted with the receive, it would leave before its action began, and its peer's receive
    // could end before the send's span starts (a timeline against causality).
    const auto& actions = m_schedule.devices.at(static_cast<std::size_t>(m_device));
    std::vector<Transfer> transfers;
    std::vector<double> bytes;
    bool receiving = false;
    for (std::size_t i = first; i < actions.size() && isTransfer(actions[i].kind); ++i) {
        const bool send = actions[i].kind == ActionKind::SendActivation || actions[i].kind == ActionKind::SendGradient;
        if (send && receiving)
            break;
        receiving = !send;
        const Action a = r == 0 ? actions[i] : repeatedAction(actions[i], r, m_schedule.microbatches);
        const bool gradient = a.kind == ActionKind::SendGradient || a.kind == ActionKind::RecvGradient;
        auto& store = gradient ? m_gradients : m_activations;
        Transfer t;
        t.peer = a.peer;
        t.tag = transferTag(gradient, a.stage, a.microbatch);
        if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGradient) {
            auto it = store.find({a.stage, a.microbatch});
            if (it == store.end())
                throw std::runtime_error("device " + std::to_string(m_device) + ": nothing to send for stage "
                    + std::to_string(a.stage) + " microbatch " + std::to_string(a.microbatch));
            t.direction = Transfer::Direction::Send;
            t.region = region(it->second);
        } else {
            Buffer& buffer = store[{a.stage, a.microbatch}];
            buffer.ensure(*m_backend, boundaryCount(), m_backend->act());
            t.direction = Transfer::Direction::Recv;
            t.region = region(buffer);
        }
        bytes.push_back(static_cast<double>(t.region.bytes()));
        transfers.push_back(t);
    }
    auto handles = m_transport->exchange(transfers);
    for (std::size_t k = 0; k < handles.size(); ++k)
        m_exchange.emplace_back(std::move(handles[k]), bytes[k]);
}

double DeviceExecutor::transferBytes(const Action& a) const
{
    if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGradient) {
        const auto& store = a.kind == ActionKind::SendGradient ? m_gradients : m_activations;
        const auto it = store.find({a.stage, a.microbatch});
        return it == store.end() ? 0.0 : static_cast<double>(it->second.bytes());
    }
    return static_cast<double>(boundaryCount() * byteSize(m_backend->act()));
}

std::size_t DeviceExecutor::boundaryCount() const
{
    // With tensor parallelism each rank moves its 1/t of the rows (Megatron's scatter/gather; with sequence
    // parallelism the rows it holds).
    return static_cast<std::size_t>(m_setup.shape.batch) * m_setup.shape.seq * m_setup.model.channels
        / static_cast<std::size_t>(tensorRanks(m_plan));
}

planner::Span DeviceExecutor::planned(const Action& a, std::int64_t runIndex, double bytes) const
{
    planner::Span span;
    span.device = m_device;
    span.kind = a.kind;
    span.stage = a.stage;
    span.microbatch = a.microbatch;
    span.action = static_cast<std::int32_t>(runIndex);
    span.peer = a.peer;
    span.weight_version = a.weight_version;
    span.bytes = bytes;
    switch (a.kind) {
    case ActionKind::SendActivation:
    case ActionKind::SendGradient:
    case ActionKind::WavePush:
        span.lane = planner::Lane::Send;
        break;
    case ActionKind::RecvActivation:
    case ActionKind::RecvGradient:
        span.lane = planner::Lane::Recv;
        break;
    case ActionKind::AllReduce:
        span.lane = planner::Lane::Collective;
        break;
    default:
        break;
    }
    if (a.kind == ActionKind::WavePush || a.kind == ActionKind::WavePull)
        span.weight_version = a.wave; // a wave action's version is its wave
    return span;
}

void DeviceExecutor::flushLosses()
{
    deliverLosses();
    if (m_lossIds.empty())
        return;
    std::vector<float> host(m_lossIds.size());
    m_backend->download(host.data(), m_losses.data(), DType::F32, host.size());
    const auto ids = std::move(m_lossIds);
    m_lossIds.clear();
    if (m_sink.loss)
        for (std::size_t i = 0; i < ids.size(); ++i)
            m_sink.loss(ids[i], host[i]);
}

void DeviceExecutor::readLossesLater()
{
    if (m_lossIds.empty())
        return; // (another stage's step on this device: the losses in flight stay so until the head's next one)
    deliverLosses(); // the previous step's: landed while this step ran
    m_pendingLosses = {m_backend->readBack(m_losses.as<float>(), m_lossIds.size()), std::move(m_lossIds)};
    m_lossIds.clear();
}

void DeviceExecutor::deliverLosses()
{
    auto [copy, ids] = std::move(m_pendingLosses);
    m_pendingLosses = {};
    if (!copy)
        return;
    const std::vector<float> host = copy->take();
    if (m_sink.loss)
        for (std::size_t i = 0; i < ids.size(); ++i)
            m_sink.loss(ids[i], host[i]);
}

void DeviceExecutor::flushSpans(bool wait)
{
    m_timer->resolve(
        [&](std::uint64_t ticket, double t0, double t1) {
            auto node = m_openSpans.extract(ticket);
            if (node.empty())
                return;
            planner::Span span = node.mapped();
            span.t0 = t0;
            span.t1 = t1;
            if (m_sink.span)
                m_sink.span(span);
        },
        wait);
}

int DeviceExecutor::globalMicrobatch(int local) const
{
    const int m = m_plan.schedule.microbatches;
    return (local / m) * m * m_pipelines + m_pipeline * m + local % m;
}

void DeviceExecutor::execute(const Action& a, std::int64_t runIndex, std::int64_t key)
{
    double bytes = 0; // what a transfer or collective moves, known before it starts
    if (isTransfer(a.kind))
        bytes = m_exchange.empty() ? transferBytes(a) : m_exchange.front().second;
    else if (a.kind == ActionKind::AllReduce && tiedAllReduce(a))
        bytes = static_cast<double>(state(a.stage).model->tiedSlot()->size * byteSize(m_backend->act()));
    else if (a.kind == ActionKind::AllReduce)
        bytes = static_cast<double>(
            state(m_schedule.groups.at(static_cast<std::size_t>(a.group)).stage).model->grads().bytes());
    planner::Span span = planned(a, runIndex, bytes);
    if (m_sink.begin) {
        planner::Span now = span;
        now.t0 = monotonicSeconds();
        m_sink.begin(now);
    }
    // An all-reduce whose buckets went out during the backward began with the first of them.
    std::optional<std::uint64_t> early;
    if (a.kind == ActionKind::AllReduce && !tiedAllReduce(a))
        early = state(m_schedule.groups.at(static_cast<std::size_t>(a.group)).stage).buckets.takeTicket();
    const std::uint64_t ticket = early ? *early : m_timer->begin();
    if (isTransfer(a.kind) && m_exchange.empty()) {
        // Posted within this action's span: its sends leave now, not before the span begins.
        const auto period = static_cast<std::int64_t>(m_schedule.devices.at(static_cast<std::size_t>(m_device)).size());
        postExchange(static_cast<std::size_t>(runIndex % period), static_cast<int>(runIndex / period));
    }
    switch (a.kind) {
    case ActionKind::Forward:
        forward(a, key);
        break;
    case ActionKind::Backward:
    case ActionKind::BackwardInput:
        backward(a, key);
        break;
    case ActionKind::BackwardWeight:
        weightGradient(a);
        break;
    case ActionKind::SendActivation:
    case ActionKind::SendGradient: {
        // Posted with its exchange; the buffer goes back to the backend, which orders its reuse after the send.
        m_sends.push_back(std::move(m_exchange.front().first));
        m_exchange.pop_front();
        (a.kind == ActionKind::SendActivation ? m_activations : m_gradients).erase({a.stage, a.microbatch});
        while (m_sends.size() > 64) {
            m_sends.front().wait();
            m_sends.pop_front();
        }
        break;
    }
    case ActionKind::RecvActivation:
    case ActionKind::RecvGradient: {
        Handle received = std::move(m_exchange.front().first);
        m_exchange.pop_front();
        received.wait();
        break;
    }
    case ActionKind::AllReduce: {
        if (tiedAllReduce(a)) {
            StageState& st = state(a.stage);
            TiedCopies::exchange(*m_backend, *m_transport, *st.model, st.buckets.replicas(),
                m_schedule.groups.at(static_cast<std::size_t>(a.group)).devices);
            break;
        }
        auto& st = state(m_schedule.groups.at(static_cast<std::size_t>(a.group)).stage);
        tiedLocal(st);
        st.buckets.allReduce(*st.model, *m_transport);
        break;
    }
    case ActionKind::OptimizerStep:
        optimizerStep(a);
        break;
    case ActionKind::WavePush:
        span.bytes = wavePush(a);
        break;
    case ActionKind::WavePull:
        span.bytes = wavePull(a);
        break;
    }
    m_timer->end(ticket);
    m_openSpans.emplace(ticket, span);
    flushSpans(false);
}

const void* DeviceExecutor::weightsFor(StageState& st, std::int64_t key, const char* what, int microbatch)
{
    return st.versions.weights(*st.model, key,
        "device " + std::to_string(m_device) + ": " + what + " of microbatch " + std::to_string(microbatch));
}

void DeviceExecutor::forward(const Action& a, std::int64_t key)
{
    StageState& st = state(a.stage);
    const int m = m_setup.microbatches;
    const int global = globalMicrobatch(a.microbatch);
    const std::size_t n = static_cast<std::size_t>(m_setup.shape.batch) * m_setup.shape.seq;
    m_tokens.resize(n);
    m_targets.resize(n);
    m_data.microbatch(global / m, global % m, m_tokens, m_targets);
    Buffer input;
    if (!st.model->hasEmbedding()) {
        auto it = m_activations.find({a.stage - 1, a.microbatch});
        if (it == m_activations.end())
            throw std::runtime_error("device " + std::to_string(m_device) + ": forward of stage "
                + std::to_string(a.stage) + " microbatch " + std::to_string(a.microbatch) + " has no input");
        input = std::move(it->second);
        m_activations.erase(it);
    }
    const void* weights = weightsFor(st, key, "forward", a.microbatch);
    StageStash& stash = st.stashes.begin(a.microbatch);
    float* loss = nullptr;
    if (st.model->hasHead() && !m_reportsLosses) { // another tensor rank of the head reports them
        m_otherLoss.ensure(*m_backend, 1, DType::F32);
        loss = m_otherLoss.as<float>();
    } else if (st.model->hasHead()) {
        // The loss stays on the device until the next read-back.
        const std::size_t capacity = std::max<std::size_t>(16, 2 * static_cast<std::size_t>(m));
        if (m_losses.count() < capacity) {
            flushLosses();
            m_losses = Buffer(*m_backend, capacity, DType::F32);
        } else if (m_lossIds.size() == m_losses.count()) {
            flushLosses();
        }
        loss = m_losses.as<float>() + m_lossIds.size();
        m_lossIds.push_back(global);
    }
    const Buffer* out = st.model->forward(stash, weights, m_tokens, &input, m_targets, m_lossScale, loss);
    if (out) {
        Buffer& sent = m_activations[{a.stage, a.microbatch}];
        sent.ensure(*m_backend, out->count(), out->dtype());
        m_backend->copy(sent.data(), out->data(), out->bytes());
    }
}

void DeviceExecutor::backward(const Action& a, std::int64_t key)
{
    // The fused backward (B), or its input half (I: zero-bubble schedules), which keeps the stash for its W.
    const bool split = a.kind == ActionKind::BackwardInput;
    const char* what = split ? "input gradient" : "backward";
    StageState& st = state(a.stage);
    StageStash& stash = st.stashes.at(a.microbatch,
        "device " + std::to_string(m_device) + ": " + what + " of stage " + std::to_string(a.stage) + " microbatch "
            + std::to_string(a.microbatch));
    Buffer dout;
    if (!st.model->hasHead()) {
        auto it = m_gradients.find({a.stage + 1, a.microbatch});
        if (it == m_gradients.end())
            throw std::runtime_error("device " + std::to_string(m_device) + ": " + what + " of stage "
                + std::to_string(a.stage) + " microbatch " + std::to_string(a.microbatch) + " has no output gradient");
        dout = std::move(it->second);
        m_gradients.erase(it);
    }
    const void* weights = weightsFor(st, key, what, a.microbatch);
    const Buffer* din = nullptr;
    if (split) {
        din = st.model->backwardInput(stash, weights, st.model->hasHead() ? nullptr : &dout);
    } else {
        // The last backward before the stage's all-reduce posts its buckets as its layers finish.
        StageModel::LayerDone done;
        if (m_bucketed[static_cast<std::size_t>(m_index)])
            done = st.buckets.collect(*st.model, *m_transport, *m_timer, m_setup.bucket_bytes);
        din = st.model->backward(stash, weights, st.model->grads().data(), st.model->hasHead() ? nullptr : &dout, done);
        st.buckets.finish(*st.model, *m_transport, *m_timer);
        st.stashes.end(a.microbatch);
    }
    if (st.waves)
        st.waves->backwardDone(a.microbatch);
    if (din) {
        Buffer& sent = m_gradients[{a.stage, a.microbatch}];
        sent.ensure(*m_backend, din->count(), din->dtype());
        m_backend->copy(sent.data(), din->data(), din->bytes());
    }
    st.versions.used(key, m_index);
}

void DeviceExecutor::weightGradient(const Action& a)
{
    // W: the weight gradients from what the microbatch's I kept; the stash's activations are free after it.
    StageState& st = state(a.stage);
    StageStash& stash = st.stashes.at(a.microbatch,
        "device " + std::to_string(m_device) + ": weight gradient of stage " + std::to_string(a.stage) + " microbatch "
            + std::to_string(a.microbatch));
    StageModel::LayerDone done;
    if (m_bucketed[static_cast<std::size_t>(m_index)])
        done = st.buckets.collect(*st.model, *m_transport, *m_timer, m_setup.bucket_bytes);
    st.model->backwardWeight(stash, st.model->grads().data(), done);
    st.buckets.finish(*st.model, *m_transport, *m_timer);
    st.stashes.end(a.microbatch);
}

void DeviceExecutor::tiedLocal(StageState& st)
{
    // Both copies of wte are on this device (ZBV): summed before the stages' all-reduces (which then sum the
    // replicas' sums) and steps, once per step.
    if (st.tied.partner >= 0) {
        StageState& other = state(st.tied.partner);
        TiedCopies::sumLocal(*m_backend, st.tied, *st.model, other.tied, *other.model);
    }
}

bool DeviceExecutor::tiedAllReduce(const Action& a) const
{
    return a.kind == ActionKind::AllReduce && a.group >= 0
        && static_cast<std::size_t>(a.group) < m_schedule.groups.size()
        && m_schedule.groups[static_cast<std::size_t>(a.group)].purpose == planner::CollectivePurpose::TiedWeights;
}

void DeviceExecutor::optimizerStep(const Action& a)
{
    StageState& st = state(a.stage);
    tiedLocal(st); // the tied embedding's group exchange was its own AllReduce, before this step
    st.versions.keepLive(*m_backend, *st.model, m_index);
    if (st.waves)
        st.waves->beforeStep(*m_backend, *st.model);
    st.model->sumSharedGradients(); // sequence parallelism's norms, shared key/value heads
    const double lr = m_setup.adam.lrAt(st.steps);
    st.adam->step(*st.model, m_setup.adam, lr, ++st.steps);
    if (st.sharded)
        gatherShards(st);
    st.model->zeroGrads();
    st.tied.summed = false; // the partner's flag goes with its own step
    st.versions.stepped(a.weight_version);
    if (st.waves)
        st.waves->afterStep(*m_backend, *st.model);
    // One read-back per step, of the losses of the microbatches this step trained on, taken at the next step: the
    // host never waits for the device here, so it enqueues the next step while this one's tail still runs.
    readLossesLater();
    if (m_sink.step)
        m_sink.step(a.stage, a.weight_version);
}

void DeviceExecutor::gatherShards(StageState& st)
{
    // The replicas' shards, all-gathered: each keeps its own updated part and zeros elsewhere, and the sum over the
    // replicas is every part (x + 0 is exact in any precision). In mixed precision the fp32 master weights too, so
    // that every replica's copy stays whole.
    StageModel& model = *st.model;
    const auto [first, end] = st.adam->range();
    const auto zeroOutside = [&](void* data, DType dtype, std::size_t n) {
        const std::size_t e = byteSize(dtype);
        auto* bytes = static_cast<std::byte*>(data);
        m_backend->zero(bytes, first * e);
        m_backend->zero(bytes + end * e, (n - end) * e);
        m_transport->allReduceSum(st.buckets.replicas(), {data, dtype, n}).wait();
    };
    zeroOutside(model.params().data(), model.params().dtype(), model.parameterCount());
    if (float* master = model.master())
        zeroOutside(master, DType::F32, model.parameterCount());
}

double DeviceExecutor::wavePush(const Action& a)
{
    StageState& st = state(a.stage);
    if (!st.waves)
        throw std::logic_error("a wave push on a stage without waves");
    return st.waves->push(*m_backend, *m_transport, m_sends, *st.model, a.stage, a.wave);
}

double DeviceExecutor::wavePull(const Action& a)
{
    StageState& st = state(a.stage);
    if (!st.waves)
        throw std::logic_error("a wave pull on a stage without waves");
    // The forwards after the pull use new weights (a new key), even when no wave is new.
    st.versions.keepLive(*m_backend, *st.model, m_index);
    st.versions.pulled();
    return st.waves->pull(*m_backend, *m_transport, *st.model, a.wave);
}

} // namespace pw::engine
