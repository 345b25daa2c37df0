// SPDX-License-Identifier: MIT
// SSH sessions against a real sshd on 127.0.0.1 (tests/ssh/sshd_fixture.h): a known host runs commands and takes
// uploads; an unknown host key is refused unless confirmed or accepted (and then recorded); a changed host key is
// refused always, naming both fingerprints; a wrong user key, an unreachable host and a wrong port fail with the
// host and the cause; ~/.ssh/config's Host alias, HostName, Port, User and IdentityFile are honoured; without a
// known_hosts given, the account's file (password database, not $HOME) is the one read, written and named.
#include <catch2/catch.hpp>

#include <functional>
#include <sstream>

#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/launch/ssh.h"
#include "tests/ssh/sshd_fixture.h"

using namespace pw;
using agents::SshEndpoint;
using agents::SshError;
using agents::SshFailure;
using agents::SshSession;
using agents::SshSettings;
using Catch::Contains;

namespace {

SshEndpoint endpointOf(const test::Sshd& sshd)
{
    return {"127.0.0.1", sshd.port, test::currentUser(), sshd.user_key.string()};
}

SshSettings settingsOf(const test::Sshd& sshd)
{
    SshSettings s;
    s.known_hosts = sshd.known_hosts;
    s.config = sshd.dir.path / "no-ssh-config"; // an empty configuration: the test's own machine's is not read
    std::ofstream(s.config).flush();
    s.timeout = std::chrono::milliseconds {5000};
    return s;
}

SshFailure failureOf(const SshEndpoint& e, const SshSettings& s, std::string& message)
{
    try {
        SshSession::open(e, s);
    } catch (const SshError& err) {
        message = err.what();
        return err.failure();
    }
    FAIL("the session opened");
    return SshFailure::Remote;
}

} // namespace

TEST_CASE("a known host runs commands and takes uploads", "[ssh]")
{
    test::Sshd sshd;
    sshd.trust();
    auto session = SshSession::open(endpointOf(sshd), settingsOf(sshd));
    CHECK(session->name() == test::currentUser() + "@127.0.0.1:" + std::to_string(sshd.port));
    CHECK(session->hostKey().fingerprint == sshd.fingerprint());

    const auto echo = session->run("echo hello; cat; echo oops >&2", "from stdin\n");
    CHECK(echo.exit_status == 0);
    CHECK(echo.out == "hello\nfrom stdin\n");
    CHECK(echo.err == "oops\n");
    CHECK(session->run("exit 3").exit_status == 3);

    std::string payload(300000, '\0');
    for (std::size_t i = 0; i < payload.size(); ++i)
        payload[i] = static_cast<char>(i * 7 + 1);
    const std::string remote = (sshd.dir.path / "uploaded.bin").string();
    session->upload(payload, remote, 0750);
    CHECK(test::slurpFile(remote) == payload);
    CHECK((std::filesystem::status(remote).permissions() & std::filesystem::perms::all)
        == (std::filesystem::perms::owner_all | std::filesystem::perms::group_read
            | std::filesystem::perms::group_exec));
    CHECK_THROWS_AS(session->upload(payload, "/nonexistent-dir/x", 0644), SshError);
}

TEST_CASE("an unknown host key is refused unless confirmed or accepted, and accepting records it", "[ssh]")
{
    test::Sshd sshd; // known_hosts is empty
    const auto endpoint = endpointOf(sshd);
    auto settings = settingsOf(sshd);
    std::string message;
    CHECK(failureOf(endpoint, settings, message) == SshFailure::HostKeyUnknown);
    CHECK_THAT(message, Contains("127.0.0.1") && Contains(sshd.fingerprint()) && Contains("--accept-new-host-keys"));

    // The app's question: shown the key, the user says no, then yes.
    int asked = 0;
    settings.confirm_new_host_key = [&](const agents::HostKey& key) {
        ++asked;
        CHECK(key.fingerprint == sshd.fingerprint());
        CHECK(key.type == "ssh-ed25519");
        CHECK(key.host == "[127.0.0.1]:" + std::to_string(sshd.port));
        return false;
    };
    CHECK(failureOf(endpoint, settings, message) == SshFailure::HostKeyUnknown);
    CHECK(asked == 1);
    CHECK(test::slurpFile(sshd.known_hosts).empty());

    settings.confirm_new_host_key = nullptr;
    settings.accept_new_host_keys = true;
    CHECK(SshSession::open(endpoint, settings)->run("true").exit_status == 0);
    CHECK_THAT(test::slurpFile(sshd.known_hosts), Contains("[127.0.0.1]:" + std::to_string(sshd.port)));
    // Recorded: the next connection needs no flag.
    settings.accept_new_host_keys = false;
    CHECK(SshSession::open(endpoint, settings)->run("true").exit_status == 0);
}

TEST_CASE("a changed host key is refused always, naming both fingerprints", "[ssh]")
{
    test::Sshd sshd;
    const auto impostor = sshd.dir.path / "other_host_key";
    test::makeKey(impostor);
    {
        std::istringstream pub(test::slurpFile(impostor.string() + ".pub"));
        std::string type, key;
        pub >> type >> key;
        std::ofstream(sshd.known_hosts) << "[127.0.0.1]:" << sshd.port << " " << type << " " << key << "\n";
    }
    const auto out = sshd.dir.path / "fp";
    test::runProgram({"/usr/bin/ssh-keygen", "-l", "-E", "sha256", "-f", impostor.string() + ".pub"}, out);
    std::istringstream fpLine(test::slurpFile(out));
    std::string bits, knownFingerprint;
    fpLine >> bits >> knownFingerprint;

    auto settings = settingsOf(sshd);
    settings.accept_new_host_keys = true;
    bool asked = false;
    settings.confirm_new_host_key = [&](const agents::HostKey&) { return asked = true; };
    std::string message;
    CHECK(failureOf(endpointOf(sshd), settings, message) == SshFailure::HostKeyChanged);
    CHECK_FALSE(asked);
    CHECK_THAT(message, Contains("CHANGED") && Contains(sshd.fingerprint()) && Contains(knownFingerprint));
    CHECK_THAT(message, Contains("ssh-keygen -R"));
    // known_hosts is left as it was.
    CHECK_THAT(
        test::slurpFile(sshd.known_hosts), !Contains(test::slurpFile(sshd.host_key.string() + ".pub").substr(12, 40)));
}

TEST_CASE("a wrong user key, an unreachable host and a wrong port fail with the host and the cause", "[ssh]")
{
    test::Sshd sshd;
    sshd.trust();
    const auto settings = settingsOf(sshd);
    std::string message;
    SECTION("a key the server does not accept")
    {
        const auto stranger = sshd.dir.path / "stranger";
        test::makeKey(stranger);
        auto endpoint = endpointOf(sshd);
        endpoint.identity_file = stranger.string();
        CHECK(failureOf(endpoint, settings, message) == SshFailure::Authentication);
        CHECK_THAT(message, Contains("127.0.0.1") && Contains(stranger.string()) && Contains("authorized_keys"));
        // No key material in the message: neither the private key's lines nor the public key's.
        std::istringstream key(test::slurpFile(stranger));
        for (std::string line; std::getline(key, line);)
            if (line.find("-----") == std::string::npos && !line.empty())
                CHECK_THAT(message, !Contains(line));
        CHECK_THAT(message, !Contains(test::slurpFile(stranger.string() + ".pub").substr(12, 40)));
    }
    SECTION("an identity file that does not exist")
    {
        auto endpoint = endpointOf(sshd);
        endpoint.identity_file = (sshd.dir.path / "missing_key").string();
        CHECK(failureOf(endpoint, settings, message) == SshFailure::Authentication);
        CHECK_THAT(message, Contains("does not exist"));
    }
    SECTION("a port nobody listens on")
    {
        auto endpoint = endpointOf(sshd);
        endpoint.port = test::freePort();
        CHECK(failureOf(endpoint, settings, message) == SshFailure::Unreachable);
        CHECK_THAT(message, Contains("127.0.0.1") && Contains(std::to_string(endpoint.port)) && Contains("ssh_port"));
    }
    SECTION("a host name that does not resolve")
    {
        auto endpoint = endpointOf(sshd);
        endpoint.host = "no-such-host.invalid";
        CHECK(failureOf(endpoint, settings, message) == SshFailure::Unreachable);
        CHECK_THAT(message, Contains("no-such-host.invalid"));
    }
}

TEST_CASE("the account's ~/.ssh/config: Host alias, HostName, Port, User and IdentityFile are honoured", "[ssh]")
{
    test::Sshd sshd;
    sshd.trust();
    auto settings = settingsOf(sshd);
    settings.config = sshd.dir.path / "ssh_config";
    std::ofstream(settings.config) << "Host gpu-node-7\n  HostName 127.0.0.1\n  Port " << sshd.port << "\n  User "
                                   << test::currentUser() << "\n  IdentityFile " << sshd.user_key.string() << "\n";
    auto session = SshSession::open({"gpu-node-7", 0, "", ""}, settings);
    CHECK(session->name() == test::currentUser() + "@127.0.0.1:" + std::to_string(sshd.port));
    CHECK(session->run("echo $((6 * 7))").out == "42\n");
    // What the cluster file says wins over the configuration: a wrong port given explicitly fails.
    std::string message;
    CHECK(failureOf({"gpu-node-7", test::freePort(), "", ""}, settings, message) == SshFailure::Unreachable);
}

TEST_CASE("shell quoting keeps every word whole", "[ssh]")
{
    CHECK(agents::shellQuote("plain") == "'plain'");
    CHECK(agents::shellQuote("it's a $HOME; rm -rf /") == "'it'\\''s a $HOME; rm -rf /'");
}

namespace {

/// The account's home as the password database has it, read here independently of agents::accountHome().
std::filesystem::path passwdHome()
{
    const passwd* entry = getpwuid(getuid());
    REQUIRE(entry);
    REQUIRE(entry->pw_dir);
    return entry->pw_dir;
}

/// Runs `body` in a child process in a mount namespace of its own where `home` is bind-mounted over the account's
/// home (so that the test writes nothing in the real one) and $HOME names `elsewhere`, as after `sudo -E` or in a
/// shell that changed it. The child's text (body's result) comes back; a child that could not set itself up fails
/// the test (SSH tests run as root).
std::string inAccountHome(
    const std::filesystem::path& home, const std::filesystem::path& elsewhere, const std::function<std::string()>& body)
{
    const std::filesystem::path report = home.parent_path() / "child-report.txt";
    const std::filesystem::path target = passwdHome();
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) { // the child: no Catch assertion here, only its report and exit status
        if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0
            || mount(home.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0)
            _exit(90);
        setenv("HOME", elsewhere.c_str(), 1);
        std::string text;
        try {
            text = body();
        } catch (const std::exception& e) {
            text = std::string("exception: ") + e.what();
        }
        std::ofstream(report) << text;
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    INFO("the child could not bind-mount a home (exit 90: unshare/mount refused; SSH tests need root)");
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return test::slurpFile(report);
}

} // namespace

TEST_CASE("the default known_hosts is the account's from the password database, not $HOME's", "[ssh]")
{
    const char* oldHome = std::getenv("HOME");
    const std::string saved = oldHome ? oldHome : "";
    setenv("HOME", "/nonexistent-home-for-the-test", 1);
    CHECK(agents::accountHome() == passwdHome());
    CHECK(agents::knownHostsFile() == passwdHome() / ".ssh" / "known_hosts");
    CHECK(agents::knownHostsFile("/some/file") == "/some/file");
    if (oldHome)
        setenv("HOME", saved.c_str(), 1);
    else
        unsetenv("HOME");
}

TEST_CASE("without --known-hosts, the file libssh records keys in is the one messages name, a changed key names "
          "it and both fingerprints",
    "[ssh]")
{
    test::Sshd sshd;
    const auto home = sshd.dir.path / "account-home";
    const auto elsewhere = sshd.dir.path / "shell-home";
    std::filesystem::create_directories(home);
    std::filesystem::create_directories(elsewhere);
    const std::string shown = (passwdHome() / ".ssh" / "known_hosts").string(); // the path as the user sees it
    const auto connect = [&](bool accept) {
        return [&sshd, accept] {
            auto settings = settingsOf(sshd);
            settings.known_hosts.clear(); // the default file
            settings.accept_new_host_keys = accept;
            try {
                const auto session = SshSession::open(endpointOf(sshd), settings);
                return "connected; key checked against " + session->hostKey().known_hosts_file.string();
            } catch (const SshError& e) {
                return std::string(e.what());
            }
        };
    };

    // Unknown: refused, naming the account's file.
    std::string text = inAccountHome(home, elsewhere, connect(false));
    CHECK_THAT(text, Contains("not known") && Contains("not in " + shown));
    CHECK_THAT(text, !Contains(elsewhere.string()));
    // Accepted: recorded in the account's file (here the bind-mounted `home`), nothing under $HOME.
    text = inAccountHome(home, elsewhere, connect(true));
    CHECK(text == "connected; key checked against " + shown);
    CHECK_THAT(test::slurpFile(home / ".ssh" / "known_hosts"), Contains("[127.0.0.1]:" + std::to_string(sshd.port)));
    CHECK_FALSE(std::filesystem::exists(elsewhere / ".ssh" / "known_hosts"));
    CHECK((std::filesystem::status(home / ".ssh").permissions() & std::filesystem::perms::all)
        == std::filesystem::perms::owner_all);

    // Changed: the file holds another key for the host; the message names that file and both fingerprints.
    const auto impostor = sshd.dir.path / "impostor_key";
    test::makeKey(impostor);
    std::string type, key;
    std::istringstream(test::slurpFile(impostor.string() + ".pub")) >> type >> key;
    std::ofstream(home / ".ssh" / "known_hosts", std::ios::trunc)
        << "[127.0.0.1]:" << sshd.port << " " << type << " " << key << "\n";
    const auto out = sshd.dir.path / "impostor-fp";
    test::runProgram({"/usr/bin/ssh-keygen", "-l", "-E", "sha256", "-f", impostor.string() + ".pub"}, out);
    std::string bits, oldFingerprint;
    std::istringstream(test::slurpFile(out)) >> bits >> oldFingerprint;
    text = inAccountHome(home, elsewhere, connect(true));
    CHECK_THAT(text, Contains("CHANGED") && Contains(sshd.fingerprint()) && Contains(oldFingerprint));
    CHECK_THAT(text, Contains(shown + " holds " + oldFingerprint));
    CHECK_THAT(text, Contains("ssh-keygen -R [127.0.0.1]:" + std::to_string(sshd.port) + " -f " + shown));
    CHECK_THAT(text, !Contains(elsewhere.string()));
}
