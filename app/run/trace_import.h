// SPDX-License-Identifier: MIT
// Runs from another runtime: the PyTorch profiler (Kineto JSON) traces of a torch.distributed.pipelining run of a plan
// that Pipewright exported to torchtitan, one trace per pipeline rank, read back as a measured run of that plan. The
// runtime names every action it executes "PP:{action}" (PP:0F3, PP:1RECV_F0, PP:(0F3;3B1)OVERLAP_F_B); each is matched
// to the plan's (stage, microbatch, kind) in the order the exported CSV gives, step after step, and the ranks' clocks
// are aligned from the data they exchange. A trace of another plan is refused naming its first mismatch; nothing is
// guessed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/timeline.h"

namespace pw::app {

/// @brief What importPipeliningTraces read.
struct ImportedRun
{
    /// The plan as torch.distributed.pipelining ran it (PlanExporter::runsAs): the plan given, but with weights tied
    /// across stages untied; the measured timeline's action indices are its program's.
    planner::Plan plan;
    bool untied = false; ///< the plan given ties its embedding and head across stages, which the run did not
    planner::Timeline measured; ///< on the plan's devices, action indices of the plan's program over `steps` steps
    int steps = 0;
    int matched = 0; ///< compute and transfer actions matched (every one of the program's)
    std::vector<double> clock_offsets_s; ///< per rank: added to its trace's times (rank 0: 0)
    std::vector<std::string> files; ///< per rank: the trace read as that rank (its distributedInfo's, else by order)
    /// Where the times are from: "gpu_user_annotation" (device time), "user_annotation" (host time), or
    /// "gpu_user_annotation (compute), user_annotation (transfers)" (transfers that ran no kernel: Gloo's)
    std::string source;

    bool operator==(const ImportedRun&) const = default;
};

/// Reads `traces` (trace i is pipeline rank i unless it names its rank in distributedInfo) as a run of `plan` as torch
/// ran it (ImportedRun::plan).
/// Throws planner::InputError naming the file and what does not match: an unreadable trace, a rank missing or twice,
/// a plan the torchtitan export refuses or with data-parallel or tensor-parallel groups (one pipeline is read), an
/// action the plan does not have or in another order (the first mismatch: rank, step, position, both actions), an
/// action missing, an F&B pair whose forward and backward are not timed apart.
ImportedRun importPipeliningTraces(const planner::Plan& plan, const std::vector<std::filesystem::path>& traces);

} // namespace pw::app
