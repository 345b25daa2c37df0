// SPDX-License-Identifier: MIT
// pipewright-agent: trains its devices' part of a plan, driven by a controller over stdin/stdout.
//   pipewright-agent                 a session on stdin/stdout (what the controller starts)
//   pipewright-agent --capabilities  prints this machine's capabilities as JSON
//   pipewright-agent --profile ...   measures a GPT-2's layers here and writes a model profile (profile_command.h)
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include "agents/agent/agent.h"
#include "agents/agent/profile_command.h"

namespace {

void onTerminate(int)
{
    pw::agents::requestAgentStop();
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--profile") == 0)
        return pw::agents::runProfileCommand(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--capabilities") == 0) {
            std::cout << pw::agents::capabilities().toJson().dump(2) << "\n";
            return 0;
        }
        if (std::strcmp(argv[i], "--version") == 0) {
            std::cout << "pipewright-agent " << PW_VERSION << "\n";
            return 0;
        }
        std::cerr << "pipewright-agent: unknown argument '" << argv[i]
                  << "'\nusage: pipewright-agent [--capabilities | --version | --profile OPTIONS]\n"
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
