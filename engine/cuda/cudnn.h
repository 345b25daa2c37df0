// SPDX-License-Identifier: MIT
// Internal to engine/: cuDNN's graph API entry points, looked up in libcudnn.so.<major> when attention first needs
// them (as cuBLASLt's and NCCL's are). Nothing links cuDNN: a machine without it trains with the engine's own
// attention kernels, and a program that does not train on a GPU never maps it.
#pragma once

#include <string>

#include <cudnn.h>

namespace pw::engine::cuda {

/// @brief The cuDNN functions the engine calls, with the toolkit header's signatures.
struct CudnnApi
{
    decltype(&::cudnnGetVersion) getVersion = nullptr;
    decltype(&::cudnnGetErrorString) getErrorString = nullptr;
    decltype(&::cudnnGetLastErrorString) getLastErrorString = nullptr;
    decltype(&::cudnnCreate) create = nullptr;
    decltype(&::cudnnDestroy) destroy = nullptr;
    decltype(&::cudnnSetStream) setStream = nullptr;
    decltype(&::cudnnBackendCreateDescriptor) createDescriptor = nullptr;
    decltype(&::cudnnBackendDestroyDescriptor) destroyDescriptor = nullptr;
    decltype(&::cudnnBackendSetAttribute) setAttribute = nullptr;
    decltype(&::cudnnBackendGetAttribute) getAttribute = nullptr;
    decltype(&::cudnnBackendFinalize) finalize = nullptr;
    decltype(&::cudnnBackendExecute) execute = nullptr;
};

/// The library's file name: libcudnn.so.<the major version of the headers the engine was built against>.
const char* cudnnLibrary();
/// The process's cuDNN, loaded on first use and never unloaded; throws std::runtime_error saying what is missing.
const CudnnApi& cudnn();
/// Whether the library is loaded in this process.
bool cudnnLoaded();
/// cuDNN's version as "major.minor.patch"; "none (why)" when the library cannot be loaded.
std::string cudnnVersion();

} // namespace pw::engine::cuda
