// SPDX-License-Identifier: MIT
// Internal to engine/: bf16 on the host, the one rounding every backend and file format uses (the CPU backend's bf16
// mixed precision, the CUDA backend's uploads and read-backs, safetensors' BF16 tensors).
#pragma once

#include <bit>
#include <cstdint>

namespace pw::engine {

/// fp32 to bf16, rounded to nearest even (as __float2bfloat16_rn and PyTorch round); a NaN stays a (quiet) NaN.
inline std::uint16_t toBf16(float f)
{
    const auto bits = std::bit_cast<std::uint32_t>(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
    return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/// bf16 to fp32, exactly.
inline float fromBf16(std::uint16_t h)
{
    return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

} // namespace pw::engine
