// SPDX-License-Identifier: MIT
// Internal to app/run/: running Slurm's client commands (sbatch, scontrol, sinfo, scancel) and taking their output,
// for the Slurm launcher and its pre-flight (slurm.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace pw::app::slurm_detail {

/// @brief How a command ended and what it printed.
struct ToolResult
{
    int status = -1; ///< its exit status; -1 when it could not be started, was killed or ran out of time
    std::string output; ///< stdout
    std::string errors; ///< stderr, or why it did not run

    bool ok() const { return status == 0; }
};

/// Runs `argv` (looked up on PATH) with stdin from /dev/null and the environment as it is (SLURM_CONF...), killed
/// after `timeout`.
ToolResult runTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// "sbatch: exited with status 1: sbatch: error: ..." for messages.
std::string describeFailure(const std::vector<std::string>& argv, const ToolResult& r);

} // namespace pw::app::slurm_detail
