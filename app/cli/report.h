// SPDX-License-Identifier: MIT
// Human and JSON renderings of plans and simulation results for the CLI.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/analysis/advisor.h"
#include "planner/analysis/compare.h"
#include "planner/partition/partitioner.h"
#include "planner/sim/simulator.h"
#include "planner/units.h"

namespace pw::cli {

using planner::formatBytes; // memory in GiB & co. (planner/units.h), the one memory unit everywhere
using planner::formatSeconds;

/// `v` with `digits` digits after the point: "12.345".
std::string fixedText(double v, int digits);
/// A relative change as a signed percentage with one decimal: "+3.2 %", "-0.5 %".
std::string signedPercent(double relative);

/// Metrics of a simulated plan as the `simulate --json` contract writes them.
nlohmann::json metricsJson(const planner::Plan& plan, const planner::SimulationResult& result);
void printPlanSummary(std::ostream& out, const planner::Plan& plan, const planner::SimulationResult& result);
void printDiagnostics(std::ostream& out, const std::vector<planner::Diagnostic>& diagnostics);
/// "" when every device fits, else a sentence naming the worst stage.
std::string memoryProblem(const planner::Plan& plan, const planner::SimulationResult& result);

/// The `compare` table: one row per algorithm, failures with their reason.
void printComparison(std::ostream& out, const std::vector<planner::ComparisonRow>& rows);
nlohmann::json comparisonJson(const std::vector<planner::ComparisonRow>& rows);

/// The `advise` ranking: the first `top` allocations and the time share when there is one.
void printAdvice(std::ostream& out, const planner::AdvisorResult& result, int top, double samples);
nlohmann::json adviceJson(const planner::AdvisorResult& result, int top);

} // namespace pw::cli
