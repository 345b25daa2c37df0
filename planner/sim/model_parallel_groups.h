// SPDX-License-Identifier: MIT
// A plan's tensor- and context-parallel groups as the simulator runs them: once each, on the group's first device.
// Internal to planner/sim/: simulator.cpp uses it.
#pragma once

#include <vector>

#include "simulator.h"

namespace pw::planner {

/// @brief A plan's model-parallel groups (its t c consecutive devices of every stage) where the schedule gives every
/// member the program of the group's first device, with its own peers and its own tensor rank's collectives (as
/// expandTensorParallel makes it) and the cost model charges every member alike. The simulator then runs each group
/// once, on its first device: the group's slices of a transfer are booked on each member's link and the group goes on
/// when its last slice has arrived (Megatron gathers the slices before the next stage computes, §4.4.1), and every
/// member gets its first device's timeline and metrics. Empty `members`: the schedule is simulated rank by rank.
struct ModelParallelGroups
{
    int size = 1; ///< t c
    std::vector<int> members; ///< [leader * size + j]: member j of the group led by `leader`; -1 elsewhere
    std::vector<int> leader; ///< per device: the first device of its group, itself outside groups

    bool active() const { return !members.empty(); }
    int member(int lead, int j) const { return members[static_cast<std::size_t>(lead) * size + j]; }
    bool runs(int d) const { return members.empty() || leader[d] == d; }
};

/// The model-parallel groups of `plan` (t c consecutive devices of every stage, the same in every stage that holds
/// them) on D devices, or none.
ModelParallelGroups groupsOf(const Plan& plan, int D);

/// The groups of `plan` where `schedule` and `cost` treat every member as its leader, or none
/// (ModelParallelGroups::members empty) where a member's program or costs differ from its leader's, or the schedule
/// has parameter-server waves.
ModelParallelGroups modelParallelGroups(const Plan& plan, const Schedule& schedule, const CostModel& cost);

} // namespace pw::planner
