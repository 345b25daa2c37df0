// SPDX-License-Identifier: MIT
// Tensor parallelism as Megatron-LM does it (Shoeybi et al. 2019; Korthikanti et al. 2022 for the sequence part):
// a stage's t ranks split every block's products, the column-parallel ones (QKV, MLP up: gate and up for SwiGLU) by
// their output rows, the row-parallel ones (attention projection, MLP down) by their input columns, followed by a
// sum over the group; the heads are split over the ranks, and the embedding and the head by vocabulary rows (the
// cross-entropy combines each rank's share of the softmax: no rank holds every logit). With sequence parallelism the
// norms and residual sums run on 1/t of the microbatch's positions, each sum over the group becomes a reduce-scatter
// and the products' inputs an all-gather. What a rank holds of each tensor is TensorSplit; its collectives are a
// TensorGroup's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend.h"

namespace pw::engine {

class Transport;

/// @brief Which rank of its stage's tensor-parallel group a model is, and whether the sequence is split too.
struct TensorParallel
{
    int rank = 0;
    int ranks = 1; ///< t; 1 = none
    /// Megatron's sequence parallelism: the residual stream (a block's input and output, the norms) is this rank's
    /// 1/t of the microbatch's positions (rows of B T, in order), all-gathered before the products that need all.
    bool sequence = false;

    bool on() const { return ranks > 1; }
    bool operator==(const TensorParallel&) const = default;
};

/// @brief How a tensor of the model is divided over a tensor-parallel group.
enum class TensorSplit : std::uint8_t {
    Whole, ///< every rank holds all of it (norms, position table, the row-parallel products' biases)
    Rows, ///< rank r holds its share of the rows of each of the tensor's row blocks (TensorShare)
    Columns, ///< rank r holds columns [r K/t, (r+1) K/t) of every row
};

/// @brief A tensor's split over a tensor-parallel group of t ranks, and what each rank holds of it.
struct TensorShare
{
    TensorSplit split = TensorSplit::Whole;
    /// Rows: the rows are this many equal blocks, each split on its own (GPT-2's fused q, k, v: 3).
    int row_blocks = 1;
    /// Rows: the units (heads) a block's rows are made of, 0 = its rows. At least t units: rank r holds units
    /// [r U/t, (r+1) U/t); fewer (Megatron's key/value heads when there are fewer than t): rank r holds unit r U / t,
    /// as t / U ranks in a row do.
    int row_units = 0;

    /// How many ranks hold each part of it: t / U for units fewer than t, else 1 (Whole: t).
    int holders(int t) const;
    bool operator==(const TensorShare&) const = default;
};

/// @brief The collectives of one stage's tensor-parallel group, on its backend's memory and stream: every rank calls
/// them in the same order. Regions hold `dtype` elements (the backend's act(), or fp32); sums accumulate in fp32.
class TensorGroup
{
public:
    virtual ~TensorGroup() = default;
    /// data (n elements) = the sum of every rank's, in place.
    virtual void allReduce(void* data, DType dtype, std::size_t n) = 0;
    /// whole (t n elements) = every rank's part (n elements) in rank order.
    virtual void allGather(void* whole, const void* part, DType dtype, std::size_t n) = 0;
    /// part (n elements) = the sum over the ranks of their whole's (t n elements) rank-th n elements.
    virtual void reduceScatter(void* part, const void* whole, DType dtype, std::size_t n) = 0;
};

/// Elements [begin, end) of the whole tensor (as the family's flat checkpoint holds it: row-major rows x columns)
/// that rank `tp.rank` holds, in the order its buffer keeps them. `shape` is the whole tensor's (rows, columns) or
/// (n). Throws std::invalid_argument when the share does not divide over t.
std::vector<std::pair<std::size_t, std::size_t>> shardRanges(
    std::span<const std::size_t> shape, const TensorShare& share, const TensorParallel& tp);

/// The collectives of the group of `devices` (one of the transport's groups, made by makeGroups) as its rank `rank`
/// (the place in the plan's stage, Megatron's order) posts them over `transport` in `backend`'s memory.
std::unique_ptr<TensorGroup> transportGroup(Transport& transport, Backend& backend, std::vector<int> devices, int rank);

} // namespace pw::engine
