// SPDX-License-Identifier: MIT
// Internal to engine/: the schedule features a stage of DeviceExecutor may run, each owning its state and its steps.
// WeightVersions: the weights each forward and backward uses (PipeDream's stashed versions, 2BW's two, the flushed
// schedules' one; HetPipe's pulls change them too). Stashes: a microbatch's activations from its forward to its
// backward (with the backward split, to its W). GradientBuckets: the replicas' all-reduce, posted in buckets as the
// last backward's layers finish. TiedCopies: the tied embedding's two copies, summed on one device (ZBV) or over a
// group. Waves: HetPipe's wave-synchronous updates between pipelines. DeviceExecutor composes them per stage.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "model.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "transport.h"

namespace pw::engine {

/// @brief The weights a stage's actions use: the live ones, and copies of older ones later actions still need.
class WeightVersions
{
public:
    /// Weights are named by the schedule's version and, with wave pulls, the pulls before it (a pull changes the
    /// weights without a new version): pulls << 32 | version.
    static std::int64_t key(int pulls, int version) { return (static_cast<std::int64_t>(pulls) << 32) | version; }
    /// Per action of a device's period: the weights it uses. Forwards use the live ones; backwards their forward's
    /// (when its version is theirs). 0 for the other actions.
    static std::vector<std::int64_t> actionKeys(const std::vector<planner::Action>& actions);

    /// Action `index` of the period reads the weights `key` (its last use is the highest index recorded).
    void readBy(std::int64_t key, int index) { m_lastUse[key] = index; }
    std::int64_t liveKey() const { return key(m_pulls, m_version); }
    int version() const { return m_version; }
    /// The parameters of `key`: the live ones, or a kept copy; throws naming `what` asked for a copy not kept.
    const void* weights(const StageModel& model, std::int64_t key, const std::string& what) const;
    /// Before the live weights change at action `index` (a step, a pull): a copy when a later action reads them.
    void keepLive(Backend& backend, const StageModel& model, int index);
    /// Action `index` read `key`: its copy goes when no later action reads it (a repeated period's keys are past
    /// the table: used once).
    void used(std::int64_t key, int index);
    void stepped(int version) { m_version = version; }
    void pulled() { ++m_pulls; }

private:
    int m_version = 0; ///< the version the live parameters hold
    int m_pulls = 0; ///< wave pulls applied to the live parameters
    std::map<std::int64_t, Buffer> m_copies; ///< older weights (by key) that later actions still read
    std::map<std::int64_t, int> m_lastUse; ///< key -> index of the last action of the period that reads it
};

/// @brief The activations of the microbatches between their forward and their backward (or W), reusing the buffers
/// of finished ones (no allocation per microbatch after the first).
class Stashes
{
public:
    StageStash& begin(int microbatch);
    /// Throws naming `what` when the microbatch has no forward stashed.
    StageStash& at(int microbatch, const std::string& what);
    void end(int microbatch);

private:
    std::map<int, StageStash> m_live;
    std::vector<StageStash> m_spare;
};

/// @brief The all-reduce of a stage's gradients over its replicas: posted in buckets of about `bucket_bytes` as the
/// layers of the last backward before it finish, or whole at the AllReduce action.
class GradientBuckets
{
public:
    explicit GradientBuckets(std::vector<int> replicas);
    const std::vector<int>& replicas() const { return m_replicas; }
    /// A LayerDone for the backward about to run: contiguous finished ranges posted once they reach bucket_bytes;
    /// finish() posts the rest. The first bucket begins the AllReduce's span on `timer`.
    StageModel::LayerDone collect(
        StageModel& model, Transport& transport, ActionTimer& timer, std::size_t bucket_bytes);
    void finish(StageModel& model, Transport& transport, ActionTimer& timer);
    /// The AllReduce's ticket when buckets began it (then cleared).
    std::optional<std::uint64_t> takeTicket() { return std::exchange(m_ticket, {}); }
    /// The AllReduce action: waits for the buckets, or all-reduces the whole gradient when none was posted.
    void allReduce(StageModel& model, Transport& transport);

private:
    void post(StageModel& model, Transport& transport, ActionTimer& timer, std::size_t first, std::size_t end);

    std::vector<int> m_replicas; ///< sorted
    std::vector<Handle> m_posted;
    std::optional<std::uint64_t> m_ticket;
    std::pair<std::size_t, std::size_t> m_pending {0, 0}; ///< finished gradients [first, end) not posted yet
};

/// @brief The tied embedding's copy on a stage (the embedding's or the head's): its gradient summed with the other
/// copy's before a step, on this device (ZBV's V: both stages here) or over a group of devices.
struct TiedCopies
{
    int partner = -1; ///< this device's other stage holding a copy, or -1
    bool summed = false; ///< the two local copies are summed for the coming step

    /// Both copies on this device: each gets the sum (through fp32, as a group's reduction), once per step.
    static void sumLocal(Backend& backend, TiedCopies& a, StageModel& ma, TiedCopies& b, StageModel& mb);
    /// Over `members` (a TiedWeights group): every replica of a stage holds the same sum after its all-reduce, so
    /// in a group of several replicas of one stage each contributes its share.
    static void exchange(Backend& backend, Transport& transport, StageModel& model, const std::vector<int>& replicas,
        const std::vector<std::int32_t>& members);
};

/// @brief HetPipe's wave synchronous parallel (schedule "wsp") for one stage: the sum of its own updates per wave,
/// pushed to the devices of the other pipelines holding the same layers; their waves pulled and added to the live
/// weights (digest §1.2.5).
class Waves
{
public:
    /// concurrent: microbatches per wave; last_pull: per device of the schedule, the last wave it pulls (-1: none).
    Waves(int concurrent, std::vector<int> last_pull);
    /// Where this stage's updates go and the others' come from: each tensor is owned by one layer (the head's copy
    /// of a tied embedding by the embedding), every pipeline holds each layer once, ranges in the receiver's order.
    void link(const planner::Plan& plan, const ModelConfig& config, int stage, const StageModel& model);
    void backwardDone(int microbatch) { m_lastBackward = microbatch; }
    /// Bracket an optimizer step: the update it made is added to its wave's sum.
    void beforeStep(Backend& backend, const StageModel& model);
    void afterStep(Backend& backend, const StageModel& model);
    /// Returns the bytes moved.
    double push(Backend& backend, Transport& transport, std::deque<Handle>& sends, const StageModel& model, int stage,
        int wave);
    double pull(Backend& backend, Transport& transport, StageModel& model, int wave);

private:
    struct Link
    {
        int device = 0;
        int stage = 0; ///< the peer's stage (the sender's stage names the transfer)
        std::vector<std::pair<std::size_t, std::size_t>> ranges; ///< (offset, size) in this stage's parameters
        std::size_t size = 0;
    };
    int m_concurrent;
    std::vector<int> m_lastPull;
    int m_lastBackward = -1; ///< microbatch of the latest backward (its step's wave)
    int m_pulledWave = -1; ///< every wave up to this one is in the live weights
    std::map<int, Buffer> m_updates; ///< wave -> sum of this stage's own updates in it (fp32)
    std::vector<Link> m_pushTo, m_pullFrom;
    Buffer m_before; ///< the weights before the step in progress
};

} // namespace pw::engine
