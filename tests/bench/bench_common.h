// SPDX-License-Identifier: MIT
// Timing helpers for the benchmarks: best of N wall-clock runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "planner/plan.h"
#include "tests/planner/fixtures.h"

namespace pw::bench {

/// Best wall time in seconds over `repeats` runs of `fn`.
inline double bestOf(int repeats, const std::function<void()>& fn)
{
    double best = 1e300;
    for (int i = 0; i < repeats; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    return best;
}

} // namespace pw::bench
