// SPDX-License-Identifier: MIT
// `pipewright-agent --profile`: measures a GPT-2's layers on this machine with the engine (engine/profiler.h) and
// writes the planner's model profile JSON, to stdout or a file. `pipewright-cli profile measure` runs it.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/gemm_profile.h"
#include "engine/profiler.h"

namespace pw::agents {

/// The usage text of --profile (also printed by --help).
extern const char* const kProfileUsage;

/// @brief The command line after --profile, as given.
struct ProfileArguments
{
    engine::ProfileOptions options; ///< the shape fields stay 0 when not given
    std::string plan; ///< --plan: take the shape and microbatch size from this plan's model
    std::string hf_config; ///< --hf-config: the shape from a Hugging Face config.json (with --seq, --microbatch)
    std::string output; ///< -o: "" writes to stdout
    bool help = false;

    bool operator==(const ProfileArguments&) const = default;
};

/// Parses --layers --hidden --heads --seq --vocab --microbatch | --plan PLAN.json, --threads --repeats --warmup
/// --seed, --device, --precision, -o FILE, --help. Throws InputError naming the option at fault (an unknown one, a
/// missing or malformed value).
ProfileArguments parseProfileArguments(const std::vector<std::string>& args);

/// `--device`'s value: "cpu" (nullopt), "cuda" (0) or "cuda:N". Throws InputError naming `option` otherwise.
std::optional<int> parseDevice(const std::string& option, const std::string& text);
/// `--precision`'s value: "fp32" or "bf16" (bf16 mixed). Throws InputError naming `option` otherwise.
engine::Precision parsePrecision(const std::string& option, const std::string& text);
/// Throws InputError naming --device or --precision when `choice` cannot run here: CUDA asked for in a build
/// without it, a device index beyond the `cudaDevices` visible (with `why`, the probe's reason when none is), bf16
/// on the CPU.
void checkDeviceChoice(
    const engine::DeviceChoice& choice, int cudaDevices, bool cudaCompiledIn, const std::string& why = {});

/// The options to measure with: the shape from --plan (its model's architecture and the plan's microbatch size)
/// or from the shape options, never both; validated, the device included (checkDeviceChoice against this
/// process's CUDA). Throws InputError naming the option or the plan file.
engine::ProfileOptions resolveProfileOptions(const ProfileArguments& args);

/// Runs the command; returns the exit status (0 written, 1 failed, 2 bad arguments) with the error on `err`.
int runProfileCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

/// The usage text of --profile-gemm.
extern const char* const kGemmProfileUsage;

/// @brief The command line after --profile-gemm.
struct GemmProfileArguments
{
    engine::GemmProfileOptions options;
    std::string output; ///< -o: "" writes to stdout
    bool help = false;

    bool operator==(const GemmProfileArguments&) const = default;
};

/// Parses --device cuda[:N], --precision bf16|fp32, --dims N,N,..., --repeats N, -o FILE, --help. Throws
/// InputError naming the option at fault.
GemmProfileArguments parseGemmProfileArguments(const std::vector<std::string>& args);

/// `pipewright-agent --profile-gemm`: measures the GEMM table (engine/gemm_profile.h) and writes it (JSON,
/// planner/gemm_table.h) to stdout or a file, the progress on `err`. Exit status 0 written, 1 failed (no CUDA, no
/// such device), 2 bad arguments.
int runGemmProfileCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

} // namespace pw::agents
