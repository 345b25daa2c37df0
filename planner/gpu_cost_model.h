// SPDX-License-Identifier: MIT
// A GPU cost model by shape: every matrix product of a transformer layer timed by its (M, N, K), from a measured GEMM
// table (interpolated) or from a documented default curve; attention by a flash kernel's efficiency; layer norm,
// element-wise ops and cross-entropy by bytes over memory bandwidth. The constants and their sources are in
// docs/planner.md ("GPU cost model by shape").
#pragma once

#include <memory>
#include <optional>

#include "cluster.h"
#include "gemm_table.h"
#include "model_profile.h"

namespace pw::planner {

/// @brief The default curve of one GPU kind: achieved = peak x eff_max x quantization(M, N) x K / (K + k0), never
/// faster than its bytes over bandwidth_efficiency x the datasheet bandwidth.
struct GpuCurve
{
    int sms = 0; ///< streaming multiprocessors: one output tile each per wave
    int tile_m = 128, tile_n = 256; ///< a large Hopper bf16 output tile (CUTLASS 3 offers 128 x 256 x 64)
    double eff_max = 0; ///< share of peak_tflops of a product with whole waves and an endless K
    double k0 = 0; ///< the K at which a product reaches half of eff_max (pipeline fill and epilogue per tile)
    double bandwidth_efficiency = 0; ///< share of the datasheet bandwidth a streaming kernel reaches
    double flash_forward = 0; ///< share of peak of a flash-attention forward at head dim 128 and a long sequence
    double flash_backward = 0; ///< the same for its backward (which does 2.5 x the forward's products)
    double flash_s0 = 0; ///< keys per query at which the flash kernel reaches half of its long-sequence rate
    double nonmatmul_cost = 0; ///< tensor-core FLOPs one score's softmax work costs (the head-dimension term)
    /// The clock tensor-core work holds under the power limit over a long run, as a share of the clock the peak and
    /// the short measurements above ran at (1: no lower sustained clock known).
    double sustained_clock = 1;
    /// Share of peak no product exceeds: the fastest rate measured on random operands over a search of shapes (the
    /// curve's extrapolation to endless K and whole waves would otherwise promise more than cuBLAS ever gave).
    double ceiling = 1;
    /// Share of the curve's rate a backward product (dX = dY W^T, dW = X^T dY: transposed operands) reaches.
    double backward_gemm_efficiency = 1;
    // FP8 products (E4M3 operands, 16-bit output; DeviceType::peak_fp8_tflops), the same tiles and waves:
    double fp8_eff_max = 0; ///< share of peak_fp8_tflops with whole waves and an endless K; 0: no FP8 products
    double fp8_k0 = 0; ///< the K at which an FP8 product reaches half of fp8_eff_max
    double fp8_ceiling = 1; ///< share of peak_fp8_tflops no FP8 product exceeds

    bool operator==(const GpuCurve&) const = default;
};

/// The documented default curve of a device type (H100 and H200 SXM, A100 SXM, matched by name like devicePreset);
/// none for other devices (their transformer profiles keep the flat efficiency unless a GEMM table is given).
std::optional<GpuCurve> defaultGpuCurve(const DeviceType& device);

/// @brief Times of the pieces of a layer on one device: products by a GEMM table when given, else by the curve.
class GpuCostModel
{
public:
    /// `table` may be null (then `curve` times the products); `curve` also gives bandwidth and attention constants.
    /// With a table and no curve the Hopper constants are used for those.
    GpuCostModel(const DeviceType& device, std::shared_ptr<const GemmTable> table, std::optional<GpuCurve> curve);

    /// Seconds of `batch` independent products D (m x n) = A (m x k) B (k x n) in 16-bit elements.
    double gemmSeconds(double m, double n, double k, double batch = 1) const;
    /// The same product in a backward pass (its operands transposed): by the curve, at its backward_gemm_efficiency;
    /// a measured table times it as measured.
    double backwardGemmSeconds(double m, double n, double k, double batch = 1) const;
    /// Seconds of the same product with FP8 operands (1 byte each) and a 16-bit output, at the device's
    /// peak_fp8_tflops, forward or backward alike: Hopper's FP8 products take their operands in one layout only, and
    /// the transposed copies a backward product reads are made (and charged) by the casts (Transformer Engine's
    /// cast-transpose). Throws std::logic_error on a device or curve without FP8.
    double fp8GemmSeconds(double m, double n, double k, double batch = 1) const;
    /// Seconds to stream `bytes` through device memory.
    double bytesSeconds(double bytes) const;
    /// Seconds of a causal flash attention over `batch` x `heads` sequences of `sequence` tokens with head dimension
    /// `headDim`: forward, or backward (recomputes the scores: 2.5 x the forward's products).
    double attentionSeconds(double batch, double heads, double sequence, double headDim, bool backward) const;
    /// The same attention unfused, as Megatron ran it before flash kernels: the whole s x s score matrix by batched
    /// products, its softmax (and dropout, with its 1-byte mask) through memory.
    double materializedAttentionSeconds(
        double batch, double heads, double sequence, double headDim, bool dropout, bool backward) const;

    const GpuCurve& curve() const { return m_curve; }
    bool usesTable() const { return m_table != nullptr; }

private:
    DeviceType m_device;
    std::shared_ptr<const GemmTable> m_table;
    GpuCurve m_curve;
};

/// @brief A layer's estimated milliseconds: forward and the two halves of its backward.
struct LayerEstimate
{
    double forward_ms = 0;
    double backward_input_ms = 0;
    double backward_weight_ms = 0;
    double backwardMs() const { return backward_input_ms + backward_weight_ms; }

    bool operator==(const LayerEstimate&) const = default;
};

/// The attention core of one block of `config` on its microbatch (scores, softmax, values): a flash kernel, or
/// unfused with `flash_attention` false. Forward, or its backward.
double attentionCoreSeconds(const TransformerConfig& config, const GpuCostModel& model, bool backward);

/// @brief One tensor-parallel rank's share of a layer: every part split over the group (as with sequence
/// parallelism), and what each rank runs whole besides without sequence parallelism. At t = 1 the split part is the
/// whole layer and nothing is replicated.
struct RankEstimate
{
    LayerEstimate split;
    double replicated_forward_ms = 0;
    double replicated_backward_ms = 0;

    bool operator==(const RankEstimate&) const = default;
};

/// One rank of a block split over t devices as Megatron splits it: QKV and MLP up by columns (n / t), the attention
/// projection and MLP down by rows (k / t), the attention on a / t heads, each product timed by its own shape.
RankEstimate transformerBlockRankEstimate(const TransformerConfig& config, const GpuCostModel& model, int t);
/// The head's rank: the vocabulary split over the group (logits and cross-entropy), the final norm replicated.
RankEstimate transformerHeadRankEstimate(const TransformerConfig& config, const GpuCostModel& model, int t);

/// One pre-LN transformer block of `config` (its microbatch): QKV, out-projection, MLP up and down products (each
/// backward as dX = dY W^T of shape (M, K, N) and dW = X^T dY of shape (K, N, M)), causal flash attention, two layer
/// norms, GELU, two residual adds and the biases' gradients.
LayerEstimate transformerBlockEstimate(const TransformerConfig& config, const GpuCostModel& model);
/// The final layer norm, the logits product (h -> V) and the softmax cross-entropy.
LayerEstimate transformerHeadEstimate(const TransformerConfig& config, const GpuCostModel& model);

} // namespace pw::planner
