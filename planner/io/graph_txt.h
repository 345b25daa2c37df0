// SPDX-License-Identifier: MIT
// PipeDream's graph.txt profile format (msr-fiddle/pipedream graph/graph.py), read and written.
#pragma once

#include <istream>
#include <ostream>
#include <string>

#include "../model_profile.h"
#include "../plan.h"

namespace pw::planner {

/// Reads a graph.txt. Nodes become layers in a topological order (Kahn's algorithm; ties broken by the
/// node number of `node<k>`, then by file order; other ids sort after all `node<k>`); edges become
/// Layer::inputs (duplicate edges count once); the profile is marked as a graph and named after the
/// directory of `source` (else its stem). Layer::name is the node id, Layer::kind the module
/// description. Times are ms, sizes bytes, as in the file; list-valued activation sizes are summed;
/// a `stage_id` suffix is checked and ignored. Throws InputError naming `source`, the line and the field
/// for malformed lines, unknown nodes, duplicate ids, cycles and negative or non-finite numbers.
ModelProfile readGraphTxt(std::istream& in, const std::string& source);
ModelProfile loadGraphTxt(const std::string& path);

/// Whether `path` holds a PipeDream graph.txt rather than a native JSON model: the one rule the CLI and the
/// app share. A ".txt" suffix means graph.txt and ".json" means JSON (either case); for any other name the
/// content decides: a first non-blank character other than '{' means graph.txt. A file that cannot be read
/// counts as JSON, whose loader then reports it.
bool isGraphTxtFile(const std::string& path);
/// A model profile from a PipeDream graph.txt or a native JSON model, as isGraphTxtFile() tells them apart.
ModelProfile loadAnyModel(const std::string& path);

/// Writes a graph.txt (node lines in layer order, then edge lines grouped by consumer); numbers with
/// three decimals as PipeDream does, or exactly where three decimals would change them, so that reading
/// the result gives the same profile. A chain profile gets edges between consecutive layers. With a plan
/// (of the same model), each node line ends in " -- stage_id=<k>" as the PipeDream optimizer's output does;
/// a plan with several pipelines is refused (InputError).
void writeGraphTxt(std::ostream& out, const ModelProfile& model, const Plan* plan = nullptr);

} // namespace pw::planner
