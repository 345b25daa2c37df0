// SPDX-License-Identifier: MIT
// Internal to app/: the history file's schema, as the migrations that build it step by step, and the numbers the
// spans table stores for the planner's lanes and action kinds.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "planner/timeline.h"

namespace pw::app {

/// Migration k takes a file from schema version k to k + 1 (kHistorySchemaVersion steps in all).
std::span<const std::string_view> historyMigrations();

/// The spans table stores lanes and kinds as numbers: reordering an enum of the planner would reinterpret every
/// stored span, so the build fails instead (append new values at the end; a new one needs kKindCount raised).
inline constexpr int kLaneCount = 4;
inline constexpr int kKindCount = 12;
inline constexpr bool enumsInSchemaOrder()
{
    using K = planner::ActionKind;
    using L = planner::Lane;
    constexpr std::array<K, kKindCount> kinds
        = {K::Forward, K::Backward, K::BackwardWeight, K::SendActivation, K::RecvActivation, K::SendGradient,
            K::RecvGradient, K::AllReduce, K::OptimizerStep, K::WavePush, K::WavePull, K::BackwardInput};
    constexpr std::array<L, kLaneCount> lanes = {L::Compute, L::Send, L::Recv, L::Collective};
    for (int i = 0; i < kKindCount; ++i)
        if (static_cast<int>(kinds[i]) != i)
            return false;
    for (int i = 0; i < kLaneCount; ++i)
        if (static_cast<int>(lanes[i]) != i)
            return false;
    return true;
}
static_assert(enumsInSchemaOrder(), "planner::ActionKind or planner::Lane changed: the history stores their numbers");

} // namespace pw::app
