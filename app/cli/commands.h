// SPDX-License-Identifier: MIT
// The CLI's subcommands, separated from argument parsing. Each throws planner::InputError on bad input.
#pragma once

#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/partition/partitioner.h"

namespace pw::cli {

/// @brief A command line that means nothing (an option the chosen algorithm does not read): exit status 2.
class UsageError : public planner::InputError
{
public:
    using planner::InputError::InputError;
};

/// @brief The command wrote and printed its plan, but the plan does not fit device memory: exit status 3.
class DoesNotFit : public planner::InputError
{
public:
    using planner::InputError::InputError;
};

/// The exit statuses scripts can rely on (README "Exit status", `pipewright-cli --help`).
enum ExitStatus : int {
    kExitOk = 0, ///< done
    kExitError = 1, ///< bad input or a failure: nothing (or nothing valid) was written
    kExitUsage = 2, ///< the command line is wrong
    kExitDoesNotFit = 3, ///< the plan was written and printed, but it does not fit device memory
};

struct ImportOptions
{
    std::string input;
    std::string output;
    std::string name;
    int batch_size = 0; ///< samples per profiled minibatch (graph.txt does not store it)
    bool json = false;
};

struct TransformerOptions
{
    int layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, microbatch = 1;
    // The family's fields (TransformerConfig; 0 and "" leave GPT-2's default).
    int ffn_hidden = 0, kv_heads = 0;
    std::string mlp, norm, positions;
    bool untied_embeddings = false, no_bias = false, no_dropout = false;
    std::string attention; ///< flash | materialized; empty: flash
    std::string cross_entropy; ///< fp32 | native; empty: fp32
    std::string hf_config; ///< a Hugging Face config.json: the model's shape comes from it
    int bytes_per_element = 0; ///< 0: what the engine trains in on the device (defaultBytesPerElement)
    std::string precision; ///< fp32 | bf16 | fp16 | fp8 (the block products in FP8); empty: by bytes_per_element
    double efficiency = std::numeric_limits<double>::quiet_NaN(); ///< NaN: not given (the device's time model)
    std::string gemm_table; ///< a GEMM table file: time the products by it
    std::string device;
    std::string output;
    bool json = false;
};

struct PlanOptions
{
    std::string model;
    std::string cluster;
    std::string algorithm;
    std::string output;
    std::string boundaries; ///< comma-separated, for manual
    std::vector<std::string> settings; ///< --set NAME=VALUE, algorithm-specific options
    std::string costs; ///< calibrated costs (`calibrate`) to predict the plan with instead of the profile's
    planner::PartitionOptions partition;
    bool json = false;
};

struct CompareOptions
{
    std::string model;
    std::string cluster;
    std::vector<std::string> algorithms;
    planner::PartitionOptions partition;
    bool json = false;
};

struct AdviseOptions
{
    std::string model;
    std::string offers;
    double samples = 0;
    std::optional<double> budget;
    std::optional<double> deadline_hours;
    std::vector<std::string> algorithms;
    std::vector<std::string> mixed_algorithms;
    bool no_mixes = false;
    int max_devices = 64;
    int top = 10;
    planner::PartitionOptions partition;
    bool json = false;
};

struct SimulateOptions
{
    std::string plan;
    std::string trace;
    std::string costs; ///< calibrated costs (`calibrate`) instead of the profile's
    bool json = false;
};

struct ExportOptions
{
    std::string plan;
    std::string format;
    std::string output;
    bool json = false;
};

void importPipeDream(const ImportOptions& o, std::ostream& out);
void transformer(const TransformerOptions& o, std::ostream& out);
void plan(const PlanOptions& o, std::ostream& out);
void simulate(const SimulateOptions& o, std::ostream& out);
void exportPlan(const ExportOptions& o, std::ostream& out);
void demo(bool json, std::ostream& out);
/// Runs every applicable partitioner on one input and prints the comparison table.
void compare(const CompareOptions& o, std::ostream& out);
/// Ranks the allocations of an offers file for a model (GPU allocation advisor).
void advise(const AdviseOptions& o, std::ostream& out);
/// Lists the partitioners with their algorithm-specific options.
void listAlgorithms(bool json, std::ostream& out);

/// Parses "3,7,11" into layer indices; throws InputError naming --boundaries.
std::vector<int> parseBoundaries(const std::string& text);
/// The partitioner by name; throws InputError listing the known ones.
const planner::Partitioner& partitionerNamed(const std::string& name);
/// Parses --set NAME=VALUE items against the partitioner's option specs into PartitionOptions::params.
nlohmann::json parseSettings(const planner::Partitioner& partitioner, const std::vector<std::string>& settings);

} // namespace pw::cli
