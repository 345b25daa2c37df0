// SPDX-License-Identifier: MIT
// Plans for other runtimes: the files with which torchtitan (torch.distributed.pipelining), Megatron-LM and
// DeepSpeed train the same partition and schedule. One exporter per runtime, all listed in one registry; each
// refuses, naming the plan's field, what its runtime cannot express (docs/exports.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "../plan.h"

namespace pw::planner {

/// @brief One file of an export: its name (no directory) and its text.
struct ExportedFile
{
    std::string name;
    std::string text;

    bool operator==(const ExportedFile&) const = default;
};

/// @brief What an exporter wrote for a plan.
struct PlanExport
{
    std::vector<ExportedFile> files;
    /// What the user must know to use the files (one sentence each): what the runtime decides itself, what the
    /// export could not carry.
    std::vector<std::string> notes;

    bool operator==(const PlanExport&) const = default;
};

class PlanExporter
{
public:
    virtual ~PlanExporter() = default;
    virtual std::string_view name() const = 0; ///< the --format value: "torchtitan", "megatron", "deepspeed"
    virtual std::string_view description() const = 0;
    /// The files for `plan` (validated). Throws InputError whose field is the plan's JSON path of what the
    /// runtime cannot express (devices of several types, an asynchronous schedule, stages replicated unequally,
    /// a profile that is not a transformer where the runtime needs one), with the runtime named in the message.
    virtual PlanExport write(const Plan& plan) const = 0;
    /// The plan as the runtime trains it from the files `write` gives, where that differs from the plan in what the
    /// runtime cannot keep (torchtitan: weights tied across pipeline stages train as two copies): what its runs are
    /// predicted and recorded against (history import-trace). The plan itself by default.
    virtual Plan runsAs(const Plan& plan) const { return plan; }
};

const std::vector<const PlanExporter*>& planExporters();
const PlanExporter* findPlanExporter(std::string_view name);

/// Writes the export's files into `directory` (made when missing) and returns their paths; throws InputError
/// naming the directory or the file that could not be written.
std::vector<std::string> writePlanExport(const PlanExport& exported, const std::string& directory);

} // namespace pw::planner
