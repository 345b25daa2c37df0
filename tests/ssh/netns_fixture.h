// SPDX-License-Identifier: MIT
// Hosts on real links for the network-fault tests: each host a Linux network namespace at 10.77.S.x with one sshd
// (port 22 of its own address), made and removed by the fixture. A host has two links: "ctl", a veth straight to
// this (the root) namespace, which is the controller's link (the controller speaks from 10.77.S.1), and "data", a
// veth on a bridge that joins the hosts to each other (the agents' Gloo links). A link goes silent the way a
// pulled cable does: its end in the host goes down, and every packet is dropped without a reset or an error to
// either side's TCP. S is a slot (0..63) held with flock(2) for the fixture's life: a test
// process that died left its namespaces, links and processes behind under its slot, and the next fixture to take
// the slot removes them first. Needs root, network namespaces, veth and bridge: unavailable() says which is
// missing, for PW_SKIP.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

#include "tests/ssh/sshd_fixture.h"

namespace pw::test {

/// @brief Network namespaces as hosts, with an sshd each and links that can be silenced.
class NetnsHosts
{
public:
    /// Empty when this machine can make the fixture; else what it lacks (for PW_SKIP).
    static std::string unavailable()
    {
        if (::geteuid() != 0)
            return "network namespaces need root (this test runs as uid " + std::to_string(::geteuid()) + ")";
        if (!std::filesystem::exists("/usr/sbin/ip"))
            return "iproute2 (ip) is not installed";
        TempDir dir;
        const auto out = dir.path / "probe.txt";
        const std::string ns = "pw-probe-" + std::to_string(::getpid());
        const std::string a = "pwp" + std::to_string(::getpid() % 100000) + "a";
        const std::string b = "pwp" + std::to_string(::getpid() % 100000) + "b";
        std::string why;
        if (runProgram({"/usr/sbin/ip", "netns", "add", ns}, out) != 0)
            why = "cannot make a network namespace (ip netns add: " + slurpFile(out) + ")";
        else if (runProgram({"/usr/sbin/ip", "link", "add", a, "type", "veth", "peer", "name", b}, out) != 0)
            why = "cannot make a veth pair (ip link add type veth: " + slurpFile(out) + ")";
        else if (runProgram({"/usr/sbin/ip", "link", "add", a + "br", "type", "bridge"}, out) != 0)
            why = "cannot make a bridge (ip link add type bridge: " + slurpFile(out) + ")";
        runProgram({"/usr/sbin/ip", "link", "del", a + "br"});
        runProgram({"/usr/sbin/ip", "link", "del", a});
        runProgram({"/usr/sbin/ip", "netns", "del", ns});
        return why;
    }

    struct Host
    {
        std::string ns; ///< the namespace's name
        std::string address; ///< 10.77.S.x
        std::string ctl_root, data_root; ///< the root namespace's ends of its links
        pid_t sshd = -1;
    };

    /// `count` hosts, each with its sshd listening; throws std::runtime_error when a step fails.
    explicit NetnsHosts(int count)
    {
        takeSlot();
        removeLeftovers();
        user_key = dir.path / "user_ed25519";
        host_key = dir.path / "host_ed25519";
        known_hosts = dir.path / "known_hosts";
        makeKey(user_key);
        makeKey(host_key); // one host key for every host: known_hosts lists it under each address
        std::filesystem::copy_file(user_key.string() + ".pub", dir.path / "authorized_keys");
        std::filesystem::permissions(dir.path,
            std::filesystem::perms::owner_all | std::filesystem::perms::group_exec
                | std::filesystem::perms::others_exec);
        try {
            ip({"link", "add", bridge(), "type", "bridge"});
            ip({"addr", "add", controllerAddress() + "/32", "dev", bridge()}); // the controller's source address
            ip({"link", "set", bridge(), "up"});
            for (int i = 0; i < count; ++i)
                addHost(i);
            std::ofstream kh(known_hosts);
            std::istringstream pub(slurpFile(host_key.string() + ".pub"));
            std::string type, key;
            pub >> type >> key;
            for (const auto& h : hosts)
                kh << h.address << " " << type << " " << key << "\n";
        } catch (...) {
            removeAll();
            throw;
        }
    }
    ~NetnsHosts() { removeAll(); }
    NetnsHosts(const NetnsHosts&) = delete;
    NetnsHosts& operator=(const NetnsHosts&) = delete;

    TempDir dir;
    std::vector<Host> hosts;
    std::filesystem::path user_key, host_key, known_hosts;

    std::string controllerAddress() const { return "10.77." + std::to_string(m_slot) + ".1"; }

    /// The controller's link to host `i` goes silent (true) or carries packets again (false). Its far end goes
    /// down, as a pulled cable: the controller's side loses its carrier, and what it sends is dropped there without
    /// a word to its TCP (a qdisc that drops on the sender's own interface would not do: Linux's TCP sees those
    /// drops and gives the connection up within seconds, as no real outage makes it).
    void silenceControllerLink(int i, bool silent)
    {
        const Host& h = hosts.at(static_cast<std::size_t>(i));
        ipIn(h.ns, {"link", "set", "ctl", silent ? "down" : "up"});
        if (!silent) // a link that went down lost its routes
            ipIn(h.ns, {"route", "replace", controllerAddress() + "/32", "dev", "ctl"});
    }
    /// Host `i`'s link to the other hosts (the agents' Gloo connections) goes silent, or carries packets again.
    void silenceDataLink(int i, bool silent)
    {
        const Host& h = hosts.at(static_cast<std::size_t>(i));
        ipIn(h.ns, {"link", "set", "data", silent ? "down" : "up"});
    }

    /// Host `i`'s sshd killed (SIGKILL), its listener and every session it runs (the controller's SSH channels to the
    /// agents there die with them; the agents, started apart, train on).
    void killSshd(int i)
    {
        Host& h = hosts.at(static_cast<std::size_t>(i));
        for (pid_t p : pidsIn(h.ns)) {
            std::ifstream in("/proc/" + std::to_string(p) + "/comm");
            std::string comm;
            std::getline(in, comm);
            if (comm == "sshd")
                ::kill(p, SIGKILL);
        }
        if (h.sshd > 0)
            ::waitpid(h.sshd, nullptr, 0); // `ip netns exec` ends with the sshd it ran
        h.sshd = -1;
    }
    /// Host `i`'s sshd started again (after killSshd), listening when this returns.
    void restartSshd(int i) { startSshd(hosts.at(static_cast<std::size_t>(i)), i); }

    /// The processes living in host `i`'s namespace (its sshd, the agents started through it).
    std::vector<pid_t> processes(int i) const { return pidsIn(hosts.at(static_cast<std::size_t>(i)).ns); }

private:
    int m_slot = -1;
    int m_lockFd = -1;

    std::string prefix() const { return "pw" + std::to_string(m_slot); }
    std::string bridge() const { return prefix() + "br"; }
    std::string nsName(int i) const { return "pw-net-" + std::to_string(m_slot) + "-" + std::to_string(i); }

    static void run(const std::vector<std::string>& argv)
    {
        TempDir tmp;
        const auto out = tmp.path / "out.txt";
        if (runProgram(argv, out) != 0) {
            std::string line;
            for (const auto& a : argv)
                line += a + " ";
            throw std::runtime_error("network fixture: `" + line + "` failed: " + slurpFile(out));
        }
    }
    static void ip(std::vector<std::string> args)
    {
        args.insert(args.begin(), "/usr/sbin/ip");
        run(args);
    }
    static void ipIn(const std::string& ns, std::vector<std::string> args)
    {
        args.insert(args.begin(), {"/usr/sbin/ip", "-n", ns});
        run(args);
    }

    static std::vector<pid_t> pidsIn(const std::string& ns)
    {
        TempDir tmp;
        const auto out = tmp.path / "pids.txt";
        runProgram({"/usr/sbin/ip", "netns", "pids", ns}, out);
        std::istringstream in(slurpFile(out));
        std::vector<pid_t> pids;
        for (long p = 0; in >> p;)
            pids.push_back(static_cast<pid_t>(p));
        return pids;
    }

    /// The first slot no live fixture holds (the lock dies with its process, so a crashed test frees its slot).
    void takeSlot()
    {
        for (int s = 0; s < 64; ++s) {
            const std::string path = "/tmp/pw-netns-slot-" + std::to_string(s) + ".lock";
            const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
            if (fd < 0)
                continue;
            if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
                m_slot = s;
                m_lockFd = fd;
                return;
            }
            ::close(fd);
        }
        throw std::runtime_error("network fixture: all 64 slots are held by running tests");
    }

    /// What a test process that died under this slot left: its namespaces' processes, the namespaces, the bridge.
    void removeLeftovers()
    {
        TempDir tmp;
        const auto out = tmp.path / "netns.txt";
        runProgram({"/usr/sbin/ip", "netns", "list"}, out);
        std::istringstream in(slurpFile(out));
        const std::string mine = "pw-net-" + std::to_string(m_slot) + "-";
        for (std::string line; std::getline(in, line);) {
            const std::string name = line.substr(0, line.find(' '));
            if (name.rfind(mine, 0) == 0)
                removeNamespace(name);
        }
        // The root namespace's ends of its links (a namespace's links go away with it only later, asynchronously).
        runProgram({"/usr/sbin/ip", "-o", "link", "show"}, out);
        std::istringstream links(slurpFile(out));
        for (std::string line; std::getline(links, line);) {
            // "12: pw3c0@if11: <...": this slot's links are pwS followed by c or d and the host's number.
            const auto start = line.find(": ");
            if (start == std::string::npos)
                continue;
            const std::string name = line.substr(start + 2, line.find_first_of("@:", start + 2) - start - 2);
            if (name.rfind(prefix(), 0) == 0 && name.size() > prefix().size()
                && (name[prefix().size()] == 'c' || name[prefix().size()] == 'd'))
                runProgram({"/usr/sbin/ip", "link", "del", name});
        }
        runProgram({"/usr/sbin/ip", "link", "del", bridge()});
    }

    static void removeNamespace(const std::string& ns)
    {
        for (int round = 0; round < 50; ++round) {
            const auto pids = pidsIn(ns);
            if (pids.empty())
                break;
            for (pid_t p : pids)
                ::kill(p, SIGKILL);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        runProgram({"/usr/sbin/ip", "netns", "del", ns}); // its veth ends go with it, and so do their peers
    }

    void addHost(int i)
    {
        Host h;
        h.ns = nsName(i);
        h.address = "10.77." + std::to_string(m_slot) + "." + std::to_string(i + 2);
        h.ctl_root = prefix() + "c" + std::to_string(i);
        h.data_root = prefix() + "d" + std::to_string(i);
        hosts.push_back(h);
        ip({"netns", "add", h.ns});
        ipIn(h.ns, {"link", "set", "lo", "up"});
        // The data link, on the bridge the hosts share.
        ip({"link", "add", h.data_root, "type", "veth", "peer", "name", h.data_root + "n"});
        ip({"link", "set", h.data_root + "n", "netns", h.ns});
        ipIn(h.ns, {"link", "set", h.data_root + "n", "name", "data"});
        ip({"link", "set", h.data_root, "master", bridge(), "up"});
        ipIn(h.ns, {"addr", "add", h.address + "/24", "dev", "data"});
        ipIn(h.ns, {"link", "set", "data", "up"});
        // The controller's link: routes of one address each way, so that nothing else takes it.
        ip({"link", "add", h.ctl_root, "type", "veth", "peer", "name", h.ctl_root + "n"});
        ip({"link", "set", h.ctl_root + "n", "netns", h.ns});
        ipIn(h.ns, {"link", "set", h.ctl_root + "n", "name", "ctl"});
        ip({"link", "set", h.ctl_root, "up"});
        ipIn(h.ns, {"link", "set", "ctl", "up"});
        ip({"route", "add", h.address + "/32", "dev", h.ctl_root, "src", controllerAddress()});
        ipIn(h.ns, {"route", "add", controllerAddress() + "/32", "dev", "ctl"});
        startSshd(hosts.back(), i);
    }

    void startSshd(Host& h, int i)
    {
        const auto config = dir.path / ("sshd_config_" + std::to_string(i));
        {
            std::ofstream c(config);
            c << "Port 22\nListenAddress " << h.address << "\nHostKey " << host_key.string() << "\nPidFile "
              << (dir.path / ("sshd_" + std::to_string(i) + ".pid")).string() << "\nAuthorizedKeysFile "
              << (dir.path / "authorized_keys").string()
              << "\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                 "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nSubsystem sftp internal-sftp\n"
                 "AllowStreamLocalForwarding yes\nMaxSessions 64\nMaxStartups 64\nLogLevel VERBOSE\n";
        }
        std::error_code ec;
        std::filesystem::create_directories("/run/sshd", ec);
        const std::string log = (dir.path / ("sshd_" + std::to_string(i) + ".log")).string();
        const pid_t pid = fork();
        if (pid == 0) {
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            execl("/usr/sbin/ip", "ip", "netns", "exec", h.ns.c_str(), "/usr/sbin/sshd", "-D", "-e", "-f",
                config.c_str(), nullptr);
            _exit(127);
        }
        h.sshd = pid;
        // Listening: a TCP connection from here (the controller's side) to its port 22 is accepted.
        for (int attempt = 0; attempt < 200; ++attempt) {
            int status = 0;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                h.sshd = -1;
                throw std::runtime_error("sshd in " + h.ns + " did not start: " + slurpFile(log));
            }
            const int s = ::socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in a {};
            a.sin_family = AF_INET;
            a.sin_port = htons(22);
            ::inet_pton(AF_INET, h.address.c_str(), &a.sin_addr);
            const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
            ::close(s);
            if (ok)
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        throw std::runtime_error("sshd in " + h.ns + " does not listen on " + h.address + ":22: " + slurpFile(log));
    }

    void removeAll()
    {
        for (auto& h : hosts) {
            if (h.sshd > 0) {
                ::kill(h.sshd, SIGTERM);
                waitpid(h.sshd, nullptr, 0);
                h.sshd = -1;
            }
            removeNamespace(h.ns);
            // Deleting a veth end deletes its peer at once; the namespace's would go only with the namespace,
            // which the kernel dismantles later: the next fixture of this slot must find the names free.
            runProgram({"/usr/sbin/ip", "link", "del", h.ctl_root});
            runProgram({"/usr/sbin/ip", "link", "del", h.data_root});
        }
        hosts.clear();
        if (m_slot >= 0)
            runProgram({"/usr/sbin/ip", "link", "del", bridge()});
        if (m_lockFd >= 0)
            ::close(m_lockFd);
        m_lockFd = -1;
    }
};

} // namespace pw::test
