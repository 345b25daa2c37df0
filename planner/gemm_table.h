// SPDX-License-Identifier: MIT
// GemmTable: measured throughput of matrix products over a grid of shapes (M, N, K) on one GPU, in one precision
// (`pipewright-agent --profile-gemm` writes it: cuBLASLt, bf16 in, fp32 accumulate). The time of a product of any
// shape is interpolated from the grid: a layer's cost by its shapes instead of one flat efficiency. The file format
// is in docs/formats.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pw::planner {

inline constexpr int kGemmTableFormatVersion = 1;

/// @brief One measured product D (m x n) = A (m x k) B (k x n).
struct GemmSample
{
    long long m = 0, n = 0, k = 0;
    double seconds = 0; ///< median over its repeats, one product
    double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
    double tflops() const { return seconds > 0 ? flops() / seconds / 1e12 : 0; }

    bool operator==(const GemmSample&) const = default;
};

/// @brief Products measured on one device; samples on a full grid (every m with every n and every k).
struct GemmTable
{
    std::string device; ///< "NVIDIA H100 80GB HBM3"
    std::string library; ///< "cuBLASLt 13.1.0"
    std::string dtype = "bf16"; ///< the matrices' type ("bf16" | "fp32"); products accumulate in fp32
    std::string layout; ///< cuBLAS operations of A and B, e.g. "TN" (A transposed)
    std::vector<GemmSample> samples;

    /// The grid's values of each dimension, ascending.
    std::vector<long long> ms() const;
    std::vector<long long> ns() const;
    std::vector<long long> ks() const;
    /// Seconds of a product of shape (m, n, k): the throughput interpolated trilinearly over log2 of each dimension
    /// between the grid's neighbours (held at the grid's edge beyond it), applied to the product's FLOPs. Throws
    /// std::invalid_argument for a dimension < 1 or an empty table.
    double seconds(long long m, long long n, long long k) const;
    /// Throws InputError naming the field: a sample with a dimension < 1 or no time, a grid with holes.
    void validate() const;

    bool operator==(const GemmTable&) const = default;
};

nlohmann::json toJson(const GemmTable& table);
/// Parses and validates; errors carry the JSON path of the bad field.
GemmTable gemmTableFromJson(const nlohmann::json& j);

} // namespace pw::planner
