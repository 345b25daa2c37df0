// SPDX-License-Identifier: MIT
// cuDNN's fused attention (engine/cuda/cudnn_attention.cpp). Without a GPU, the graphs are built for an H100 from
// its device properties: cuDNN's support checks must accept both passes for every shape the engine sends it, and
// NVRTC must compile their kernels; only loading a kernel onto a device is left, which the driver's stub refuses
// (the process loads the toolkit's stub libcuda for that, so no GPU is needed). With a GPU, the plans are built for
// it, and cuDNN's results are checked against the engine's own kernels and the CPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <dlfcn.h>

#include "engine/cuda/cudnn_attention.h"
#include "tests/skip.h"
#include "twins.h"

namespace pw::test::cuda {

namespace {

using engine::cuda::AttentionBuffers;
using engine::cuda::AttentionGraph;
using engine::cuda::AttentionPass;
using engine::cuda::CudnnAttentionPlan;
using engine::cuda::CudnnDevice;
using engine::cuda::CudnnError;
using engine::cuda::GraphOp;
using engine::cuda::GraphTensor;

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

/// @brief Runs an attention graph on the CPU (fp32 storage, double sums), as the graph's operations define it
/// (GraphOp): the oracle of what cuDNN is asked to compute, independent of cuDNN. A virtual tensor is never in
/// memory, so its strides say nothing (the frontend's dO . O has overlapping ones): it gets packed storage of its own,
/// and a reshape's output sees its input's storage through the output's strides.
class GraphOnCpu
{
public:
    /// `bf16`: what a bf16 tensor holds is rounded to bf16 where it is written and where it is read (a reshape's
    /// bf16 view of an fp32 tensor is what a product reads: rounded).
    GraphOnCpu(
        const AttentionGraph& graph, const std::vector<std::pair<std::int64_t, void*>>& bindings, bool bf16 = false)
        : m_graph(graph)
        , m_bf16(bf16)
        , m_data(graph.tensors.size(), nullptr)
        , m_strides(graph.tensors.size())
    {
        std::map<std::int64_t, void*> bound(bindings.begin(), bindings.end());
        for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
            const GraphTensor& t = graph.tensors[i];
            if (!t.isVirtual) {
                REQUIRE(bound.count(t.uid) == 1);
                m_data[i] = static_cast<float*>(bound[t.uid]);
            }
        }
        for (const GraphOp& op : graph.ops) // a reshape's output aliases its input
            if (op.kind == GraphOp::Kind::Reshape)
                m_alias[op.y] = op.x;
        for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
            const GraphTensor& t = graph.tensors[i];
            m_strides[i] = t.strides;
            if (!t.isVirtual || m_alias.count(static_cast<int>(i)))
                continue;
            std::int64_t extent = 1;
            for (std::size_t d = t.dims.size(); d-- > 0;) {
                m_strides[i][d] = extent;
                extent *= t.dims[d];
            }
            m_owned.emplace_back(static_cast<std::size_t>(extent), 0.0f);
            m_data[i] = m_owned.back().data();
        }
        for (const auto& [y, x] : m_alias)
            m_data[static_cast<std::size_t>(y)] = m_data[static_cast<std::size_t>(x)];
    }

    void run()
    {
        for (const GraphOp& op : m_graph.ops)
            switch (op.kind) {
            case GraphOp::Kind::Pointwise:
                pointwise(op);
                break;
            case GraphOp::Kind::Reduction:
                reduction(op);
                break;
            case GraphOp::Kind::Matmul:
                matmul(op);
                break;
            case GraphOp::Kind::Reshape:
                break; // the output already sees the input's storage
            }
    }

private:
    using Index = std::array<std::int64_t, 4>;

    const GraphTensor& tensor(int i) const { return m_graph.tensors.at(static_cast<std::size_t>(i)); }
    /// The element of tensor `i` at `idx` given in the coordinates of a tensor of dims `outer`: a dimension of 1 is
    /// broadcast, a smaller one that divides it maps groups (a key/value head serves its group of query heads).
    float& at(int i, const Index& idx, const std::vector<std::int64_t>& outer)
    {
        const GraphTensor& t = tensor(i);
        std::int64_t offset = 0;
        for (std::size_t d = 0; d < 4; ++d) {
            std::int64_t k = idx[d];
            if (t.dims[d] == 1)
                k = 0;
            else if (t.dims[d] != outer[d])
                k = idx[d] / (outer[d] / t.dims[d]);
            offset += k * m_strides[static_cast<std::size_t>(i)][d];
        }
        return m_data[static_cast<std::size_t>(i)][offset];
    }
    /// A value as tensor `i` holds it (bf16 rounded, in bf16 mode, when its type is bf16).
    float stored(int i, float v) const { return m_bf16 && tensor(i).type == CUDNN_DATA_BFLOAT16 ? roundBf16(v) : v; }
    float read(int i, const Index& idx, const std::vector<std::int64_t>& outer) { return stored(i, at(i, idx, outer)); }
    void write(int i, const Index& idx, const std::vector<std::int64_t>& outer, float v)
    {
        at(i, idx, outer) = stored(i, v);
    }
    template <class F> static void each(const std::vector<std::int64_t>& dims, F f)
    {
        Index idx {};
        for (idx[0] = 0; idx[0] < dims[0]; ++idx[0])
            for (idx[1] = 0; idx[1] < dims[1]; ++idx[1])
                for (idx[2] = 0; idx[2] < dims[2]; ++idx[2])
                    for (idx[3] = 0; idx[3] < dims[3]; ++idx[3])
                        f(idx);
    }

    void pointwise(const GraphOp& op)
    {
        const auto& dims = tensor(op.y).dims;
        each(dims, [&](const Index& i) {
            const float x = read(op.x, i, dims);
            const float b = op.b >= 0 ? read(op.b, i, dims) : 0.0f;
            float y = 0;
            switch (op.pointwise) {
            case CUDNN_POINTWISE_ADD:
                y = x + b;
                break;
            case CUDNN_POINTWISE_SUB:
                y = x - b;
                break;
            case CUDNN_POINTWISE_MUL:
                y = x * b;
                break;
            case CUDNN_POINTWISE_DIV:
                y = x / b;
                break;
            case CUDNN_POINTWISE_EXP:
                y = std::exp(x);
                break;
            case CUDNN_POINTWISE_LOG:
                y = std::log(x);
                break;
            case CUDNN_POINTWISE_IDENTITY:
                y = x;
                break;
            case CUDNN_POINTWISE_GEN_INDEX:
                y = static_cast<float>(i[static_cast<std::size_t>(op.axis)]);
                break;
            case CUDNN_POINTWISE_CMP_GE:
                y = x >= b ? 1.0f : 0.0f;
                break;
            case CUDNN_POINTWISE_BINARY_SELECT:
                y = at(op.t, i, dims) != 0.0f ? x : b;
                break;
            default:
                FAIL("the CPU runner has no pointwise mode " << op.pointwise);
            }
            write(op.y, i, dims, y);
        });
    }

    void reduction(const GraphOp& op)
    {
        const auto& xd = tensor(op.x).dims;
        const bool max = op.reduction == CUDNN_REDUCE_TENSOR_MAX;
        REQUIRE((max || op.reduction == CUDNN_REDUCE_TENSOR_ADD));
        float* y0 = m_data[static_cast<std::size_t>(op.y)];
        std::vector<double> acc; // by the output element's offset
        std::vector<char> seen;
        each(xd, [&](const Index& i) {
            const auto k = static_cast<std::size_t>(&at(op.y, i, xd) - y0);
            if (k >= acc.size()) {
                acc.resize(k + 1);
                seen.resize(k + 1);
            }
            const double v = read(op.x, i, xd);
            acc[k] = !seen[k] ? v : max ? std::max(acc[k], v) : acc[k] + v;
            seen[k] = 1;
        });
        for (std::size_t k = 0; k < acc.size(); ++k)
            if (seen[k])
                y0[k] = stored(op.y, static_cast<float>(acc[k]));
    }

    void matmul(const GraphOp& op)
    {
        const auto& yd = tensor(op.y).dims;
        const std::int64_t K = tensor(op.x).dims[3];
        REQUIRE(tensor(op.b).dims[2] == K);
        const std::vector<std::int64_t> ad {yd[0], yd[1], yd[2], K}, bd {yd[0], yd[1], K, yd[3]};
        each(yd, [&](const Index& i) {
            double sum = 0;
            for (std::int64_t k = 0; k < K; ++k)
                sum += static_cast<double>(read(op.x, {i[0], i[1], i[2], k}, ad))
                    * read(op.b, {i[0], i[1], k, i[3]}, bd);
            write(op.y, i, yd, static_cast<float>(sum));
        });
    }

    const AttentionGraph& m_graph;
    bool m_bf16 = false;
    std::vector<float*> m_data;
    std::vector<std::vector<std::int64_t>> m_strides; ///< the addressing strides (packed for virtual tensors)
    std::map<int, int> m_alias;
    std::vector<std::vector<float>> m_owned;
};

} // namespace

namespace {

/// What an attention call gives: out (B, T, C), the statistics (B, NH, T; the graphs only) and dqkv.
struct AttentionResults
{
    std::vector<float> out, lse, dqkv;
};

/// The CPU engine's attention, forward then backward (written over dqkv).
AttentionResults cpuAttention(const AttentionShape& s, const std::vector<float>& qkv, const std::vector<float>& dout)
{
    const auto cpu = makeCpuBackend();
    AttentionResults r {std::vector<float>(s.rows() * static_cast<std::size_t>(s.channels())), {},
        std::vector<float>(qkv.size(), 9.0f)};
    std::vector<float> stash(cpu->attentionStashCount(s)); // the softmax itself
    cpu->attentionForward(r.out.data(), stash.data(), qkv.data(), s);
    cpu->attentionBackward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), stash.data(), s);
    return r;
}

/// Both graphs run on the CPU (GraphOnCpu); the backward reads `backwardOut` (null: the forward graph's out).
AttentionResults graphAttentionOnCpu(const AttentionShape& s, const std::vector<float>& qkv,
    const std::vector<float>& dout, const std::vector<float>* backwardOut, bool bf16)
{
    const std::size_t rows = s.rows() * static_cast<std::size_t>(s.heads);
    AttentionResults r {std::vector<float>(s.rows() * static_cast<std::size_t>(s.channels()), 7.0f),
        std::vector<float>(rows, 7.0f), std::vector<float>(qkv.size(), 5.0f)};
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_size)), negInf = -INFINITY, one = 1.0f;
    AttentionBuffers f;
    f.qkv = qkv.data();
    f.out = r.out.data();
    f.lse = r.lse.data();
    f.scale = &scale;
    f.negInf = &negInf;
    f.one = &one;
    const AttentionGraph forward = attentionGraph(s, AttentionPass::Forward);
    GraphOnCpu(forward, attentionBindings(s, AttentionPass::Forward, f, sizeof(float)), bf16).run();

    std::vector<float> rowSums(rows), accum(rows * static_cast<std::size_t>(s.head_size));
    AttentionBuffers g = f;
    g.out = nullptr;
    g.outIn = backwardOut ? backwardOut->data() : r.out.data();
    g.dout = dout.data();
    g.dqkv = r.dqkv.data();
    g.rowSums = rowSums.data();
    g.dqAccum = accum.data();
    const AttentionGraph backward = attentionGraph(s, AttentionPass::Backward);
    GraphOnCpu(backward, attentionBindings(s, AttentionPass::Backward, g, sizeof(float)), bf16).run();
    return r;
}

} // namespace

TEST_CASE("the attention graphs given to cuDNN compute the CPU engine's attention, forward and backward", "[cudnn]")
{
    // The graphs' own math and layouts (strides into qkv and out, head offsets, scale, causal mask, statistics,
    // grouped-query broadcast and sums), run on the CPU in fp32 against the CPU backend: no cuDNN and no GPU needed.
    const AttentionShape shapes[] = {{2, 37, 3, 3, 16}, {2, 19, 4, 2, 8}, {1, 21, 4, 1, 8}, {2, 5, 5, 5, 8}};
    for (const AttentionShape& s : shapes) {
        INFO(cudnnShapeText(s));
        const std::vector<float> qkv
            = randomValues(s.rows() * static_cast<std::size_t>(s.qkvColumns()), 70, -1.5f, 1.5f);
        const std::vector<float> dout = randomValues(s.rows() * static_cast<std::size_t>(s.channels()), 71);
        const AttentionResults want = cpuAttention(s, qkv, dout);
        // The backward reads the CPU engine's out, so that only the graph's backward is compared.
        const AttentionResults got = graphAttentionOnCpu(s, qkv, dout, &want.out, false);
        CHECK(relativeError(got.out, want.out) <= 1e-6);
        CHECK(relativeError(got.lse, attentionLogSumExp(s, qkv)) <= 1e-6);
        const double err = relativeError(got.dqkv, want.dqkv); // written whole: it started at 5
        INFO("dqkv: relative error " << err);
        CHECK(err <= 1e-5);
    }
}

TEST_CASE("in bf16 the attention graphs stay within the GPU tests' tolerance of the CPU engine", "[cudnn]")
{
    // What the GPU tests may expect of cuDNN: the graphs run with every bf16 tensor rounded (inputs, P and dS into
    // their products, outputs) against the CPU engine on the same rounded inputs, for the kernel test's shapes and
    // value ranges. Half the tests' 2e-2 is asked, so that cuDNN's own order of sums has room.
    const AttentionShape shapes[] = {{3, 37, 3, 3, 16}, {2, 131, 2, 2, 64}, {1, 70, 2, 2, 128}, {2, 5, 5, 5, 8},
        {2, 70, 8, 2, 16}, {2, 131, 4, 2, 64}, {1, 70, 4, 1, 128}};
    for (const AttentionShape& s : shapes) {
        INFO(cudnnShapeText(s));
        std::vector<float> qkv = randomValues(s.rows() * static_cast<std::size_t>(s.qkvColumns()), 30, -1.5f, 1.5f);
        std::vector<float> dout = randomValues(s.rows() * static_cast<std::size_t>(s.channels()), 31);
        std::transform(qkv.begin(), qkv.end(), qkv.begin(), roundBf16);
        std::transform(dout.begin(), dout.end(), dout.begin(), roundBf16);
        const AttentionResults want = cpuAttention(s, qkv, dout);
        // The backward reads the forward's bf16 out, as on the GPU.
        const AttentionResults got = graphAttentionOnCpu(s, qkv, dout, nullptr, true);
        const double outErr = relativeError(got.out, want.out), dqkvErr = relativeError(got.dqkv, want.dqkv);
        INFO("out: relative error " << outErr << "; dqkv: " << dqkvErr);
        CHECK(outErr <= 1e-2);
        CHECK(dqkvErr <= 1e-2);
    }
}

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
