// SPDX-License-Identifier: MIT
// SSH sessions to the nodes of a cluster (libssh): the host key verified against OpenSSH's known_hosts, the user
// authenticated with ssh-agent, an identity file or the default keys, ~/.ssh/config honoured (Host aliases,
// HostName, Port, User, IdentityFile), commands run on channels, files uploaded by SFTP. Every failure is an
// SshError that says which host, what went wrong and what to do; no key material, passphrase or agent socket
// content is ever part of a message.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace pw::agents {

/// @brief Where to connect: a cluster node's host (or ~/.ssh/config alias) and, when given, port, user and key.
struct SshEndpoint
{
    std::string host;
    int port = 0; ///< 0: ~/.ssh/config's Port, else 22
    std::string user; ///< empty: ~/.ssh/config's User, else the local user
    std::string identity_file; ///< empty: ssh-agent, then ~/.ssh/config's IdentityFile and the default keys

    bool operator==(const SshEndpoint&) const = default;
};

/// @brief A server's host key as the user must judge it.
struct HostKey
{
    std::string host; ///< as known_hosts names it: "name" or "[name]:port"
    std::string type; ///< "ssh-ed25519", ...
    std::string fingerprint; ///< "SHA256:..." (what `ssh-keygen -lf` prints)
    std::string known_fingerprint; ///< a changed key: the fingerprint known_hosts holds; else empty
    /// The known_hosts file the key was checked against, where a trusted key is recorded (knownHostsFile()).
    std::filesystem::path known_hosts_file;

    bool operator==(const HostKey&) const = default;
};

/// @brief How to connect, for every node of a run.
struct SshSettings
{
    /// Empty: the account's ~/.ssh/known_hosts (knownHostsFile()), and /etc/ssh/ssh_known_hosts read too.
    std::filesystem::path known_hosts;
    std::filesystem::path config; ///< empty: ~/.ssh/config and /etc/ssh/ssh_config
    /// Trust and record a key known_hosts does not hold (--accept-new-host-keys). A changed key is refused always.
    bool accept_new_host_keys = false;
    /// Asked about an unknown key when it is not accepted by the flag (the app's dialog); true records it.
    std::function<bool(const HostKey&)> confirm_new_host_key;
    std::chrono::milliseconds timeout {10000};
};

/// The account's home directory as OpenSSH and libssh take it: the password database's entry for the real user
/// (getpwuid), not $HOME, which a shell, sudo or a test may have changed; $HOME only for a user without an entry.
std::filesystem::path accountHome();
/// The known_hosts file host keys are checked against and trusted keys are recorded in: `given` when not empty,
/// else accountHome()/.ssh/known_hosts. SshSession::open() hands this very path to libssh (what it reads and
/// writes), and every message, the CLI and the app's deploy dialog name it: one path for all of them.
std::filesystem::path knownHostsFile(const std::filesystem::path& given = {});

/// @brief What failed, for pre-flight's diagnosis and the tests.
enum class SshFailure : std::uint8_t {
    Unreachable, ///< name resolution, refused or timed-out connection, protocol error
    HostKeyUnknown,
    HostKeyChanged,
    Authentication,
    Remote, ///< a channel or a remote command failed
    Transfer, ///< SFTP
};
std::string_view toString(SshFailure failure);

class SshError : public std::runtime_error
{
public:
    SshError(SshFailure failure, std::string host, const std::string& message);
    SshFailure failure() const { return m_failure; }
    const std::string& host() const { return m_host; }

private:
    SshFailure m_failure;
    std::string m_host;
};

class SshSession;

/// @brief A command running on the remote host: its stdin, stdout (and stderr, collected), exit status.
class SshChannel
{
public:
    ~SshChannel();
    SshChannel(const SshChannel&) = delete;
    SshChannel& operator=(const SshChannel&) = delete;

    /// Writes all of `data` to the command's stdin (blocking, at most `timeout` without progress: a silent link
    /// must not hold the caller forever). Throws SshError when the channel is closed or the time is up.
    void write(std::span<const char> data, std::chrono::milliseconds timeout = std::chrono::milliseconds {10000});
    /// Closes the command's stdin (it reads end of file).
    void sendEof();
    /// Reads what has arrived on stdout without blocking: bytes read, 0 when nothing is there yet, -1 at end of file.
    /// Stderr is kept (stderrText()).
    long readSome(std::span<char> buffer);
    /// Waits up to `timeout` for stdout data: bytes read, 0 on timeout, -1 at end of file.
    long read(std::span<char> buffer, std::chrono::milliseconds timeout);
    bool atEof() const;
    const std::string& stderrText() const { return m_stderr; }
    /// The command's exit status, once stdout reached its end (libssh then waits for the status or the channel's
    /// close); -1 when the server did not say (killed by a signal).
    int exitStatus() const;
    /// Closes the channel (the command gets SIGHUP from sshd when it still runs).
    void close();

private:
    friend class SshSession;
    SshChannel(SshSession& session, void* channel);
    void drainStderr();
    SshSession& m_session;
    void* m_channel = nullptr; ///< ssh_channel
    std::string m_stderr;
};

/// @brief One authenticated SSH connection. Not thread-safe: one thread uses a session and its channels.
class SshSession
{
public:
    /// Connects, verifies the host key and authenticates; throws SshError.
    static std::unique_ptr<SshSession> open(const SshEndpoint& endpoint, const SshSettings& settings);
    ~SshSession();
    SshSession(const SshSession&) = delete;
    SshSession& operator=(const SshSession&) = delete;

    /// "user@host:port" as connected (after ~/.ssh/config).
    const std::string& name() const { return m_name; }
    const HostKey& hostKey() const { return m_hostKey; }

    struct Result
    {
        int exit_status = -1;
        std::string out, err;
    };
    /// Runs a command to its end (stdin: `input`, then end of file); throws SshError on timeout or a lost link.
    Result run(const std::string& command, std::string_view input = {},
        std::chrono::milliseconds timeout = std::chrono::milliseconds {30000});
    /// Starts a command and returns its channel.
    std::unique_ptr<SshChannel> start(const std::string& command);
    /// Writes `data` to `remote_path` by SFTP (created or replaced) with permissions `mode`; throws SshError.
    void upload(std::span<const char> data, const std::string& remote_path, int mode = 0644);
    /// The socket the session reads from, to poll() on beside other connections.
    int socket() const;
    /// Whether the connection is still up (as far as libssh knows: a link that went silent still looks up).
    bool connected() const;
    /// Gives up a connection that went silent: shuts its socket down without a word to the server (a polite
    /// disconnect would wait on the dead link). Its channels read the end of their streams, and are freed with the
    /// session; nothing blocks.
    void abandon();

private:
    SshSession() = default;
    void* m_session = nullptr; ///< ssh_session
    bool m_abandoned = false; ///< abandon(): no call reaches libssh's session but its destruction
    std::string m_name;
    std::string m_host; ///< for errors
    HostKey m_hostKey;
    friend class SshChannel;
};

/// POSIX shell quoting of one word ('...' with ' escaped), for the commands run remotely.
std::string shellQuote(const std::string& word);

} // namespace pw::agents
