// SPDX-License-Identifier: MIT
// GpuCostModel (gpu_cost_model.h): the default curve's constants, the products' times and a transformer block's.
#include "gpu_cost_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>

#include "transformer_shape.h"

namespace pw::planner {

namespace {

std::string lowerAlnum(const std::string& name)
{
    std::string out;
    for (char c : name)
        if (std::isalnum(static_cast<unsigned char>(c)))
            out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

/// Share of the tiles' work that is useful, times the share of the last wave that is busy: one output tile per SM
/// per wave (NVIDIA's "Matrix Multiplication Background" guide: tile and wave quantization). The better of the two
/// orientations of the tile, as cuBLAS's heuristics choose.
double quantization(double m, double n, double batch, const GpuCurve& c)
{
    double best = 0;
    for (const auto& [tm, tn] : {std::pair<double, double>(c.tile_m, c.tile_n), {c.tile_n, c.tile_m}}) {
        const double rows = std::ceil(m / tm), cols = std::ceil(n / tn);
        const double tiles = rows * cols * batch;
        const double useful = m * n / (rows * tm * cols * tn);
        const double waves = std::ceil(tiles / c.sms);
        best = std::max(best, useful * tiles / (waves * c.sms));
    }
    return best;
}

/// The Hopper curve (H100 SXM and H200: same 132 SMs and 989 dense bf16 TFLOP/s). Sources in docs/planner.md.
GpuCurve hopperCurve()
{
    GpuCurve c;
    c.sms = 132;
    c.tile_m = 128;
    c.tile_n = 256;
    // Fitted to the shape dependence of tests/data/gemm/h100-constant-fill-bf16.json (products with m, n >= 1024 and
    // k >= 256: median |log error| 3.6 %), not to any transformer block.
    c.k0 = 288;
    // cuBLAS bf16 8192^3 with random matrices reached 792 TFLOP/s on the H200 (shared/docs/gpu.md): that product's
    // quantization and K term taken out, what is left is the curve's ceiling.
    c.eff_max = 792.0 / 989.0 / (quantization(8192, 8192, 1, c) * 8192.0 / (8192.0 + c.k0));
    // ... and no shape beyond what cuBLAS reached on random operands: 792 TFLOP/s (our H200 at 8192^3; the maximum
    // over ml-engineering's mamf-finder search on an H100 SXM, 792.1, agrees), where the curve would extrapolate to
    // 846 at endless K.
    c.ceiling = 792.0 / 989.0;
    // Device-to-device copies measured 4.3 of the H200's 4.8 TB/s and 3.0 of the H100's 3.35 (gpu.md).
    c.bandwidth_efficiency = 0.9;
    // FlashAttention-2 (Dao, 2023, section 4.1): up to 335 TFLOP/s forward on an H100 (head dim 128, long
    // sequences); its backward reaches 63 % of peak where the forward reaches 73 % (A100), the same ratio here.
    c.flash_forward = 335.0 / 989.0;
    c.flash_backward = c.flash_forward * 63.0 / 73.0;
    // A flash kernel's rate over sequence length on an H100 (pytorch/benchmark #2391: 329, 390, 434, 458, 471, 477
    // TFLOP/s at 512 ... 16384 tokens, head dim 128) fits r = r_inf s / (s + 243).
    c.flash_s0 = 243;
    // About 4 non-matmul operations per score (scale, running max, exp, sum: FlashAttention-2 section 3.1), each as
    // dear as 989 / 67 tensor-core FLOPs (the H100's dense bf16 tensor and fp32 vector peaks).
    c.nonmatmul_cost = 4.0 * 989.0 / 67.0;
    // The backward's products (dX = dY W^T, dW = X^T dY) ran slower than the curve's forward-layout rate on the two
    // blocks of gpu.md measured on our H200 (PyTorch, bf16): at 0.85 of it their backwards come out -2.3 % and
    // +0.3 % (1.0: -12 % and -11 %). A measurement of kernels, not of a training run.
    c.backward_gemm_efficiency = 0.85;
    // The peak (989 TFLOP/s) is quoted at 1,830 MHz, below the 1,980 MHz maximum boost; no sustained-clock
    // measurement of an SXM H100 under a long bf16 GEMM load is at hand (a GPU session measures it:
    // docs/planner.md), so none is applied.
    c.sustained_clock = 1;
    // FP8 (E4M3 in, bf16 out) on the same tiles (CUTLASS 3's Hopper FP8 tile is 128 x 256 x 128). An SM does twice
    // the FP8 work per clock, so a tile's fixed cost is worth twice the K: 2 x 288. cuBLASLt reached 1,599-1,630
    // TFLOP/s at 8192^3 on each of 16 H100 SXM (mean 1,611: a published cross-check report of a cluster's GPUs,
    // operand fill not stated); the ceiling and eff_max are taken from it as above. A GPU session measures our own
    // (docs/planner.md, "FP8").
    c.fp8_k0 = 2 * c.k0;
    c.fp8_ceiling = 1611.0 / 1978.9;
    c.fp8_eff_max = c.fp8_ceiling / (quantization(8192, 8192, 1, c) * 8192.0 / (8192.0 + c.fp8_k0));
    return c;
}

/// The Ampere curve (A100 SXM, 40 and 80 GB: 108 SMs, 312 dense bf16 TFLOP/s). Sources in docs/planner.md; nothing
/// here is taken from a training run.
GpuCurve ampereCurve()
{
    GpuCurve c;
    c.sms = 108;
    c.tile_m = 128; // CUTLASS 2's largest Ampere bf16 tile is 256 x 128
    c.tile_n = 256;
    // k0 is the K a tile's fixed cost (prologue and epilogue cycles) is worth in main-loop work, which scales with an
    // SM's tensor rate per clock: an A100 SM does 312e12 / (108 x 1.41 GHz) = 2,048 dense FLOP per clock, half of a
    // Hopper SM's 989e12 / (132 x 1.83 GHz) = 4,096, so the same epilogue costs half the K: 288 / 2.
    c.k0 = 144;
    // Maximum achievable matmul FLOPS (Bekman, ml-engineering, mamf-finder.py, torch.randn operands, CUDA 12.1):
    // 267.9 TFLOP/s on an A100 SXM at 6912 x 16384 x 2048, a product of whole tiles and whole waves on 108 SMs; its K
    // term taken out, what is left is the ceiling. (A maximum over a search: slightly optimistic.)
    c.eff_max = 267.9 / 312.0 / (quantization(6912, 16384, 1, c) * 2048.0 / (2048.0 + c.k0));
    c.ceiling = 267.9 / 312.0;
    // As Hopper's: a streaming kernel reaches about 0.9 of the datasheet bandwidth.
    c.bandwidth_efficiency = 0.9;
    // FlashAttention-2 (Dao, 2023, section 4.1) on an A100: forward up to 73 % of peak, backward up to 63 %.
    c.flash_forward = 0.73;
    c.flash_backward = 0.63;
    c.flash_s0 = 243; // the sequence dependence measured on an H100 (no A100 sweep at hand)
    // Softmax work per score as on Hopper, each operation as dear as 312 / 19.5 tensor FLOPs (the A100's dense bf16
    // tensor and fp32 vector peaks).
    c.nonmatmul_cost = 4.0 * 312.0 / 19.5;
    c.backward_gemm_efficiency = 0.85; // Hopper's measured backward layouts (no A100 measurement at hand)
    // The A100's 312 TFLOP/s are at its 1,410 MHz boost clock; under a long dense tensor-core load it holds about
    // 1,305 MHz at its 400 W limit (the clock NVIDIA quotes HPL's sustained peak at, glennklockwood.com "peak FLOPS").
    // The maximum-matmul measurement above is a short burst at boost.
    c.sustained_clock = 1305.0 / 1410.0;
    return c;
}

} // namespace

std::optional<GpuCurve> defaultGpuCurve(const DeviceType& device)
{
    // The SXM parts (Hopper: 132 SMs at 700 W; Ampere: 108 SMs at 400 W); the PCIe cards (H100: 114 SMs at 350 W;
    // A100: 250-300 W, so lower sustained clocks) have no curve of their own yet.
    const std::string name = lowerAlnum(device.name);
    if (name.find("pcie") != std::string::npos)
        return std::nullopt;
    for (const char* hopper : {"h100", "h200"})
        if (name.find(hopper) != std::string::npos)
            return hopperCurve();
    if (name.find("a100") != std::string::npos)
        return ampereCurve();
    return std::nullopt;
}

GpuCostModel::GpuCostModel(
    const DeviceType& device, std::shared_ptr<const GemmTable> table, std::optional<GpuCurve> curve)
    : m_device(device)
    , m_table(std::move(table))
    , m_curve(curve ? *curve : hopperCurve())
{
}

double GpuCostModel::bytesSeconds(double bytes) const
{
    const double bandwidth = m_device.memory_bandwidth_bytes_per_s * m_curve.bandwidth_efficiency;
    return bandwidth > 0 ? bytes / bandwidth : 0.0;
}

double GpuCostModel::gemmSeconds(double m, double n, double k, double batch) const
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
        return 0.0;
    if (m_table)
        return batch
            * m_table->seconds(
                std::llround(std::max(1.0, m)), std::llround(std::max(1.0, n)), std::llround(std::max(1.0, k)));
    const double flops = 2.0 * m * n * k * batch;
    const double rate = m_device.peak_tflops * 1e12 * m_curve.sustained_clock
        * std::min(m_curve.ceiling, m_curve.eff_max * quantization(m, n, batch, m_curve) * k / (k + m_curve.k0));
    // Roofline: a thin product is bound by reading A and B and writing D (16-bit elements).
    const double bytes = 2.0 * (m * k + k * n + m * n) * batch;
    return std::max(flops / rate, bytesSeconds(bytes));
}

double GpuCostModel::fp8GemmSeconds(double m, double n, double k, double batch) const
{
    if (!(m_device.peak_fp8_tflops > 0) || !(m_curve.fp8_eff_max > 0))
        throw std::logic_error("GpuCostModel: '" + m_device.name + "' has no FP8 products");
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
        return 0.0;
    const double flops = 2.0 * m * n * k * batch;
    const double rate = m_device.peak_fp8_tflops * 1e12 * m_curve.sustained_clock
        * std::min(
            m_curve.fp8_ceiling, m_curve.fp8_eff_max * quantization(m, n, batch, m_curve) * k / (k + m_curve.fp8_k0));
    const double bytes = (m * k + k * n + 2.0 * m * n) * batch; // 1-byte operands, a 16-bit output
    return std::max(flops / rate, bytesSeconds(bytes));
}

double GpuCostModel::backwardGemmSeconds(double m, double n, double k, double batch) const
{
    const double seconds = gemmSeconds(m, n, k, batch);
    return m_table ? seconds : seconds / m_curve.backward_gemm_efficiency;
}

double GpuCostModel::materializedAttentionSeconds(
    double batch, double heads, double sequence, double headDim, bool dropout, bool backward) const
{
    // Megatron's unfused core: every score of the s x s matrix (no causal skip) is computed, written and read.
    const double products = batch * heads;
    const double scores = products * sequence * sequence;
    const double e = 2.0; // 16-bit scores
    if (!backward) {
        // Q K^T (s, s, dh); the fused scale-mask-softmax reads and writes them; dropout reads them and writes them
        // and a 1-byte mask; P V (s, dh, s).
        return gemmSeconds(sequence, sequence, headDim, products) + gemmSeconds(sequence, headDim, sequence, products)
            + bytesSeconds(scores * (2 * e + (dropout ? 2 * e + 1 : 0)));
    }
    // dP = dO V^T (s, s, dh) and dV = P^T dO (s, dh, s); dropout's backward reads dP and the mask, writes its
    // gradient; softmax's reads P and the gradient, writes dS; dQ = dS K and dK = dS^T Q (s, dh, s) each.
    return backwardGemmSeconds(sequence, sequence, headDim, products)
        + 3 * backwardGemmSeconds(sequence, headDim, sequence, products)
        + bytesSeconds(scores * (3 * e + (dropout ? 2 * e + 1 : 0)));
}

double attentionCoreSeconds(const TransformerConfig& config, const GpuCostModel& model, bool backward)
{
    const double B = config.microbatch, a = config.heads, s = config.sequence, dh = config.headDim();
    return config.flash_attention ? model.attentionSeconds(B, a, s, dh, backward)
                                  : model.materializedAttentionSeconds(B, a, s, dh, config.dropout, backward);
}

double GpuCostModel::attentionSeconds(double batch, double heads, double sequence, double headDim, bool backward) const
{
    // Causal: half of the score matrix is computed, and a query sees s/2 keys on average.
    const double forwardFlops = 4.0 * batch * heads * sequence * sequence * headDim / 2.0;
    const double keys = sequence / 2.0;
    auto headTerm = [&](double dh) { return 4.0 * dh / (4.0 * dh + m_curve.nonmatmul_cost); };
    const double share = (backward ? m_curve.flash_backward : m_curve.flash_forward) * keys / (keys + m_curve.flash_s0)
        * headTerm(headDim) / headTerm(128);
    const double flops = backward ? 2.5 * forwardFlops : forwardFlops;
    // Q, K, V in and O out (forward); Q, K, V, O, dO in and dQ, dK, dV out (backward), 16-bit.
    const double bytes = (backward ? 8.0 : 4.0) * batch * sequence * heads * headDim * 2.0;
    return std::max(flops / (m_device.peak_tflops * 1e12 * m_curve.sustained_clock * share), bytesSeconds(bytes));
}

RankEstimate transformerBlockRankEstimate(const TransformerConfig& config, const GpuCostModel& model, int t)
{
    const double T = static_cast<double>(config.microbatch) * config.sequence; // tokens
    const double d = config.hidden, e = config.bytes_per_element, f = config.ffnHidden(), g = std::max(1, t);
    RankEstimate r;
    auto& split = r.split;
    double forward = 0, input = 0, weight = 0;
    // X (T x K) W (K x N): QKV, attention out-projection, MLP up (and gate), MLP down (transformer_shape.h). A rank
    // computes n / t of a column-parallel product's outputs and sums k / t of a row-parallel one's inputs.
    // FP8 products (Transformer Engine): the forward casts the product's input to FP8 with a transposed copy for
    // dW (read 16-bit, write 1 + 1 bytes per value), the backward the output gradient the same way (dX and dW read
    // it); the weights' casts happen once per step (cached across microbatches: not charged per microbatch).
    for (const auto& p : blockProducts(config)) {
        const double n = p.column_parallel ? p.n / g : p.n, k = p.column_parallel ? p.k : p.k / g;
        if (config.fp8) {
            forward += model.fp8GemmSeconds(T, n, k) + model.bytesSeconds(T * k * (e + 2));
            input += model.fp8GemmSeconds(T, k, n) + model.bytesSeconds(T * n * (e + 2));
            weight += model.fp8GemmSeconds(k, n, T);
            continue;
        }
        forward += model.gemmSeconds(T, n, k);
        input += model.backwardGemmSeconds(T, k, n); // dX = dY W^T
        weight += model.backwardGemmSeconds(k, n, T); // dW = X^T dY
    }
    // The attention core runs on the rank's heads: a / t of them, all on the same tokens.
    TransformerConfig rank = config;
    rank.heads = static_cast<int>(config.heads / g);
    rank.hidden = rank.heads * config.headDim();
    forward += attentionCoreSeconds(rank, model, false);
    input += attentionCoreSeconds(rank, model, true);
    // Memory-bound ops in units of one [T, d] tensor read or written. Forward: 2 norms (read, write: 2 each), the
    // activation on [T, f] (GELU reads and writes one: 2f/d; SwiGLU reads gate and up, writes their product: 3f/d),
    // 2 residual adds (read 2, write 1: 3 each). GPT: 4 + 8 + 6 = 18. Input gradient: 2 norms' dX (read x and dY,
    // write dX: 3 each), the activation's (GELU reads x and dY, writes dX: 3f/d; SwiGLU reads gate, up and dY,
    // writes both gradients: 5f/d), the 2 residual branches' gradients summed (3 each). GPT: 6 + 12 + 6 = 24.
    // Weight gradient: 2 norms' scale (and shift) gradients (read x and dY: 2 each) and the biases' gradients (read
    // the dY of each biased product: its n / d). GPT: 4 + 9 = 13. Rotary positions rotate Q and K in the forward and
    // their gradients in the backward (read and write each: 2 (d + kv) / d).
    // Under tensor parallelism the activation, rotary and the column-parallel products' biases are on the rank's
    // share (/ t); the norms, residual adds and the row-parallel products' biases act on the whole [T, d] tensor on
    // every rank unless sequence parallelism splits them too (the replicated part).
    const bool swiglu = config.mlp == MlpKind::SwiGlu;
    double fwdSplit = (swiglu ? 3 : 2) * f / d, inSplit = (swiglu ? 5 : 3) * f / d, wSplit = 0;
    const double fwdWhole = 4 + 6, inWhole = 6 + 6;
    double wWhole = 4;
    for (const auto& p : blockProducts(config))
        if (p.bias)
            (p.column_parallel ? wSplit : wWhole) += p.n / d;
    if (config.positions == PositionKind::Rotary) {
        const double rotated = 2 * (d + static_cast<double>(config.kvHeads()) * config.headDim()) / d;
        fwdSplit += rotated;
        inSplit += rotated;
    }
    const double tensor = T * d * e;
    split.forward_ms = (forward + model.bytesSeconds((fwdSplit / g + fwdWhole / g) * tensor)) * 1e3;
    split.backward_input_ms = (input + model.bytesSeconds((inSplit / g + inWhole / g) * tensor)) * 1e3;
    split.backward_weight_ms = (weight + model.bytesSeconds((wSplit / g + wWhole / g) * tensor)) * 1e3;
    // Without sequence parallelism each rank also runs the rest of the whole-tensor work itself.
    r.replicated_forward_ms = model.bytesSeconds(fwdWhole * (1 - 1 / g) * tensor) * 1e3;
    r.replicated_backward_ms = model.bytesSeconds((inWhole + wWhole) * (1 - 1 / g) * tensor) * 1e3;
    return r;
}

LayerEstimate transformerBlockEstimate(const TransformerConfig& config, const GpuCostModel& model)
{
    return transformerBlockRankEstimate(config, model, 1).split;
}

RankEstimate transformerHeadRankEstimate(const TransformerConfig& config, const GpuCostModel& model, int t)
{
    const double T = static_cast<double>(config.microbatch) * config.sequence;
    const double d = config.hidden, V = config.vocab, e = config.bytes_per_element, g = std::max(1, t);
    // Final layer norm (read, write), logits X (T x d) W (d x V), the cross-entropy; backward: the layer norm's dX
    // (3) and dgamma, dbeta (2), the loss's gradient. The vocabulary is split over a tensor-parallel group (Megatron's
    // vocab-parallel head and cross-entropy); the final norm is whole on every rank unless sequence parallelism
    // splits it. The cross-entropy in bytes per logit: fused in the logits' precision, read once (forward) and read
    // and written (backward); in fp32 (Megatron's vocab_parallel_cross_entropy on output.float()): cast (read e,
    // write 4), max (4), subtract it (8), exp (8), sum (4), the softmax kept (8): 30 + e forward; softmax minus the
    // one-hot (8), times the loss's gradient (8), cast back (4 + e): 20 + e backward.
    const double lossForward = config.fp32_cross_entropy ? 30 + e : e;
    const double lossBackward = config.fp32_cross_entropy ? 20 + e : 2 * e;
    RankEstimate r;
    r.split.forward_ms = (model.bytesSeconds(2 * T * d * e / g) + model.gemmSeconds(T, V / g, d)
                             + model.bytesSeconds(T * V / g * lossForward))
        * 1e3;
    r.split.backward_input_ms = (model.backwardGemmSeconds(T, d, V / g) + model.bytesSeconds(T * V / g * lossBackward)
                                    + model.bytesSeconds(3 * T * d * e / g))
        * 1e3;
    r.split.backward_weight_ms = (model.backwardGemmSeconds(d, V / g, T) + model.bytesSeconds(2 * T * d * e / g)) * 1e3;
    r.replicated_forward_ms = model.bytesSeconds(2 * T * d * e * (1 - 1 / g)) * 1e3;
    r.replicated_backward_ms = model.bytesSeconds(5 * T * d * e * (1 - 1 / g)) * 1e3;
    return r;
}

LayerEstimate transformerHeadEstimate(const TransformerConfig& config, const GpuCostModel& model)
{
    return transformerHeadRankEstimate(config, model, 1).split;
}

} // namespace pw::planner
