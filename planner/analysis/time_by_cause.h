// SPDX-License-Identifier: MIT
// Why a run is slow: each device's time in each step split into causes (compute, communication exposed, the plan's
// bubble, waits beyond the plan on a named peer, host gaps), the communication each kind hid under compute, and the
// stragglers (devices and links slower than their peers and their prediction). Pure functions of the measured
// timeline, the prediction for the same plan and steps, and the schedule both ran: the run monitor asks them live,
// `history show` and the run comparison after the run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../schedule.h"
#include "../timeline.h"

namespace pw::planner {

/// @brief Where one device's time went, in seconds. The six parts partition the time: they sum to it exactly.
struct TimeCauses
{
    double compute_s = 0; ///< its compute lane busy: F, B, I, W, optimizer steps
    /// Blocked in a receive after its sender had sent: the data on the wire, not hidden under compute.
    double p2p_exposed_s = 0;
    /// Blocked in an all-reduce after its last member arrived: the collective itself (data-parallel gradients, tied
    /// weights). Tensor-parallel collectives run inside the compute spans and are counted there.
    double collective_exposed_s = 0;
    /// Waiting for a peer (a receive's sender, an all-reduce's last member) as long as the plan waits in the step,
    /// its prediction scaled to the run's measured speed (TimeByCause::scale): the schedule's intended idle.
    double bubble_s = 0;
    double late_s = 0; ///< waiting for a peer beyond the plan's wait (DeviceStep::late_by names who)
    double host_gap_s = 0; ///< no action in progress: its host had not issued the next one yet

    double idle() const { return p2p_exposed_s + collective_exposed_s + bubble_s + late_s + host_gap_s; }
    double total() const { return compute_s + idle(); }
    TimeCauses& operator+=(const TimeCauses& o);
    bool operator==(const TimeCauses&) const = default;
};

/// @brief One of TimeCauses' parts by name, for tables and charts: compute, "p2p exposed", "all-reduce exposed",
/// "bubble (planned)", "late peer", "host gap", in this order.
struct CauseField
{
    std::string_view name;
    double TimeCauses::*seconds;
};
std::span<const CauseField> causeFields();

/// @brief How long a device waited beyond the plan on one peer: the one that made it late, followed through peers that
/// were themselves waiting beyond the plan just before they sent or arrived (a chain of stages behind a straggler names
/// the straggler).
struct LatePeer
{
    int peer = -1;
    double seconds = 0;
    bool operator==(const LatePeer&) const = default;
};

/// @brief One device's step: from the end of its previous step's last optimizer step (the run's first action for
/// step 0) to the end of this step's last.
struct DeviceStep
{
    int device = 0;
    int step = 0;
    double t0 = 0;
    double t1 = 0;
    TimeCauses causes;
    std::vector<LatePeer> late_by; ///< the peers that made it wait beyond the plan, longest first

    bool operator==(const DeviceStep&) const = default;
};

/// @brief The communication of one kind over the run: how much of it ran while the device that needed it computed.
struct CommOverlap
{
    enum class Kind : std::uint8_t {
        PointToPoint, ///< activations and gradients between stages
        Collective, ///< all-reduces: data-parallel gradients and tied weights
    };
    Kind kind = Kind::PointToPoint;
    double exposed_s = 0; ///< the receiving device blocked while it ran (summed over devices)
    double overlapped_s = 0; ///< it ran while the receiving device computed
    double percent() const;
    bool operator==(const CommOverlap&) const = default;
};
std::string_view toString(CommOverlap::Kind kind); ///< "p2p", "all-reduce"

/// @brief The time by cause of a run so far.
struct TimeByCause
{
    /// The run's pace: measured over predicted compute of the median device (of an even count, the mean of the middle
    /// two; per device: its measured actions' durations over the prediction's of the same actions). The plan's bubble
    /// is a replay at the run's pace per kind of action (timeByCause); this is what the text and the app show. 1
    /// without a prediction.
    double scale = 1;
    std::vector<DeviceStep> steps; ///< complete steps only, by step then device
    std::vector<CommOverlap> overlap; ///< one per kind that ran

    /// Device `device`'s causes summed over its complete steps.
    TimeCauses device(int device) const;
    int deviceCount() const;
    int stepCount() const;
    bool operator==(const TimeByCause&) const = default;
};

/// Splits every complete step of every device of `measured` into causes. `schedule`: the program every device ran
/// (its actions are the spans' `action` indices, its groups the all-reduces' members); `predicted`: the simulator's
/// timeline for the same plan and steps (its spans matched by device and action; empty: no bubble, every wait is
/// counted late). Steps are counted by optimizer steps: a device's step ends with the last optimizer step of its
/// stages in that step.
TimeByCause timeByCause(const Timeline& measured, const Timeline& predicted, const Schedule& schedule);

/// @brief A device or a link slower than its peers and its plan.
struct Straggler
{
    int device = 0; ///< the slow device; a link's sender
    int peer = -1; ///< a link: its receiver; -1 for a device
    ActionKind kind = ActionKind::Forward; ///< the slow actions' kind (a link: its sends)
    double slowdown = 1; ///< its time over the expected time (1.8: 80 % slower than its peers at their pace)
    double extra_s = 0; ///< seconds per step beyond the expected time, in the latest step
    int since_step = 0; ///< the first step of the current run of slow steps
    int last_step = 0; ///< the latest complete step it was slow in

    /// "device 1 runs F 2.1x slower than its peers and its plan since step 3 (+41 ms per step)"; a link "link 0 -> 1
    /// ...".
    std::string text() const;
    bool operator==(const Straggler&) const = default;
};

/// @brief When an action counts as straggling.
struct StragglerRule
{
    /// Slower than `threshold` x the expected time: its prediction x the pace of the median device (link) for the
    /// same kind in the same step.
    double threshold = 1.5;
    /// And by at least this share of the step (noise of short actions is not a straggler).
    double min_share = 0.05;
    bool operator==(const StragglerRule&) const = default;
};

/// The devices (per compute kind) and links whose latest two complete steps are slow by `rule` (a device: or the
/// latest by twice its threshold and share), with since when they have been: slowest first. Needs the prediction
/// (`predicted` empty: none found).
std::vector<Straggler> findStragglers(
    const Timeline& measured, const Timeline& predicted, const Schedule& schedule, StragglerRule rule = {});

/// The time-by-cause table as text for people: per device, seconds per step and share of each cause, the late peers,
/// the overlap per communication kind and the stragglers; e.g. for `history show`.
std::string timeByCauseText(const TimeByCause& t, const std::vector<Straggler>& stragglers);

} // namespace pw::planner
