// SPDX-License-Identifier: MIT
#include "stage_features.h"

#include <algorithm>
#include <stdexcept>

namespace pw::engine {

using planner::Action;
using planner::ActionKind;

// ---- Weight versions ---------------------------------------------------------------------------------------------

std::vector<std::int64_t> WeightVersions::actionKeys(const std::vector<Action>& actions)
{
    std::vector<std::int64_t> keys(actions.size(), 0);
    std::map<int, int> pulls;
    std::map<std::pair<int, int>, std::int64_t> forwardKey;
    for (std::size_t i = 0; i < actions.size(); ++i) {
        const auto& a = actions[i];
        const std::int64_t own = key(pulls[a.stage], a.weight_version);
        if (a.kind == ActionKind::WavePull)
            pulls[a.stage] += 1;
        else if (a.kind == ActionKind::Forward)
            keys[i] = forwardKey[{a.stage, a.microbatch}] = own;
        else if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput
            || a.kind == ActionKind::BackwardWeight) {
            auto it = forwardKey.find({a.stage, a.microbatch});
            // A backward whose forward ran before a pull uses the forward's weights; its version must match.
            keys[i] = it != forwardKey.end() && static_cast<std::int32_t>(it->second) == a.weight_version ? it->second
                                                                                                          : own;
        }
    }
    return keys;
}

const void* WeightVersions::weights(const StageModel& model, std::int64_t key, const std::string& what) const
{
    if (key == liveKey())
        return model.params().data();
    auto it = m_copies.find(key);
    if (it == m_copies.end())
        throw std::runtime_error(what + " asks for weight version " + std::to_string(static_cast<std::int32_t>(key))
            + " (after " + std::to_string(key >> 32) + " wave pulls), but the stage holds version "
            + std::to_string(m_version) + " (after " + std::to_string(m_pulls) + ") and no stashed copy of it");
    return it->second.data();
}

void WeightVersions::keepLive(Backend& backend, const StageModel& model, int index)
{
    if (auto it = m_lastUse.find(liveKey()); it != m_lastUse.end() && it->second > index) {
        const Buffer& live = model.params();
        Buffer& copy = m_copies[liveKey()];
        copy.ensure(backend, live.count(), live.dtype());
        backend.copy(copy.data(), live.data(), live.bytes());
    }
}

void WeightVersions::used(std::int64_t key, int index)
{
    if (auto last = m_lastUse.find(key); last == m_lastUse.end() || last->second <= index)
        m_copies.erase(key);
}

// ---- Stashes -----------------------------------------------------------------------------------------------------

StageStash& Stashes::begin(int microbatch)
{
    auto [slot, fresh] = m_live.try_emplace(microbatch);
    if (fresh && !m_spare.empty()) { // no allocation for every microbatch's activations
        slot->second = std::move(m_spare.back());
        m_spare.pop_back();
    }
    return slot->second;
}

StageStash& Stashes::at(int microbatch, const std::string& what)
{
    auto it = m_live.find(microbatch);
    if (it == m_live.end())
        throw std::runtime_error(what + " before its forward");
    return it->second;
}

void Stashes::end(int microbatch)
{
    auto node = m_live.extract(microbatch);
    if (!node.empty())
        m_spare.push_back(std::move(node.mapped()));
}

// ---- Gradient buckets --------------------------------------------------------------------------------------------

GradientBuckets::GradientBuckets(std::vector<int> replicas)
    : m_replicas(std::move(replicas))
{
    std::sort(m_replicas.begin(), m_replicas.end());
}

StageModel::LayerDone GradientBuckets::collect(
    StageModel& model, Transport& transport, ActionTimer& timer, std::size_t bucket_bytes)
{
    // Gradients are final layer by layer (last to first), so contiguous buckets of them are all-reduced while the
    // earlier layers' backward runs.
    m_pending = {0, 0};
    return [this, &model, &transport, &timer, bucket_bytes](int, std::size_t from, std::size_t count) {
        auto& [first, end] = m_pending;
        if (end > first && from + count != first) { // not adjacent (never, with the stage's layout): apart
            post(model, transport, timer, first, end);
            end = first;
        }
        if (end == first)
            end = from + count;
        first = from;
        if ((end - first) * byteSize(model.backend().act()) >= bucket_bytes) {
            post(model, transport, timer, first, end);
            end = first;
        }
    };
}

void GradientBuckets::finish(StageModel& model, Transport& transport, ActionTimer& timer)
{
    if (m_pending.second > m_pending.first)
        post(model, transport, timer, m_pending.first, m_pending.second);
    m_pending = {0, 0};
}

void GradientBuckets::post(
    StageModel& model, Transport& transport, ActionTimer& timer, std::size_t first, std::size_t end)
{
    if (!m_ticket)
        m_ticket = timer.begin();
    const DType act = model.backend().act();
    void* g = static_cast<std::byte*>(model.grads().data()) + first * byteSize(act);
    m_posted.push_back(transport.allReduceSum(m_replicas, {g, act, end - first}));
}

void GradientBuckets::allReduce(StageModel& model, Transport& transport)
{
    if (m_posted.empty())
        transport.allReduceSum(m_replicas, region(model.grads())).wait();
    for (auto& h : m_posted)
        h.wait();
    m_posted.clear();
}

// ---- Tied copies -------------------------------------------------------------------------------------------------

void TiedCopies::sumLocal(Backend& backend, TiedCopies& a, StageModel& ma, TiedCopies& b, StageModel& mb)
{
    if (a.summed)
        return;
    const DType act = backend.act();
    const std::size_t e = byteSize(act);
    const TensorSlot* mine = ma.tiedSlot();
    const TensorSlot* theirs = mb.tiedSlot();
    void* g = static_cast<std::byte*>(ma.grads().data()) + mine->offset * e;
    void* h = static_cast<std::byte*>(mb.grads().data()) + theirs->offset * e;
    Buffer zeros(backend, mine->size, act);
    Buffer wide(backend, mine->size, DType::F32);
    backend.zero(zeros.data(), zeros.bytes());
    backend.zero(wide.data(), wide.bytes());
    backend.addDifference(wide.as<float>(), h, zeros.data(), mine->size); // the partner's gradient in fp32
    backend.addUpdate(g, nullptr, wide.as<float>(), mine->size);
    backend.copy(h, g, mine->size * e);
    a.summed = b.summed = true;
}

void TiedCopies::exchange(Backend& backend, Transport& transport, StageModel& model, const std::vector<int>& replicas,
    const std::vector<std::int32_t>& members)
{
    const TensorSlot* slot = model.tiedSlot();
    if (!slot)
        throw std::logic_error("an all-reduce of the tied embedding on a stage without it");
    const DType act = backend.act();
    void* g = static_cast<std::byte*>(model.grads().data()) + slot->offset * byteSize(act);
    const auto holders = std::count_if(
        members.begin(), members.end(), [&](int d) { return std::binary_search(replicas.begin(), replicas.end(), d); });
    if (holders > 1)
        backend.scale(g, 1.0f / static_cast<float>(holders), slot->size);
    const std::vector<int> group(members.begin(), members.end());
    transport.allReduceSum(group, {g, act, slot->size}).wait();
}

// ---- Waves -------------------------------------------------------------------------------------------------------

Waves::Waves(int concurrent, std::vector<int> last_pull)
    : m_concurrent(std::max(1, concurrent))
    , m_lastPull(std::move(last_pull))
{
}

void Waves::link(const planner::Plan& plan, const ModelConfig& config, int stage, const StageModel& model)
{
    const auto& me = plan.stages[static_cast<std::size_t>(stage)];
    const auto& mine = model.slots();
    const auto ranges
        = [&](const std::vector<TensorSlot>& receiver, int first, int last, const std::vector<TensorSlot>& holder) {
              Link link;
              for (const auto& r : receiver) {
                  if (r.owner < first || r.owner > last)
                      continue;
                  for (const auto& h : holder)
                      if (h.name == r.name) {
                          link.ranges.emplace_back(h.offset, h.size);
                          link.size += h.size;
                          break;
                      }
              }
              return link;
          };
    for (int s = 0; s < plan.stageCount(); ++s) {
        const auto& other = plan.stages[static_cast<std::size_t>(s)];
        if (other.pipeline == me.pipeline)
            continue;
        const auto theirs = stageSlots(config, other.first_layer, other.last_layer);
        for (int d : other.devices) {
            Link out = ranges(theirs, me.first_layer, me.last_layer, mine);
            out.device = d;
            out.stage = stage;
            if (out.size > 0)
                m_pushTo.push_back(std::move(out));
            Link in = ranges(mine, other.first_layer, other.last_layer, mine);
            in.device = d;
            in.stage = s;
            if (in.size > 0)
                m_pullFrom.push_back(std::move(in));
        }
    }
}

void Waves::beforeStep(Backend& backend, const StageModel& model)
{
    const Buffer& params = model.params();
    m_before.ensure(backend, params.count(), params.dtype());
    backend.copy(m_before.data(), params.data(), params.bytes());
}

void Waves::afterStep(Backend& backend, const StageModel& model)
{
    // HetPipe's local update u_p, summed per wave for the push.
    const Buffer& params = model.params();
    Buffer& sum = m_updates[std::max(0, m_lastBackward) / m_concurrent];
    if (sum.empty()) {
        sum = Buffer(backend, params.count(), DType::F32);
        backend.zero(sum.data(), sum.bytes());
    }
    backend.addDifference(sum.as<float>(), params.data(), m_before.data(), params.count());
}

double Waves::push(
    Backend& backend, Transport& transport, std::deque<Handle>& sends, const StageModel& model, int stage, int wave)
{
    auto node = m_updates.extract(wave);
    Buffer update;
    if (node.empty()) {
        update = Buffer(backend, model.parameterCount(), DType::F32);
        backend.zero(update.data(), update.bytes());
    } else {
        update = std::move(node.mapped());
    }
    double bytes = 0;
    for (const auto& link : m_pushTo) {
        if (m_lastPull[static_cast<std::size_t>(link.device)] < wave)
            continue; // that device never pulls this wave
        // Its own buffer: back to the backend after the send is posted, which orders its reuse after the send.
        Buffer packed(backend, link.size, DType::F32);
        std::size_t at = 0;
        for (const auto& [offset, size] : link.ranges) {
            backend.copy(packed.as<float>() + at, update.as<float>() + offset, size * sizeof(float));
            at += size;
        }
        sends.push_back(transport.send(link.device, waveTag(stage, wave), region(packed)));
        bytes += static_cast<double>(packed.bytes());
    }
    return bytes;
}

double Waves::pull(Backend& backend, Transport& transport, StageModel& model, int wave)
{
    double bytes = 0;
    Buffer buffer;
    auto* params = static_cast<std::byte*>(model.params().data());
    float* master = model.master();
    const std::size_t e = byteSize(backend.act());
    for (int w = m_pulledWave + 1; w <= wave; ++w)
        for (const auto& link : m_pullFrom) {
            buffer.ensure(backend, link.size, DType::F32);
            transport.recv(link.device, waveTag(link.stage, w), region(buffer)).wait();
            bytes += static_cast<double>(buffer.bytes());
            std::size_t at = 0;
            for (const auto& [offset, size] : link.ranges) {
                backend.addUpdate(
                    params + offset * e, master ? master + offset : nullptr, buffer.as<float>() + at, size);
                at += size;
            }
        }
    m_pulledWave = std::max(m_pulledWave, wave);
    return bytes;
}

} // namespace pw::engine
