// SPDX-License-Identifier: MIT
// measureGemmTable (engine/gemm_profile.h) on a CUDA device: one stream, the matrices of the largest shape
// allocated once, the backend's Matmul (its cuBLASLt plan and algorithm per shape) timed by event pairs.
#include "engine/gemm_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cublaslt.h"
#include "cuda_util.h"
#include "matmul.h"

namespace pw::engine {

namespace {

/// Fills `bytes` of device memory with values uniform in [-1, 1) (bf16 or fp32), or with random E4M3 bytes (every
/// finite value of the format, as per-tensor scaling spreads a tensor over its range; the two NaN codes replaced): a
/// block of 8 MiB made on the host from `seed`, then copied over the rest.
void fillRandom(void* device, std::size_t bytes, std::size_t element, std::uint64_t seed, cudaStream_t stream)
{
    const std::size_t block = std::min<std::size_t>(bytes, 8u << 20);
    std::vector<std::uint8_t> host(block);
    std::uint64_t state = 0x9E3779B97F4A7C15ull * seed;
    for (std::size_t i = 0; i + element <= block; i += element) {
        state ^= state << 13; // xorshift64
        state ^= state >> 7;
        state ^= state << 17;
        if (element == 1) {
            auto byte = static_cast<std::uint8_t>(state >> 56);
            if ((byte & 0x7F) == 0x7F) // S.1111.111: NaN
                byte ^= 0x01;
            host[i] = byte;
            continue;
        }
        const float value = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
        std::uint32_t bits = 0;
        std::memcpy(&bits, &value, sizeof bits);
        if (element == 2) {
            const auto half = static_cast<std::uint16_t>(bits >> 16); // bf16: the float's upper half
            std::memcpy(&host[i], &half, 2);
        } else {
            std::memcpy(&host[i], &bits, 4);
        }
    }
    PW_CUDA(cudaMemcpy(device, host.data(), block, cudaMemcpyHostToDevice));
    auto* base = static_cast<std::uint8_t*>(device);
    for (std::size_t at = block; at < bytes; at += block)
        PW_CUDA(cudaMemcpyAsync(base + at, base, std::min(block, bytes - at), cudaMemcpyDeviceToDevice, stream));
}

} // namespace

planner::GemmTable measureGemmTable(
    const GemmProfileOptions& options, const std::function<void(std::size_t, std::size_t)>& progress)
{
    const std::vector<long long> dims = options.dims.empty() ? defaultGemmDims() : options.dims;
    if (std::any_of(dims.begin(), dims.end(), [](long long d) { return d < 1 || d > 65536; }))
        throw std::runtime_error("--dims: every dimension must be 1 ... 65536");
    if (options.repeats < 1)
        throw std::runtime_error("--repeats: at least 1");
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || options.gpu >= count || options.gpu < 0)
        throw std::runtime_error("cuda:" + std::to_string(options.gpu) + ": " + std::to_string(count)
            + " CUDA device(s) visible" + (e != cudaSuccess ? std::string(" (") + cudaGetErrorString(e) + ")" : ""));
    PW_CUDA(cudaSetDevice(options.gpu));
    cudaDeviceProp prop {};
    PW_CUDA(cudaGetDeviceProperties(&prop, options.gpu));

    const long long top = *std::max_element(dims.begin(), dims.end());
    const bool fp8 = options.dtype == GemmDtype::Fp8;
    const std::size_t element = fp8 ? 1 : options.dtype == GemmDtype::Bf16 ? 2 : 4; // the operands'
    const std::size_t bytes = static_cast<std::size_t>(top) * static_cast<std::size_t>(top) * element;
    const std::size_t outputBytes = static_cast<std::size_t>(top) * static_cast<std::size_t>(top) * (fp8 ? 2 : element);
    const std::size_t workspaceBytes = 32u << 20;
    cudaStream_t stream = nullptr;
    void *a = nullptr, *b = nullptr, *d = nullptr, *workspace = nullptr, *scales = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    const auto release = [&] {
        for (void* p : {a, b, d, workspace, scales})
            if (p)
                cudaFree(p);
        if (start)
            cudaEventDestroy(start);
        if (stop)
            cudaEventDestroy(stop);
        if (stream)
            cudaStreamDestroy(stream);
    };
    planner::GemmTable table;
    try {
        PW_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        PW_CUDA(cudaMalloc(&a, bytes));
        PW_CUDA(cudaMalloc(&b, bytes));
        PW_CUDA(cudaMalloc(&d, outputBytes));
        PW_CUDA(cudaMalloc(&workspace, workspaceBytes));
        // Random values, as a model's weights and activations are: matrices of one repeated value draw less power
        // and run their products at higher clocks (on an H100, 10-15 % above PyTorch's products of random matrices
        // measured the same day), which a cost model must not learn.
        fillRandom(a, bytes, element, 1, stream);
        fillRandom(b, bytes, element, 2, stream);
        PW_CUDA(cudaEventCreate(&start));
        PW_CUDA(cudaEventCreate(&stop));
        // FP8: per-tensor scales as Transformer Engine passes them (device pointers read by the kernel), here 1.
        if (fp8) {
            const float ones[2] = {1.0f, 1.0f};
            PW_CUDA(cudaMalloc(&scales, sizeof ones));
            PW_CUDA(cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice));
        }
        cuda::Matmul matmul(stream, workspace, workspaceBytes,
            fp8                                    ? cuda::Matmul::Operands::Fp8E4M3
                : options.dtype == GemmDtype::Bf16 ? cuda::Matmul::Operands::Bf16
                                                   : cuda::Matmul::Operands::Fp32);

        const std::size_t all = dims.size() * dims.size() * dims.size();
        std::size_t done = 0;
        for (const long long m : dims)
            for (const long long n : dims)
                for (const long long k : dims) {
                    cuda::Matmul::Product p;
                    p.transA = true; // A stored k x m (a weight as the engine keeps it), B k x n
                    p.m = static_cast<int>(m);
                    p.n = static_cast<int>(n);
                    p.k = static_cast<int>(k);
                    p.A = a;
                    p.lda = static_cast<int>(k);
                    p.B = b;
                    p.ldb = static_cast<int>(k);
                    p.D = d;
                    p.ldd = static_cast<int>(m);
                    p.scaleA = fp8 ? static_cast<const float*>(scales) : nullptr;
                    p.scaleB = fp8 ? static_cast<const float*>(scales) + 1 : nullptr;
                    const auto timed = [&](int products) {
                        PW_CUDA(cudaEventRecord(start, stream));
                        for (int i = 0; i < products; ++i)
                            if (!matmul.run(p))
                                throw std::runtime_error("cuBLASLt has no algorithm for " + std::to_string(m) + " x "
                                    + std::to_string(n) + " x " + std::to_string(k));
                        PW_CUDA(cudaEventRecord(stop, stream));
                        PW_CUDA(cudaEventSynchronize(stop));
                        float ms = 0;
                        PW_CUDA(cudaEventElapsedTime(&ms, start, stop));
                        return static_cast<double>(ms) * 1e-3 / products;
                    };
                    timed(1); // the plan, the heuristic's algorithm, the caches
                    // Enough products per timing for ~0.5 ms: a small product is otherwise its launch.
                    const int products = static_cast<int>(std::clamp(std::ceil(5e-4 / timed(1)), 1.0, 200.0));
                    std::vector<double> times;
                    for (int r = 0; r < options.repeats; ++r)
                        times.push_back(timed(products));
                    std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
                    table.samples.push_back({m, n, k, times[times.size() / 2]});
                    if (progress)
                        progress(++done, all);
                }
    } catch (...) {
        release();
        throw;
    }
    release();
    table.device = prop.name;
    table.library = "cuBLASLt " + cuda::cublasLtVersion();
    table.dtype = name(options.dtype);
    table.layout = "TN";
    return table;
}

} // namespace pw::engine
