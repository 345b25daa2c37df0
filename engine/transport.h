// SPDX-License-Identifier: MIT
// Transport: how a device's stages exchange activations and gradients with other devices and all-reduce with
// their replicas. The executor speaks only this interface, in regions of its backend's memory, posting operations
// that return handles. Implementations: LocalFabric (threads of one process: tests, in-process runs) and Gloo
// (processes over TCP: engine/gloo_transport.h) carry host memory, and throughHost() stages any backend's memory
// through the host for them; NCCL (engine/cuda/nccl_transport.h) moves GPU memory itself, and the device fabric
// (engine/device_fabric.h) the memory of the stages that share one GPU, both ordered on the backend's stream. No
// transport library's types here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.h"

namespace pw::engine {

/// @brief A transfer or collective could not complete (peer gone, timeout, aborted run).
class TransportError : public std::runtime_error
{
public:
    using std::runtime_error::runtime_error;
};

/// @brief Memory a transfer reads or writes: `count` elements of `dtype` at `data`, in the memory of the backend that
/// owns it.
struct Region
{
    void* data = nullptr;
    DType dtype = DType::F32;
    std::size_t count = 0;

    std::size_t bytes() const { return count * byteSize(dtype); }
    bool operator==(const Region&) const = default;
};
inline Region region(Buffer& b)
{
    return {b.data(), b.dtype(), b.count()};
}
inline Region region(const Buffer& b)
{
    return {const_cast<void*>(b.data()), b.dtype(), b.count()};
}

/// @brief A posted send, receive or collective. wait() returns once a receive's or a collective's data is in its
/// region as later work on the backend's stream sees it (a host transport: in memory), and once a send's region may
/// be overwritten by the host; it throws TransportError when the operation failed, and does nothing after the first
/// call. A handle dropped without wait() leaves the operation to its transport (flush(), or the transport's end).
class Handle
{
public:
    /// What a transport puts behind a handle.
    class Work
    {
    public:
        virtual ~Work() = default;
        virtual void wait() = 0;
    };

    Handle() = default; ///< an operation already complete
    explicit Handle(std::unique_ptr<Work> work)
        : m_work(std::move(work))
    {
    }

    void wait()
    {
        if (auto work = std::move(m_work))
            work->wait();
    }
    bool waited() const { return !m_work; }

private:
    std::unique_ptr<Work> m_work;
};

/// A handle whose wait() runs `work`: an operation a transport does when it is waited for (the in-process ones'
/// receives and all-reduces).
Handle whenWaited(std::function<void()> work);

/// @brief One transfer of a grouped exchange.
struct Transfer
{
    enum class Direction : std::uint8_t { Send, Recv };
    Direction direction = Direction::Send;
    int peer = 0;
    std::uint64_t tag = 0;
    Region region;

    bool operator==(const Transfer&) const = default;
};

class Transport
{
public:
    virtual ~Transport() = default;

    /// Makes the communicators of every collective group in `groups` that this device belongs to (device lists,
    /// ascending), before the first step. Every device of the run calls it with the same list in the same order
    /// (collectiveGroups() in engine/executor.h), each on its own thread; a collective on a group not made here
    /// throws TransportError.
    virtual void makeGroups(const std::vector<std::vector<int>>& groups) = 0;
    /// Posts a send. Its region may be reused by work enqueued later on the backend's stream as soon as this returns
    /// (a host transport has copied it). Sends to one peer arrive in the order they were posted.
    virtual Handle send(int peer, std::uint64_t tag, Region data) = 0;
    /// Posts a receive of the send with this tag from `peer` (sizes must match).
    virtual Handle recv(int peer, std::uint64_t tag, Region data) = 0;
    /// Posts all of `transfers` together and returns their handles in order. Whatever order the peers post their
    /// matching exchanges in, none deadlocks (NCCL: one group of sends and receives, as Megatron batches 1F1B's
    /// send-forward-receive-backward). The default posts the receives first, then the sends, which is enough for a
    /// transport whose sends never wait for their receiver.
    virtual std::vector<Handle> exchange(std::span<const Transfer> transfers);
    /// Posts an in-place sum of `data` over `group` (one of makeGroups'; this device among them). Every member posts
    /// the same group's collectives in the same order.
    virtual Handle allReduceSum(const std::vector<int>& group, Region data) = 0;
    /// Blocks until every posted send has completed.
    virtual void flush() = 0;
    /// Whether it moves `backend`'s memory itself; if not, the executor stages through the host (throughHost).
    virtual bool reaches(const Backend& backend) const = 0;

    /// @brief What a handle's wait() promises.
    enum class Completion : std::uint8_t {
        /// The host blocked until the operation finished: a receive's data is in memory (host transports, and the
        /// host staging of any backend's memory), a send's region is free.
        Host,
        /// The operation is ordered on the backend's stream: work enqueued after wait() sees a receive's data, and a
        /// send's region may be reused by later stream work at once; the host blocks at most until the peers have
        /// posted their parts (NCCL, the device fabric). The host reads the data only after synchronising.
        Stream,
    };
    virtual Completion completion() const = 0;
};

/// A backend's memory through host memory over `host` (whose regions are host memory: transfers of any element type,
/// byte for byte; all-reduces of fp32): a transfer's bytes are downloaded as they are before a send and uploaded when
/// a receive is waited for (bf16 activations travel as bf16), an all-reduce's are converted to fp32, summed, and
/// converted back. Staging buffers come from a pool (nothing allocated per transfer after the first step). Memory
/// that is already fp32 on the host is passed through without a copy, so the CPU engine moves exactly what it did.
std::unique_ptr<Transport> throughHost(Transport& host, Backend& backend);

/// A transfer's tag: its kind (activation 0, gradient 1), the producing stage and the microbatch.
std::uint64_t transferTag(bool gradient, int stage, int microbatch);
/// A wave push's tag (HetPipe's WSP): the sending stage and the wave; never equal to a transfer's.
std::uint64_t waveTag(int stage, int wave);

/// @brief In-process transport: one endpoint per device, threads as devices; host memory (transfers of any element
/// type, all-reduces of fp32). abort() wakes every waiter with a TransportError (a failed device stops the others).
class LocalFabric
{
public:
    explicit LocalFabric(int devices);
    ~LocalFabric();
    Transport& endpoint(int device);
    void abort(const std::string& why);

private:
    struct State;
    class Endpoint;
    std::shared_ptr<State> m_state;
    std::vector<std::unique_ptr<Endpoint>> m_endpoints;
};

} // namespace pw::engine
