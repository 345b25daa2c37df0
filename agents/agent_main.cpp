// SPDX-License-Identifier: MIT
// pipewright-agent: trains its devices' part of a plan, driven by a controller over stdin/stdout.
//   pipewright-agent                 a session on stdin/stdout (what the controller starts)
//   pipewright-agent --capabilities [--human]   prints this machine's capabilities: JSON (the Hello, what
//                                               pre-flight reads), or lines for people
//   pipewright-agent --profile ...   measures a GPT-2's layers here and writes a model profile (profile_command.h)
//   pipewright-agent --profile-gemm ...   times cuBLASLt products over a grid of shapes: the GEMM table (same file)
//   pipewright-agent --session SOCKET [--linger S]   a served agent for an SSH deployment (agent/serve.h)
//   pipewright-agent --connect HOST:PORT --secret-file F [--task N]   connects to its controller (a Slurm run's
//                                                                     task: agent/connect.h)
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "agents/agent/agent.h"
#include "agents/agent/connect.h"
#include "agents/agent/profile_command.h"
#include "agents/agent/serve.h"

namespace {

void onTerminate(int signal)
{
    pw::agents::requestAgentStop(signal);
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--profile-gemm") == 0)
        return pw::agents::runGemmProfileCommand(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    if (argc > 1 && std::strcmp(argv[1], "--profile") == 0)
        return pw::agents::runProfileCommand(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    if (argc == 4 && std::strcmp(argv[1], "--probe") == 0)
        return pw::agents::probeCommand(argv[2], std::atoi(argv[3]));
    if (argc == 3 && std::strcmp(argv[1], "--listen-probe") == 0)
        return pw::agents::listenProbeCommand(argv[2]);
    if (argc > 1 && std::strcmp(argv[1], "--connect") == 0) {
        // A Slurm run's task: --connect HOST:PORT --secret-file FILE [--task N] (the secret never on a command line).
        std::string secretFile;
        std::optional<int> task;
        bool ok = argc >= 5 && argc % 2 == 1;
        for (int i = 3; ok && i + 1 < argc; i += 2) {
            if (std::strcmp(argv[i], "--secret-file") == 0)
                secretFile = argv[i + 1];
            else if (std::strcmp(argv[i], "--task") == 0)
                task = std::atoi(argv[i + 1]);
            else
                ok = false;
        }
        if (!ok || secretFile.empty()) {
            std::cerr << "usage: pipewright-agent --connect HOST:PORT --secret-file FILE [--task N]\n";
            return 2;
        }
        struct sigaction term = {};
        term.sa_handler = onTerminate;
        sigaction(SIGTERM, &term, nullptr);
        sigaction(SIGINT, &term, nullptr);
        return pw::agents::connectCommand(argv[2], secretFile, task);
    }
    // Served agents (runs deployed over SSH): --serve SOCKET | --attach SOCKET | --session SOCKET, [--linger S].
    for (const char* mode : {"--serve", "--attach", "--session"})
        if (argc > 2 && std::strcmp(argv[1], mode) == 0) {
            std::chrono::seconds linger {30};
            if (argc == 5 && std::strcmp(argv[3], "--linger") == 0)
                linger = std::chrono::seconds {std::max(1, std::atoi(argv[4]))};
            else if (argc != 3) {
                std::cerr << "usage: pipewright-agent " << mode << " SOCKET [--linger SECONDS]\n";
                return 2;
            }
            struct sigaction term = {};
            term.sa_handler = onTerminate;
            sigaction(SIGTERM, &term, nullptr);
            sigaction(SIGINT, &term, nullptr);
            if (std::strcmp(mode, "--serve") == 0)
                return pw::agents::serveCommand(argv[2], linger);
            if (std::strcmp(mode, "--attach") == 0)
                return pw::agents::attachCommand(argv[2], std::chrono::seconds {3}); // a controller reconnecting
            return pw::agents::sessionCommand(argv[2], linger);
        }
    if (argc > 1 && std::strcmp(argv[1], "--capabilities") == 0) {
        const bool human = argc == 3 && std::strcmp(argv[2], "--human") == 0;
        if (argc > 3 || (argc == 3 && !human && std::strcmp(argv[2], "--json") != 0)) {
            std::cerr << "usage: pipewright-agent --capabilities [--json | --human]\n";
            return 2;
        }
        const auto hello = pw::agents::capabilities();
        std::cout << (human ? pw::agents::describeCapabilities(hello) : hello.toJson().dump(2) + "\n");
        return 0;
    }
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--version") == 0) {
            std::cout << "pipewright-agent " << PW_VERSION << "\n";
            return 0;
        }
        std::cerr << "pipewright-agent: unknown argument '" << argv[i]
                  << "'\nusage: pipewright-agent [--capabilities [--human] | --version | --profile OPTIONS | "
                     "--profile-gemm OPTIONS]\n"
                     "  (without arguments it speaks the controller protocol on stdin/stdout)\n";
        return 2;
    }
    // stdout carries frames only: keep it for the protocol and point fd 1 at stderr, so that a library printing to
    // stdout cannot corrupt the stream.
    const int protocolOut = dup(STDOUT_FILENO);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    struct sigaction sa = {};
    sa.sa_handler = onTerminate;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    return pw::agents::runAgentSession(STDIN_FILENO, protocolOut);
}
