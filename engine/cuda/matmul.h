// SPDX-License-Identifier: MIT
// Internal to engine/: the CUDA backend's matrix products through cuBLASLt. One Matmul per backend: its handle, its
// stream and workspace, and a plan per shape (descriptors and the heuristic's algorithm), made on the first call
// of that shape and reused after. fp32 computes in fp32 (CUBLAS_COMPUTE_32F on fp32 matrices: no TF32), bf16 in
// fp32 on bf16 matrices, fp8 in fp32 on E4M3 operands with a bf16 result (the GEMM profile's; training in FP8 is
// issue 32's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace pw::engine::cuda {

class Matmul
{
public:
    /// One product, column-major as cuBLAS sees it: D (m x n, ldd) = op(A) op(B) + beta D, op(A) m x k, op(B) k x n;
    /// A is stored k x m when transA (else m x k), B n x k when transB (else k x n).
    struct Product
    {
        bool transA = false, transB = false;
        int m = 0, n = 0, k = 0;
        const void* A = nullptr;
        int lda = 0;
        const void* B = nullptr;
        int ldb = 0;
        void* D = nullptr;
        int ldd = 0;
        float beta = 0.0f;
        const void* bias = nullptr; ///< m elements added to every column (the epilogue's bias), or null
        void* geluInput = nullptr; ///< with GELU: D gets GELU(result) and this (ldd) the result before it
        /// GELU's backward: D gets result * GELU'(this), this (ldd) the forward's GELU input (its aux).
        const void* dgeluAux = nullptr;
        /// The bias gradient of a weight gradient's product: op(B)'s sums over k (n elements, D's type) written here
        /// by the BGRADB epilogue, or null.
        void* biasGradient = nullptr;
        /// Fp8E4M3 operands: device pointers to the fp32 factors that turn A's and B's stored values into the
        /// values they stand for (per-tensor scaling's inverse scales); null: 1.
        const float* scaleA = nullptr;
        const float* scaleB = nullptr;
    };

    /// The matrices' types: fp32 throughout; bf16; or E4M3 operands A and B with a bf16 D, which cuBLASLt's FP8 kernels
    /// take in the TN layout alone (transA, not transB) and which accumulate in fp32 with fast accumulation
    /// (Transformer Engine's forward products).
    enum class Operands { Fp32, Bf16, Fp8E4M3 };

    Matmul(cudaStream_t stream, void* workspace, std::size_t workspaceBytes, Operands operands);
    ~Matmul();
    Matmul(const Matmul&) = delete;
    Matmul& operator=(const Matmul&) = delete;

    /// Enqueues the product; false (nothing enqueued) when cuBLASLt has no algorithm for it, which only a fused
    /// epilogue (GELU, GELU's backward, the bias gradient) may meet (the caller then does it itself). Throws on any
    /// other failure.
    bool run(const Product& p);

private:
    struct Plan
    {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
        cublasLtMatmulAlgo_t algo {};
        bool found = false;
    };
    using Key = std::tuple<bool, bool, int, int, int, int, int, int, bool, int, int, int, int, int, int, int>;

    Plan& plan(const Product& p);
    void build(Plan& plan, const Product& p);
    static void destroy(Plan& plan);

    cublasLtHandle_t m_handle = nullptr;
    cudaStream_t m_stream;
    void* m_workspace;
    std::size_t m_workspaceBytes;
    Operands m_operands;
    std::map<Key, Plan> m_plans;
};

} // namespace pw::engine::cuda
