// SPDX-License-Identifier: MIT
// The CUDA kernel tests' twins: the same values on the CPU oracle and on one CUDA backend, and the norm-wise error
// between them (test_cuda_kernels.cpp explains the tolerances).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"

namespace pw::test::cuda {

using namespace pw::engine;

struct Mode
{
    Precision precision;
    double tolerance;
};

inline const Mode kModes[] = {{Precision::Fp32, 1e-5}, {Precision::Bf16Mixed, 2e-2}};

inline float roundBf16(float f)
{
    const auto bits = std::bit_cast<std::uint32_t>(f);
    const auto rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    return std::bit_cast<float>(rounded);
}

inline std::vector<float> randomValues(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v)
        x = u(rng);
    return v;
}

inline std::vector<std::int32_t> randomTokens(std::size_t n, int vocab, unsigned seed)
{
    std::mt19937 rng(seed);
    std::vector<std::int32_t> v(n);
    for (auto& x : v)
        x = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    return v;
}

/// |got - want|_2 / |want|_2 (want all zero: |got|_2); infinite when anything is not finite.
inline double relativeError(const std::vector<float>& got, const std::vector<float>& want)
{
    REQUIRE(got.size() == want.size());
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i]) || !std::isfinite(want[i]))
            return INFINITY;
        diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
        norm += static_cast<double>(want[i]) * want[i];
    }
    return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

/// The CPU oracle and one CUDA backend.
struct Backends
{
    std::unique_ptr<Backend> cpu;
    std::unique_ptr<Backend> gpu;
    Mode mode;

    explicit Backends(Mode m, CudaAttention attention = cudaAttentionFromEnvironment())
        : cpu(makeCpuBackend())
        , gpu(makeCudaBackend(0, m.precision, attention))
        , mode(m)
    {
    }
    DType act() const { return gpu->act(); }
};

/// The same values on both backends: fp32 on the CPU, `type` on the GPU (rounded to it first).
struct Twin
{
    Backends* be = nullptr;
    DType type = DType::F32;
    std::size_t n = 0;
    Buffer cpu, gpu;

    Twin(Backends& backends, std::vector<float> values, DType t)
        : be(&backends)
        , type(t)
        , n(values.size())
        , cpu(*backends.cpu, values.size(), DType::F32)
        , gpu(*backends.gpu, values.size(), t)
    {
        if (t == DType::BF16)
            std::transform(values.begin(), values.end(), values.begin(), roundBf16);
        backends.cpu->upload(cpu.data(), DType::F32, values.data(), n);
        backends.gpu->upload(gpu.data(), t, values.data(), n);
    }
    /// Zeros of `count` elements.
    Twin(Backends& backends, std::size_t count, DType t)
        : Twin(backends, std::vector<float>(count, 0.0f), t)
    {
    }

    std::vector<float> onCpu() const
    {
        std::vector<float> v(n);
        be->cpu->download(v.data(), cpu.data(), DType::F32, n);
        return v;
    }
    std::vector<float> onGpu() const
    {
        std::vector<float> v(n);
        be->gpu->download(v.data(), gpu.data(), type, n);
        return v;
    }
    float* c() { return cpu.as<float>(); }
    void* g() { return gpu.data(); }
    float* gf() { return gpu.as<float>(); }
};

/// Tokens (int32) on both backends.
struct Tokens
{
    Buffer cpu, gpu;

    Tokens(Backends& be, const std::vector<std::int32_t>& values)
        : cpu(*be.cpu, values.size(), DType::I32)
        , gpu(*be.gpu, values.size(), DType::I32)
    {
        be.cpu->uploadTokens(cpu.as<std::int32_t>(), values.data(), values.size());
        be.gpu->uploadTokens(gpu.as<std::int32_t>(), values.data(), values.size());
    }
};

inline void expectClose(const Twin& t, const Backends& be, const std::string& what, double tolerance)
{
    const double err = relativeError(t.onGpu(), t.onCpu());
    INFO(what << " (" << toString(be.mode.precision) << "): relative error " << err << ", tolerance " << tolerance);
    CHECK(err <= tolerance);
}

inline void expectClose(const Twin& t, const Backends& be, const std::string& what)
{
    expectClose(t, be, what, be.mode.tolerance);
}

/// Each row's log-sum-exp of its scaled causal scores (1 / sqrt(hs)), from qkv (B, T, (NH + 2 KV) hs) in double:
/// the attention's statistics (B, NH, T).
inline std::vector<float> attentionLogSumExp(const AttentionShape& s, const std::vector<float>& qkv)
{
    const std::size_t W = static_cast<std::size_t>(s.qkvColumns());
    const int hs = s.head_size;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    std::vector<float> lse(s.rows() * static_cast<std::size_t>(s.heads));
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int t = 0; t < s.seq; ++t) {
                const std::size_t key = static_cast<std::size_t>(s.heads + h / s.group()) * hs;
                std::vector<double> scores;
                for (int j = 0; j <= t; ++j) {
                    double dot = 0;
                    for (int d = 0; d < hs; ++d)
                        dot += static_cast<double>(qkv[(static_cast<std::size_t>(b) * s.seq + t) * W + h * hs + d])
                            * qkv[(static_cast<std::size_t>(b) * s.seq + j) * W + key + d];
                    scores.push_back(dot * scale);
                }
                const double mx = *std::max_element(scores.begin(), scores.end());
                double sum = 0;
                for (double x : scores)
                    sum += std::exp(x - mx);
                lse[(static_cast<std::size_t>(b) * s.heads + h) * s.seq + t] = static_cast<float>(mx + std::log(sum));
            }
    return lse;
}

inline bool noGpu()
{
    return cudaVisibleDeviceCount() == 0;
}

} // namespace pw::test::cuda
