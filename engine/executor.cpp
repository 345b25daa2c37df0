// SPDX-License-Identifier: MIT
#include "executor.h"

#include <algorithm>
#include <ctime>

#include "planner/errors.h"
#include "planner/schedule/generator.h"
#include "planner/schedule/traits.h"

namespace pw::engine {

using planner::Action;
using planner::ActionKind;
using planner::InputError;

double monotonicSeconds()
{
    timespec ts {};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TrainingSetup trainingSetup(const planner::Plan& plan)
{
    const auto& model = *plan.model;
    if (!model.architecture)
        throw InputError("the plan's model '" + model.name
            + "' has no transformer shape (architecture): only plans made with `profile transformer` can be "
              "trained, since the engine must know the layers' sizes");
    const auto& arch = *model.architecture;
    TrainingSetup s;
    s.model = Gpt2Config::fromTransformer(arch);
    s.model.validate();
    if (model.layerCount() != s.model.layerCount())
        throw InputError("the plan's model has " + std::to_string(model.layerCount()) + " layers; a GPT-2 of "
            + std::to_string(arch.layers) + " blocks has " + std::to_string(s.model.layerCount())
            + " (embedding, blocks, head)");
    for (int pos = 0; pos < static_cast<int>(plan.layer_order.size()); ++pos)
        if (plan.layer_order[static_cast<std::size_t>(pos)] != pos)
            throw InputError("/layer_order: the engine runs GPT-2's layers in their order");
    if (plan.tensor_parallel > 1)
        throw InputError("/tensor_parallel: tensor parallelism (t = " + std::to_string(plan.tensor_parallel)
            + ") is not run by the engine yet; plan with t = 1");
    if (planner::scheduleTraits(plan.schedule.kind).wave_synchronous)
        throw InputError("/schedule/kind: HetPipe's wave synchronous schedule ('" + plan.schedule.kind
            + "') is not run by the engine yet");
    s.shape.batch = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : arch.microbatch;
    s.shape.seq = arch.sequence;
    s.microbatches = plan.schedule.microbatches;
    return s;
}

planner::Schedule runSchedule(const planner::Plan& plan, int steps)
{
    if (steps <= 0)
        throw InputError("steps: must be positive, got " + std::to_string(steps));
    planner::Plan p = plan;
    p.schedule.iterations = steps;
    p.validate();
    return planner::generateSchedule(p);
}

planner::Action repeatedAction(const planner::Action& a, int repeat, int periodMicrobatches)
{
    planner::Action b = a;
    if (b.microbatch >= 0)
        b.microbatch += repeat * periodMicrobatches;
    if (planner::isCompute(b.kind)) // transfers and collectives carry no version
        b.weight_version += repeat;
    return b;
}

namespace {

/// Whether `two` (two steps) is `one` (one step) executed twice, all-reduce groups compared by their members.
bool repeatsOneStep(const planner::Schedule& one, const planner::Schedule& two)
{
    if (one.num_devices != two.num_devices || two.microbatches != 2 * one.microbatches)
        return false;
    const auto sameGroup = [&](int g1, int g2) {
        if (g1 < 0 || g2 < 0)
            return g1 == g2;
        return one.groups.at(static_cast<std::size_t>(g1)) == two.groups.at(static_cast<std::size_t>(g2));
    };
    for (int d = 0; d < one.num_devices; ++d) {
        const auto& a = one.devices[static_cast<std::size_t>(d)];
        const auto& b = two.devices[static_cast<std::size_t>(d)];
        if (b.size() != 2 * a.size())
            return false;
        for (std::size_t i = 0; i < b.size(); ++i) {
            auto expected = repeatedAction(a[i % a.size()], static_cast<int>(i / a.size()), one.microbatches);
            const auto& got = b[i];
            if (!sameGroup(expected.group, got.group))
                return false;
            expected.group = got.group;
            if (!(expected == got))
                return false;
        }
    }
    return true;
}

} // namespace

RunSchedule runProgram(const planner::Plan& plan, int steps)
{
    if (steps <= 1)
        return {runSchedule(plan, steps), 1};
    auto one = runSchedule(plan, 1);
    if (repeatsOneStep(one, runSchedule(plan, 2)))
        return {std::move(one), steps};
    return {runSchedule(plan, steps), 1};
}

// ---------------------------------------------------------------------------------------------------------------

/// @brief One virtual stage on this device: its model, optimizer, and the weight versions still in use.
struct DeviceExecutor::StageState
{
    StageModel* model = nullptr;
    std::unique_ptr<AdamW> adam;
    std::vector<std::uint8_t> decay;
    int version = 0; ///< the version the live parameters hold
    int steps = 0; ///< optimizer steps taken (AdamW's t - 1)
    std::map<int, std::vector<float>> snapshots; ///< older versions that later actions still use
    /// version -> index of the last action (forward or backward) that uses it: a step keeps a copy of the version
    /// it replaces while a later action needs it (PipeDream's stashed versions, 2BW's previous one).
    std::map<int, int> lastUse;
    std::map<int, StageStash> stashes; ///< microbatch -> activations
    std::vector<int> replicas; ///< devices of the stage (all-reduce group)
};

DeviceExecutor::DeviceExecutor(const planner::Plan& plan, const planner::Schedule& schedule, int device,
    const TrainingSetup& setup, const DataOrder& data, Transport& transport, ExecutorSink sink, int repeats)
    : m_plan(plan)
    , m_schedule(schedule)
    , m_repeats(repeats)
    , m_device(device)
    , m_setup(setup)
    , m_data(data)
    , m_transport(transport)
    , m_sink(std::move(sink))
{
    const auto& traits = planner::scheduleTraits(plan.schedule.kind);
    // The step's loss is the mean of its microbatches' means; a kind that updates after every backward trains
    // each microbatch on its own loss.
    m_lossScale = traits.update_per_backward ? 1.0f : 1.0f / static_cast<float>(setup.microbatches);
    const int last = setup.model.layerCount() - 1;
    bool embeddingWithHead = false;
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& ps = plan.stages[static_cast<std::size_t>(s)];
        embeddingWithHead = embeddingWithHead || (ps.first_layer == 0 && ps.last_layer == last);
        const bool tied = ps.first_layer == 0 || ps.last_layer == last;
        for (int d : ps.devices)
            if (tied && std::find(m_tiedGroup.begin(), m_tiedGroup.end(), d) == m_tiedGroup.end())
                m_tiedGroup.push_back(d);
        if (std::find(ps.devices.begin(), ps.devices.end(), device) == ps.devices.end())
            continue;
        auto model = std::make_unique<StageModel>(setup.model, setup.shape, ps.first_layer, ps.last_layer);
        if (setup.checkpoint)
            model->loadFrom(*setup.checkpoint);
        else
            model->initialise(setup.seed);
        auto st = std::make_unique<StageState>();
        st->model = model.get();
        st->adam = std::make_unique<AdamW>(model->parameterCount());
        st->decay = model->decayMask();
        st->replicas = ps.devices;
        std::sort(st->replicas.begin(), st->replicas.end());
        const auto& actions = schedule.devices.at(static_cast<std::size_t>(device));
        for (std::size_t i = 0; i < actions.size(); ++i)
            if (actions[i].stage == s && planner::isCompute(actions[i].kind)
                && actions[i].kind != ActionKind::OptimizerStep)
                st->lastUse[actions[i].weight_version] = static_cast<int>(i);
        m_models[s] = std::move(model);
        m_states[s] = std::move(st);
    }
    std::sort(m_tiedGroup.begin(), m_tiedGroup.end());
    if (embeddingWithHead || m_tiedGroup.size() < 2)
        m_tiedGroup.clear();
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
    for (int r = 0; r < m_repeats; ++r)
        for (std::size_t i = 0; i < actions.size(); ++i) {
            if (stop.load(std::memory_order_relaxed))
                return false;
            m_index = static_cast<int>(i); // the period's index: what lastUse counts in
            const auto runIndex = static_cast<std::int64_t>(r) * static_cast<std::int64_t>(actions.size())
                + static_cast<std::int64_t>(i);
            if (r == 0)
                execute(actions[i], runIndex);
            else
                execute(repeatedAction(actions[i], r, m_schedule.microbatches), runIndex);
        }
    m_transport.flush();
    return true;
}

void DeviceExecutor::execute(const Action& a, std::int64_t runIndex)
{
    planner::Span span;
    span.device = m_device;
    span.kind = a.kind;
    span.stage = a.stage;
    span.microbatch = a.microbatch;
    span.action = static_cast<std::int32_t>(runIndex);
    span.peer = a.peer;
    span.weight_version = a.weight_version;
    span.t0 = monotonicSeconds();
    const auto elements = [&](const std::vector<float>& v) { return static_cast<double>(v.size() * sizeof(float)); };
    switch (a.kind) {
    case ActionKind::Forward:
        forward(a);
        break;
    case ActionKind::Backward:
        backward(a);
        break;
    case ActionKind::SendActivation:
    case ActionKind::SendGradient: {
        auto& store = a.kind == ActionKind::SendActivation ? m_activations : m_gradients;
        auto it = store.find({a.stage, a.microbatch});
        if (it == store.end())
            throw std::runtime_error("device " + std::to_string(m_device) + ": nothing to send for stage "
                + std::to_string(a.stage) + " microbatch " + std::to_string(a.microbatch));
        span.lane = planner::Lane::Send;
        span.bytes = elements(it->second);
        m_transport.send(a.peer, transferTag(a.kind == ActionKind::SendGradient, a.stage, a.microbatch), it->second);
        store.erase(it);
        break;
    }
    case ActionKind::RecvActivation:
    case ActionKind::RecvGradient: {
        auto& buffer = (a.kind == ActionKind::RecvActivation ? m_activations : m_gradients)[{a.stage, a.microbatch}];
        buffer.assign(static_cast<std::size_t>(m_setup.shape.batch) * m_setup.shape.seq * m_setup.model.channels, 0.0f);
        span.lane = planner::Lane::Recv;
        span.bytes = elements(buffer);
        m_transport.recv(a.peer, transferTag(a.kind == ActionKind::RecvGradient, a.stage, a.microbatch), buffer);
        break;
    }
    case ActionKind::AllReduce: {
        auto& st = state(m_schedule.groups.at(static_cast<std::size_t>(a.group)).stage);
        span.lane = planner::Lane::Collective;
        span.bytes = elements(st.model->grads());
        m_transport.allReduceSum(st.replicas, st.model->grads());
        break;
    }
    case ActionKind::OptimizerStep:
        optimizerStep(a);
        break;
    case ActionKind::BackwardWeight:
    case ActionKind::WavePush:
    case ActionKind::WavePull:
        throw InputError("the engine does not run '" + std::string(planner::toString(a.kind))
            + "' actions yet (schedule '" + m_schedule.kind + "')");
    }
    span.t1 = monotonicSeconds();
    if (m_sink.span)
        m_sink.span(span);
}

const float* DeviceExecutor::weightsFor(StageState& st, int version, const char* what, int microbatch)
{
    if (version == st.version)
        return st.model->params().data();
    auto it = st.snapshots.find(version);
    if (it == st.snapshots.end())
        throw std::runtime_error("device " + std::to_string(m_device) + ": " + what + " of microbatch "
            + std::to_string(microbatch) + " asks for weight version " + std::to_string(version)
            + ", but the stage holds version " + std::to_string(st.version) + " and no stashed copy of it");
    return it->second.data();
}

void DeviceExecutor::forward(const Action& a)
{
    StageState& st = state(a.stage);
    const int m = m_setup.microbatches;
    const std::size_t n = static_cast<std::size_t>(m_setup.shape.batch) * m_setup.shape.seq;
    std::vector<std::int32_t> tokens(n), targets(n);
    m_data.microbatch(a.microbatch / m, a.microbatch % m, tokens, targets);
    std::vector<float> input;
    if (!st.model->hasEmbedding()) {
        auto it = m_activations.find({a.stage - 1, a.microbatch});
        if (it == m_activations.end())
            throw std::runtime_error("device " + std::to_string(m_device) + ": forward of stage "
                + std::to_string(a.stage) + " microbatch " + std::to_string(a.microbatch) + " has no input");
        input = std::move(it->second);
        m_activations.erase(it);
    }
    const float* weights = weightsFor(st, a.weight_version, "forward", a.microbatch);
    StageStash& stash = st.stashes[a.microbatch];
    auto out = st.model->forward(stash, weights, tokens, input, targets);
    if (st.model->hasHead()) {
        if (m_sink.loss)
            m_sink.loss(a.microbatch, stash.loss);
    } else {
        m_activations[{a.stage, a.microbatch}].assign(out.begin(), out.end());
    }
}

void DeviceExecutor::backward(const Action& a)
{
    StageState& st = state(a.stage);
    auto stash = st.stashes.find(a.microbatch);
    if (stash == st.stashes.end())
        throw std::runtime_error("device " + std::to_string(m_device) + ": backward of stage " + std::to_string(a.stage)
            + " microbatch " + std::to_string(a.microbatch) + " before its forward");
    std::vector<float> dout;
    if (!st.model->hasHead()) {
        auto it = m_gradients.find({a.stage + 1, a.microbatch});
        if (it == m_gradients.end())
            throw std::runtime_error("device " + std::to_string(m_device) + ": backward of stage "
                + std::to_string(a.stage) + " microbatch " + std::to_string(a.microbatch) + " has no output gradient");
        dout = std::move(it->second);
        m_gradients.erase(it);
    }
    const float* weights = weightsFor(st, a.weight_version, "backward", a.microbatch);
    auto din = st.model->backward(stash->second, weights, st.model->grads().data(), dout, m_lossScale);
    st.stashes.erase(stash);
    if (!st.model->hasEmbedding())
        m_gradients[{a.stage, a.microbatch}].assign(din.begin(), din.end());
    // The last use of this version (a repeated period's versions are past the table: used once, here).
    if (auto last = st.lastUse.find(a.weight_version); last == st.lastUse.end() || last->second <= m_index)
        st.snapshots.erase(a.weight_version);
}

void DeviceExecutor::tiedExchange(StageState& st)
{
    // The embedding's and the head's copies of wte each got the gradient of their own use; both need the sum.
    // After the replicas' all-reduce every replica of a stage holds the same sum, so each contributes its share.
    const TensorSlot* slot = st.model->tiedSlot();
    if (m_tiedGroup.empty() || !slot)
        return;
    std::span<float> g(st.model->grads().data() + slot->offset, slot->size);
    const float share = 1.0f / static_cast<float>(st.replicas.size());
    if (share != 1.0f)
        for (float& x : g)
            x *= share;
    m_transport.allReduceSum(m_tiedGroup, g);
}

void DeviceExecutor::optimizerStep(const Action& a)
{
    StageState& st = state(a.stage);
    tiedExchange(st);
    // A later forward or backward still uses the version this step replaces: keep a copy of it.
    if (auto it = st.lastUse.find(st.version); it != st.lastUse.end() && it->second > m_index)
        st.snapshots[st.version] = st.model->params();
    const double lr = m_setup.adam.lrAt(st.steps);
    st.adam->step(st.model->params(), st.model->grads(), st.decay, m_setup.adam, lr, ++st.steps);
    st.model->zeroGrads();
    st.version = a.weight_version;
    if (m_sink.step)
        m_sink.step(a.stage, a.weight_version);
}

} // namespace pw::engine
