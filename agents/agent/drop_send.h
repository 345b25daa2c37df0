// SPDX-License-Identifier: MIT
// Internal to agents/: a test hook that makes a run hang the way a lost message does. With
// PIPEWRIGHT_TEST_DROP_SEND=DEVICE:KIND:STAGE:MICROBATCH in its environment (KIND F: an activation, B: a gradient)
// the agent skips that one send of that device, so that its receiver waits for it forever; the stall tests check
// that the controller names the wait.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/transport.h"

namespace pw::agents {

/// @brief The one send to skip: the device that would send it and the transfer's tag.
struct DroppedSend
{
    int device = 0;
    bool gradient = false; ///< B (a gradient), else F (an activation)
    int stage = 0;
    int microbatch = 0;

    bool operator==(const DroppedSend&) const = default;
};

/// The hook's variable parsed; nullopt when it is unset or empty. Throws planner::InputError naming the expected
/// form for anything else.
std::optional<DroppedSend> droppedSendFromEnv();

/// `inner` (not owned), forwarding everything but the dropped send, which it reports done without sending it;
/// `dropped` says when it did (to log it).
std::unique_ptr<engine::Transport> dropOneSend(
    engine::Transport& inner, const DroppedSend& send, std::function<void(const std::string&)> dropped);

} // namespace pw::agents
