// SPDX-License-Identifier: MIT
// Internal to engine/: the CUDA backend's entry points, called by backend.cpp when PW_HAVE_CUDA.
//
// How the backend is built (engine/cuda/):
// - cuda_backend.cpp: CudaBackend, one per device and executor (its stream, events, arena, scratch and staging in
//   cuda_memory.h). One non-blocking stream: every kernel, copy and cuBLASLt call of the backend is enqueued on it
//   and the host waits only in download() and synchronize() (and for a read-back's copy when it takes it).
//   Backends of one GPU share its memory: the device fabric copies between them on their streams, ordered by
//   events (record, waitFor).
//   The arena caches freed blocks by size (rounded up to 512 B): cudaMalloc runs only when no cached block of the
//   size is free, so a run allocates during its first step only; MemoryStats count the rounded blocks, including
//   the backend's own (the 32 MiB cuBLASLt workspace and the kernels' scratch). A block released while kernels
//   still use it is safe to hand out again because its next user is ordered after them on the same stream. Uploads
//   go through pinned staging chunks (bf16 rounded on the host, to nearest even) recorded with an event, so the
//   caller's memory is free when upload() returns and the host never waits for the device to reuse a chunk unless
//   eight are in flight. The action timer records pooled cudaEvent pairs and resolves them against an anchor event
//   whose host time (CLOCK_MONOTONIC) was read when it completed, re-anchored whenever a waited resolve leaves the
//   stream idle.
// - matmul.cpp: cuBLASLt products, one cached plan (descriptors + heuristic algorithm) per shape, epilogue and
//   pointer alignment; bias fused in the epilogue, GELU too in bf16 (GELU_AUX_BIAS: GELU to gelu_out, the
//   pre-activation to out). fp32 mode keeps its own GELU kernel, the CPU's formula, so that it stays within 1e-5
//   of the CPU; fp32 uses CUBLAS_COMPUTE_32F on fp32 matrices (no TF32).
// - elementwise.cu, layernorm.cu, classifier.cu, encoder.cu, attention.cu: the kernels, templated on the stored
//   element type (float, or __nv_bfloat16 in mixed precision) with fp32 arithmetic, written in the CPU ops' order;
//   backward kernels accumulate (+=). Vector paths (128-bit accesses) run only when every pointer involved is
//   16-byte aligned and the row length allows it; otherwise the scalar path of the same kernel runs. Reductions
//   are deterministic (fixed grids, fixed orders, no atomics): column sums (dweight, dbias) through per-chunk
//   partials, dwte through a token sort, the gradient norm in two levels.
// - cudnn_attention.cpp, cudnn_runner.cpp: in bf16, attention through cuDNN's fused flash attention (graph API,
//   dlopen'ed like cuBLASLt), plans shared per GPU and shape; shapes cuDNN refuses, fp32 and PW_CUDA_ATTENTION=own
//   run attention.cu.
// - attention.cu: a flash-style fused attention. bf16 with head size 64 or 128 runs on tensor cores (mma.sync,
//   online softmax, the log-sum-exp per row kept as the stash: B NH T floats); other head sizes and fp32 run a
//   warp-per-row kernel on CUDA cores, fp32 throughout. The backward recomputes the probabilities, in two kernels
//   (dK/dV per key tile, dQ per query tile) so that nothing needs atomics.
// - Every CUDA and cuBLASLt call is checked (cuda_util.h): failures throw std::runtime_error with the call, file,
//   line and the library's message.
#pragma once

#include <memory>
#include <string>

#include "../backend.h"

namespace pw::engine {

/// Which attention kernels a CUDA backend runs in bf16: cuDNN's fused flash attention where cuDNN is installed and
/// takes the shape (query heads in whole groups per key/value head, head size a multiple of 8 up to 128), else the
/// engine's own; or the engine's own
/// always. fp32 runs the engine's own.
enum class CudaAttention { Cudnn, Own };
/// `Own` when the environment has PW_CUDA_ATTENTION=own, else `Cudnn`.
CudaAttention cudaAttentionFromEnvironment();

/// The backend of CUDA device `device` (an index among the visible ones) in `precision`; throws
/// std::runtime_error naming the device and the CUDA error when it does not exist or cannot be used.
std::unique_ptr<Backend> makeCudaBackend(
    int device, Precision precision, CudaAttention attention = cudaAttentionFromEnvironment());
/// What ran `backend`'s last attention call: "cuDNN 9.19.0", or "own kernels" with the reason cuDNN did not
/// ("" before its first call, or when it is not a CUDA backend).
std::string cudaAttentionKernels(const Backend& backend);
/// CUDA devices visible to this process; 0 when there is no driver or no device (never throws).
int cudaVisibleDeviceCount();

/// @brief Where a CUDA backend's work runs: what NCCL enqueues its operations against.
struct CudaPlace
{
    int device = -1; ///< the CUDA device index
    void* stream = nullptr; ///< the backend's cudaStream_t

    bool operator==(const CudaPlace&) const = default;
};
/// The device and stream of `backend` when it is a CUDA backend; device -1 otherwise.
CudaPlace cudaPlace(const Backend& backend);

} // namespace pw::engine
