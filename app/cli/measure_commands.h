// SPDX-License-Identifier: MIT
// The CLI's measuring half: `profile measure` (a model profile timed on this machine by pipewright-agent
// --profile) and `calibrate` (a cost model fitted to a recorded run, for `simulate` and `plan --costs`).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace pw::cli {

struct MeasureOptions
{
    int layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, microbatch = 0; ///< 0: not given
    std::string plan; ///< instead of the shape: a plan whose model carries the architecture
    std::string hf_config; ///< instead of the shape: a Hugging Face config.json (with --seq, --microbatch)
    int threads = 1;
    int repeats = 10;
    int warmup = 1;
    std::uint64_t seed = 1234;
    std::string device = "cpu"; ///< cpu | cuda | cuda:N (pipewright-agent --profile --device)
    std::string precision = "fp32"; ///< fp32 | bf16 (a CUDA device only)
    std::string output;
    bool json = false;
};

/// `--device`'s value as a device: nullopt for a malformed one, else -1 for "cpu" and N for "cuda:N" ("cuda": 0).
std::optional<int> measureDeviceIndex(const std::string& device);

struct CalibrateOptions
{
    std::string run; ///< run id (a unique prefix will do)
    std::string output;
    std::string history; ///< empty: the user's data directory
    std::string statistic = "median"; ///< of a stage's spans: median | mean
    bool json = false;
};

/// Runs pipewright-agent --profile (PIPEWRIGHT_AGENT, else the agent beside the CLI) with the options, which writes
/// the profile to o.output; prints a summary. Throws InputError with the agent's own message when it fails, which
/// for a device the agent cannot use (built without CUDA, no such device, bf16 on the CPU) comes before it measures
/// anything. Throws InputError for bf16 with --device cpu without starting the agent.
void profileMeasure(const MeasureOptions& o, std::ostream& out);

/// Fits a cost model to the run's measured spans (planner/sim/calibration.h), writes it to o.output and prints the
/// fit with the iteration-time error of the profile's and of the calibrated prediction against that run.
void calibrate(const CalibrateOptions& o, std::ostream& out);

} // namespace pw::cli
