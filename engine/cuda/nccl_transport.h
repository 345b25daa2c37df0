// SPDX-License-Identifier: MIT
// The NCCL transport (engine/transport.h) between the GPUs of a run, one rank per device, in the memory of the
// device's CUDA backend. Usable from any layer: nothing of NCCL or CUDA appears here, and a build without CUDA
// answers ncclCompiledIn() false and makeNcclTransport with a TransportError (engine/nccl_absent.cpp).
//
// How it works (nccl_transport.cpp):
// - Communicators: device 0 makes an ncclUniqueId and publishes it in the run's rendezvous store; every device
//   joins with ncclCommInitRank (non-blocking communicators: every wait is bounded), then splits it once more
//   into a twin, and makeGroups splits one communicator per collective group (ncclCommSplit: the group's index
//   as colour for members, NCCL_SPLIT_NOCOLOR for the rest; every device splits for every group, in order).
// - Sends and receives: NCCL matches a pair's operations by their order, not by tag (the executor posts them in
//   the schedule's order on both sides). Transfers from a lower device to a higher one (or to itself) run on one
//   communicator and stream, from a higher to a lower one on the twin and a second stream, so that two devices
//   pushing to each other before they receive (HetPipe's waves) never wait on each other. A send first copies
//   its region (on the backend's stream) into a buffer of the transport: the backend may reuse the region at
//   once and its stream never waits for a receiver. A receive waits for the backend's stream up to its posting
//   (its region may have been in use), and its handle's wait() makes the backend's stream wait for it: the host
//   never blocks. exchange() posts its transfers in one ncclGroupStart/End.
// - All-reduces: in place, fp32 or bf16, on a third stream ordered after the backend's stream by an event; the
//   handle's wait() makes the backend's stream wait for the all-reduce's event, so that an all-reduce runs while
//   the backward computes the next gradients (the executor's buckets).
// - Failures: a watchdog thread polls every communicator's asynchronous error and every posted operation's
//   event; an operation not done within the timeout, or an error, aborts every communicator (ncclCommAbort: the
//   stuck kernels return) and the next call of the transport throws TransportError naming the device, the peer
//   or group and NCCL's words (ncclGetErrorString, ncclGetLastError).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../backend.h"
#include "../rendezvous.h"
#include "../transport.h"

namespace pw::engine {

struct NcclOptions
{
    std::string prefix = "pw"; ///< the run's keys in the store (the unique id under prefix + "/nccl/id")
    /// Communicator creation, and any posted operation (a receive waiting for its sender included): not done
    /// within it, the run fails with a TransportError instead of hanging.
    std::chrono::milliseconds timeout {120000};
};

/// Whether this build can make NCCL transports (it was built with CUDA and NCCL).
bool ncclCompiledIn();
/// Device `device` of `devices` on `backend` (a CUDA backend; its GPU must be no other device's of the run: NCCL
/// refuses two ranks on one GPU). Nothing is collective here: the communicators are made by makeGroups, which
/// every device calls on its own thread. Throws TransportError when `backend` is not a CUDA backend or the build
/// has no NCCL.
std::unique_ptr<Transport> makeNcclTransport(
    int device, int devices, Rendezvous& store, std::shared_ptr<Backend> backend, const NcclOptions& options = {});
/// The same among the run's `devices` (ascending; the plan's, which may leave some of its cluster's out): rank r of
/// the communicators is devices[r], and the first publishes the unique id.
std::unique_ptr<Transport> makeNcclTransport(int device, std::vector<int> devices, Rendezvous& store,
    std::shared_ptr<Backend> backend, const NcclOptions& options = {});

} // namespace pw::engine
