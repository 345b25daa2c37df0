// SPDX-License-Identifier: MIT
// The grid of GEMM shapes (engine/gemm_profile.h); the measurement itself is engine/cuda/gemm_profile.cpp, and a
// build without CUDA says so.
#include "gemm_profile.h"

#include <stdexcept>

namespace pw::engine {

const char* name(GemmDtype dtype)
{
    switch (dtype) {
    case GemmDtype::Fp32:
        return "fp32";
    case GemmDtype::Bf16:
        return "bf16";
    case GemmDtype::Fp8:
        return "fp8";
    }
    return "?";
}

std::vector<long long> defaultGemmDims()
{
    return {128, 256, 512, 1024, 2048, 3072, 4096, 8192, 12288, 16384};
}

#if !PW_HAVE_CUDA
planner::GemmTable measureGemmTable(const GemmProfileOptions&, const std::function<void(std::size_t, std::size_t)>&)
{
    throw std::runtime_error(
        "this build has no CUDA (configured with PW_WITH_CUDA=OFF, or no CUDA compiler was found): GEMM "
        "throughput is measured on a GPU");
}
#endif

} // namespace pw::engine
