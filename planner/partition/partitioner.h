// SPDX-License-Identifier: MIT
// The partitioner interface and registry: one algorithm per file, all listed in one place.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../plan.h"

namespace pw::planner {

/// @brief A finding about a partitioning run: why it failed or what to be careful about.
struct Diagnostic
{
    enum class Severity { Info, Warning, Error };
    Severity severity = Severity::Info;
    std::string code; ///< stable identifier, e.g. "infeasible", "over-memory", "cancelled"
    std::string message;
};

/// @brief An algorithm-specific option: what `pipewright-cli plan --set NAME=VALUE` and the app's option form
/// offer. Values live in PartitionOptions::params, keyed by name, and are checked against the spec.
struct OptionSpec
{
    enum class Type { Integer, Number, Boolean, Choice, IntegerList };
    std::string name; ///< kebab-case, e.g. "staleness"
    Type type = Type::Integer;
    nlohmann::json default_value; ///< null: no fixed default (the algorithm chooses; shown as "auto")
    std::string description;
    std::optional<double> min; ///< Integer, Number, IntegerList elements
    std::optional<double> max;
    std::vector<std::string> choices; ///< Choice
};

struct PartitionOptions
{
    int devices = 0; ///< devices to use (first N of the cluster); 0 = all
    int stages = 0; ///< stage count for algorithms that take one (uniform, parameters); 0 = one per device
    bool straight = false; ///< no replication: every stage on one device
    bool memory_limit = false; ///< reject stages that do not fit device memory
    std::string pipedream_variant = "paper"; ///< paper | reference
    /// Paper variant: read B_k as per-worker bandwidth, charging the all-reduce 2(m-1)/m |w| / B_k per
    /// worker instead of the paper's 2(m-1)|w| / B_k (digest §2.7 item 3).
    bool per_worker_allreduce = false;
    bool flat = false; ///< PipeDream: one level over all devices at the slowest bandwidth
    /// PipeDream (both variants): drop replicas that do not speed a stage up past the slowest stage (the
    /// reference optimizer's --use_fewer_machines; see docs/algorithms/pipedream.md). Without it such replicas
    /// only get an "idle-replicas" warning.
    bool use_fewer_machines = false;
    std::optional<double> activation_compression_ratio; ///< reference variant only
    std::vector<int> boundaries; ///< manual: last layer of every stage but the final one
    ScheduleOptions schedule; ///< copied into the plan; memory checks follow its kind
    /// Algorithm-specific options by name (see Partitioner::options()); unknown names are errors.
    nlohmann::json params = nlohmann::json::object();
};

/// @brief What to partition. The model and cluster are shared with every plan the partitioner makes.
struct PartitionRequest
{
    Shared<ModelProfile> model;
    Shared<Cluster> cluster;
    PartitionOptions options;
};

/// @brief One configuration a search algorithm evaluated, as its own cost model saw it (best first).
struct Candidate
{
    std::string description; ///< e.g. "d=2 p=4 b=2 recompute"
    nlohmann::json config = nlohmann::json::object(); ///< the choices, machine-readable
    double throughput_samples_per_s = 0; ///< the algorithm's own prediction
    double peak_memory_bytes = 0; ///< the most any device needs
    double memory_capacity_bytes = 0; ///< of that device
    bool feasible = true;
    std::string reason; ///< why it is infeasible or was not chosen
};

struct PartitionResult
{
    std::optional<Plan> plan;
    std::vector<Diagnostic> diagnostics;
    std::vector<Candidate> candidates; ///< search algorithms: what they compared (the chosen one first)

    bool ok() const { return plan.has_value(); }
    bool hasError() const;
    std::string errorText() const; ///< the error diagnostics joined, for one-line reports
};

/// Progress in [0, 1]. Called from the partitioner's thread.
using ProgressFn = std::function<void(double)>;

/// @brief Which of PartitionOptions' shared fields an algorithm reads (besides devices, memory_limit and the
/// schedule, which all read). Front ends reject the others when given instead of ignoring them (#10 item 4).
struct SharedOptionUse
{
    bool stages = false; ///< PartitionOptions::stages
    bool straight = false; ///< PartitionOptions::straight
    bool flat = false; ///< PartitionOptions::flat
};

class Partitioner
{
public:
    virtual ~Partitioner() = default;
    virtual std::string_view name() const = 0;
    virtual std::string_view description() const = 0;
    /// The algorithm-specific options it reads from PartitionOptions::params.
    virtual std::vector<OptionSpec> options() const { return {}; }
    /// The shared options it reads (see SharedOptionUse).
    virtual SharedOptionUse sharedOptions() const { return {}; }
    /// Never throws for bad input: problems come back as Error diagnostics.
    virtual PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop) const = 0;
};

/// The shared options set in `options` (stages > 0, straight, flat) that `partitioner` does not read, as
/// their command-line names ("--straight"); empty when all of them mean something to it.
std::vector<std::string> unusedSharedOptions(const Partitioner& partitioner, const PartitionOptions& options);

/// All partitioners, in a fixed order.
const std::vector<const Partitioner*>& partitioners();
/// nullptr when there is none by that name.
const Partitioner* findPartitioner(std::string_view name);

/// Shared helpers for partitioners.
namespace detail {
/// A plan skeleton with model, cluster, algorithm and schedule filled in.
Plan basePlan(const PartitionRequest& request, std::string_view algorithm);
/// Number of devices the request may use, or an error diagnostic.
std::optional<int> usableDevices(const PartitionRequest& request, std::vector<Diagnostic>& diagnostics);
PartitionResult failure(std::string code, std::string message);
/// The finished plan when it passes Plan::validate(), else an "invalid-plan" error; keeps `diagnostics` and adds
/// an "estimated-speed" warning for every device type the plan uses whose speed is a peak-FLOP/s guess.
PartitionResult validated(Plan plan, std::vector<Diagnostic> diagnostics);
/// True when the request asked for a schedule kind (other than the default) that differs from `chosen`: the
/// partitioners that pick their own kind say so in a diagnostic.
bool replacesRequestedKind(const PartitionRequest& request, std::string_view chosen);

/// "description: reason" of the first candidate that gives a reason (best first: the closest to working), or
/// empty; for the error a search reports when nothing fits.
std::string firstReason(const std::vector<Candidate>& candidates);

/// The request checks the search partitioners share: one chunk per device, a stage count in [0, devices],
/// microbatches in [1, kMaxMicrobatches] and a microbatch size >= 0. An error result naming `algorithm`, or
/// nullopt when the request passes.
std::optional<PartitionResult> checkOneStagePerDevice(
    const PartitionRequest& request, std::string_view algorithm, int devices);

/// @brief Typed access to PartitionOptions::params after checking them against a partitioner's specs.
class OptionValues
{
public:
    /// Checks every given value (known name, type, range, choice); problems become "bad-option" errors.
    /// ok() is false when any was found.
    OptionValues(
        const std::vector<OptionSpec>& specs, const nlohmann::json& params, std::vector<Diagnostic>& diagnostics);
    bool ok() const { return m_ok; }
    /// True when the user gave the option or its spec has a default.
    bool has(std::string_view name) const;
    bool given(std::string_view name) const; ///< set by the user
    /// Accessors return the given value, else the default; they throw std::logic_error for an option that
    /// has neither (check has() first) or is not in the specs.
    int integer(std::string_view name) const;
    double number(std::string_view name) const;
    bool boolean(std::string_view name) const;
    std::string choice(std::string_view name) const;
    std::vector<int> integers(std::string_view name) const;
    /// The effective values (given or default), for Plan::algorithm_options.
    nlohmann::json effective() const;

private:
    const nlohmann::json& value(std::string_view name) const;
    std::vector<OptionSpec> m_specs;
    nlohmann::json m_params;
    bool m_ok = true;
};
} // namespace detail

/// @brief Thrown from deep inside a search when its stop token is set; OptionedPartitioner reports it.
struct PartitionCancelled : std::runtime_error
{
    PartitionCancelled()
        : std::runtime_error("partitioning was cancelled")
    {
    }
};

/// @brief A partitioner with typed options (the search algorithms): partition() checks the options against
/// options() and the device count, then runs search(); PartitionCancelled, InputError and any other exception
/// become error diagnostics ("cancelled", "invalid-input", "internal-error" naming the algorithm).
class OptionedPartitioner : public Partitioner
{
public:
    PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop) const final;

protected:
    /// `devices`: how many the request may use; `diagnostics`: what the checks found so far (warnings).
    virtual PartitionResult search(const PartitionRequest& request, const detail::OptionValues& values, int devices,
        const ProgressFn& progress, std::stop_token stop, std::vector<Diagnostic> diagnostics) const = 0;
};

/// Parses command-line text for an option ("4", "0.5", "true", "ed", "1,2,4") into its JSON value.
/// Throws InputError naming the option when the text does not fit its type.
nlohmann::json parseOptionValue(const OptionSpec& spec, std::string_view text);
/// "integer >= 0", "one of np|ed|hd|custom", ...: for help texts.
std::string describeType(const OptionSpec& spec);

} // namespace pw::planner
