// SPDX-License-Identifier: MIT
// How the run controller reaches one agent: a child process on pipes (the local launcher), or a served agent on a
// remote host through an SSH channel (app/run/remote.h). The controller speaks the protocol over either alike.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pw::app {

class AgentConnection
{
public:
    virtual ~AgentConnection() = default;

    /// Where the agent runs, for messages: "local" or "user@host:port".
    virtual std::string where() const = 0;
    /// The descriptor to poll for input, -1 while the link is down. Several connections may share one (an SSH
    /// session's socket carries every channel of its host).
    virtual int pollFd() const = 0;
    /// Whether input may wait inside the connection where poll() does not see it (libssh reads packets of every
    /// channel of a session into their buffers): the controller then reads without waiting for the descriptor.
    virtual bool buffersInput() const { return false; }
    /// What arrived, without blocking: bytes read, 0 when nothing is there yet, -1 at the end of the stream.
    virtual long read(std::span<char> buffer) = 0;
    /// Sends bytes (blocking); throws std::runtime_error when the link is down.
    virtual void write(std::string_view bytes) = 0;
    /// After the end of the stream: how the agent process ended ("exited with status 1", "was killed by signal
    /// 9 (Killed)"), or nullopt when it still runs or cannot be asked (a dropped link): see reconnect().
    /// `wait`: block until a local process can be reaped.
    virtual std::optional<std::string> ended(bool wait) = 0;
    /// Sends `signal` to the agent process, wherever it runs.
    virtual void signal(int signal) = 0;
    /// For a link that dropped while its agent lives on: tries to reach it again without blocking (the caller
    /// then sends Resume). True once the link is back; false while an attempt is still on its way (call again);
    /// throws std::runtime_error when an attempt failed (the next call starts another). Local agents cannot.
    virtual bool reconnect() { return false; }
    virtual bool canReconnect() const { return false; }
    /// Gives up a link that went silent (no bytes for longer than the agent's heartbeat allows) without waiting on
    /// it: the agent may live on beyond it, and reconnect() makes a new one. Nothing for local agents.
    virtual void abandonLink() { }
};

/// Starts `exe` as a child process speaking the protocol on its stdin and stdout (stderr stays the caller's). It
/// gets PR_SET_PDEATHSIG (it dies with its parent) and OMP_WAIT_POLICY=PASSIVE unless the environment sets one.
std::unique_ptr<AgentConnection> startLocalAgent(const std::filesystem::path& exe);

/// "exited with status N" or "was killed by signal N (name)" for a wait(2) status.
std::string describeExit(int status);

} // namespace pw::app
