// SPDX-License-Identifier: MIT
// Internal to tests/engine/: the engine-measured profile the memory comparisons (recomputation, tensor parallelism)
// predict from.
#pragma once

#include "engine/profiler.h"
#include "tests/engine/engine_fixtures.h"

namespace pw::test {

/// A GPT-2 of 6 blocks of 64 channels in 4 heads, 64 positions, vocabulary 64, timed once without warm-up (its
/// stashes in the planner's parts are what counts).
inline engine::ProfileOptions smallProfileOptions()
{
    engine::ProfileOptions o;
    o.shape = tinyGpt2(6);
    o.shape.hidden = 64;
    o.shape.heads = 4;
    o.shape.sequence = 64;
    o.shape.vocab = 64;
    o.repeats = 1;
    o.warmup = 0;
    return o;
}

} // namespace pw::test
