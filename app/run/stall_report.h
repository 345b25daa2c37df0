// SPDX-License-Identifier: MIT
// The stall report: when a run stops making progress, the chain of waits from device to device (a receive waits
// on its peer, an all-reduce on the replica that is not in it), ending at an agent that went silent, at one that
// computes, or in a cycle (a deadlock), said in one line for people. No I/O: the controller gathers what its agents
// reported and asks explainStall.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/timeline.h"

namespace pw::app {

/// @brief What the controller knows of one device when it looks for the cause of a stall.
struct DeviceWait
{
    int device = 0;
    std::vector<int> stages; ///< the plan's stages on this device
    std::string host; ///< its agent's host
    std::string where; ///< "cpu", "cuda:1"
    bool silent = false; ///< its agent has sent nothing (no heartbeat) for silent_s
    double silent_s = 0;
    bool reported = false; ///< its agent reported this device's progress at least once
    bool busy = false; ///< in `action` (t0: when it began, in seconds from the run's start on the controller's clock)
    planner::Span action;
    std::int64_t finished = 0; ///< actions it finished
    double predicted_s = 0; ///< what the plan predicts `action` takes (0: no prediction)
    /// The devices it all-reduces the tied embedding's gradient with before its step (its TiedWeights group of
    /// Plan::tiedWeightGroups, less itself)
    std::vector<int> tied;
    /// Its stage's tensor-parallel group in rank order, itself included (empty without tensor parallelism): the
    /// devices whose collectives inside every forward and backward it meets.
    std::vector<int> tensor_group;

    bool operator==(const DeviceWait&) const = default;
};

/// @brief The chain of waits, and the line that says it.
struct StallReport
{
    std::string text;
    std::vector<int> chain; ///< the devices it goes through, in order
    bool cycle = false; ///< the chain came back to a device in it (a deadlock)
    int silent_device = -1; ///< where it ends at a silent agent, that device

    bool operator==(const StallReport&) const = default;
};

/// The chain of waits at time `now` (seconds from the run's start, the clock of the actions' t0), starting at
/// device `start`, or when it is -1 at the device that has waited longest. `stageDevices[s]`: the devices of stage
/// s (its replicas), for an all-reduce. A device computing in a tensor-parallel group waits in the group's collectives
/// on a member that is not in the same computation. E.g. "stage 1 (device 1, host b, cpu) waits 62 s for F mb 12 from
/// stage 0; stage 0 (device 0, host a, cpu) has sent nothing for 61 s (stopped or hung; it last reported computing F mb
/// 13)".
StallReport explainStall(const std::vector<DeviceWait>& devices, const std::vector<std::vector<int>>& stageDevices,
    double now, int start = -1);

/// The device of `devices` whose action runs far beyond the plan's prediction (longer than `factor` times it and
/// than `floor_s`), the one most beyond; -1 when none.
int slowestBeyondPlan(const std::vector<DeviceWait>& devices, double now, double factor = 10, double floor_s = 10);

} // namespace pw::app
