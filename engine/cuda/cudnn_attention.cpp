// SPDX-License-Identifier: MIT
// Causal attention through cuDNN's graph API (cudnn_attention.h).
#include "cudnn_attention.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace pw::engine::cuda {

// ---- Descriptors ---------------------------------------------------------------------------------------------------

void checkCudnn(const CudnnApi& api, cudnnStatus_t status, const std::string& what)
{
    if (status == CUDNN_STATUS_SUCCESS)
        return;
    char reason[1024] = {};
    api.getLastErrorString(reason, sizeof reason);
    std::string message = "cuDNN: " + what + ": " + api.getErrorString(status);
    if (reason[0] != '\0')
        message += std::string(" (") + reason + ")";
    throw CudnnError(message, status);
}

CudnnDescriptor::CudnnDescriptor(const CudnnApi& api, cudnnBackendDescriptorType_t type)
    : m_api(api)
{
    checkCudnn(api, api.createDescriptor(type, &m_desc), "creating descriptor type " + std::to_string(type));
}

CudnnDescriptor::~CudnnDescriptor()
{
    if (m_desc != nullptr)
        m_api.destroyDescriptor(m_desc);
}

CudnnDescriptor& CudnnDescriptor::set(
    cudnnBackendAttributeName_t attribute, cudnnBackendAttributeType_t type, std::int64_t count, const void* values)
{
    checkCudnn(m_api, m_api.setAttribute(m_desc, attribute, type, count, values),
        "setting attribute " + std::to_string(attribute));
    return *this;
}

CudnnDescriptor& CudnnDescriptor::setInt(cudnnBackendAttributeName_t attribute, std::int64_t value)
{
    return set(attribute, CUDNN_TYPE_INT64, 1, &value);
}

CudnnDescriptor& CudnnDescriptor::setInts(
    cudnnBackendAttributeName_t attribute, const std::vector<std::int64_t>& values)
{
    return set(attribute, CUDNN_TYPE_INT64, static_cast<std::int64_t>(values.size()), values.data());
}

CudnnDescriptor& CudnnDescriptor::setDesc(cudnnBackendAttributeName_t attribute, const CudnnDescriptor& value)
{
    const cudnnBackendDescriptor_t d = value.get();
    return set(attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void CudnnDescriptor::finalize(const std::string& what)
{
    checkCudnn(m_api, m_api.finalize(m_desc), "finalising " + what);
}

// ---- Devices -------------------------------------------------------------------------------------------------------

std::string h100DeviceJson()
{
    // CUDA C++ Programming Guide, "Features and Technical Specifications" for compute capability 9.0: grid and
    // block limits, 64 K registers per block and per SM, 32 resident blocks and 2048 threads per SM, 48 KiB of
    // static shared memory per block, 227 KiB opt-in with 1 KiB reserved per block. H100 SXM5 80 GB (datasheet):
    // 132 SMs, 1980 MHz boost clock, 50 MiB L2, 80 GB HBM3 (79.1 GiB usable) at 2619 MHz.
    return R"({"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],"regsPerBlock":65536,)"
           R"("multiProcessorCount":132,"warpSize":32,"maxSharedMemoryPerBlock":49152,)"
           R"("maxSharedMemoryPerBlockOptin":232448,"reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,)"
           R"("maxCtasPerSM":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":0,"isTccDriver":0,)"
           R"("supportCoopLaunch":1,"totalGlobalMem":85029158912,"smClockRateKHz":1980000,"memClockRateKHz":2619000,)"
           R"("l2CacheSize":52428800,"cudaDeviceId":0,"deviceVer":900,"driverVer":13000,)"
           R"("deviceName":"NVIDIA H100 80GB HBM3"})";
}

CudnnDevice::CudnnDevice(const CudnnApi& api, cudnnHandle_t handle)
    : m_api(api)
    , m_properties(std::make_unique<CudnnDescriptor>(api, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR))
{
    m_properties->set(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    m_properties->finalize("the device's properties");
}

CudnnDevice::CudnnDevice(const CudnnApi& api, const std::string& json)
    : m_api(api)
    , m_properties(std::make_unique<CudnnDescriptor>(api, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR))
{
    m_properties->set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
        static_cast<std::int64_t>(json.size()), json.data());
    m_properties->finalize("the device's properties (JSON)");
}

// ---- Graphs --------------------------------------------------------------------------------------------------------

namespace {

// The tensors the caller's memory backs (their unique ids in the variant pack); virtual tensors number from 100.
enum Uid : std::int64_t {
    kQ = 1,
    kKt, ///< K as (B, NH, hs, T): the first product's right operand
    kV, ///< forward: V (B, NH, T, hs); backward: V as (B, NH, hs, T)
    kO,
    kStats,
    kScale,
    kNegInf,
    kOne,
    kDO,
    kDQ,
    kDK,
    kDV,
    kRowSums, ///< backward: the rows' sums of dO . O (fp32, in the workspace)
    kDQAccum, ///< backward: dQ in fp32 (in the workspace)
    kFirstVirtual = 100,
};

using Dims = std::vector<std::int64_t>;

constexpr std::size_t kAlign = 256;

std::size_t alignUp(std::size_t n)
{
    return (n + kAlign - 1) / kAlign * kAlign;
}

/// Writes the graph's tensors and operations down as data (AttentionGraph).
class Builder
{
public:
    using Ref = int; ///< a tensor: its index in AttentionGraph::tensors; kNone for none
    static constexpr Ref kNone = -1;

    struct TensorSpec
    {
        Dims dims;
        Dims strides;
        cudnnDataType_t type = CUDNN_DATA_FLOAT;
        std::int64_t uid = 0; ///< 0: a virtual tensor with the next free id
        bool byValue = false;
    };

    Ref tensor(const TensorSpec& spec)
    {
        GraphTensor t;
        t.dims = spec.dims;
        t.strides = spec.strides;
        t.type = spec.type;
        t.isVirtual = spec.uid == 0;
        t.uid = t.isVirtual ? m_nextVirtual++ : spec.uid;
        t.byValue = spec.byValue;
        m_graph.tensors.push_back(std::move(t));
        return static_cast<Ref>(m_graph.tensors.size() - 1);
    }

    /// A scalar passed by value at execution (fp32).
    Ref scalar(std::int64_t uid) { return tensor({{1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, uid, true}); }

    /// A virtual tensor like `dims` with packed strides.
    Ref temp(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT)
    {
        Dims strides(dims.size(), 1);
        for (std::size_t i = dims.size() - 1; i-- > 0;)
            strides[i] = strides[i + 1] * dims[i + 1];
        return tensor({dims, strides, type});
    }

    /// y = mode(x[, b[, t]]) computed in `math`.
    void pointwise(cudnnPointwiseMode_t mode, Ref x, Ref b, Ref y, Ref t = kNone,
        cudnnDataType_t math = CUDNN_DATA_FLOAT, std::int64_t axis = -1)
    {
        GraphOp& op = add(GraphOp::Kind::Pointwise, x, b, y);
        op.pointwise = mode;
        op.math = math;
        op.axis = axis;
        op.t = t;
    }

    void reduction(cudnnReduceTensorOp_t mode, Ref x, Ref y)
    {
        add(GraphOp::Kind::Reduction, x, kNone, y).reduction = mode;
    }

    /// c = a b over the last two dimensions, batched over the first two, accumulated in fp32.
    void matmul(Ref a, Ref b, Ref c) { add(GraphOp::Kind::Matmul, a, b, c); }

    /// y: x's elements seen through y's dimensions and strides (a transpose, here).
    void reshape(Ref x, Ref y) { add(GraphOp::Kind::Reshape, x, kNone, y); }

    /// The causal mask of the frontend's sliding-window mask with a right bound of 0: scores above the diagonal
    /// (column > row) become -inf.
    Ref causalMask(Ref scores, const Dims& dims, Ref negInf)
    {
        const Ref row = temp(dims, CUDNN_DATA_INT32);
        const Ref col = temp(dims, CUDNN_DATA_INT32);
        pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, kNone, row, kNone, CUDNN_DATA_FLOAT, 2);
        pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, kNone, col, kNone, CUDNN_DATA_FLOAT, 3);
        const Ref keepIt = temp(dims, CUDNN_DATA_BOOLEAN);
        pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keepIt, kNone, CUDNN_DATA_BOOLEAN);
        const Ref masked = temp(dims);
        pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, negInf, masked, keepIt);
        return masked;
    }

    AttentionGraph take() { return std::move(m_graph); }

private:
    GraphOp& add(GraphOp::Kind kind, Ref x, Ref b, Ref y)
    {
        GraphOp& op = m_graph.ops.emplace_back();
        op.kind = kind;
        op.x = x;
        op.b = b;
        op.y = y;
        return op;
    }

    AttentionGraph m_graph;
    std::int64_t m_nextVirtual = kFirstVirtual;
};

/// The layouts of the backend's buffers as (B, heads, T, hs) tensors. qkv's row is W = (NH + 2 KV) hs wide: the
/// query heads, then the key heads, then the value heads; a grouped-query key or value head serves NH / KV query
/// heads, which cuDNN's products broadcast over (no expanded copy).
struct Layouts
{
    std::int64_t B, H, KV, T, D;

    std::int64_t C() const { return H * D; }
    std::int64_t W() const { return (H + 2 * KV) * D; }
    Dims q() const { return {B, H, T, D}; }
    Dims kv() const { return {B, KV, T, D}; }
    Dims kvT() const { return {B, KV, D, T}; }
    Dims scores() const { return {B, H, T, T}; }
    Dims rows() const { return {B, H, T, 1}; }
    /// A head of qkv (B, T, W), or of its gradient.
    Dims qkvStrides() const { return {T * W(), D, W(), 1}; }
    /// The same seen transposed, (B, heads, hs, T).
    Dims qkvStridesT() const { return {T * W(), D, 1, W()}; }
    /// A head of out (B, T, C) or dout.
    Dims outStrides() const { return {T * C(), D, C(), 1}; }
    Dims rowStrides() const { return {H * T, T, 1, 1}; }
    /// A packed (B, H, T, hs) tensor.
    Dims packed() const { return {H * T * D, T * D, D, 1}; }
    /// Element offsets of the key and value heads in a row of qkv.
    std::size_t kOffset() const { return static_cast<std::size_t>(H * D); }
    std::size_t vOffset() const { return static_cast<std::size_t>((H + KV) * D); }
};

Layouts layoutsOf(const AttentionShape& a)
{
    return {a.batch, a.heads, a.kv_heads, a.seq, a.head_size};
}

void buildForward(Builder& g, const Layouts& l)
{
    const auto bf16 = CUDNN_DATA_BFLOAT16;
    const auto q = g.tensor({l.q(), l.qkvStrides(), bf16, kQ});
    const auto kt = g.tensor({l.kvT(), l.qkvStridesT(), bf16, kKt});
    const auto v = g.tensor({l.kv(), l.qkvStrides(), bf16, kV});
    const auto o = g.tensor({l.q(), l.outStrides(), bf16, kO});
    const auto stats = g.tensor({l.rows(), l.rowStrides(), CUDNN_DATA_FLOAT, kStats});
    const auto scale = g.scalar(kScale);
    const auto negInf = g.scalar(kNegInf);

    const auto s = g.temp(l.scores());
    g.matmul(q, kt, s);
    const auto scaled = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_MUL, s, scale, scaled);
    const auto masked = g.causalMask(scaled, l.scores(), negInf);
    // Softmax with its statistics: max, exp(x - max), their sum; stats = max + log(sum); p = exp / sum.
    const auto max = g.temp(l.rows());
    g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
    const auto shifted = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_SUB, masked, max, shifted);
    const auto e = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_EXP, shifted, Builder::kNone, e);
    const auto sum = g.temp(l.rows());
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
    const auto logSum = g.temp(l.rows());
    g.pointwise(CUDNN_POINTWISE_LOG, sum, Builder::kNone, logSum);
    g.pointwise(CUDNN_POINTWISE_ADD, max, logSum, stats);
    const auto p = g.temp(l.scores(), bf16); // the second product's operands share a type
    g.pointwise(CUDNN_POINTWISE_DIV, e, sum, p);
    g.matmul(p, v, o);
}

/// out (B, KV, T, hs) = a b, the product per query head summed over each key/value head's group (the frontend's
/// GQA gradient: the full-head product, then a reduction over the group); a plain product when KV = NH.
void productOverGroups(Builder& g, const Layouts& l, Builder::Ref a, Builder::Ref b, Builder::Ref out)
{
    if (l.KV == l.H) {
        g.matmul(a, b, out);
        return;
    }
    const auto full = g.tensor({l.q(), l.packed(), CUDNN_DATA_BFLOAT16});
    g.matmul(a, b, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void buildBackward(Builder& g, const Layouts& l)
{
    const auto bf16 = CUDNN_DATA_BFLOAT16;
    const auto q = g.tensor({l.q(), l.qkvStrides(), bf16, kQ});
    const auto kt = g.tensor({l.kvT(), l.qkvStridesT(), bf16, kKt});
    const auto vt = g.tensor({l.kvT(), l.qkvStridesT(), bf16, kV});
    const auto o = g.tensor({l.q(), l.outStrides(), bf16, kO});
    const auto dO = g.tensor({l.q(), l.outStrides(), bf16, kDO});
    const auto stats = g.tensor({l.rows(), l.rowStrides(), CUDNN_DATA_FLOAT, kStats});
    const auto dQ = g.tensor({l.q(), l.qkvStrides(), bf16, kDQ});
    const auto dK = g.tensor({l.kv(), l.qkvStrides(), bf16, kDK});
    const auto dV = g.tensor({l.kv(), l.qkvStrides(), bf16, kDV});
    const auto scale = g.scalar(kScale);
    const auto negInf = g.scalar(kNegInf);
    const auto one = g.scalar(kOne);

    // Each row's sum of dO . O (softmax's backward subtracts it), kept in the workspace.
    const auto dOO = g.tensor({l.q(), {l.H * l.T * l.D, l.T * l.D, l.H * l.D, 1}, CUDNN_DATA_FLOAT});
    g.pointwise(CUDNN_POINTWISE_MUL, dO, o, dOO);
    const auto rowSum = g.temp(l.rows());
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rowSum);
    const auto rowSums = g.tensor({l.rows(), l.rowStrides(), CUDNN_DATA_FLOAT, kRowSums});
    g.pointwise(CUDNN_POINTWISE_MUL, rowSum, one, rowSums);

    // The probabilities again: p = exp(mask(scale q k^T) - stats).
    const auto s = g.temp(l.scores());
    g.matmul(q, kt, s);
    const auto scaled = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_MUL, s, scale, scaled);
    const auto shifted = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_SUB, scaled, stats, shifted);
    const auto masked = g.causalMask(shifted, l.scores(), negInf);
    const auto p = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_EXP, masked, Builder::kNone, p);

    // dV = p^T dO.
    const Dims transposed {l.H * l.T * l.T, l.T * l.T, 1, l.T};
    const auto pT = g.tensor({l.scores(), transposed, bf16});
    g.reshape(p, pT);
    productOverGroups(g, l, pT, dO, dV);

    // dS = p (dO V^T - rowSums) scale; dK = dS^T q; dQ = dS k (accumulated in fp32).
    const auto dP = g.temp(l.scores());
    g.matmul(dO, vt, dP);
    const auto centred = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_SUB, dP, rowSums, centred);
    const auto dSraw = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_MUL, centred, p, dSraw);
    const auto dS = g.temp(l.scores());
    g.pointwise(CUDNN_POINTWISE_MUL, dSraw, scale, dS);
    const auto dST = g.tensor({l.scores(), transposed, bf16});
    g.reshape(dS, dST);
    productOverGroups(g, l, dST, q, dK);
    const auto k = g.tensor({l.kv(), l.qkvStrides(), bf16});
    g.reshape(kt, k);
    const auto dQAccum = g.tensor({l.q(), l.packed(), CUDNN_DATA_FLOAT, kDQAccum});
    g.matmul(dS, k, dQAccum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, dQAccum, Builder::kNone, dQ);
}

/// The graph's descriptors, kept in `keep`; returns its operations in order.
std::vector<cudnnBackendDescriptor_t> lower(
    const CudnnApi& api, const AttentionGraph& graph, std::vector<std::unique_ptr<CudnnDescriptor>>& keep)
{
    const auto make = [&](cudnnBackendDescriptorType_t type) -> CudnnDescriptor& {
        keep.push_back(std::make_unique<CudnnDescriptor>(api, type));
        return *keep.back();
    };
    std::vector<const CudnnDescriptor*> tensors;
    for (const GraphTensor& spec : graph.tensors) {
        auto& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        const std::int64_t alignment = 16;
        const bool yes = true;
        t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &spec.type)
            .setInts(CUDNN_ATTR_TENSOR_DIMENSIONS, spec.dims)
            .setInts(CUDNN_ATTR_TENSOR_STRIDES, spec.strides)
            .setInt(CUDNN_ATTR_TENSOR_UNIQUE_ID, spec.uid)
            .setInt(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment);
        if (spec.isVirtual)
            t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
        if (spec.byValue)
            t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
        t.finalize("tensor " + std::to_string(spec.uid));
        tensors.push_back(&t);
    }
    const auto at = [&](int i) -> const CudnnDescriptor& { return *tensors.at(static_cast<std::size_t>(i)); };
    std::vector<cudnnBackendDescriptor_t> ops;
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    for (const GraphOp& o : graph.ops) {
        CudnnDescriptor* op = nullptr;
        switch (o.kind) {
        case GraphOp::Kind::Pointwise: {
            auto& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
            pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &o.pointwise)
                .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &o.math);
            if (o.axis >= 0)
                pw.setInt(CUDNN_ATTR_POINTWISE_AXIS, o.axis);
            pw.finalize("pointwise mode " + std::to_string(o.pointwise));
            op = &make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
            op->setDesc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
                .setDesc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(o.x));
            if (o.b >= 0)
                op->setDesc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(o.b));
            if (o.t >= 0)
                op->setDesc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(o.t));
            op->setDesc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(o.y));
            op->finalize("pointwise operation mode " + std::to_string(o.pointwise));
            break;
        }
        case GraphOp::Kind::Reduction: {
            auto& r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
            r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &o.reduction)
                .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
            r.finalize("reduction");
            op = &make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
            op->setDesc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
                .setDesc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(o.x))
                .setDesc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(o.y));
            op->finalize("reduction operation");
            break;
        }
        case GraphOp::Kind::Matmul: {
            auto& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
            mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
            mm.finalize("matmul");
            op = &make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
            op->setDesc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
                .setDesc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(o.x))
                .setDesc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(o.b))
                .setDesc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(o.y));
            op->finalize("matmul operation");
            break;
        }
        case GraphOp::Kind::Reshape:
            op = &make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
            op->setDesc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(o.x))
                .setDesc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(o.y));
            op->finalize("reshape operation");
            break;
        }
        ops.push_back(op->get());
    }
    return ops;
}

} // namespace

AttentionGraph attentionGraph(const AttentionShape& shape, AttentionPass pass)
{
    Builder g;
    if (pass == AttentionPass::Forward)
        buildForward(g, layoutsOf(shape));
    else
        buildBackward(g, layoutsOf(shape));
    return g.take();
}

std::vector<std::pair<std::int64_t, void*>> attentionBindings(
    const AttentionShape& shape, AttentionPass pass, const AttentionBuffers& m, std::size_t elementBytes)
{
    const Layouts l = layoutsOf(shape);
    const auto at = [&](const void* base, std::size_t elements) {
        return static_cast<void*>(static_cast<char*>(const_cast<void*>(base)) + elements * elementBytes);
    };
    const auto value = [](const float* v) { return static_cast<void*>(const_cast<float*>(v)); };
    std::vector<std::pair<std::int64_t, void*>> b {{kQ, at(m.qkv, 0)}, {kKt, at(m.qkv, l.kOffset())},
        {kV, at(m.qkv, l.vOffset())}, {kStats, m.lse}, {kScale, value(m.scale)}, {kNegInf, value(m.negInf)}};
    if (pass == AttentionPass::Forward) {
        b.emplace_back(kO, m.out);
        return b;
    }
    b.insert(b.end(),
        {{kO, const_cast<void*>(m.outIn)}, {kDO, const_cast<void*>(m.dout)}, {kDQ, at(m.dqkv, 0)},
            {kDK, at(m.dqkv, l.kOffset())}, {kDV, at(m.dqkv, l.vOffset())}, {kOne, value(m.one)}, {kRowSums, m.rowSums},
            {kDQAccum, m.dqAccum}});
    return b;
}

struct CudnnAttentionPlan::Graph
{
    std::vector<std::unique_ptr<CudnnDescriptor>> descriptors;
    std::unique_ptr<CudnnDescriptor> operations;
    /// The heuristics' engine configurations, kept as long as the plan made of one (as the frontend does).
    std::vector<std::unique_ptr<CudnnDescriptor>> configs;
    std::unique_ptr<CudnnDescriptor> plan;
    float scale = 1.0f;
    float negInf = -std::numeric_limits<float>::infinity();
    float one = 1.0f;
};

std::string CudnnAttentionPlan::unsupported(const AttentionShape& a)
{
    if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
        return std::to_string(a.heads) + " query heads are not groups of " + std::to_string(a.kv_heads)
            + " key/value heads";
    if (a.head_size % 8 != 0 || a.head_size > 128)
        return "head size " + std::to_string(a.head_size) + " (cuDNN's attention takes multiples of 8 up to 128)";
    return {};
}

CudnnAttentionPlan::CudnnAttentionPlan(const CudnnDevice& device, const AttentionShape& shape, AttentionPass pass)
    : m_api(device.api())
    , m_shape(shape)
    , m_pass(pass)
    , m_graph(std::make_unique<Graph>())
{
    if (const std::string why = unsupported(shape); !why.empty())
        throw CudnnError("cuDNN attention: " + why);
    const char* passName = pass == AttentionPass::Forward ? "forward" : "backward";
    m_graph->scale = 1.0f / std::sqrt(static_cast<float>(shape.head_size));

    const std::vector<cudnnBackendDescriptor_t> ops = lower(m_api, attentionGraph(shape, pass), m_graph->descriptors);
    auto& graph = m_graph->operations
        = std::make_unique<CudnnDescriptor>(m_api, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()),
        ops.data());
    graph->finalize(std::string("the attention ") + passName + " graph");

    CudnnDescriptor heuristics(m_api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    heuristics.setDesc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
        .setDesc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, device.properties());
    heuristics.finalize(std::string("the heuristics of the attention ") + passName + " graph");
    std::int64_t count = 0;
    checkCudnn(m_api,
        m_api.getAttribute(
            heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "counting the heuristics' engine configurations");
    std::vector<std::unique_ptr<CudnnDescriptor>> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (std::int64_t i = 0; i < count; ++i) {
        configs.push_back(std::make_unique<CudnnDescriptor>(m_api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(configs.back()->get());
    }
    std::int64_t returned = 0;
    if (count > 0)
        checkCudnn(m_api,
            m_api.getAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                &returned, raw.data()),
            "reading the heuristics' engine configurations");
    m_offered = static_cast<int>(returned);
    std::string reasons;
    cudnnStatus_t lastStatus = CUDNN_STATUS_NOT_SUPPORTED;
    for (std::int64_t i = 0; i < returned && !m_graph->plan; ++i) {
        auto plan = std::make_unique<CudnnDescriptor>(m_api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        try {
            plan->setDesc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[static_cast<std::size_t>(i)])
                .setDesc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, device.properties());
            plan->finalize("an execution plan");
        } catch (const CudnnError& e) {
            reasons += std::string(reasons.empty() ? "" : "; ") + e.what();
            lastStatus = e.status();
            continue;
        }
        std::int64_t got = 0;
        checkCudnn(m_api,
            m_api.getAttribute(
                plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &m_cudnnWorkspace),
            "reading the plan's workspace size");
        // The engine's global index, for the record.
        CudnnDescriptor engine(m_api, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        cudnnBackendDescriptor_t e = engine.get();
        if (m_api.getAttribute(configs[static_cast<std::size_t>(i)]->get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &e)
            == CUDNN_STATUS_SUCCESS)
            m_api.getAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &m_engine);
        m_graph->plan = std::move(plan);
    }
    m_graph->configs = std::move(configs);
    if (!m_graph->plan)
        throw CudnnError(std::string("cuDNN attention ") + passName + ": none of the " + std::to_string(returned)
                + " engines offered builds a plan" + (reasons.empty() ? std::string() : " (" + reasons + ")"),
            lastStatus, static_cast<int>(returned));
}

CudnnAttentionPlan::~CudnnAttentionPlan() = default;

std::size_t CudnnAttentionPlan::workspaceBytes() const
{
    std::size_t bytes = alignUp(static_cast<std::size_t>(m_cudnnWorkspace));
    if (m_pass == AttentionPass::Backward) {
        const std::size_t rows = m_shape.rows() * static_cast<std::size_t>(m_shape.heads);
        bytes += alignUp(rows * sizeof(float)) + rows * static_cast<std::size_t>(m_shape.head_size) * sizeof(float);
    }
    return bytes;
}

std::string CudnnAttentionPlan::engineDescription() const
{
    return "engine " + std::to_string(m_engine) + " (the first of " + std::to_string(m_offered)
        + " offered that builds), workspace " + std::to_string(workspaceBytes()) + " bytes";
}

void CudnnAttentionPlan::execute(
    cudnnHandle_t handle, const std::vector<std::pair<std::int64_t, void*>>& bindings, void* workspace) const
{
    std::vector<std::int64_t> uids;
    std::vector<void*> pointers;
    for (const auto& [uid, pointer] : bindings) {
        uids.push_back(uid);
        pointers.push_back(pointer);
    }
    CudnnDescriptor pack(m_api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<std::int64_t>(pointers.size()),
            pointers.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack.finalize("the attention's variant pack");
    const std::lock_guard lock(m_executing);
    checkCudnn(m_api, m_api.execute(handle, m_graph->plan->get(), pack.get()), "running the attention plan");
}

void CudnnAttentionPlan::forward(cudnnHandle_t handle, void* out, float* lse, const void* qkv, void* workspace) const
{
    if (m_pass != AttentionPass::Forward)
        throw std::logic_error("CudnnAttentionPlan::forward on a backward plan");
    AttentionBuffers m;
    m.qkv = qkv;
    m.out = out;
    m.lse = lse;
    m.scale = &m_graph->scale;
    m.negInf = &m_graph->negInf;
    m.one = &m_graph->one;
    execute(handle, attentionBindings(m_shape, m_pass, m, 2), workspace);
}

void CudnnAttentionPlan::backward(cudnnHandle_t handle, cudaStream_t stream, void* dqkv, const void* dout,
    const void* qkv, const void* out, const float* lse, void* workspace) const
{
    if (m_pass != AttentionPass::Backward)
        throw std::logic_error("CudnnAttentionPlan::backward on a forward plan");
    const std::size_t rows = m_shape.rows() * static_cast<std::size_t>(m_shape.heads);
    char* rowSums = static_cast<char*>(workspace) + alignUp(static_cast<std::size_t>(m_cudnnWorkspace));
    char* accum = rowSums + alignUp(rows * sizeof(float));
    if (m_api.getVersion() < 90600) {
        // The frontend zeroes the accumulator for these versions; later ones initialise it themselves.
        const cudaError_t e
            = cudaMemsetAsync(accum, 0, rows * static_cast<std::size_t>(m_shape.head_size) * sizeof(float), stream);
        if (e != cudaSuccess)
            throw CudnnError(std::string("cuDNN attention: zeroing dQ's accumulator: ") + cudaGetErrorString(e));
    }
    AttentionBuffers m;
    m.qkv = qkv;
    m.outIn = out;
    m.lse = const_cast<float*>(lse);
    m.dout = dout;
    m.dqkv = dqkv;
    m.rowSums = rowSums;
    m.dqAccum = accum;
    m.scale = &m_graph->scale;
    m.negInf = &m_graph->negInf;
    m.one = &m_graph->one;
    execute(handle, attentionBindings(m_shape, m_pass, m, 2), workspace);
}

} // namespace pw::engine::cuda
