// SPDX-License-Identifier: MIT
// Runs pipewright-cli in-process for the CLI tests.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "app/cli/cli.h"

namespace pw::cli::test {

struct Outcome
{
    int code;
    std::string out;
    std::string err;
};

inline Outcome cli(std::vector<std::string> args)
{
    std::ostringstream out, err;
    int code = pw::cli::run(args, out, err);
    return {code, out.str(), err.str()};
}

inline const std::string kData = PW_TEST_DATA_DIR;
inline const std::string kDemo = PW_DEMO_DIR;
inline const std::string kProfiles = PW_PROFILES_DIR;

} // namespace pw::cli::test
