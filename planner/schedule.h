// SPDX-License-Identifier: MIT
// Schedule: for every device, the ordered list of actions it executes. The simulator draws it and the
// agents run it, so both agree by construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pw::planner {

inline constexpr int kScheduleFormatVersion = 1;

enum class ActionKind : std::uint8_t {
    Forward,
    Backward, ///< input and weight gradients together
    /// Weight gradient alone (zero-bubble schedules: after its own BackwardInput, before the batch's optimizer
    /// step; it frees the stage's stashed activations of its microbatch).
    BackwardWeight,
    SendActivation,
    RecvActivation,
    SendGradient,
    RecvGradient,
    AllReduce, ///< gradient all-reduce among a CollectiveGroup (a stage's replicas, or the holders of tied weights)
    OptimizerStep,
    /// HetPipe's wave synchronous parallel (schedule "wsp"): the device pushes its partition's aggregated
    /// update of wave `wave` to the parameter servers (send lane, bytes = the partition's weights).
    WavePush,
    /// Blocks until every WavePush of wave `wave` in the schedule has arrived at the parameter servers, then
    /// pulls the partition's global weights (bytes = the partition's weights).
    WavePull,
    /// Input gradient alone (zero-bubble schedules, Qi et al. 2024): the part of the backward the previous stage
    /// waits for; it sends the gradient on, and its BackwardWeight follows later. Appended last: the history
    /// stores kinds by number (app/history/schema.h).
    BackwardInput,
};

std::string_view toString(ActionKind kind);
/// Throws InputError for an unknown name.
ActionKind actionKindFromString(std::string_view name);
bool isCompute(ActionKind kind);
bool isSend(ActionKind kind);
bool isRecv(ActionKind kind);
bool isWaveSync(ActionKind kind); ///< WavePush or WavePull
/// Backward, BackwardInput or BackwardWeight.
bool isBackward(ActionKind kind);

/// @brief One step of a device's program.
///
/// Semantics (what the agents implement and the simulator models): compute actions run in order on the
/// device's compute stream; a send is posted when reached and completes in the background (sends to one
/// peer keep their order); a receive blocks the device until the matching send's data has arrived;
/// an all-reduce blocks until every replica of the stage has reached it.
struct Action
{
    ActionKind kind = ActionKind::Forward;
    std::int32_t stage = 0; ///< virtual stage
    std::int32_t microbatch = 0; ///< -1 for per-batch actions (all-reduce, optimizer step)
    std::int32_t peer = -1; ///< device at the other end of a send/receive
    std::int32_t weight_version = 0; ///< version used by F/B; version produced by an optimizer step
    std::int32_t group = -1; ///< all-reduce: index into Schedule::groups
    double bytes = 0; ///< payload of a transfer or collective
    std::int32_t wave = -1; ///< WavePush / WavePull: the wave (0-based); -1 otherwise
    /// A Forward paired with the next compute action on its device, a backward of another stage (DualPipeV's F&B,
    /// torch's OVERLAP_F_B): the two are one unit of the schedule. Pipewright runs them one after the other (so does
    /// torch's runtime without an overlap callback: the overlap DualPipe gains hides expert-parallel all-to-alls);
    /// exports write the pair as one action.
    bool overlaps_next = false;

    bool operator==(const Action&) const = default;
};

/// What a collective group's all-reduce sums.
enum class CollectivePurpose : std::uint8_t {
    /// The gradients of one stage's data-parallel replicas (stage = that stage).
    Replicas,
    /// The gradient of weights two stages of a pipeline share, summed before their optimizer steps: a transformer's
    /// token embedding, tied to its head (stage = the embedding's stage; each member's AllReduce names its own
    /// stage). Its members are both stages' devices (every replica of each, each contributing its share).
    TiedWeights,
};

/// @brief A set of devices that all-reduce together.
struct CollectiveGroup
{
    std::int32_t stage = 0;
    std::vector<std::int32_t> devices;
    CollectivePurpose purpose = CollectivePurpose::Replicas;

    bool operator==(const CollectiveGroup&) const = default;
};

struct Schedule
{
    std::string kind;
    int num_devices = 0;
    int num_stages = 0; ///< virtual stages
    int microbatches = 0; ///< total microbatches in the schedule (all batches)
    int microbatches_per_batch = 0;
    int chunks = 1;
    std::vector<CollectiveGroup> groups;
    std::vector<std::vector<Action>> devices; ///< per device, in execution order

    std::size_t actionCount() const;

    bool operator==(const Schedule&) const = default;
};

nlohmann::json toJson(const Schedule& schedule);
Schedule scheduleFromJson(const nlohmann::json& j);

/// Compact text form of one action, torch.distributed.pipelining style: "3F12", "3SEND_F12", "1ALLREDUCE".
std::string actionLabel(const Action& action);

} // namespace pw::planner
