// SPDX-License-Identifier: MIT
// cuBLASLt matrix products of the CUDA backend (matmul.h).
#include "matmul.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cublaslt.h"
#include "cuda_util.h"

namespace pw::engine::cuda {

namespace {

/// The largest power of two (up to 256) that divides the address: what the heuristic must assume of a pointer.
int alignmentOf(const void* p)
{
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (a == 0)
        return 256;
    return static_cast<int>(std::min<std::uintptr_t>(256, a & (~a + 1)));
}

template <class V> void setDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const V& value)
{
    PW_CUBLAS(cublasLt().matmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

cublasLtEpilogue_t epilogueOf(const Matmul::Product& p)
{
    if (p.geluInput)
        return p.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (p.dgeluAux)
        return CUBLASLT_EPILOGUE_DGELU;
    if (p.biasGradient)
        return CUBLASLT_EPILOGUE_BGRADB;
    return p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

} // namespace

Matmul::Matmul(cudaStream_t stream, void* workspace, std::size_t workspaceBytes, Operands operands)
    : m_stream(stream)
    , m_workspace(workspace)
    , m_workspaceBytes(workspaceBytes)
    , m_operands(operands)
{
    PW_CUBLAS(cublasLt().create(&m_handle));
}

Matmul::~Matmul()
{
    for (auto& [key, plan] : m_plans)
        destroy(plan);
    cublasLt().destroy(m_handle);
}

void Matmul::destroy(Plan& plan)
{
    for (cublasLtMatrixLayout_t layout : {plan.a, plan.b, plan.d})
        if (layout)
            cublasLt().matrixLayoutDestroy(layout);
    if (plan.desc)
        cublasLt().matmulDescDestroy(plan.desc);
    plan = Plan {};
}

Matmul::Plan& Matmul::plan(const Product& p)
{
    // The algorithm depends on the shape, the epilogue, whether C is read, and every pointer's alignment.
    const Key key {p.transA, p.transB, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.beta != 0.0f,
        static_cast<int>(epilogueOf(p)), alignmentOf(p.A), alignmentOf(p.B), alignmentOf(p.D),
        alignmentOf(p.bias ? p.bias : p.biasGradient), alignmentOf(p.geluInput), alignmentOf(p.dgeluAux)};
    if (auto it = m_plans.find(key); it != m_plans.end())
        return it->second;
    // Built aside and cached only when complete: a failure leaves nothing half-made behind.
    Plan plan;
    try {
        build(plan, p);
    } catch (...) {
        destroy(plan);
        throw;
    }
    return m_plans.emplace(key, plan).first->second;
}

void Matmul::build(Plan& plan, const Product& p)
{
    const bool fp8 = m_operands == Operands::Fp8E4M3;
    if (fp8 && (!p.transA || p.transB))
        throw std::runtime_error("cuBLASLt's FP8 products take A transposed and B not (TN)");
    const cudaDataType_t type = m_operands == Operands::Fp32 ? CUDA_R_32F : CUDA_R_16BF; // D's
    const cudaDataType_t operand = fp8 ? CUDA_R_8F_E4M3 : type;
    PW_CUBLAS(cublasLt().matmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (fp8) {
        setDesc(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(1));
        setDesc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.scaleA);
        setDesc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.scaleB);
    }
    setDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, p.transA ? CUBLAS_OP_T : CUBLAS_OP_N);
    setDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, p.transB ? CUBLAS_OP_T : CUBLAS_OP_N);
    setDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogueOf(p));
    // The heuristic reads the bias and aux pointers for their alignment: set this call's (run() sets them again).
    if (const void* bias = p.bias ? p.bias : p.biasGradient)
        setDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (const void* aux = p.geluInput ? p.geluInput : p.dgeluAux) {
        setDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
        setDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(p.ldd));
    }
    PW_CUBLAS(cublasLt().matrixLayoutCreate(&plan.a, operand, p.transA ? p.k : p.m, p.transA ? p.m : p.k, p.lda));
    PW_CUBLAS(cublasLt().matrixLayoutCreate(&plan.b, operand, p.transB ? p.n : p.k, p.transB ? p.k : p.n, p.ldb));
    PW_CUBLAS(cublasLt().matrixLayoutCreate(&plan.d, type, p.m, p.n, p.ldd));

    cublasLtMatmulPreference_t preference = nullptr;
    PW_CUBLAS(cublasLt().matmulPreferenceCreate(&preference));
    const auto setPreference = [&](cublasLtMatmulPreferenceAttributes_t attribute, auto value) {
        const cublasStatus_t status
            = cublasLt().matmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
        if (status != CUBLAS_STATUS_SUCCESS) {
            cublasLt().matmulPreferenceDestroy(preference);
            PW_CUBLAS(status);
        }
    };
    setPreference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(m_workspaceBytes));
    setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(alignmentOf(p.A)));
    setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(alignmentOf(p.B)));
    setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<std::uint32_t>(alignmentOf(p.D)));
    setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(alignmentOf(p.D)));
    cublasLtMatmulHeuristicResult_t result {};
    int found = 0;
    const cublasStatus_t status = cublasLt().matmulAlgoGetHeuristic(
        m_handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result, &found);
    cublasLt().matmulPreferenceDestroy(preference);
    // "Not supported" is how cuBLASLt says that no algorithm fits (e.g. an epilogue on this type): a fallback, not
    // an error.
    if (status != CUBLAS_STATUS_NOT_SUPPORTED)
        PW_CUBLAS(status);
    plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (plan.found)
        plan.algo = result.algo;
}

bool Matmul::run(const Product& p)
{
    Plan& pl = plan(p);
    if (!pl.found) {
        if (p.geluInput || p.dgeluAux || p.biasGradient)
            return false;
        throw std::runtime_error("cuBLASLt has no algorithm for a "
            + std::string(m_operands == Operands::Fp32 ? "fp32"
                    : m_operands == Operands::Bf16     ? "bf16"
                                                       : "fp8")
            + " " + std::to_string(p.m) + " x " + std::to_string(p.n) + " x " + std::to_string(p.k) + " product");
    }
    if (const void* bias = p.bias ? p.bias : p.biasGradient)
        setDesc(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (m_operands == Operands::Fp8E4M3) {
        setDesc(pl.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.scaleA);
        setDesc(pl.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.scaleB);
    }
    if (const void* aux = p.geluInput ? p.geluInput : p.dgeluAux)
        setDesc(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    const float alpha = 1.0f;
    PW_CUBLAS(cublasLt().matmul(m_handle, pl.desc, &alpha, p.A, pl.a, p.B, pl.b, &p.beta, p.D, pl.d, p.D, pl.d,
        &pl.algo, m_workspace, m_workspaceBytes, m_stream));
    return true;
}

} // namespace pw::engine::cuda
