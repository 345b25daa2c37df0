// SPDX-License-Identifier: MIT
// ScheduleBuilder: the plan checks and action insertion every generator shares.
#include "builder.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "../costs.h"
#include "../errors.h"

namespace pw::planner {

ScheduleBuilder::ScheduleBuilder(const Plan& plan, std::string_view kind)
{
    plan.validate();
    if (plan.modelParallel() > 1)
        throw InputError({}, 0, plan.tensor_parallel > 1 ? "/tensor_parallel" : "/context_parallel",
            "generators build the logical plan (one device per tensor- and context-parallel group); use "
            "generateSchedule()");
    m_stages = plan.stageCount();
    m_chunks = std::max(1, plan.schedule.chunks);
    m_depth = plan.pipelineDepth();
    m_perBatch = plan.schedule.microbatches;
    m_batches = plan.schedule.iterations;
    if (static_cast<long long>(m_perBatch) * m_batches > INT_MAX / 2)
        throw InputError({}, 0, "/schedule/iterations",
            "microbatches x iterations = " + std::to_string(static_cast<long long>(m_perBatch) * m_batches)
                + " is too large");
    const int numDevices = plan.cluster->deviceCount();
    const auto* traits = findScheduleTraits(kind);
    if (plan.pipelineCount() > 1 && !(traits && traits->wave_synchronous))
        throw InputError({}, 0, "/schedule/kind",
            "schedule kind '" + std::string(kind) + "' runs one pipeline, but the plan has "
                + std::to_string(plan.pipelineCount()) + " independent pipelines (virtual workers): use kind wsp");
    m_first.resize(m_stages);
    m_last.resize(m_stages);
    for (int s = 0; s < m_stages; ++s) {
        m_first[s] = plan.firstInPipeline(s);
        m_last[s] = plan.lastInPipeline(s);
    }

    // Plan::validate() checks these as well; repeated here because the generators index by them. The kind decides
    // the placement: the V (ChunkRule::V, two chunks) or the loop of every other kind.
    const bool v = traits && traits->chunks == ChunkRule::V && m_chunks == 2;
    const auto physical = [&](int s) { return s < m_depth ? s : v ? 2 * m_depth - 1 - s : s % m_depth; };
    std::vector<int> owner(numDevices, -1);
    m_devices.resize(m_stages);
    for (int s = 0; s < m_stages; ++s) {
        const auto& st = plan.stages[s];
        const std::string field = "/stages/" + std::to_string(s) + "/devices";
        if (s >= m_depth && st.devices != plan.stages[physical(s)].devices)
            throw InputError({}, 0, field,
                "with " + std::to_string(m_chunks) + " chunks virtual stage " + std::to_string(s)
                    + " must run on the devices of stage " + std::to_string(physical(s))
                    + (v ? " (schedule '" + std::string(kind) + "' places two chunks per device in a V)" : ""));
        for (int d : st.devices) {
            if (d < 0 || d >= numDevices)
                throw InputError({}, 0, field, "device " + std::to_string(d) + " is not in the cluster");
            if (s < m_depth) {
                if (owner[d] >= 0)
                    throw InputError({}, 0, field,
                        "device " + std::to_string(d) + " is in stages " + std::to_string(owner[d]) + " and "
                            + std::to_string(s) + "; a device may hold one physical stage");
                owner[d] = s;
            }
        }
        m_devices[s] = st.devices;
    }

    const auto cut = plan.model->cutBytes(plan.layer_order);
    const double scale = microbatchScale(plan);
    m_cutBytes.assign(m_stages, 0.0);
    m_weightBytes.assign(m_stages, 0.0);
    m_gradientScale = gradientBytesPerWeightByte(plan.schedule, *plan.model); // the all-reduce moves gradients
    m_group.assign(m_stages, -1);
    for (int s = 0; s < m_stages; ++s) {
        const auto& st = plan.stages[s];
        if (!m_last[s])
            m_cutBytes[s] = cut.at(st.last_layer) * scale;
        for (int pos = st.first_layer; pos <= st.last_layer; ++pos)
            m_weightBytes[s] += plan.model->layers.at(plan.layerAt(pos)).weight_bytes;
        if (st.replicas() > 1) {
            m_group[s] = static_cast<int>(m_schedule.groups.size());
            m_schedule.groups.push_back({s, std::vector<std::int32_t>(st.devices.begin(), st.devices.end())});
        }
    }
    // Each pipeline's tied weights (the embedding's and the head's copies): their groups (Plan::tiedWeightGroups).
    m_tied.assign(m_stages, {});
    m_tiedBytes = plan.model->tiedWeightBytes() * m_gradientScale;
    int lastLayer = 0;
    for (const auto& st : plan.stages)
        lastLayer = std::max(lastLayer, st.last_layer);
    for (int p = 0; p < plan.pipelineCount(); ++p) {
        for (const std::vector<int>& devices : plan.tiedWeightGroups(p)) {
            const int group = static_cast<int>(m_schedule.groups.size());
            int embedding = -1;
            for (int s = 0; s < m_stages; ++s) {
                const auto& st = plan.stages[s];
                if (st.pipeline != p || (st.first_layer != 0 && st.last_layer != lastLayer))
                    continue;
                m_tied[s].push_back(group);
                if (embedding < 0 && st.first_layer == 0)
                    embedding = s;
            }
            m_schedule.groups.push_back({std::max(embedding, 0),
                std::vector<std::int32_t>(devices.begin(), devices.end()), CollectivePurpose::TiedWeights});
        }
    }

    m_inFlight.assign(m_stages, 1);
    int downstream = 0; // devices of physical stages s..p-1
    for (int s = m_depth - 1; s >= 0; --s) {
        if (m_last[s])
            downstream = 0; // each pipeline counts its own stages
        downstream += replicas(s);
        m_inFlight[s] = (downstream + replicas(s) - 1) / replicas(s);
    }
    for (int s = m_depth; s < m_stages; ++s)
        m_inFlight[s] = m_inFlight[physical(s)];
    if (!plan.schedule.in_flight.empty()) {
        if (static_cast<int>(plan.schedule.in_flight.size()) != m_stages)
            throw InputError({}, 0, "/schedule/in_flight", "needs one entry per stage");
        for (int s = 0; s < m_stages; ++s)
            m_inFlight[s] = std::max(1, plan.schedule.in_flight[s]);
    }

    m_schedule.kind = std::string(kind);
    m_schedule.num_devices = numDevices;
    m_schedule.num_stages = m_stages;
    m_schedule.microbatches = totalMicrobatches();
    m_schedule.microbatches_per_batch = m_perBatch;
    m_schedule.chunks = m_chunks;
    m_schedule.devices.resize(numDevices);
    // Upper bound per device: F, B and four transfers per microbatch, an all-reduce and a step per backward.
    std::vector<std::size_t> expect(numDevices, 0);
    for (int s = 0; s < m_stages; ++s) {
        const std::size_t local = (static_cast<std::size_t>(totalMicrobatches()) + replicas(s) - 1) / replicas(s);
        for (int d : m_devices[s])
            expect[d] += 8 * local + 2 * static_cast<std::size_t>(m_batches);
    }
    for (int d = 0; d < numDevices; ++d)
        m_schedule.devices[d].reserve(expect[d]);
}

bool ScheduleBuilder::replicated() const
{
    return std::any_of(m_group.begin(), m_group.end(), [](int g) { return g >= 0; });
}

int ScheduleBuilder::inFlight(int stage) const
{
    return m_inFlight[stage];
}

void ScheduleBuilder::forward(int stage, int microbatch, int version)
{
    const int d = deviceOf(stage, microbatch);
    if (!m_first[stage]) {
        const int src = deviceOf(stage - 1, microbatch);
        if (src != d)
            push(d, {ActionKind::RecvActivation, stage - 1, microbatch, src, 0, -1, m_cutBytes[stage - 1]});
    }
    push(d, {ActionKind::Forward, stage, microbatch, -1, version, -1, 0.0});
    if (!m_last[stage]) {
        const int dst = deviceOf(stage + 1, microbatch);
        if (dst != d)
            push(d, {ActionKind::SendActivation, stage, microbatch, dst, 0, -1, m_cutBytes[stage]});
    }
}

void ScheduleBuilder::backward(int stage, int microbatch, int version)
{
    const int d = deviceOf(stage, microbatch);
    if (!m_last[stage]) {
        const int src = deviceOf(stage + 1, microbatch);
        if (src != d)
            push(d, {ActionKind::RecvGradient, stage + 1, microbatch, src, 0, -1, m_cutBytes[stage]});
    }
    push(d, {ActionKind::Backward, stage, microbatch, -1, version, -1, 0.0});
    if (!m_first[stage]) {
        const int dst = deviceOf(stage - 1, microbatch);
        if (dst != d)
            push(d, {ActionKind::SendGradient, stage, microbatch, dst, 0, -1, m_cutBytes[stage - 1]});
    }
}

void ScheduleBuilder::backwardInput(int stage, int microbatch, int version)
{
    const int d = deviceOf(stage, microbatch);
    if (!m_last[stage]) {
        const int src = deviceOf(stage + 1, microbatch);
        if (src != d)
            push(d, {ActionKind::RecvGradient, stage + 1, microbatch, src, 0, -1, m_cutBytes[stage]});
    }
    push(d, {ActionKind::BackwardInput, stage, microbatch, -1, version, -1, 0.0});
    if (!m_first[stage]) {
        const int dst = deviceOf(stage - 1, microbatch);
        if (dst != d)
            push(d, {ActionKind::SendGradient, stage, microbatch, dst, 0, -1, m_cutBytes[stage - 1]});
    }
}

void ScheduleBuilder::forwardBackward(int fstage, int fmb, int bstage, int bmb, int version, bool input)
{
    const int d = deviceOf(fstage, fmb);
    if (deviceOf(bstage, bmb) != d)
        throw InputError({}, 0, "/stages", "an F&B pair runs on one device");
    const auto other = [&](int stage, int mb) {
        const int o = deviceOf(stage, mb);
        return o != d ? o : -1;
    };
    const int fromF = m_first[fstage] ? -1 : other(fstage - 1, fmb);
    const int fromB = m_last[bstage] ? -1 : other(bstage + 1, bmb);
    const int toF = m_last[fstage] ? -1 : other(fstage + 1, fmb);
    const int toB = m_first[bstage] ? -1 : other(bstage - 1, bmb);
    if (fromF >= 0)
        push(d, {ActionKind::RecvActivation, fstage - 1, fmb, fromF, 0, -1, m_cutBytes[fstage - 1]});
    if (fromB >= 0)
        push(d, {ActionKind::RecvGradient, bstage + 1, bmb, fromB, 0, -1, m_cutBytes[bstage]});
    push(d, {ActionKind::Forward, fstage, fmb, -1, version, -1, 0.0, -1, true});
    push(d, {input ? ActionKind::BackwardInput : ActionKind::Backward, bstage, bmb, -1, version, -1, 0.0});
    if (toF >= 0)
        push(d, {ActionKind::SendActivation, fstage, fmb, toF, 0, -1, m_cutBytes[fstage]});
    if (toB >= 0)
        push(d, {ActionKind::SendGradient, bstage, bmb, toB, 0, -1, m_cutBytes[bstage - 1]});
}

void ScheduleBuilder::backwardWeight(int stage, int microbatch, int version)
{
    push(deviceOf(stage, microbatch), {ActionKind::BackwardWeight, stage, microbatch, -1, version, -1, 0.0});
}

void ScheduleBuilder::step(int device, int stage, int version)
{
    if (m_group[stage] >= 0)
        push(device, {ActionKind::AllReduce, stage, -1, -1, 0, m_group[stage], m_weightBytes[stage] * m_gradientScale});
    tiedAllReduce(device, stage);
    push(device, {ActionKind::OptimizerStep, stage, -1, -1, version, -1, 0.0});
}

void ScheduleBuilder::tiedAllReduce(int device, int stage)
{
    for (int g : m_tied[stage]) {
        const auto& members = m_schedule.groups[g].devices;
        if (std::find(members.begin(), members.end(), device) != members.end())
            push(device, {ActionKind::AllReduce, stage, -1, -1, 0, g, m_tiedBytes});
    }
}

Schedule ScheduleBuilder::finish()
{
    return std::move(m_schedule);
}

VCopies vCopies(const ScheduleBuilder& b, std::string_view kind)
{
    const std::string k(kind);
    if (b.chunks() != 2)
        throw InputError({}, 0, "/schedule/chunks",
            "'" + k + "' runs two chunks per device in a V (chunks 2), not " + std::to_string(b.chunks()));
    const int d = b.replicas(0);
    for (int s = 0; s < b.stageCount(); ++s)
        if (b.replicas(s) != d)
            throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                "'" + k
                    + "' runs replicated stages as equal copies of the V, so every stage needs the same number of "
                      "replicas (stage 0 has "
                    + std::to_string(d) + ", stage " + std::to_string(s) + " has " + std::to_string(b.replicas(s))
                    + ")");
    const int m = b.microbatchesPerBatch();
    if (m % d != 0)
        throw InputError({}, 0, "/schedule/microbatches",
            "'" + k + "' needs the microbatches per batch (" + std::to_string(m) + ") to be a multiple of the replicas "
                + std::to_string(d));
    return {d, m / d};
}

Schedule buildV(const Plan& plan, std::string_view kind, const std::function<VPrograms(int p, int count)>& programs)
{
    ScheduleBuilder b(plan, kind);
    const int p = b.depth();
    const int m = b.microbatchesPerBatch();
    const auto [d, local] = vCopies(b, kind);
    const VPrograms ranks = programs(p, local);
    for (int j = 0; j < d; ++j)
        for (int rank = 0; rank < p; ++rank) {
            const int device = b.device(rank, j);
            const int stages[2] = {rank, 2 * p - 1 - rank};
            for (int batch = 0; batch < b.batches(); ++batch) {
                const auto global = [&](int i) { return batch * m + j + d * i; };
                for (const VAction& a : ranks[rank]) {
                    const int s = stages[a.chunk], k = global(a.microbatch);
                    if (a.paired >= 0) {
                        b.forwardBackward(s, k, stages[1 - a.chunk], global(a.paired), batch);
                        continue;
                    }
                    switch (a.kind) {
                    case ActionKind::Forward:
                        b.forward(s, k, batch);
                        break;
                    case ActionKind::Backward:
                        b.backward(s, k, batch);
                        break;
                    case ActionKind::BackwardInput:
                        b.backwardInput(s, k, batch);
                        break;
                    default:
                        b.backwardWeight(s, k, batch);
                        break;
                    }
                }
                for (int s : stages)
                    b.step(device, s, batch + 1);
            }
        }
    return b.finish();
}

double vProgramBubble(const VPrograms& ranks, const UniformStageTimes& times)
{
    const int p = static_cast<int>(ranks.size());
    if (p == 0)
        return 0;
    const int m = static_cast<int>(std::count_if(ranks[0].begin(), ranks[0].end(),
        [](const VAction& a) { return a.kind == ActionKind::Forward && a.chunk == 0; }));
    const double f = times.forward_s / 2, in = times.input_s / 2, w = times.weight_s / 2;
    // end[kind][virtual stage][microbatch] of forwards (0) and input gradients or fused backwards (1); < 0: not yet.
    std::vector<std::vector<std::vector<double>>> end(
        2, std::vector<std::vector<double>>(2 * p, std::vector<double>(m, -1)));
    const auto stage = [p](int rank, int chunk) { return chunk == 0 ? rank : 2 * p - 1 - rank; };
    // The pass a forward of virtual stage s waits for: the forward of s - 1; a backward: that of s + 1 (the loss's
    // backward, at the last virtual stage, waits for its own forward).
    const auto ready = [&](bool backward, int s, int k) {
        if (!backward)
            return s == 0 ? 0.0 : end[0][s - 1][k];
        return s == 2 * p - 1 ? end[0][s][k] : end[1][s + 1][k];
    };
    std::vector<std::size_t> pc(p, 0);
    std::vector<double> clock(p, 0);
    double work = 0;
    for (const auto& a : ranks[0])
        work += a.kind == ActionKind::Forward     ? f + (a.paired >= 0 ? in + w : 0)
            : a.kind == ActionKind::Backward      ? in + w
            : a.kind == ActionKind::BackwardInput ? in
                                                  : w;
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; ++r)
            for (; pc[r] < ranks[r].size(); ++pc[r]) {
                const VAction& a = ranks[r][pc[r]];
                const int s = stage(r, a.chunk);
                double start = clock[r];
                if (a.kind == ActionKind::BackwardWeight) {
                    clock[r] = start + w;
                    progress = true;
                    continue;
                }
                const bool backward = a.kind != ActionKind::Forward;
                const double in0 = ready(backward, s, a.microbatch);
                const int other = stage(r, 1 - a.chunk);
                const double in1 = a.paired >= 0 ? ready(true, other, a.paired) : 0.0;
                if (in0 < 0 || in1 < 0)
                    break; // blocked: another rank first
                start = std::max({start, in0, in1});
                if (!backward) {
                    end[0][s][a.microbatch] = clock[r] = start + f;
                    if (a.paired >= 0)
                        end[1][other][a.paired] = clock[r] += in + w;
                } else {
                    end[1][s][a.microbatch] = clock[r] = start + in + (a.kind == ActionKind::Backward ? w : 0);
                }
                progress = true;
            }
    }
    for (int r = 0; r < p; ++r)
        if (pc[r] < ranks[r].size())
            throw std::logic_error("vProgramBubble: the programs deadlock");
    return *std::max_element(clock.begin(), clock.end()) - work;
}

double vProgramPeakActivationBytes(const std::vector<VAction>& program, double stash, double kept)
{
    double current = 0, peak = 0;
    for (const auto& a : program) {
        if (a.kind == ActionKind::Forward)
            current += stash;
        else if (a.kind == ActionKind::BackwardInput)
            current += kept;
        else if (a.kind == ActionKind::BackwardWeight)
            current -= stash + kept;
        peak = std::max(peak, current);
        if (a.kind == ActionKind::Backward || a.paired >= 0)
            current -= stash;
    }
    return peak;
}

std::vector<int> replicaMicrobatches(int begin, int end, int replica, int replicas)
{
    std::vector<int> ids;
    int first = begin + ((replica - begin % replicas) % replicas + replicas) % replicas;
    if (first < end)
        ids.reserve(static_cast<std::size_t>((end - first + replicas - 1) / replicas));
    for (int k = first; k < end; k += replicas)
        ids.push_back(k);
    return ids;
}

} // namespace pw::planner
