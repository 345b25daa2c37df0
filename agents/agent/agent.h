// SPDX-License-Identifier: MIT
// pipewright-agent's program: speaks the protocol (agents/protocol) on two file descriptors (its stdin and stdout,
// or an SSH channel's), runs its devices' part of a plan with the engine, and streams telemetry back.
#pragma once

#include <chrono>
#include <string>

#include "agents/protocol/messages.h"

namespace pw::agents {

/// What this machine and build offer (the handshake's Hello; `pipewright-agent --capabilities` prints it): cores,
/// memory, BLAS, the CUDA build and libraries (engine::probeCuda) and every GPU this process sees.
Hello capabilities();

/// The Hello for people (`pipewright-agent --capabilities --human`): every item on a line of its own, with what is
/// missing said as such (no CUDA in the build, no driver, no device visible and why).
std::string describeCapabilities(const Hello& hello);

/// Runs one agent session on in_fd/out_fd: Hello, then RunSpec, rendezvous, Start, telemetry, Done. Returns the
/// process exit status (0 succeeded or stopped, 1 failed). Exits the process at once when the controller goes
/// away (in_fd reaches its end) while devices are still running: nothing of a run outlives its controller.
int runAgentSession(int in_fd, int out_fd);

/// @brief A served agent (pipewright-agent --serve): its controller connects on a unix socket, through an SSH
/// channel that may drop. While it is away the agent trains on and journals telemetry; when it connects again it
/// sends Resume and gets what it missed. After `linger` without a controller the agent stops the run itself.
struct ServeOptions
{
    int listen_fd = -1; ///< listening unix socket
    std::chrono::seconds linger {30};
};

/// Runs one session on a served agent's first connection; returns like runAgentSession once the controller said
/// goodbye (Stop after Done) or stayed away for the linger time.
int runServedSession(int connection, const ServeOptions& options);

/// Asks a running session to stop as if the controller had sent Stop (SIGTERM's and SIGINT's handler calls it, with
/// the signal's number: the session's Done then says it was stopped by that signal, not by the controller).
/// Async-signal-safe.
void requestAgentStop(int signal = 0);
/// Whether requestAgentStop was called (a relay's loop ends on it: SIGTERM from the relay that replaces it).
bool agentStopRequested();

} // namespace pw::agents
