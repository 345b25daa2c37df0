// SPDX-License-Identifier: MIT
// A real Slurm cluster on this machine for the Slurm launcher's tests: munged with its own key and socket, slurmctld
// and one slurmd per virtual node (NodeAddr 127.0.0.1, a port each, `slurmd -N NAME`), all in the foreground as
// children of the test, configured by a slurm.conf the fixture writes into a temporary directory (state, spool,
// logs and pid files there too; free ports, never Slurm's defaults, so that daemons the packages started on
// install are left alone). SLURM_CONF points the client commands (sbatch, scontrol, sinfo, scancel: the launcher's
// and the test's) at it while the fixture lives. The fixture waits for every node to be idle, and at the end cancels
// what is left, stops the daemons and checks that no process of the cluster remains. Needs root (slurmd runs jobs
// as their users) and Debian's slurm-wlm and munge: unavailable() says what is missing, for PW_SKIP.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/run/process_helpers.h"
#include "tests/ssh/sshd_fixture.h"

namespace pw::test {

/// @brief slurmctld, slurmd per node and munged, private to one test.
class SlurmCluster
{
public:
    /// Empty when this machine can run the fixture; else what it lacks.
    static std::string unavailable()
    {
        if (::geteuid() != 0)
            return "the Slurm fixture's slurmd needs root (this test runs as uid " + std::to_string(::geteuid()) + ")";
        for (const char* tool : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch",
                 "/usr/bin/srun", "/usr/bin/scontrol", "/usr/bin/sinfo", "/usr/bin/scancel"})
            if (!std::filesystem::exists(tool))
                return std::string(tool) + " is not installed (Debian's slurm-wlm and munge: packaging/setup-deps.sh)";
        return {};
    }

    /// `nodes` virtual nodes of `cpus` CPUs each, named pw1, pw2, ..., all in partition "debug" (the default).
    explicit SlurmCluster(int nodes = 2, int cpus = 2)
    {
        if (const char* old = std::getenv("SLURM_CONF"))
            m_oldConf = old;
        try {
            start(nodes, cpus);
        } catch (...) {
            stop();
            throw;
        }
    }
    ~SlurmCluster()
    {
        try {
            stop();
        } catch (...) {
        }
    }
    SlurmCluster(const SlurmCluster&) = delete;
    SlurmCluster& operator=(const SlurmCluster&) = delete;

    const std::filesystem::path& dir() const { return m_dir.path; }
    std::string conf() const { return (m_dir.path / "slurm.conf").string(); }
    std::vector<std::string> nodeNames() const { return m_nodes; }

    /// Runs a Slurm client command (SLURM_CONF set) and returns its output; status in `status` when asked.
    std::string client(const std::vector<std::string>& argv, int* status = nullptr) const
    {
        const auto out = m_dir.path / "client.out";
        const int rc = runProgram(argv, out);
        if (status)
            *status = rc;
        return slurpFile(out);
    }

    /// Jobs Slurm still lists (any state but ended ones), one id a line.
    std::string liveJobs() const { return client({"/usr/bin/squeue", "--noheader", "--format=%i %T"}); }

    /// Stops every daemon (cancelling the jobs left first) and throws when a process of the cluster remains.
    void stop()
    {
        if (m_stopped)
            return;
        m_stopped = true;
        if (m_ctld > 0) {
            client({"/usr/bin/scancel", "--user=root"});
            for (int i = 0; i < 100 && !liveJobs().empty(); ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        // slurmd before slurmctld, munged last (both daemons authenticate through it to the end).
        for (auto it = m_slurmd.rbegin(); it != m_slurmd.rend(); ++it)
            end(*it);
        end(m_ctld);
        end(m_munged);
        m_slurmd.clear();
        m_ctld = m_munged = -1;
        if (m_oldConf)
            ::setenv("SLURM_CONF", m_oldConf->c_str(), 1);
        else
            ::unsetenv("SLURM_CONF");
        const auto left = processesUsing(m_dir.path.string());
        if (!left.empty())
            throw std::runtime_error("processes of the Slurm fixture remain: " + left);
    }

    /// "PID NAME" of every live process whose command line mentions `text`, or empty.
    static std::string processesUsing(const std::string& text)
    {
        std::string out;
        for (const auto& p : liveProcesses()) {
            std::string cmdline = slurpFile("/proc/" + std::to_string(p.pid) + "/cmdline");
            std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
            if (cmdline.find(text) != std::string::npos)
                out += (out.empty() ? "" : ", ") + std::to_string(p.pid) + " " + cmdline;
        }
        return out;
    }

private:
    void start(int nodes, int cpus)
    {
        const auto d = m_dir.path;
        ::chmod(d.c_str(), 0700);
        for (const char* sub : {"munge", "state", "log"})
            std::filesystem::create_directories(d / sub);
        ::chmod((d / "munge").c_str(), 0700);
        // munged: a fresh key, its own socket (AuthInfo tells slurm's daemons and commands where it is).
        {
            std::random_device rd;
            std::ofstream key(d / "munge" / "munge.key", std::ios::binary);
            for (int i = 0; i < 1024; ++i)
                key.put(static_cast<char>(rd() & 0xff));
        }
        ::chmod((d / "munge" / "munge.key").c_str(), 0400);
        const std::string socket = (d / "munge" / "munge.socket").string();
        m_munged = spawn({"/usr/sbin/munged", "--foreground", "--force", "--socket=" + socket,
                             "--key-file=" + (d / "munge" / "munge.key").string(),
                             "--log-file=" + (d / "log" / "munged.log").string(),
                             "--pid-file=" + (d / "munge" / "munged.pid").string(),
                             "--seed-file=" + (d / "munge" / "munged.seed").string()},
            d / "log" / "munged.out");
        waitFor([&] { return std::filesystem::exists(socket); }, "munged to listen", d / "log" / "munged.out");

        // slurmctld and slurmd know themselves by the short hostname.
        char name[256] = {};
        ::gethostname(name, sizeof name - 1);
        const std::string host = std::string(name).substr(0, std::string(name).find('.'));
        std::ofstream conf(d / "slurm.conf");
        conf << "ClusterName=pwtest\n"
             << "SlurmctldHost=" << host << "(127.0.0.1)\n"
             << "SlurmUser=root\nSlurmdUser=root\n"
             << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << socket << "\n"
             << "SlurmctldPort=" << freePort() << "\n"
             << "StateSaveLocation=" << (d / "state").string() << "\n"
             << "SlurmdSpoolDir=" << (d / "spool-%n").string() << "\n"
             << "SlurmctldPidFile=" << (d / "slurmctld.pid").string() << "\n"
             << "SlurmdPidFile=" << (d / "slurmd-%n.pid").string() << "\n"
             << "SlurmctldLogFile=" << (d / "log" / "slurmctld.log").string() << "\n"
             << "SlurmdLogFile=" << (d / "log" / "slurmd-%n.log").string() << "\n"
             << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
             << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
             << "MpiDefault=none\nReturnToService=2\nSchedulerType=sched/builtin\n"
             // Cancelled steps get SIGKILL 2 s after SIGTERM (the default 30 s would slow every cancel test).
             << "KillWait=2\nInactiveLimit=0\nMinJobAge=300\n"
             << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n";
        std::string names;
        for (int i = 1; i <= nodes; ++i) {
            const std::string name = "pw" + std::to_string(i);
            m_nodes.push_back(name);
            names += (names.empty() ? "" : ",") + name;
            conf << "NodeName=" << name << " NodeAddr=127.0.0.1 NodeHostname=" << host << " Port=" << freePort()
                 << " CPUs=" << cpus << " State=UNKNOWN\n";
        }
        conf << "PartitionName=debug Nodes=" << names << " Default=YES MaxTime=INFINITE State=UP\n";
        conf.close();
        ::setenv("SLURM_CONF", this->conf().c_str(), 1);
        m_ctld = spawn({"/usr/sbin/slurmctld", "-D", "-i", "-f", this->conf()}, d / "log" / "slurmctld.out");
        for (const auto& name : m_nodes)
            m_slurmd.push_back(spawn(
                {"/usr/sbin/slurmd", "-D", "-f", this->conf(), "-N", name}, d / "log" / ("slurmd-" + name + ".out")));
        waitFor(
            [&] {
                int status = 0;
                const std::string states = client({"/usr/bin/sinfo", "--noheader", "--Node", "--format=%T"}, &status);
                if (status != 0)
                    return false;
                std::size_t idle = 0, pos = 0;
                while ((pos = states.find("idle", pos)) != std::string::npos) {
                    ++idle;
                    pos += 4;
                }
                return idle == m_nodes.size();
            },
            "every node to be idle", d / "log" / "slurmctld.log");
    }

    /// Starts `argv` in a process group of its own, its output into `log`.
    static pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& log)
    {
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::setpgid(0, 0);
            std::vector<char*> args;
            for (const auto& a : argv)
                args.push_back(const_cast<char*>(a.c_str()));
            args.push_back(nullptr);
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) {
                ::dup2(fd, STDOUT_FILENO);
                ::dup2(fd, STDERR_FILENO);
            }
            ::execv(args[0], args.data());
            _exit(127);
        }
        if (pid < 0)
            throw std::runtime_error("fork failed");
        return pid;
    }

    template <typename Ready> void waitFor(Ready ready, const std::string& what, const std::filesystem::path& log)
    {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!ready()) {
            for (pid_t p : m_slurmd)
                if (::waitpid(p, nullptr, WNOHANG) == p)
                    throw std::runtime_error("a slurmd exited while waiting for " + what + ": " + slurpFile(log));
            if (std::chrono::steady_clock::now() > until)
                throw std::runtime_error("timed out waiting for " + what + ": " + slurpFile(log));
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }

    /// SIGTERM, then SIGKILL after 10 s; reaped.
    static void end(pid_t pid)
    {
        if (pid <= 0)
            return;
        ::kill(pid, SIGTERM);
        for (int i = 0; i < 100; ++i) {
            if (::waitpid(pid, nullptr, WNOHANG) == pid)
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }

    TempDir m_dir;
    std::optional<std::string> m_oldConf;
    std::vector<std::string> m_nodes;
    pid_t m_munged = -1;
    pid_t m_ctld = -1;
    std::vector<pid_t> m_slurmd;
    bool m_stopped = false;
};

} // namespace pw::test
