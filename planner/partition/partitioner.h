// SPDX-License-Identifier: MIT
// The partitioner interface and registry: one algorithm per file, all listed in one place.
#pragma once

#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

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
    std::optional<double> activation_compression_ratio; ///< reference variant only
    std::vector<int> boundaries; ///< manual: last layer of every stage but the final one
    ScheduleOptions schedule; ///< copied into the plan; memory checks follow its kind
};

struct PartitionRequest
{
    const ModelProfile& model;
    const Cluster& cluster;
    PartitionOptions options;
};

struct PartitionResult
{
    std::optional<Plan> plan;
    std::vector<Diagnostic> diagnostics;

    bool ok() const { return plan.has_value(); }
    bool hasError() const;
    std::string errorText() const; ///< the error diagnostics joined, for one-line reports
};

/// Progress in [0, 1]. Called from the partitioner's thread.
using ProgressFn = std::function<void(double)>;

class Partitioner
{
public:
    virtual ~Partitioner() = default;
    virtual std::string_view name() const = 0;
    virtual std::string_view description() const = 0;
    /// Never throws for bad input: problems come back as Error diagnostics.
    virtual PartitionResult partition(
        const PartitionRequest& request, const ProgressFn& progress, std::stop_token stop) const = 0;
};

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
/// The finished plan when it passes Plan::validate(), else an "invalid-plan" error; keeps `diagnostics`.
PartitionResult validated(Plan plan, std::vector<Diagnostic> diagnostics);
} // namespace detail

} // namespace pw::planner
