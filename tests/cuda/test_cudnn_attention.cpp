// SPDX-License-Identifier: MIT
// cuDNN's fused attention (engine/cuda/cudnn_attention.cpp). Without a GPU, the graphs are built for an H100 from
// its device properties: cuDNN's support checks must accept both passes for every shape the engine sends it, and
// NVRTC must compile their kernels; only loading a kernel onto a device is left, which the driver's stub refuses
// (the process loads the toolkit's stub libcuda for that, so no GPU is needed). With a GPU, the plans are built for
// it, and cuDNN's results are checked against the engine's own kernels and the CPU.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <dlfcn.h>

#include "engine/cuda/cudnn_attention.h"
#include "tests/skip.h"
#include "twins.h"

namespace pw::test::cuda {

namespace {

using engine::cuda::AttentionPass;
using engine::cuda::CudnnAttentionPlan;
using engine::cuda::CudnnDevice;
using engine::cuda::CudnnError;

/// The shapes the engine's tests and benchmarks send cuDNN: GPT-2 124M's, Llama 3 8B's (32 query heads in groups
/// of 4 per key/value head, hs 128, T 4096), and the kernel tests' odd ones (T off the 64-row tiles, head sizes 8
/// and 16, grouped-query and multi-query).
const AttentionShape kCudnnShapes[] = {{16, 1024, 12, 12, 64}, {1, 4096, 32, 8, 128}, {2, 131, 2, 2, 64},
    {3, 37, 3, 3, 16}, {2, 5, 5, 5, 8}, {2, 131, 4, 2, 64}, {1, 70, 4, 1, 128}};

std::string cudnnShapeText(const AttentionShape& s)
{
    return "B " + std::to_string(s.batch) + " T " + std::to_string(s.seq) + " NH " + std::to_string(s.heads) + " KV "
        + std::to_string(s.kv_heads) + " hs " + std::to_string(s.head_size);
}

/// Loads the CUDA driver's stub in place of the driver (its soname is libcuda.so.1, so cuDNN's own dlopen finds
/// it); false where the toolkit has none.
bool loadDriverStub()
{
    return dlopen(PW_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_GLOBAL) != nullptr;
}

} // namespace

TEST_CASE("cuDNN takes the engine's attention graphs for an H100, forward and backward", "[cudnn]")
{
    if (!noGpu())
        PW_SKIP("a GPU is visible: the next case builds the plans on it");
    std::string absent = engine::cuda::cudnnVersion();
    if (absent.rfind("none", 0) == 0)
        PW_SKIP("cuDNN cannot be loaded: " + absent);
    if (!loadDriverStub())
        PW_SKIP(std::string("the CUDA driver stub is missing: ") + PW_CUDA_DRIVER_STUB);
    const auto& api = engine::cuda::cudnn();
    const CudnnDevice h100(api, engine::cuda::h100DeviceJson());
    for (const AttentionShape& s : kCudnnShapes)
        for (const AttentionPass pass : {AttentionPass::Forward, AttentionPass::Backward}) {
            const std::string at = cudnnShapeText(s) + (pass == AttentionPass::Forward ? " forward" : " backward");
            INFO(at);
            REQUIRE(CudnnAttentionPlan::unsupported(s).empty());
            try {
                const CudnnAttentionPlan plan(h100, s, pass);
                FAIL("a plan was built without a device: " << plan.engineDescription());
            } catch (const CudnnError& e) {
                INFO(e.what());
                // Engines passed cuDNN's support checks for sm_90 (a graph they do not recognise gets none), and
                // their kernels compiled: the stub refused only to load them.
                CHECK(e.offered() >= 1);
                CHECK(e.status() == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
            }
        }
}

TEST_CASE("cuDNN refuses what its attention does not take, before building anything", "[cudnn]")
{
    CHECK_THAT(CudnnAttentionPlan::unsupported({2, 64, 6, 4, 64}), Catch::Contains("not groups of 4"));
    CHECK(CudnnAttentionPlan::unsupported({2, 64, 8, 2, 64}).empty());
    CHECK_THAT(CudnnAttentionPlan::unsupported({2, 64, 4, 4, 20}), Catch::Contains("head size 20"));
    CHECK_THAT(CudnnAttentionPlan::unsupported({2, 64, 4, 4, 256}), Catch::Contains("head size 256"));
    CHECK(CudnnAttentionPlan::unsupported({2, 64, 4, 4, 64}).empty());
}

TEST_CASE("cuDNN attention builds plans on the GPU and matches the engine's own kernels", "[cuda][cudnn]")
{
    if (noGpu())
        PW_SKIP("no CUDA device");
    const Mode bf16 = kModes[1];
    for (const AttentionShape& s : kCudnnShapes) {
        if (s.seq * s.batch > 8192)
            continue; // the big shapes are the benchmark's
        const std::string at = " " + cudnnShapeText(s);
        INFO(at);
        const std::size_t bt = s.rows();
        const std::size_t W = static_cast<std::size_t>(s.qkvColumns()), C = static_cast<std::size_t>(s.channels());
        const auto cudnnGpu = makeCudaBackend(0, Precision::Bf16Mixed, CudaAttention::Cudnn);
        const auto ownGpu = makeCudaBackend(0, Precision::Bf16Mixed, CudaAttention::Own);
        const auto upload = [&](Backend& b, const std::vector<float>& v) {
            Buffer buf(b, v.size(), DType::BF16);
            b.upload(buf.data(), DType::BF16, v.data(), v.size());
            return buf;
        };
        const auto download = [&](Backend& b, const Buffer& buf, DType t) {
            std::vector<float> v(buf.count());
            b.download(v.data(), buf.data(), t, v.size());
            return v;
        };
        const std::vector<float> qkv = randomValues(bt * W, 60, -1.5f, 1.5f), dout = randomValues(bt * C, 61);
        std::vector<float> results[2][3]; // [cudnn, own][out, lse, dqkv]
        for (int which = 0; which < 2; ++which) {
            Backend& b = which == 0 ? *cudnnGpu : *ownGpu;
            Buffer x = upload(b, qkv), g = upload(b, dout);
            Buffer out(b, bt * C, DType::BF16), lse(b, b.attentionStashCount(s), DType::F32);
            Buffer dqkv(b, bt * W, DType::BF16);
            b.attentionForward(out.data(), lse.as<float>(), x.data(), s);
            b.attentionBackward(dqkv.data(), g.data(), x.data(), out.data(), lse.as<float>(), s);
            results[which][0] = download(b, out, DType::BF16);
            results[which][1] = download(b, lse, DType::F32);
            results[which][2] = download(b, dqkv, DType::BF16);
        }
        CHECK_THAT(cudaAttentionKernels(*cudnnGpu), Catch::StartsWith("cuDNN 9."));
        CHECK_THAT(cudaAttentionKernels(*ownGpu), Catch::Contains("PW_CUDA_ATTENTION=own"));
        const char* names[] = {"out", "log-sum-exp", "dqkv"};
        for (int k = 0; k < 3; ++k) {
            const double err = relativeError(results[0][k], results[1][k]);
            INFO(names[k] << ": cuDNN against the own kernels, relative error " << err);
            CHECK(err <= bf16.tolerance);
        }
    }
}

} // namespace pw::test::cuda
