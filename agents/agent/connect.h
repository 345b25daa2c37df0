// SPDX-License-Identifier: MIT
// An agent that connects to its controller over TCP instead of being started by it on pipes or SSH: the agents of a
// Slurm run, started by `srun` on the allocation's nodes (app/run/slurm.h). It proves the run's secret
// (agents/protocol/connect_auth.h) and then runs an ordinary session on the connection.
#pragma once

#include <optional>
#include <string>

namespace pw::agents {

/// pipewright-agent --connect HOST:PORT --secret-file FILE [--task N]: connects to the controller (trying for up to
/// 60 s), answers its challenge with task N (default: SLURM_PROCID) and the secret in FILE, then runs
/// runAgentSession on the connection. Exit status as runAgentSession; 1 when it cannot connect or prove itself.
int connectCommand(const std::string& address, const std::string& secret_file, std::optional<int> task);

} // namespace pw::agents
