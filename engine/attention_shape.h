// SPDX-License-Identifier: MIT
// The shape of a causal self-attention call, shared by the op table (backend.h) and the CPU kernels (ops.h).
#pragma once

#include <cstddef>

namespace pw::engine {

/// @brief B sequences of T positions through NH query heads and KV key/value heads (KV divides NH: multi-head when
/// equal, grouped-query when fewer, multi-query when 1) of hs dimensions each.
struct AttentionShape
{
    int batch = 1; ///< B
    int seq = 0; ///< T
    int heads = 0; ///< NH
    int kv_heads = 0; ///< KV
    int head_size = 0; ///< hs

    int channels() const { return heads * head_size; } ///< the output's row: NH hs
    int qkvColumns() const { return (heads + 2 * kv_heads) * head_size; } ///< the input's row
    int group() const { return heads / kv_heads; } ///< query heads per key/value head
    std::size_t rows() const { return static_cast<std::size_t>(batch) * seq; }

    bool operator==(const AttentionShape&) const = default;
};

} // namespace pw::engine
