// SPDX-License-Identifier: MIT
// A served agent, for runs deployed over SSH: the agent process lives apart from the SSH connection that started
// it, so that a dropped connection does not end the run. `--session SOCKET` (the command the controller runs on
// the SSH channel) starts `--serve SOCKET` detached unless one already listens there, then relays between its
// stdin/stdout (the channel) and the socket (`--attach`). When the connection drops, the relay dies with it; the
// served agent trains on, journals telemetry, and takes the controller back on a new relay (Resume).
#pragma once

#include <chrono>
#include <string>

namespace pw::agents {

/// pipewright-agent --serve SOCKET [--linger S]: listens on the unix socket (mode 0600, its pid in SOCKET.pid),
/// runs one served session for the controllers that connect, removes the socket when it ends. Exit status as
/// runAgentSession; 1 when no controller connected within the linger time.
int serveCommand(const std::string& socket, std::chrono::seconds linger);

/// pipewright-agent --attach SOCKET: relays stdin to the socket and the socket to stdout until either ends;
/// waits up to `wait` for the socket to accept (a served agent still starting). 0, or 1 when it cannot connect.
int attachCommand(const std::string& socket, std::chrono::seconds wait);

/// pipewright-agent --session SOCKET [--linger S]: the served agent on SOCKET (started detached, in its own session,
/// its output in SOCKET.log, when none listens there), then attachCommand.
int sessionCommand(const std::string& socket, std::chrono::seconds linger);

/// pipewright-agent --probe HOST PORT: connects to HOST:PORT over TCP within 3 s (pre-flight: do the nodes reach
/// each other?). 0 when it connected; 1 with the reason on stderr.
int probeCommand(const std::string& host, int port);

/// pipewright-agent --listen-probe HOST: listens on an ephemeral TCP port of HOST's address (where a Gloo transport
/// of this node would listen), prints the port, and waits up to 10 s for one connection (pre-flight: do the other
/// nodes reach this one on the transport's ports?). 0 when one came; 1 with the reason on stderr.
int listenProbeCommand(const std::string& host);

} // namespace pw::agents
