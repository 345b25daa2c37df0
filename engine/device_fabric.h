// SPDX-License-Identifier: MIT
// The device fabric (issue 33 item 1): the devices of a run that share one GPU, driven by one process (a thread
// and a backend, i.e. a stream, each), exchange activations and gradients in device memory only. A send copies its
// region into a staging buffer on the sender's stream and records an event; the receive orders the receiver's
// stream after that event and copies the staging buffer into its region there; an all-reduce copies each member's
// region the same way and then, on every member's stream, sums the members' copies in member order (one
// deterministic kernel: every member gets the same bits). The host blocks only to match a receive with its send
// (or to wait until every member has posted its part), never for the device: completion is Stream
// (Transport::Completion). Staging buffers go back to their owner's arena on the owner's thread, after the
// streams that read them have passed them (events), so that after the first step nothing is allocated.
//
// On the CPU backend (whose "stream" is the calling thread) the same logic runs with events that complete at once:
// the fake multi-device fabric the tests check the protocol with (tests/engine/test_device_fabric.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace pw::engine {

/// @brief In-process transport among devices whose backends share memory (Backend::sharesMemoryWith).
class DeviceFabric
{
public:
    /// backends[d]: device d's backend, or null for a device of the run outside the fabric. Throws
    /// std::invalid_argument when two members do not share memory, or when more than 16 devices share a GPU (the
    /// CUDA sum kernel's limit).
    explicit DeviceFabric(std::vector<std::shared_ptr<Backend>> backends);
    /// Waits for every member's stream, then gives the staging buffers still held back to their backends.
    ~DeviceFabric();
    DeviceFabric(const DeviceFabric&) = delete;
    DeviceFabric& operator=(const DeviceFabric&) = delete;

    /// Device `device`'s transport; reaches only that device's backend. Throws std::out_of_range for a non-member.
    Transport& endpoint(int device);
    /// The members, ascending.
    std::vector<int> devices() const;
    /// Wakes every waiter with a TransportError (a failed device stops the others).
    void abort(const std::string& why);

private:
    struct State;
    class Endpoint;
    std::shared_ptr<State> m_state;
    std::vector<std::unique_ptr<Endpoint>> m_endpoints; ///< by device; null for non-members
};

/// One device's transport when some of the run's devices are on its fabric and others are not (an agent holding
/// the stages of one GPU in a run over several): a transfer with a fabric peer, and a collective whose group lies
/// wholly in `local`, go over `fabric`; everything else over `remote`, which must reach the device's backend
/// (throughHost for a host transport) and is given every group of makeGroups, as every device of the run gives
/// its own. Completion is Stream when either part's is.
std::unique_ptr<Transport> linkTransports(Transport& fabric, std::vector<int> local, Transport& remote);

} // namespace pw::engine
