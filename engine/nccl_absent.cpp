// SPDX-License-Identifier: MIT
// engine/cuda/nccl_transport.h in a build without CUDA: there is no NCCL transport, and the controller never
// asks for one from an agent whose hello says it has no CUDA (app/run/gpu_devices.cpp).
#include "cuda/nccl_transport.h"

namespace pw::engine {

#if !PW_HAVE_CUDA
bool ncclCompiledIn()
{
    return false;
}

std::unique_ptr<Transport> makeNcclTransport(
    int device, std::vector<int>, Rendezvous&, std::shared_ptr<Backend>, const NcclOptions&)
{
    throw TransportError("device " + std::to_string(device)
        + ": this build has no NCCL transport (configured with PW_WITH_CUDA=OFF, or no CUDA compiler was found)");
}

std::unique_ptr<Transport> makeNcclTransport(
    int device, int, Rendezvous& store, std::shared_ptr<Backend> backend, const NcclOptions& options)
{
    return makeNcclTransport(device, std::vector<int> {}, store, std::move(backend), options);
}
#endif

} // namespace pw::engine
