// SPDX-License-Identifier: MIT
// Project files (*.pwproj): what the desktop app opens and saves. A project holds the model, the cluster, the
// current plan and named scenarios (saved plans to compare), plus the partition settings last used.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/plan.h"

namespace pw::app {

inline constexpr int kProjectFormatVersion = 1;
inline constexpr const char* kProjectExtension = ".pwproj";

/// @brief A plan saved under a name, for side-by-side comparison.
struct Scenario
{
    std::string name;
    std::string note;
    planner::Plan plan; ///< self-contained (embeds the model and cluster it was made for)
};

/// @brief The partitioner and options the partition panel used last.
struct PartitionSettings
{
    std::string algorithm = "pipedream";
    nlohmann::json params = nlohmann::json::object(); ///< algorithm options by name
    planner::ScheduleOptions schedule;

    bool operator==(const PartitionSettings&) const = default;
};

struct Project
{
    std::string name;
    planner::Shared<planner::ModelProfile> model; ///< shared with the plans made for it (planner/shared.h)
    planner::Shared<planner::Cluster> cluster;
    /// The plan being edited; its model and cluster are the project's (a plan made before the model or the
    /// cluster changed is kept as a scenario instead).
    std::optional<planner::Plan> plan;
    std::vector<Scenario> scenarios;
    PartitionSettings partition;

    /// Throws InputError for duplicate or empty scenario names and a current plan that does not match the
    /// project's model and cluster or does not validate.
    void validate() const;
    /// Index of the scenario named `name`, or -1.
    int findScenario(const std::string& name) const;
};

nlohmann::json toJson(const Project& project);
/// Parses and validates; errors carry the JSON path of the bad field.
Project projectFromJson(const nlohmann::json& j);

/// Loads a project file; every error is an InputError naming the file, line and field.
Project loadProject(const std::string& path);
/// Writes atomically (a temporary file renamed over the target), so a failed save never loses the old file.
void saveProject(const std::string& path, const Project& project);

/// A new project from a model and a cluster, named after the model.
Project newProject(planner::ModelProfile model, planner::Cluster cluster);

} // namespace pw::app
