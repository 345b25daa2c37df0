// SPDX-License-Identifier: MIT
// PipeDream's graph.txt profile format (msr-fiddle/pipedream graph/graph.py), read and written.
#pragma once

#include <istream>
#include <ostream>
#include <string>

#include "../model_profile.h"
#include "../plan.h"

namespace pw::planner {

/// Reads a graph.txt. Nodes become layers in a topological order (ties broken by the node number of
/// `node<k>`, then by file order); edges become Layer::inputs; the profile is marked as a graph.
/// Layer::name is the node id, Layer::kind the module description. Times are ms, sizes bytes, as in
/// the file; list-valued activation sizes are summed. Errors name `source`, the line and the field.
ModelProfile readGraphTxt(std::istream& in, const std::string& source);
ModelProfile loadGraphTxt(const std::string& path);

/// Writes a graph.txt (node lines, then edge lines). With a plan, each node line ends in
/// " -- stage_id=<k>" as the PipeDream optimizer's output does.
void writeGraphTxt(std::ostream& out, const ModelProfile& model, const Plan* plan = nullptr);

} // namespace pw::planner
