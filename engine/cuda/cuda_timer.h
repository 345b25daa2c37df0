// SPDX-License-Identifier: MIT
// Internal to engine/: the CUDA backend's action timer (cuda_timer.cpp).
#pragma once

#include <memory>

#include <cuda_runtime.h>

#include "../backend.h"

namespace pw::engine::cuda {

/// Device spans of `stream`'s actions from event pairs, on the host's monotonic clock: resolved against an event
/// recorded at a known host time (re-anchored while the stream is idle).
std::unique_ptr<ActionTimer> makeTimer(int device, cudaStream_t stream);

} // namespace pw::engine::cuda
