// SPDX-License-Identifier: MIT
#include "ssh.h"

#include <fstream>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libssh.h"

namespace pw::agents {

namespace {

using Clock = std::chrono::steady_clock;

/// libssh, loaded when the first session opens (libssh.h).
const libssh::Api& lib()
{
    return libssh::api();
}

ssh_session S(void* p)
{
    return static_cast<ssh_session>(p);
}
ssh_channel C(void* p)
{
    return static_cast<ssh_channel>(p);
}

std::string fingerprintOf(ssh_key key)
{
    unsigned char* hash = nullptr;
    std::size_t length = 0;
    if (lib().ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &length) != SSH_OK)
        return "?";
    char* text = lib().ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, length);
    std::string out = text ? text : "?";
    lib().ssh_string_free_char(text);
    lib().ssh_clean_pubkey_hash(&hash);
    return out;
}

std::string knownHostsName(const std::string& host, unsigned port)
{
    return port == 22 ? host : "[" + host + "]:" + std::to_string(port);
}

/// The fingerprints of the keys `file` holds for `host` (hashed names too), joined by ", "; empty when none.
std::string knownFingerprint(const std::filesystem::path& file, const std::string& host)
{
    std::ifstream in(file);
    std::string out;
    for (std::string line; std::getline(in, line);) {
        ssh_knownhosts_entry* entry = nullptr;
        if (lib().ssh_known_hosts_parse_line(host.c_str(), line.c_str(), &entry) == SSH_OK && entry && entry->publickey)
            out += (out.empty() ? "" : ", ") + fingerprintOf(entry->publickey);
        lib().ssh_knownhosts_entry_free(entry);
    }
    return out;
}

} // namespace

std::filesystem::path accountHome()
{
    // As libssh's ssh_get_user_home_dir() and OpenSSH do: the password database first.
    long size = sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buffer(static_cast<std::size_t>(size > 0 ? size : 16384));
    passwd entry {};
    passwd* found = nullptr;
    if (getpwuid_r(getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found && found->pw_dir
        && *found->pw_dir)
        return found->pw_dir;
    const char* h = std::getenv("HOME");
    return h && *h ? std::filesystem::path(h) : std::filesystem::path("/");
}

std::filesystem::path knownHostsFile(const std::filesystem::path& given)
{
    return given.empty() ? accountHome() / ".ssh" / "known_hosts" : given;
}

std::string_view toString(SshFailure failure)
{
    switch (failure) {
    case SshFailure::Unreachable:
        return "unreachable";
    case SshFailure::HostKeyUnknown:
        return "host key unknown";
    case SshFailure::HostKeyChanged:
        return "host key changed";
    case SshFailure::Authentication:
        return "authentication failed";
    case SshFailure::Remote:
        return "remote command failed";
    case SshFailure::Transfer:
        return "file transfer failed";
    }
    return "?";
}

SshError::SshError(SshFailure failure, std::string host, const std::string& message)
    : std::runtime_error(host + ": " + message)
    , m_failure(failure)
    , m_host(std::move(host))
{
}

std::string shellQuote(const std::string& word)
{
    std::string out = "'";
    for (char c : word) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

// ---------------------------------------------------------------------------------------------------------------

std::unique_ptr<SshSession> SshSession::open(const SshEndpoint& endpoint, const SshSettings& settings)
{
    try {
        lib(); // loaded now, so that a machine without libssh hears why before anything else
    } catch (const std::runtime_error& e) {
        throw SshError(SshFailure::Unreachable, endpoint.host, e.what());
    }
    std::unique_ptr<SshSession> self(new SshSession());
    ssh_session s = lib().ssh_new();
    if (!s)
        throw SshError(SshFailure::Unreachable, endpoint.host, "cannot create an SSH session (out of memory)");
    self->m_session = s;
    self->m_host = endpoint.host;
    const auto fail = [&](SshFailure kind, const std::string& message) -> SshError {
        return SshError(kind, self->m_name.empty() ? endpoint.host : self->m_name, message);
    };
    // The configuration first (matched against the name given: Host aliases), then what the cluster file says,
    // which wins over it (OpenSSH's order: the command line before the configuration).
    lib().ssh_options_set(s, SSH_OPTIONS_HOST, endpoint.host.c_str());
    if (!settings.config.empty()) {
        if (lib().ssh_options_parse_config(s, settings.config.c_str()) != SSH_OK)
            throw fail(SshFailure::Unreachable,
                "cannot read the SSH configuration " + settings.config.string() + ": " + lib().ssh_get_error(s));
    } else if (lib().ssh_options_parse_config(s, nullptr) != SSH_OK) {
        throw fail(SshFailure::Unreachable, std::string("cannot read ~/.ssh/config: ") + lib().ssh_get_error(s));
    }
    {
        const int no = 0; // parsed above; do not parse the default files again at connect
        lib().ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no);
    }
    if (endpoint.port > 0) {
        const unsigned int port = static_cast<unsigned int>(endpoint.port);
        lib().ssh_options_set(s, SSH_OPTIONS_PORT, &port);
    }
    if (!endpoint.user.empty())
        lib().ssh_options_set(s, SSH_OPTIONS_USER, endpoint.user.c_str());
    if (!endpoint.identity_file.empty() && !std::filesystem::exists(endpoint.identity_file))
        throw fail(SshFailure::Authentication,
            "the identity file " + endpoint.identity_file + " does not exist (ssh_identity_file in the cluster file)");
    const long timeoutS = std::max<long>(1, static_cast<long>(settings.timeout.count() / 1000));
    lib().ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &timeoutS);
    // The file is set explicitly, so that what libssh reads and writes is the file messages name.
    const std::filesystem::path knownFile = knownHostsFile(settings.known_hosts);
    lib().ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, knownFile.c_str());
    if (!settings.known_hosts.empty())
        lib().ssh_options_set(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null"); // that file alone decides
    char* user = nullptr;
    char* host = nullptr;
    unsigned int port = 22;
    lib().ssh_options_get(s, SSH_OPTIONS_USER, &user);
    lib().ssh_options_get(s, SSH_OPTIONS_HOST, &host);
    lib().ssh_options_get_port(s, &port);
    const std::string resolved = host ? host : endpoint.host;
    // libssh takes the user from the password database; an account without an entry there (a container's
    // arbitrary uid) has none: then the login name as the environment says it (as OpenSSH does), and when even
    // that is missing the name says only where ("?@host" was shown).
    std::string login = user ? user : "";
    if (login.empty())
        for (const char* variable : {"USER", "LOGNAME"})
            if (const char* v = std::getenv(variable); v && *v) {
                login = v;
                lib().ssh_options_set(s, SSH_OPTIONS_USER, v);
                break;
            }
    self->m_name = (login.empty() ? "" : login + "@") + resolved + ":" + std::to_string(port);
    lib().ssh_string_free_char(user);
    lib().ssh_string_free_char(host);

    if (lib().ssh_connect(s) != SSH_OK)
        throw fail(SshFailure::Unreachable,
            std::string("cannot connect: ") + lib().ssh_get_error(s)
                + " (is the host up and sshd listening on that port? check host and ssh_port in the cluster file)");

    // The host key, against known_hosts.
    ssh_key serverKey = nullptr;
    if (lib().ssh_get_server_publickey(s, &serverKey) != SSH_OK)
        throw fail(SshFailure::Unreachable, std::string("the server sent no host key: ") + lib().ssh_get_error(s));
    HostKey& key = self->m_hostKey;
    key.host = knownHostsName(resolved, port);
    key.type = lib().ssh_key_type_to_char(lib().ssh_key_type(serverKey));
    key.fingerprint = fingerprintOf(serverKey);
    lib().ssh_key_free(serverKey);
    key.known_hosts_file = knownFile;
    switch (lib().ssh_session_is_known_server(s)) {
    case SSH_KNOWN_HOSTS_OK:
        break;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER: {
        // The old key is in the user's file, or (without --known-hosts) in the system-wide one libssh reads too.
        std::filesystem::path holder = knownFile;
        key.known_fingerprint = knownFingerprint(knownFile, key.host);
        if (key.known_fingerprint.empty() && settings.known_hosts.empty()) {
            char* global = nullptr;
            const std::filesystem::path system
                = lib().ssh_options_get(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, &global) == SSH_OK && global
                ? std::filesystem::path(global)
                : std::filesystem::path("/etc/ssh/ssh_known_hosts");
            lib().ssh_string_free_char(global);
            if (std::string known = knownFingerprint(system, key.host); !known.empty()) {
                key.known_fingerprint = std::move(known);
                holder = system;
            }
        }
        throw fail(SshFailure::HostKeyChanged,
            "the host key has CHANGED: the server offers " + key.type + " " + key.fingerprint + " but "
                + holder.string() + " holds " + (key.known_fingerprint.empty() ? "another key" : key.known_fingerprint)
                + " for " + key.host
                + ". Someone may be intercepting the connection, or the host was reinstalled. Refused (always, even "
                  "with --accept-new-host-keys): if the change is expected, remove the old line with `ssh-keygen -R "
                + key.host + " -f " + holder.string() + "` and connect again");
    }
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN: {
        const bool accept
            = settings.accept_new_host_keys || (settings.confirm_new_host_key && settings.confirm_new_host_key(key));
        if (!accept)
            throw fail(SshFailure::HostKeyUnknown,
                "the host key is not known (" + key.type + " " + key.fingerprint + ", not in " + knownFile.string()
                    + "). Refused: check the fingerprint with the host's administrator, then confirm it in the app or "
                      "pass --accept-new-host-keys to trust and record it in "
                    + knownFile.string());
        if (knownFile.has_parent_path()) {
            std::error_code ec;
            if (std::filesystem::create_directories(knownFile.parent_path(), ec)) // ~/.ssh as OpenSSH makes it
                std::filesystem::permissions(knownFile.parent_path(), std::filesystem::perms::owner_all, ec);
        }
        if (lib().ssh_session_update_known_hosts(s) != SSH_OK)
            throw fail(SshFailure::HostKeyUnknown,
                "cannot record the host key in " + knownFile.string() + ": " + lib().ssh_get_error(s));
        break;
    }
    case SSH_KNOWN_HOSTS_ERROR:
    default:
        throw fail(SshFailure::HostKeyUnknown,
            "cannot check the host key against " + knownFile.string() + ": " + lib().ssh_get_error(s));
    }

    // Authentication: the identity file given, else ssh-agent, ~/.ssh/config's IdentityFile and the default keys.
    int rc = SSH_AUTH_DENIED;
    std::string tried;
    if (!endpoint.identity_file.empty()) {
        ssh_key privateKey = nullptr;
        if (lib().ssh_pki_import_privkey_file(endpoint.identity_file.c_str(), nullptr, nullptr, nullptr, &privateKey)
            != SSH_OK)
            throw fail(SshFailure::Authentication,
                "cannot read the identity file " + endpoint.identity_file
                    + " (a key with a passphrase must be added to ssh-agent, and ssh_identity_file left out)");
        rc = lib().ssh_userauth_publickey(s, nullptr, privateKey);
        lib().ssh_key_free(privateKey);
        tried = "the identity file " + endpoint.identity_file;
    } else {
        rc = lib().ssh_userauth_publickey_auto(s, nullptr, nullptr);
        tried = "ssh-agent, ~/.ssh/config's IdentityFile and the default keys (~/.ssh/id_ed25519, id_ecdsa, id_rsa)";
    }
    if (rc != SSH_AUTH_SUCCESS)
        throw fail(SshFailure::Authentication,
            "public-key authentication failed with " + tried
                + ": the server does not accept that key for this user (is the public key in the user's "
                  "~/.ssh/authorized_keys? is ssh_user right?)");
    return self;
}

SshSession::~SshSession()
{
    if (m_session) {
        lib().ssh_disconnect(S(m_session));
        lib().ssh_free(S(m_session));
    }
}

int SshSession::socket() const
{
    return lib().ssh_get_fd(S(m_session));
}

bool SshSession::connected() const
{
    return !m_abandoned && lib().ssh_is_connected(S(m_session)) != 0;
}

void SshSession::abandon()
{
    // Not ssh_silent_disconnect: it frees the session's channels, which SshChannel objects still hold. The socket
    // is shut down (its descriptor stays libssh's), and the channels are freed by ssh_free in the destructor.
    if (m_abandoned || !m_session)
        return;
    m_abandoned = true;
    if (const int fd = lib().ssh_get_fd(S(m_session)); fd >= 0)
        ::shutdown(fd, SHUT_RDWR);
}

std::unique_ptr<SshChannel> SshSession::start(const std::string& command)
{
    ssh_channel c = lib().ssh_channel_new(S(m_session));
    if (!c)
        throw SshError(
            SshFailure::Remote, m_name, std::string("cannot open a channel: ") + lib().ssh_get_error(S(m_session)));
    if (lib().ssh_channel_open_session(c) != SSH_OK || lib().ssh_channel_request_exec(c, command.c_str()) != SSH_OK) {
        std::string why = lib().ssh_get_error(S(m_session));
        lib().ssh_channel_free(c);
        // libssh gives up after the session's timeout (SSH_OPTIONS_TIMEOUT) and says nothing about it.
        if (why.empty())
            throw SshError(SshFailure::Unreachable, m_name,
                "cannot start a command: the server did not answer in time (is the host or its link down?)");
        throw SshError(SshFailure::Remote, m_name, "cannot start a command: " + why);
    }
    return std::unique_ptr<SshChannel>(new SshChannel(*this, c));
}

SshSession::Result SshSession::run(
    const std::string& command, std::string_view input, std::chrono::milliseconds timeout)
{
    auto channel = start(command);
    if (!input.empty())
        channel->write(std::span<const char>(input.data(), input.size()));
    channel->sendEof();
    Result r;
    const auto deadline = Clock::now() + timeout;
    char buffer[16384];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0)
            throw SshError(SshFailure::Remote, m_name,
                "`" + command + "` did not finish within " + std::to_string(timeout.count() / 1000) + " s");
        const long n
            = channel->read(std::span<char>(buffer, sizeof buffer), std::min(left, std::chrono::milliseconds {200}));
        if (n < 0)
            break;
        r.out.append(buffer, static_cast<std::size_t>(n));
        if (!connected())
            throw SshError(SshFailure::Unreachable, m_name, "the connection dropped while `" + command + "` ran");
    }
    r.err = channel->stderrText();
    r.exit_status = channel->exitStatus(); // after the end of file: libssh waits for the status or the close
    channel->close();
    return r;
}

void SshSession::upload(std::span<const char> data, const std::string& remote_path, int mode)
{
    sftp_session sftp = lib().sftp_new(S(m_session));
    if (!sftp || lib().sftp_init(sftp) != SSH_OK) {
        const std::string why = lib().ssh_get_error(S(m_session));
        if (sftp)
            lib().sftp_free(sftp);
        throw SshError(SshFailure::Transfer, m_name, "cannot start SFTP (is the sftp subsystem enabled?): " + why);
    }
    struct Guard
    {
        sftp_session s;
        ~Guard() { lib().sftp_free(s); }
    } guard {sftp};
    sftp_file file
        = lib().sftp_open(sftp, remote_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, static_cast<mode_t>(mode));
    if (!file)
        throw SshError(SshFailure::Transfer, m_name,
            "cannot create " + remote_path + " (SFTP error " + std::to_string(lib().sftp_get_error(sftp)) + ")");
    std::size_t done = 0;
    while (done < data.size()) {
        // One SSH_FXP_WRITE per chunk, each waiting for its status: large chunks (OpenSSH's sftp-server takes
        // messages up to 256 KiB) keep the round trips few.
        const std::size_t chunk = std::min<std::size_t>(data.size() - done, 192 * 1024);
        const ssize_t n = lib().sftp_write(file, data.data() + done, chunk);
        if (n <= 0) {
            lib().sftp_close(file);
            throw SshError(SshFailure::Transfer, m_name,
                "writing " + remote_path + " failed after " + std::to_string(done) + " of "
                    + std::to_string(data.size()) + " bytes (disk full?)");
        }
        done += static_cast<std::size_t>(n);
    }
    if (lib().sftp_close(file) != SSH_OK)
        throw SshError(SshFailure::Transfer, m_name, "closing " + remote_path + " failed");
    lib().sftp_chmod(sftp, remote_path.c_str(), static_cast<mode_t>(mode)); // the umask may have trimmed it
}

// ---------------------------------------------------------------------------------------------------------------

SshChannel::SshChannel(SshSession& session, void* channel)
    : m_session(session)
    , m_channel(channel)
{
}

SshChannel::~SshChannel()
{
    close();
}

void SshChannel::close()
{
    if (!m_channel)
        return;
    if (m_session.m_abandoned) { // freed with its session (SshSession::abandon)
        m_channel = nullptr;
        return;
    }
    ssh_channel c = C(m_channel);
    if (lib().ssh_channel_is_open(c))
        lib().ssh_channel_close(c);
    lib().ssh_channel_free(c);
    m_channel = nullptr;
}

void SshChannel::write(std::span<const char> data, std::chrono::milliseconds timeout)
{
    std::size_t done = 0;
    auto deadline = Clock::now() + timeout;
    while (done < data.size()) {
        if (!m_channel || !m_session.connected())
            throw SshError(SshFailure::Remote, m_session.name(), "write on a closed channel");
        // libssh waits for the server's window at most the session's timeout, then returns what it wrote (maybe
        // nothing): a link that stays silent ends in an error here instead of an endless loop.
        const int n
            = lib().ssh_channel_write(C(m_channel), data.data() + done, static_cast<uint32_t>(data.size() - done));
        if (n == SSH_ERROR)
            throw SshError(SshFailure::Remote, m_session.name(),
                std::string("write failed: ") + lib().ssh_get_error(S(m_session.m_session)));
        if (n > 0)
            deadline = Clock::now() + timeout;
        else if (Clock::now() > deadline)
            throw SshError(SshFailure::Unreachable, m_session.name(),
                "the server took no data for " + std::to_string(timeout.count() / 1000) + " s (is the link down?)");
        done += static_cast<std::size_t>(n);
    }
}

void SshChannel::sendEof()
{
    if (m_channel && !m_session.m_abandoned)
        lib().ssh_channel_send_eof(C(m_channel));
}

void SshChannel::drainStderr()
{
    char buffer[4096];
    for (;;) {
        const int n = lib().ssh_channel_read_nonblocking(C(m_channel), buffer, sizeof buffer, 1);
        if (n <= 0)
            break;
        m_stderr.append(buffer, static_cast<std::size_t>(n));
        if (m_stderr.size() > (1 << 20))
            m_stderr.erase(0, m_stderr.size() - (1 << 19)); // keep the newest half megabyte
    }
}

long SshChannel::readSome(std::span<char> buffer)
{
    if (!m_channel || m_session.m_abandoned)
        return -1;
    drainStderr();
    const int n
        = lib().ssh_channel_read_nonblocking(C(m_channel), buffer.data(), static_cast<uint32_t>(buffer.size()), 0);
    if (n > 0)
        return n;
    if (n == SSH_ERROR || lib().ssh_channel_is_eof(C(m_channel)) || !lib().ssh_channel_is_open(C(m_channel)))
        return -1;
    return 0;
}

long SshChannel::read(std::span<char> buffer, std::chrono::milliseconds timeout)
{
    if (!m_channel || m_session.m_abandoned)
        return -1;
    const int ready = lib().ssh_channel_poll_timeout(C(m_channel), static_cast<int>(timeout.count()), 0);
    if (ready == SSH_ERROR)
        return -1;
    const long n = readSome(buffer);
    if (n == 0 && ready == SSH_EOF)
        return -1;
    return n;
}

bool SshChannel::atEof() const
{
    return !m_channel || m_session.m_abandoned || lib().ssh_channel_is_eof(C(m_channel));
}

int SshChannel::exitStatus() const
{
    return m_channel && !m_session.m_abandoned ? lib().ssh_channel_get_exit_status(C(m_channel)) : -1;
}

} // namespace pw::agents
