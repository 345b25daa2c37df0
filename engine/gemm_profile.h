// SPDX-License-Identifier: MIT
// The throughput of matrix products on a GPU over a grid of shapes, measured with the CUDA backend's own cuBLASLt
// products (engine/cuda/matmul.h): `pipewright-agent --profile-gemm` writes the table (planner/gemm_table.h) that
// the planner's cost model reads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "planner/gemm_table.h"

namespace pw::engine {

/// The operands' type of a measured product.
enum class GemmDtype {
    Fp32, ///< fp32 throughout (no TF32)
    Bf16, ///< bf16 operands and output, fp32 accumulation
    /// E4M3 operands with per-tensor scales, bf16 output, fp32 accumulation with fast accumulation (Transformer
    /// Engine's forward products on Hopper; the TN layout is the one cuBLASLt's FP8 kernels take)
    Fp8,
};

/// "fp32", "bf16" or "fp8": the GEMM table's dtype.
const char* name(GemmDtype dtype);

/// @brief What to measure.
struct GemmProfileOptions
{
    int gpu = 0; ///< among the visible CUDA devices
    GemmDtype dtype = GemmDtype::Bf16;
    std::vector<long long> dims; ///< every m, n and k of the grid; empty: defaultGemmDims()
    int repeats = 5; ///< timed repeats per shape (the median is kept)

    bool operator==(const GemmProfileOptions&) const = default;
};

/// 128 ... 16384: powers of two with 3072 and 12288 between (the widths of GPT-style models' products).
std::vector<long long> defaultGemmDims();

/// Times D = A^T B (cuBLAS's "TN": the engine's forward products) for every (m, n, k) of the grid, each the median
/// of `repeats` timings by CUDA events, each timing long enough (back-to-back products) to dwarf the launch;
/// `progress` hears each shape done. Throws std::runtime_error without CUDA (naming why) or for a bad device.
planner::GemmTable measureGemmTable(
    const GemmProfileOptions& options, const std::function<void(std::size_t done, std::size_t all)>& progress = {});

} // namespace pw::engine
