// SPDX-License-Identifier: MIT
// Internal to engine/: cuBLASLt's entry points, looked up in its shared library when the CUDA backend first needs
// them (as NCCL's are, cuda/nccl_transport.cpp). Nothing links libcublasLt: a program built with CUDA (the CLI, the
// app, the agent) starts without mapping its 500 MB, on machines without a GPU too, and loads it only where a GPU
// trains or is measured.
#pragma once

#include <string>

#include <cublasLt.h>

namespace pw::engine::cuda {

/// @brief The cuBLASLt functions the engine calls, with their own signatures (the toolkit's header).
struct CublasLtApi
{
    decltype(&::cublasLtGetVersion) getVersion = nullptr;
    decltype(&::cublasLtGetStatusName) getStatusName = nullptr;
    decltype(&::cublasLtGetStatusString) getStatusString = nullptr;
    decltype(&::cublasLtCreate) create = nullptr;
    decltype(&::cublasLtDestroy) destroy = nullptr;
    decltype(&::cublasLtMatmulDescCreate) matmulDescCreate = nullptr;
    decltype(&::cublasLtMatmulDescDestroy) matmulDescDestroy = nullptr;
    decltype(&::cublasLtMatmulDescSetAttribute) matmulDescSetAttribute = nullptr;
    decltype(&::cublasLtMatrixLayoutCreate) matrixLayoutCreate = nullptr;
    decltype(&::cublasLtMatrixLayoutDestroy) matrixLayoutDestroy = nullptr;
    decltype(&::cublasLtMatmulPreferenceCreate) matmulPreferenceCreate = nullptr;
    decltype(&::cublasLtMatmulPreferenceDestroy) matmulPreferenceDestroy = nullptr;
    decltype(&::cublasLtMatmulPreferenceSetAttribute) matmulPreferenceSetAttribute = nullptr;
    decltype(&::cublasLtMatmulAlgoGetHeuristic) matmulAlgoGetHeuristic = nullptr;
    decltype(&::cublasLtMatmul) matmul = nullptr;
};

/// The library's file name: libcublasLt.so.<the toolkit's major version>, the one the kernels were built against.
const char* cublasLtLibrary();
/// The process's cuBLASLt, loaded on first use and never unloaded; throws std::runtime_error saying what is missing
/// (the library, or a function in it).
const CublasLtApi& cublasLt();
/// Whether the library is loaded in this process (a test checks that planning and `--version` do not load it).
bool cublasLtLoaded();
/// cuBLASLt's version as "major.minor.patch"; "none (why)" when the library cannot be loaded.
std::string cublasLtVersion();

} // namespace pw::engine::cuda
