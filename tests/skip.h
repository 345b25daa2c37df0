// SPDX-License-Identifier: MIT
// A test that cannot run here (no GPU, no PyTorch) says so and returns: every ctest entry of the project's Catch2
// executables has SKIP_REGULAR_EXPRESSION "\[pw-skip\]" (tests/CMakeLists.txt), so ctest reports it as skipped,
// not passed. Use it only for what the machine lacks (an optional tool, a device), never for what the code does
// wrong, nor for a tool the project requires (packaging/setup-deps.sh installs it: its absence must fail). Skip
// before any check: ctest reports a test whose output holds the marker as skipped even where a check failed.
#pragma once

#include <iostream>

/// Skips the current test case: prints "[pw-skip] <reason>" and returns from the test's body.
#define PW_SKIP(reason)                                                                                                \
    do {                                                                                                               \
        std::cout << "[pw-skip] " << reason << std::endl;                                                              \
        return;                                                                                                        \
    } while (false)
