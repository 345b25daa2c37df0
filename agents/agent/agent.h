// SPDX-License-Identifier: MIT
// pipewright-agent's program: speaks the protocol (agents/protocol) on two file descriptors (its stdin and stdout,
// or an SSH channel's), runs its devices' part of a plan with the engine, and streams telemetry back.
#pragma once

#include "agents/protocol/messages.h"

namespace pw::agents {

/// What this machine and build offer (the handshake's Hello; `pipewright-agent --capabilities` prints it).
Hello capabilities();

/// Runs one agent session on in_fd/out_fd: Hello, then RunSpec, rendezvous, Start, telemetry, Done. Returns the
/// process exit status (0 succeeded or stopped, 1 failed). Exits the process at once when the controller goes
/// away (in_fd reaches its end) while devices are still running: nothing of a run outlives its controller.
int runAgentSession(int in_fd, int out_fd);

/// Asks a running session to stop as if the controller had sent Stop (SIGTERM's handler calls it).
void requestAgentStop();

} // namespace pw::agents
