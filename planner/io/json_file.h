// SPDX-License-Identifier: MIT
// Reading and writing the planner's JSON files with errors that name the file, line and field.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "../cluster.h"
#include "../model_profile.h"
#include "../plan.h"

namespace pw::planner {

/// Parses a JSON file; syntax errors become InputError(file, line, "", what).
nlohmann::json readJsonFile(const std::string& path);
/// Writes `j` (indented by `indent`, or compact with -1); throws InputError when the file cannot be written.
void writeJsonFile(const std::string& path, const nlohmann::json& j, int indent = 2);

/// Line (1-based) where the value at `pointer` (an RFC 6901 JSON pointer such as "/layers/3/forward_ms")
/// starts in `text`; 0 when it cannot be found.
int lineOfJsonPointer(std::string_view text, std::string_view pointer);

/// Reads and parses `path`, then runs `convert` on it; the InputError (or JSON type error) it throws comes back
/// naming the file and the line of its field. For the file formats of other layers (app's project files).
void convertJsonFile(const std::string& path, const std::function<void(const nlohmann::json&)>& convert);

/// Load and validate; every error is an InputError naming the file, line and field.
ModelProfile loadModel(const std::string& path);
Cluster loadCluster(const std::string& path);
Plan loadPlan(const std::string& path);
/// An offers file for the GPU advisor (planner/analysis/advisor.h).
struct Market;
Market loadMarket(const std::string& path);

} // namespace pw::planner
