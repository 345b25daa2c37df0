// SPDX-License-Identifier: MIT
// Internal to engine/: splitmix64, the engine's one random generator (the initialisation's normals, the synthetic
// corpus), whose output is the same on every platform.
#pragma once

#include <cstdint>

namespace pw::engine {

struct SplitMix
{
    std::uint64_t state;
    std::uint64_t next()
    {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; } ///< in [0, 1)
    double uniformOpen() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; } ///< in (0, 1)
};

} // namespace pw::engine
