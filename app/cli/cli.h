// SPDX-License-Identifier: MIT
// pipewright-cli: the command-line twin of the desktop app, callable in-process for tests.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace pw::cli {

/// Runs the CLI with `args` (without the program name). Returns the process exit code: 0 on success,
/// 1 on bad input (one line "pipewright-cli: error: ..." on `err`), 2 on bad usage.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

} // namespace pw::cli
