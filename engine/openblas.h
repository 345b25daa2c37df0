// SPDX-License-Identifier: MIT
// Internal to engine/: OpenBLAS's entry points, looked up in its shared library when the CPU engine first needs
// them (as cuBLASLt's are, cuda/cublaslt.h). Nothing links libopenblas: the CLI and the app start without mapping
// it (and the libgfortran it brings, and its thread pool it starts at load: 4 ms of every start, issue 30 item
// 10), and load it where a CPU trains, is measured or names its BLAS.
#pragma once

#include <cblas.h>

namespace pw::engine::openblas {

/// @brief The OpenBLAS functions the engine calls, with their own signatures (cblas.h; OpenBLAS's thread and
/// configuration controls are its own: another CBLAS does not have them, and is refused by name).
struct Api
{
    decltype(&::cblas_sgemm) sgemm = nullptr;
    void (*setNumThreads)(int) = nullptr;
    int (*getNumThreads)() = nullptr;
    char* (*getConfig)() = nullptr;
};

/// The library's file name (its SONAME): libopenblas.so.0.
const char* library();
/// The process's OpenBLAS, loaded on first use and never unloaded; throws std::runtime_error naming what is
/// missing (the library and the package that has it, or a function in it).
const Api& api();
/// Whether the library is loaded in this process (a test checks that planning and `--version` do not load it).
bool loaded();

} // namespace pw::engine::openblas
