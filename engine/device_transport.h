// SPDX-License-Identifier: MIT
// What the executor speaks to other devices: transfers and all-reduces of device buffers, ordered on the stream of
// the backend that owns them. Two paths sit behind it: through host memory over a host Transport (LocalFabric,
// Gloo: stages on the CPU, and stages that share one GPU), and NCCL between GPUs (issue 21). The executor never
// asks which it has.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend.h"
#include "transport.h"

namespace pw::engine {

class DeviceTransport
{
public:
    virtual ~DeviceTransport() = default;
    /// Posts a send of `count` elements of `dtype` at device pointer `data` and returns; `data` may be reused when
    /// it returns. Sends to one peer arrive in the order they were posted.
    virtual void send(int peer, std::uint64_t tag, const void* data, DType dtype, std::size_t count) = 0;
    /// Blocks until the send with this tag from `peer` is in `data` (as the stream sees it).
    virtual void recv(int peer, std::uint64_t tag, void* data, DType dtype, std::size_t count) = 0;
    /// Sums `data` over `devices` (ascending, this one among them) in place.
    virtual void allReduceSum(const std::vector<int>& devices, void* data, DType dtype, std::size_t count) = 0;
    /// Blocks until every posted send has completed.
    virtual void flush() = 0;

    void send(int peer, std::uint64_t tag, const Buffer& b) { send(peer, tag, b.data(), b.dtype(), b.count()); }
    void recv(int peer, std::uint64_t tag, Buffer& b) { recv(peer, tag, b.data(), b.dtype(), b.count()); }
};

/// Device buffers through host memory over `host`: downloaded (converted to fp32) before a send or an all-reduce,
/// uploaded after a receive. The wire carries fp32 whatever the backend's dtype (bf16 activations travel as fp32:
/// twice the bytes, exact). A backend whose memory is the host's and whose data is fp32 is passed through without a
/// copy, so the CPU engine moves exactly what it did before the seam.
std::unique_ptr<DeviceTransport> throughHost(Transport& host, Backend& backend);

} // namespace pw::engine
